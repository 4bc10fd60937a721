"""After a finished appo-train run: its final policy rendered by a child process (tools.play_video), never failing it.

The learner imports nothing of tools/ (nor its rendering stack): the play runs as `python -m tools.play_video`,
and whatever stops it (no GL library, a missing tools extra, a crash, the timeout, a stop signal) is a warning
naming the cause; the run, its checkpoints and appo-train's exit status stay as training left them.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from common.config import AppoConfig
from common.logging import get_logger

log = get_logger("play")

# Far above a play's usual length (16 envs x 150 Go2 steps: about 100 s on 2 busy CPU cores, software GL); a hung
# GL driver must not hold appo-train forever.
PLAY_TIMEOUT_S = 900.0
# Within the stop grace period (training.stop_grace_s, 20 s by default) of a stop that arrives during the play.
END_WAIT_S = 5.0
SKIP_HINT = "the run and its checkpoints are complete; set training.no_play=true to skip rendering after training"


def play_command(run_dir: Path, cfg: AppoConfig) -> list[str]:
    return [sys.executable, "-m", "tools.play_video", "--run-dir", str(run_dir),
            "--num-envs", str(cfg.training.play_env_num), "--steps", str(cfg.training.play_steps)]


def play_final_policy(run_dir: Path, cfg: AppoConfig, stop: threading.Event,
                      timeout_s: float = PLAY_TIMEOUT_S) -> bool:
    """Render the run's final policy into run_dir; True when it did, else False after a warning saying why."""
    log.info("playing the final policy", envs=cfg.training.play_env_num, steps=cfg.training.play_steps,
             hint="training.no_play=true skips this")
    start = time.monotonic()
    try:
        proc = subprocess.Popen(play_command(run_dir, cfg), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    except OSError as exc:
        return _not_played(f"cannot start {sys.executable}: {exc}")
    while True:
        try:
            out, err = proc.communicate(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if stop.is_set():
                _end(proc)
                return _not_played("stopped by a signal during the play")
            if time.monotonic() - start > timeout_s:
                _end(proc)
                return _not_played(f"no result within {timeout_s:.0f} s")
    if proc.returncode != 0:
        return _not_played(_last_line(err) or f"tools.play_video exited {proc.returncode}")
    print(out, end="", flush=True)  # where the video and the plot were written
    log.info("final policy played", seconds=round(time.monotonic() - start, 1), run_dir=str(run_dir))
    return True


def _end(proc: subprocess.Popen) -> None:
    # SIGTERM first: the play unwinds and removes its partial video.
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=END_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1].removeprefix("error: ") if lines else ""


def _not_played(cause: str) -> bool:
    log.warning("final policy not rendered", cause=cause, hint=SKIP_HINT)
    return False
