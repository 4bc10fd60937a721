"""appo-play: watch and steer a policy in the browser, or in MuJoCo's own viewer.

    appo-play --task go2_joystick_flat --load-run -1               # the newest run's latest checkpoint
    appo-play --load-run logs/appo/g1_walk_flat/RUN --checkpoint 2000 --envs 4 --port 8080
    appo-play --task go2_joystick_flat --load-run -1 --follow      # the weights of a run training on this host
    appo-play --load-run RUN --follow tcp://learner:5555 --curve-dir keys/   # a learner on another host
    appo-play --task go2_joystick_flat --viewer native             # MuJoCo's viewer on a desktop

The page (http://HOST:PORT) draws every env's robot from the task's own model, the camera following one
env, with pause, single step, reset, speed (0.25x to 4x real time), an env picker, a deterministic /
stochastic toggle and a contact overlay (keys, as the seed's viewer: space pause, N step, Backspace reset);
velocity tasks add sliders and keys for the command (up/down vx, A/D vy, left/right yaw rate, Enter zero;
0.1 m/s and 0.2 rad/s a press, within the task's command box) and a live commanded-vs-measured plot; every task
plots its reward terms and shows the episode's time, return and what ended the last one; motion tracking
draws the reference bodies as a translucent ghost and names the clip frame.  --follow takes a running
learner's weights (read-only: it sends no rollouts and is never counted as a collector), switching to each
new version when the followed env's episode ends; without it, a switcher lists the run's checkpoints.
"""

from __future__ import annotations

# First, as the tools package chooses MuJoCo's GL backend before MuJoCo is imported (common/gl.py).
from tools import video  # noqa: F401  # isort: skip

import argparse
import sys
import threading
from pathlib import Path

import torch

from common.checkpoint_io import CheckpointError, add_checkpoint_args
from common.cli import install_stop_handlers
from common.config import ConfigError
from common.hub import motion_clip
from common.logging import get_logger, setup_logging
from common.policy import ActorCritic
from common.task_spec import UnknownTaskError
from tools.extras import missing_extra
from tools.play import sources
from tools.play.budget import CpuBudget
from tools.play.session import PlaySession, PolicySource

log = get_logger("play")
STOP_GRACE_S = 2.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="appo-play", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_args(p)
    p.add_argument("--envs", type=int, default=4, help="environments drawn and stepped (default 4)")
    p.add_argument("--viewer", choices=("web", "native"), default="web",
                   help="web: a page served on --port (default); native: MuJoCo's viewer window (needs a display)")
    p.add_argument("--host", default="0.0.0.0", help="address the page is served on (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=8080, help="port of the page (default 8080)")
    p.add_argument("--follow", nargs="?", const="local", metavar="tcp://HOST:PORT",
                   help="play the weights of a run that is training: alone, the learner of --load-run on this "
                        "host (shared memory); with an address, that learner over ZeroMQ (its transport.listen)")
    p.add_argument("--curve-dir", help="with --follow tcp://...: the run's CurveZMQ key directory "
                                       "(default: the run's transport.curve_dir)")
    p.add_argument("--curve-name", default="collector", help="the key pair of --curve-dir to use (default collector)")
    p.add_argument("--priority", choices=("idle", "normal"),
                   help="CPU priority: idle (while the host's cores are busy the viewer keeps to 2%% of one core, "
                        "so a run on the same host comes first; the page shows the real-time factor it gets) or "
                        "normal; default idle with --follow on this host, else normal")
    p.add_argument("--seed", type=int, default=0, help="environment seed (default 0)")
    p.add_argument("--threads", type=int, help="MuJoCo stepping threads (default: 1)")
    args = p.parse_args(argv)
    if args.envs < 1:
        p.error("--envs must be >= 1")
    if not 1 <= args.port <= 65535:
        p.error(f"--port {args.port} is not a port (1-65535)")
    if args.follow not in (None, "local") and not args.follow.startswith("tcp://"):
        p.error(f"--follow {args.follow!r}: give no value (this host) or tcp://HOST:PORT")
    return args


def build_session(args: argparse.Namespace, start: sources.Start) -> PlaySession:
    from collector.envs import make_env  # after tools.video fixed the GL backend

    cfg = start.config
    env = make_env(start.config.task, args.envs, args.threads or 1, args.seed,
                   motion_file=motion_clip(cfg), sim=cfg.training.sim_backend)
    if start.policy is not None:
        model, source = start.policy.model, PolicySource(start.policy.path.name)
        if (start.policy.obs_dim, start.policy.act_dim) != (env.spec.obs_dim, env.spec.act_dim):
            env.close()
            raise CheckpointError(f"{start.policy.path}: the policy maps {start.policy.obs_dim} observations to "
                                  f"{start.policy.act_dim} actions; task {env.spec.name} has {env.spec.obs_dim} "
                                  f"and {env.spec.act_dim}")
    else:
        model, source = ActorCritic.from_config(cfg, env.spec), PolicySource("untrained (waiting for the learner)")
    return PlaySession(env, model, source)


def make_follower(args: argparse.Namespace, start: sources.Start, num_weights: int):
    if args.follow is None:
        return None
    if args.follow == "local":
        return sources.ShmFollower(sources.local_shm_dir(start.run_dir, start.config))
    curve_dir = args.curve_dir if args.curve_dir is not None else start.config.transport.curve_dir
    return sources.ZmqFollower(args.follow, num_weights, curve_dir, args.curve_name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging("play")
    torch.set_num_threads(1)  # one small MLP forward per step
    stop = threading.Event()
    install_stop_handlers(stop, STOP_GRACE_S + 3.0)
    try:
        start = sources.resolve(args.load_run, args.task, args.log_root, args.checkpoint, args.follow is not None)
        session = build_session(args, start)
    except (CheckpointError, UnknownTaskError, ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    follower = viewer = None
    try:
        num_weights = sum(t.numel() for t in session.model.state_dict().values())
        follower = make_follower(args, start, num_weights)
        idle = (args.priority or ("idle" if args.follow == "local" else "normal")) == "idle"
        budget = CpuBudget() if idle else None
        if args.viewer == "native":
            from tools.play.native import NativeViewer

            viewer = NativeViewer(session, budget)
        else:
            from tools.play.web import WebViewer

            choices = {} if args.follow else sources.checkpoint_choices(start.run_dir)
            viewer = WebViewer(session, args.host, args.port, {k: Path(v) for k, v in choices.items()}, follower,
                               budget)
            print(f"appo-play: http://localhost:{args.port}  ({session.env.spec.name}, {args.envs} envs, "
                  f"policy {session.source.label}" + (f", following {follower.where}" if follower else "") + ")",
                  flush=True)
        viewer.run(stop)
    except (OSError, RuntimeError) as exc:  # a port in use, no display, an unreachable learner
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        return missing_extra(exc)
    finally:
        if viewer is not None:
            viewer.close()
        if follower is not None:
            follower.close()
        session.env.close()
    log.info("stopped", sim_time=round(session.sim_time, 3), steps=session.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
