"""Metrics: TensorBoard scalars every iteration and one live console line."""

from __future__ import annotations

import sys
import time

from torch.utils.tensorboard import SummaryWriter


class Metrics:
    """Writes a run's TensorBoard scalars and histograms, and prints its console line."""

    def __init__(self, log_dir, max_iterations: int, console: bool):
        self._log_dir = str(log_dir)
        self._purge_step: int | None = None
        self._writer: SummaryWriter | None = None
        self.max_iterations = max_iterations
        self.console = console
        self._start = time.monotonic()
        self._start_iter: int | None = None

    def resume_at(self, iteration: int) -> None:
        """Continue a resumed run: the ETA counts from here; TensorBoard steps continue after `iteration`,
        and events a crashed run wrote beyond its last checkpoint are purged."""
        self._purge_step = iteration + 1
        self._start_iter = iteration
        self._start = time.monotonic()

    @property
    def writer(self) -> SummaryWriter:
        # Created on first use, so a resumed run opens one events file, with its purge step.
        if self._writer is None:
            self._writer = SummaryWriter(log_dir=self._log_dir, purge_step=self._purge_step)
        return self._writer

    def log(self, iteration: int, scalars: dict[str, float], env_steps: int) -> None:
        for k, v in scalars.items():
            if v is not None:
                self.writer.add_scalar(k, v, iteration)
        if self.console:
            self._console_line(iteration, scalars, env_steps)

    def histogram(self, tag: str, values, iteration: int) -> None:
        if len(values):
            self.writer.add_histogram(tag, values, iteration)

    def _console_line(self, iteration: int, s: dict[str, float], env_steps: int) -> None:
        if self._start_iter is None:
            self._start_iter = iteration - 1
        done = iteration - self._start_iter
        elapsed = time.monotonic() - self._start
        eta = elapsed / max(done, 1) * (self.max_iterations - iteration)
        reward = s.get("Train/mean_reward")
        length = s.get("Train/mean_episode_length")
        line = (
            f"it {iteration}/{self.max_iterations} | steps {env_steps:,} | "
            f"{s.get('perf/env_steps_per_s', 0):,.0f} steps/s | "
            f"reward {'-' if reward is None else f'{reward:.2f}'} | "
            f"ep len {'-' if length is None else f'{length:.0f}'} | ETA {eta:.0f}s"
        )
        end = "\r" if sys.stdout.isatty() else "\n"
        print(line.ljust(100), end=end, flush=True)

    def close(self) -> None:
        if self.console and sys.stdout.isatty():
            print()
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
