"""The learner lap (docs/design.md#the-learner-lap): wait -> ring->staging -> batch -> train -> publish -> log.

`Learner.run()` is the whole loop; the transport and the run directory are
handed in, so the same loop serves appo-train (shared memory) and appo-learner.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from common.config import AppoConfig
from common.logging import get_logger
from common.policy import flat_weights
from common.rollout_spec import RolloutSpec
from common.status_server import Heartbeat
from common.task_spec import TaskSpec
from common.transport.interface import LearnerTransport
from learner.appo import APPO
from learner.checkpoint import prune_checkpoints, save_checkpoint
from learner.episode_stats import EpisodeStats
from learner.metrics import Metrics
from learner.receiver import Receiver
from learner.ring import Ring
from learner.rng import rng_state, set_rng_state
from learner.staging import StagingPool

log = get_logger("learner")
# A collector's rollouts per second are taken over its last RATE_WINDOW staged rollouts; none for
# RATE_QUIET_S seconds reads as 0 (dropped, partitioned or frozen).
RATE_WINDOW = 16
RATE_QUIET_S = 10.0


class CollectorsGone(RuntimeError):
    """No collector is left to send rollouts: the run stops (exit code 1) after a final checkpoint."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    return torch.device(name)


@dataclass
class Progress:
    """The run's counters (iteration, policy version, env steps) and best reward, saved in checkpoints."""

    iteration: int = 0
    policy_version: int = 0
    total_env_steps: int = 0
    best_mean_reward: float | None = None
    last_checkpoint: str | None = None
    started: float = field(default_factory=time.monotonic)


