"""Where appo-play's policy comes from: a run's checkpoints, or the weights a running learner publishes.

A follower reads weights the way a collector does, but sends nothing back: on one host it maps the run's
shared-memory weights board read-only (it writes no hello, so the learner never sees a collector); across
hosts it subscribes to the learner's PUB socket (port + 1 of transport.listen) with the run's CurveZMQ keys.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zmq

from common.checkpoint_io import CheckpointError, LoadedPolicy, checkpoints_in, find_checkpoint, load_policy
from common.config import AppoConfig, ConfigError, config_from_dict, read_yaml
from common.transport.curve import client_keys
from common.transport.endpoints import weights_endpoint
from common.transport.shm import DIR_PREFIX, WEIGHTS_HEADER, WeightsBoard, pid_alive
from common.transport.wire import WireError, decode_control


class FollowError(RuntimeError):
    """The running learner to follow cannot be found or reached."""


@dataclass
class Start:
    """What appo-play starts from: the run (directory and config), and its newest policy if it has one."""

    run_dir: Path | None
    config: AppoConfig
    policy: LoadedPolicy | None


def resolve(load_run: str, task: str | None, log_root: str, checkpoint: int | None, follow: bool) -> Start:
    """The run and policy `--load-run` names; a checkpoint of another task than `task` is refused.

    Following a run that has saved no checkpoint yet is allowed (its config.yaml gives the network); playing
    one is not."""
    given = Path(load_run)
    if follow and not given.is_file():
        run_dir = given if given.is_dir() else _run_dir(load_run, task, log_root)
        if not checkpoints_in(run_dir):
            config = run_config(run_dir)
            _check_task(task, config.task, run_dir / "config.yaml")
            return Start(run_dir, config, None)
    path = find_checkpoint(load_run, task, log_root, checkpoint)
    policy = load_policy(path)
    _check_task(task, policy.task, path)
    return Start(path.parent, policy.config, policy)


def run_config(run_dir: Path) -> AppoConfig:
    """The config a run saved at its start (config.yaml)."""
    path = run_dir / "config.yaml"
    try:
        return config_from_dict(read_yaml(path))
    except (OSError, ConfigError, TypeError, ValueError) as exc:
        raise CheckpointError(f"run {run_dir} has no readable config.yaml: {exc}") from None


def _run_dir(load_run: str, task: str | None, log_root: str) -> Path:
    # find_checkpoint's lookup, without requiring a checkpoint (a run that just started has none).
    if not task:
        raise CheckpointError(f"{load_run!r} is not a run directory; give --task to look it up among that task's runs")
    task_dir = Path(log_root) / task
    if load_run.lstrip("-").isdigit():
        runs = sorted((d for d in task_dir.glob("*") if (d / "config.yaml").is_file()),
                      key=lambda d: (d / "config.yaml").stat().st_mtime)
        index = int(load_run)
        if index >= 0 or -index > len(runs):
            raise CheckpointError(f"run index {index} is out of range: {task_dir} holds {len(runs)} run(s)")
        return runs[index]
    run_dir = task_dir / load_run
    if not run_dir.is_dir():
        raise CheckpointError(f"run {load_run!r} not found in {task_dir}")
    return run_dir


def _check_task(task: str | None, policy_task: str, path: Path) -> None:
    if task and task != policy_task:
        raise CheckpointError(f"{path} is a {policy_task} policy; it cannot play task {task} "
                              f"(give --task {policy_task}, or no --task)")


def checkpoint_choices(run_dir: Path | None) -> dict[str, Path]:
    """The run's checkpoints by label ('model_200.pt'), oldest first, for the page's switcher."""
    if run_dir is None:
        return {}
    return {p.name: p for _, p in sorted(checkpoints_in(run_dir).items())}


# ---------------------------------------------------------------- following a running learner


class ShmFollower:
    """The weights board of a learner on this host, mapped read-only in spirit: it is read, never written."""

    def __init__(self, shm_dir: Path):
        self.where = str(shm_dir)
        self._path = shm_dir / "weights.bin"
        self._owner = shm_dir / "owner.pid"
        self._board: WeightsBoard | None = None

    def poll(self, have_version: int) -> tuple[int, np.ndarray] | None:
        """(version, weights) newer than `have_version`, else None."""
        if self._board is None:
            try:
                head = self._path.read_bytes()[: WEIGHTS_HEADER.size]
            except FileNotFoundError:
                return None
            if len(head) < WEIGHTS_HEADER.size:
                return None
            self._board = WeightsBoard(self._path, WEIGHTS_HEADER.unpack(head)[2], create=False)
        return self._board.read(have_version)

    def alive(self) -> bool:
        try:
            return pid_alive(int(self._owner.read_text()))
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        if self._board is not None:
            self._board.close()
            self._board = None


class ZmqFollower:
    """A SUB socket on a learner's weights port (with its CurveZMQ keys where the run uses them)."""

    def __init__(self, learner: str, num_weights: int, curve_dir: str = "", curve_name: str = "collector"):
        self.where = weights_endpoint(learner)
        self.num_weights = num_weights
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.RCVHWM, 2)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        if curve_dir:
            keys = client_keys(curve_dir, curve_name)
            self.sub.curve_secretkey, self.sub.curve_publickey = keys.secret, keys.public
            self.sub.curve_serverkey = keys.server_public
        try:
            self.sub.connect(self.where)
        except zmq.ZMQError as exc:
            self.close()
            raise FollowError(f"cannot connect to the learner's weights at {self.where}: {exc}") from None
        self.session = None
        self.last_message = 0.0

    def poll(self, have_version: int) -> tuple[int, np.ndarray] | None:
        """The newest well-formed weights that arrived (a new learner session restarts the versions)."""
        newest = None
        while True:
            try:
                frames = self.sub.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return newest
            self.last_message = time.monotonic()
            try:
                msg = decode_control(frames[0].buffer, {"weights"})
            except WireError:
                continue
            if len(frames) != 2 or msg.get("n") != self.num_weights or len(frames[1].buffer) != 4 * self.num_weights:
                continue
            version = int(msg.get("version", -1))
            if msg.get("session") == self.session and version <= have_version:
                continue
            self.session = msg.get("session")
            have_version = version
            newest = (version, np.frombuffer(frames[1].buffer, dtype="<f4").copy())

    def alive(self) -> bool:
        return True  # a PUB socket says nothing between versions; the page shows the age instead

    def close(self) -> None:
        self.sub.close(linger=0)
        self.ctx.term()


def local_shm_dir(run_dir: Path, config: AppoConfig) -> Path:
    """The shared-memory directory of the learner now training `run_dir` on this host (appo-<run>-<pid>)."""
    root = Path(config.transport.shm_root)
    names = [config.transport.shm_run_id] if config.transport.shm_run_id else []
    candidates = [root / (DIR_PREFIX + n) for n in names] + sorted(root.glob(f"{DIR_PREFIX}{run_dir.name}-*"))
    for d in candidates:
        try:
            if pid_alive(int((d / "owner.pid").read_text())):
                return d
        except (OSError, ValueError):
            continue
    raise FollowError(f"no learner is training {run_dir} on this host (no live {root}/{DIR_PREFIX}{run_dir.name}-*); "
                      "for a learner on another host give --follow tcp://HOST:PORT (its transport.listen)")