class Learner:
    """The learner lap and its state: ring -> staging -> update -> publish -> log, checkpoints, summary.json."""

    def __init__(
        self, cfg: AppoConfig, task: TaskSpec, run_dir: Path, transport: LearnerTransport, stop_event: threading.Event
    ):
        self.cfg = cfg
        self.task = task
        self.run_dir = run_dir
        self.transport = transport
        self.stop_event = stop_event
        self.device = resolve_device(cfg.training.device)
        self.spec = RolloutSpec.for_task(task, cfg.algo.num_envs, cfg.algo.steps_per_env)
        self.appo = APPO(cfg, task, self.device)
        # `auto` precision is measured on the machine at hand: say what it chose.
        log.info("update", device=str(self.device), precision=self.appo.precision)
        self.ring = Ring(self.spec, cfg.training.ring_slots, pin=self.device.type == "cuda")
        self.staging = StagingPool(self.spec, cfg.training.replay_queue_size, self.device)
        self.receiver = Receiver(
            transport, self.ring, lambda: self.progress.policy_version, cfg.training.max_policy_lag
        )
        self.episodes = EpisodeStats()
        self.metrics = Metrics(run_dir, cfg.algo.max_iterations, cfg.training.console)
        self.progress = Progress()
        self.status = "running"
        self.per_collector: Counter[str] = Counter()  # rollouts received, by collector name
        self.collector_versions: dict[str, int] = {}  # policy version of each collector's newest rollout
        self.collector_lags: dict[str, int] = {}  # policy lag of each collector's newest rollout when staged
        # When each collector's recent rollouts were staged: its rollouts per second show a slow link.
        self.collector_arrivals: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=RATE_WINDOW))
        self.health: list = []  # callables returning an error message or None (e.g. dead collectors)
        self._collector_perf: dict = {}  # the newest rollout's timing statistics
        self._last_scalars: dict = {}
        self._steps_at_start = 0  # env steps before this process started (a resume), for rates
        # Liveness for probes: beaten on every pass of the loop, waiting and updating included.
        self.heartbeat = Heartbeat(cfg.training.liveness_timeout_s, "learner loop")
        self.weights_published = False
        self.waiting_since: float | None = None  # monotonic time since the lap has waited for rollouts
        self.normalizer_only_rollouts = 0  # rollouts of policy version 0 taken by the normaliser warm-up only

    # ------------------------------------------------------------------ main loop

    def run(self) -> dict:
        self._publish()  # weights exist before the first rollout: no start-up deadlock (a resume republishes)
        self.receiver.start()
        try:
            while self.progress.iteration < self.cfg.algo.max_iterations and not self.stop_event.is_set():
                if not self._lap():
                    break
            self.status = "interrupted" if self.stop_event.is_set() else "completed"
        except BaseException as exc:
            self.status = "failed"
            log.error("learner stopped", error=str(exc))
            raise
        finally:
            self._finish()
        return self.summary()

    def _abort_update(self) -> bool:
        self.heartbeat.beat()  # a long update is progress too
        return self.stop_event.is_set()

    @property
    def last_checkpoint_iteration(self) -> int | None:
        c = self.progress.last_checkpoint
        return int(Path(c).stem.split("_")[1]) if c else None

    def _check_health(self) -> None:
        self.heartbeat.beat()
        if self.receiver.error:
            raise RuntimeError(f"receiver failed: {self.receiver.error}") from self.receiver.error
        for check in self.health:
            problem = check()
            if problem:
                raise CollectorsGone(problem)

    def _lap(self) -> bool:
        self._check_health()
        t0 = time.perf_counter()
        fresh: list[int] = []
        while not fresh:  # every rollout taken may have gone stale while it waited in the ring
            slots = self._wait_for_rollouts()
            if not slots:
                return False
            t1 = time.perf_counter()
            warmed = self.normalizer_only_rollouts
            fresh = self._warm_up_normalizers(self._stage(slots))
            if not fresh and self.normalizer_only_rollouts > warmed:
                return True  # a lap of the first policy's rollouts only: the normaliser took them
        t2 = time.perf_counter()
        active = self.staging.active()
        batch = self.staging.batch(active)
        self.appo.update_normalizers(self.staging.batch(fresh))
        t3 = time.perf_counter()
        # A stop request abandons the rest of the update; what was done so far is kept and saved.
        train_metrics = self.appo.update(batch, abort=self._abort_update)
        self.staging.mark_used(active)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        t4 = time.perf_counter()
        lags = [self.progress.policy_version - v for v in self.staging.policy_versions(fresh)]
        self.progress.iteration += 1
        self.progress.policy_version += 1
        self._publish()
        t5 = time.perf_counter()
        times = {"wait": t1 - t0, "stage": t2 - t1, "batch": t3 - t2, "train": t4 - t3, "publish": t5 - t4}
        self._log(train_metrics, times, len(slots), lags)
        self._maybe_checkpoint()
        return True

    def _wait_for_rollouts(self) -> list[int]:
        self.waiting_since = time.monotonic()
        try:
            return self._wait_for_rollouts_since()
        finally:
            self.waiting_since = None

    def waiting_reason(self) -> str | None:
        """Why the lap waits, once it has waited collector_wait_warn_s (as the log warns), for /readyz; else None."""
        since = self.waiting_since
        if since is None or time.monotonic() - since < self.cfg.training.collector_wait_warn_s:
            return None
        return (f"waiting {time.monotonic() - since:.0f} s for rollouts; "
                f"{len(self.transport.collectors())} collectors connected")

    def _wait_for_rollouts_since(self) -> list[int]:
        waited = 0.0
        gone_since = None
        warn = self.cfg.training.collector_wait_warn_s
        while not self.stop_event.is_set():
            slots = self.ring.take_ready(timeout=min(0.5, warn), limit=self._intake_limit())
            if slots:
                return slots
            self._check_health()
            waited += min(0.5, warn)
            if waited >= warn:
                log.warning("waiting for rollouts", seconds=round(waited, 1),
                            collectors=len(self.transport.collectors()))
                warn += self.cfg.training.collector_wait_warn_s
            if self.transport.collectors():
                gone_since = None
            else:
                gone_since = gone_since or time.monotonic()
                if time.monotonic() - gone_since > self.cfg.training.collector_gone_timeout_s:
                    raise CollectorsGone(
                        f"no collector connected for {self.cfg.training.collector_gone_timeout_s:.0f} s"
                    )
        return []

    def _intake_limit(self) -> int | None:
        """How many ready rollouts one lap may stage.

        Every update trains on the whole pool, so staging at most `capacity` new rollouts
        only ever pushes out rollouts that were already trained on; the rest wait in the
        ring, whose fullness holds the collectors back.  `overwrite` drains everything.
        """
        return None if self.cfg.training.staging_overflow == "overwrite" else self.staging.capacity

    def _stage(self, slots: list[int]) -> list[int]:
        fresh = []
        for slot in slots:
            meta = self.ring.meta[slot]
            if self.receiver.too_stale(meta.policy_version):
                self.receiver.refuse_stale(meta.collector, meta.policy_version)
                self.ring.release(slot)
                continue
            fresh.append(self.staging.stage(self.ring, slot))
            self.episodes.add(meta.stats)
            self.per_collector[meta.collector] += 1
            self.collector_versions[meta.collector] = meta.policy_version
            self.collector_lags[meta.collector] = self.progress.policy_version - meta.policy_version
            self.collector_arrivals[meta.collector].append(time.monotonic())
            self.progress.total_env_steps += self.spec.env_steps
            self._collector_perf = meta.stats
            self.ring.release(slot)
        # A pool smaller than one lap's arrivals overwrote some of them already.
        return sorted(set(fresh[-self.staging.capacity :]))

    def _warm_up_normalizers(self, fresh: list[int]) -> list[int]:
        """With algo.normalizer_warmup, take the first policy's rollouts into the normalisers only.

        Policy version 0 acted on observations its identity normaliser left raw; training on them
        against a normaliser fitted since would see another input scale than they were acted on.
        The first such lap publishes version 1 (the fitted normaliser, the same actor) to act on.
        """
        if not self.cfg.algo.normalizer_warmup:
            return fresh
        warm = [i for i in fresh if self.staging.entries[i].meta.policy_version == 0]
        if not warm:
            return fresh
        self.appo.update_normalizers(self.staging.batch(warm))
        self.staging.drop(warm)
        self.normalizer_only_rollouts += len(warm)
        if self.progress.policy_version == 0:
            self.progress.policy_version = 1
            self._publish()
            log.info("normalizers warmed up", rollouts=len(warm))
        return [i for i in fresh if i not in warm]

    def _publish(self) -> None:
        self.transport.publish_weights(self.progress.policy_version, flat_weights(self.appo.model))
        self.weights_published = True

    # ------------------------------------------------------------------ logging / saving

    def _log(self, train: dict, times: dict, num_read: int, lags: list[int]) -> None:
        p = self.progress
        lap = sum(times.values())
        elapsed = time.monotonic() - p.started
        episode = self.episodes.means()
        reward = episode.get("Train/mean_reward")
        if reward is not None and (p.best_mean_reward is None or reward > p.best_mean_reward):
            p.best_mean_reward = reward
        perf = self._collector_perf
        scalars = {
            **train,
            **episode,
            "perf/iter_ms": lap * 1e3,
            "perf/collector_wait_ms": times["wait"] * 1e3,
            "perf/ring_to_staging_ms": times["stage"] * 1e3,
            "perf/batch_ms": times["batch"] * 1e3,
            "perf/train_ms": times["train"] * 1e3,
            "perf/weight_publish_ms": times["publish"] * 1e3,
            "perf/env_steps_per_s": (p.total_env_steps - self._steps_at_start) / max(elapsed, 1e-9),
            "perf/total_env_steps": p.total_env_steps,
            "perf/collector_mlp_infer_ms": perf.get("infer_ms"),
            "perf/collector_env_step_ms": perf.get("step_ms"),
            "Learner/staging_occupancy": self.staging.occupancy(),
            "Learner/rollouts_read_per_lap": num_read,
            "Learner/ring_occupancy": self.ring.occupancy(),
            "Learner/policy_lag_mean": float(np.mean(lags)) if lags else 0.0,
            "Learner/policy_lag_max": float(np.max(lags)) if lags else 0.0,
            "Learner/overwritten_unused": self.staging.overwritten_unused,
            "Learner/trained_fraction": self.trained_fraction(),
            "Learner/refused_messages": sum(self.receiver.refused_counts().values()),
            "Learner/collectors_connected": len(self.transport.collectors()),
        }
        for info in self.transport.collectors().values():
            if "last_seen_s" in info:
                scalars[f"Collectors/{info['name']}/last_seen_s"] = info["last_seen_s"]
        for name, count in self.per_collector.items():
            scalars[f"Collectors/{name}/rollouts"] = count
            scalars[f"Collectors/{name}/env_steps"] = count * self.spec.env_steps
            scalars[f"Collectors/{name}/policy_version"] = self.collector_versions[name]
            scalars[f"Collectors/{name}/policy_lag"] = self.collector_lags[name]
            scalars[f"Collectors/{name}/rollouts_per_s"] = self.collector_rate(name)
        for name, count in self.receiver.stale_by_collector().items():
            scalars[f"Collectors/{name}/refused_stale"] = count
        self.metrics.log(p.iteration, scalars, p.total_env_steps)
        self.metrics.histogram("Learner/policy_lag", np.asarray(lags), p.iteration)
        self._last_scalars = scalars

    def collector_rate(self, name: str) -> float:
        """A collector's staged rollouts per second over its last RATE_WINDOW rollouts (0 if it went quiet)."""
        times = self.collector_arrivals[name]
        now = time.monotonic()
        if len(times) < 2 or now - times[-1] > RATE_QUIET_S:
            return 0.0
        return (len(times) - 1) / max(times[-1] - times[0], 1e-9)

    def _maybe_checkpoint(self) -> None:
        it = self.progress.iteration
        if it % self.cfg.algo.save_interval == 0 or it == self.cfg.algo.max_iterations:
            self.save()

    def state_dict(self) -> dict:
        """Everything a resumed run needs to continue exactly where this one stands."""
        p = self.progress
        return {
            "appo": self.appo.state_dict(),
            "iteration": p.iteration,
            "policy_version": p.policy_version,
            "total_env_steps": p.total_env_steps,
            "best_mean_reward": p.best_mean_reward,
            "last_mean_reward": self._last_scalars.get("Train/mean_reward"),
            "episodes": self.episodes.state_dict(),
            "staging": self.staging.state_dict(),
            "normalizer_only_rollouts": self.normalizer_only_rollouts,
            "rng": rng_state(),
            "config": self.cfg.to_dict(),
            "task": self.task.name,
        }

    def load_state_dict(self, state: dict) -> None:
        self.appo.load_state_dict(state["appo"])
        p = self.progress
        p.iteration = int(state["iteration"])
        p.policy_version = int(state["policy_version"])
        p.total_env_steps = int(state["total_env_steps"])
        p.best_mean_reward = state["best_mean_reward"]
        self._steps_at_start = p.total_env_steps
        self.episodes.load_state_dict(state["episodes"])
        self.staging.load_state_dict(state["staging"])
        self.normalizer_only_rollouts = int(state.get("normalizer_only_rollouts", 0))  # absent before the warm-up
        set_rng_state(state["rng"])
        self.metrics.resume_at(p.iteration)

    def save(self) -> Path:
        p = self.progress
        path = self.run_dir / f"model_{p.iteration}.pt"
        save_checkpoint(self.state_dict(), path)
        p.last_checkpoint = str(path)
        prune_checkpoints(self.run_dir, self.cfg.training.keep_checkpoints, protect={p.iteration})
        log.info("checkpoint saved", path=str(path))
        return path

    def _finish(self) -> None:
        self.receiver.stop()
        if self.progress.iteration > 0 and (
            self.progress.last_checkpoint is None
            or not self.progress.last_checkpoint.endswith(f"model_{self.progress.iteration}.pt")
        ):
            self.save()
        self.metrics.close()
        self.write_summary()

    def trained_fraction(self) -> float:
        """Share of the env steps staged for training so far that at least one update trained on.

        The normaliser warm-up's rollouts are not counted: they were never meant for training
        (summary.json reports them as normalizer_only_env_steps).
        """
        staged = self.progress.total_env_steps - self.normalizer_only_rollouts * self.spec.env_steps
        return self.staging.trained_rollouts * self.spec.env_steps / staged if staged else 1.0

    def summary(self) -> dict:
        p = self.progress
        wall = time.monotonic() - p.started
        last = self._last_scalars
        return {
            "status": self.status,
            "task": self.task.name,
            "completed_iterations": p.iteration,
            "total_env_steps": p.total_env_steps,
            "trained_env_steps": self.staging.trained_rollouts * self.spec.env_steps,
            "trained_fraction": self.trained_fraction(),
            "normalizer_only_env_steps": self.normalizer_only_rollouts * self.spec.env_steps,
            # Arrived in the ring, staged or not: at a stop up to ring_slots of them were never staged.
            "received_env_steps": self._steps_at_start + self.receiver.received * self.spec.env_steps,
            "staging_overflow": self.cfg.training.staging_overflow,
            "final_mean_reward": last.get("Train/mean_reward"),
            "best_mean_reward": p.best_mean_reward,
            "mean_episode_length": last.get("Train/mean_episode_length"),
            "last_checkpoint": p.last_checkpoint,
            "training_wall_time_sec": wall,
            "env_steps_per_sec": (p.total_env_steps - self._steps_at_start) / max(wall, 1e-9),
            "refused_messages": self.receiver.refused_counts(),
            "rollouts_per_collector": {str(k): v for k, v in self.per_collector.items()},
        }

    def write_summary(self) -> Path:
        path = self.run_dir / "summary.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.summary(), indent=2))
        tmp.replace(path)
        return path
