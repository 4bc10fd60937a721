"""This project beside the seed system (UniLab 1.5.2): the same task stepped side by side, and both trainers.

    python -m benchmarks.vs_unilab --parity --task go2_joystick_flat [--envs 8] [--steps 200] [--policy RUN]
    python -m benchmarks.vs_unilab --train --task g1_walk_flat --env-steps 4000000 --seeds 3 [--num-envs 2048]
    python -m benchmarks.vs_unilab --train --task g1_walk_flat --env-steps 8000000 --seeds 102 \
        --appo-run 102=logs/milestone/g1_walk_flat/seed_102

The seed runs from its own venv (`make unilab`, benchmarks/unilab_setup.py; --venv or $UNILAB_VENV,
default .venv-unilab), set up first if it is not.

--parity  builds the seed's env (in a child process of the seed's Python, benchmarks/unilab_bridge.py)
          and ours with noise and randomisation off, puts both in the same state and drives both with
          the same actions (--policy's deterministic actions where a run or checkpoint of ours is given,
          else a scripted stepping sequence) for --steps control steps: once re-synchronised every step,
          once running free (benchmarks/parity.py).  Prints the largest difference of every observation
          column and reward term above --tolerance, termination mismatches and the pelvis drift, each
          beside its noise floor (the same run of two copies of our env, the second's every loaded state
          nudged by half a float32 step, the precision the seed's env reports its own in); writes the full report to
          --out/parity.json.
--train   per seed, one after the other: the seed's own `train --algo appo --task T --sim mujoco`,
          unmodified but for its seed, envs (--num-envs, default its own) and iterations (to --env-steps),
          on the CPU with one thread per process, stopped (as Ctrl+C stops it) once the env steps its
          collectors log reach --env-steps, since they run ahead of its learner; then `appo-train` with
          this project's preset on the same task, seed and env-step budget.  Writes both curves against
          env steps (training episode length and return from each trainer's TensorBoard scalars, which
          use the same tags; xy and yaw tracking errors where the trainer logs them: the seed's does
          not) to --out/curves.csv, curves.json and curves.png, and appo-eval's figures of the final
          policies to eval.json (the seed's last checkpoint evaluated in our env, where parity holds).
          Prints, per seed, whether ours is at or above the seed's in both training return and episode
          length at every point the seed logged past 1 M env steps (ours: its last point at or before the
          same env steps), and where not; eval.json's "ahead" holds the same.
          --appo-run SEED=RUN uses a finished run of ours for that seed instead of training one, once it is
          checked to be the run this benchmark would make: the task's preset (every algo and task_options
          field but the seed and the checkpoint interval), that seed, and the iterations of the budget.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from benchmarks.unilab_driver import SEED_ENV
from common.cli import at_least

if TYPE_CHECKING:
    from common.config import AppoConfig

# Issue 47's bar for ours against the seed's trainer: at or above it at every point it logged past this many env steps.
AHEAD_AFTER = 1_000_000
# The seed's APPO tasks (unilab/conf/appo/task/*): its registry name and its own envs per run.
SEED_TASKS = {
    "go2_joystick_flat": {"registry": "Go2JoystickFlat", "num_envs": 2048},
    "g1_walk_flat": {"registry": "G1WalkFlat", "num_envs": 2048},
    "g1_motion_tracking": {"registry": "G1MotionTracking", "num_envs": 1024},
}
PARITY_TASKS = ("go2_joystick_flat", "g1_walk_flat")  # g1_motion_tracking here is mjlab's task, not the seed's
SEED_STEPS_PER_ENV = 24  # unilab/conf/appo/config.yaml
SEED_SAVE_INTERVAL = 5  # the seed's checkpoints, every this many of its iterations
POLL_S = 5.0  # how often the seed's logged env steps are read
STOP_GRACE_S = 300.0  # its cooperative shutdown's time before it is killed


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.vs_unilab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--parity", action="store_true", help="step both envs side by side")
    mode.add_argument("--train", action="store_true", help="run both trainers on the same budget")
    p.add_argument("--task", required=True)
    p.add_argument("--venv", type=Path, default=Path(os.environ.get("UNILAB_VENV", ".venv-unilab")),
                   help="the seed's own venv (default .venv-unilab, or $UNILAB_VENV)")
    p.add_argument("--out", type=Path, help="results folder, empty or new (default logs/vs_unilab/<task>_<time>)")
    parity = p.add_argument_group("--parity")
    parity.add_argument("--envs", type=at_least(1), default=8, help="envs on each side (default 8)")
    parity.add_argument("--steps", type=at_least(1), default=200, help="control steps per mode (default 200)")
    parity.add_argument("--policy", type=Path, help="a run directory or checkpoint of ours whose deterministic "
                        "actions drive both sides (default: a scripted stepping sequence)")
    parity.add_argument("--tolerance", type=float, default=None, help="differences shown above this "
                        "(default benchmarks.parity.SOLVER_NOISE)")
    parity.add_argument("--seed", type=int, default=0, help="draws of the starting state (default 0)")
    train = p.add_argument_group("--train")
    train.add_argument("--env-steps", type=at_least(1), help="env-step budget of every run")
    train.add_argument("--seeds", default="1", help="comma-separated seeds, one run of each trainer per seed")
    train.add_argument("--num-envs", type=at_least(1), help="the seed's envs (default its own for the task)")
    train.add_argument("--episodes", type=at_least(1), default=20, help="evaluated episodes of our final policy")
    train.add_argument("--appo-run", action="append", default=[], metavar="SEED=RUN",
                       help="a finished appo-train run of ours to use for SEED instead of training one (repeatable)")
    args = p.parse_args(argv)
    from collector.envs import available_tasks

    if args.task not in available_tasks():
        p.error(f"--task {args.task!r}: unknown task; this project has {', '.join(available_tasks())}")
    if args.task not in SEED_TASKS:
        p.error(f"--task {args.task}: the seed (UniLab 1.5.2) has no such APPO task; it has "
                f"{', '.join(SEED_TASKS)}")
    if args.parity and args.task not in PARITY_TASKS:
        p.error(f"--parity --task {args.task}: this project's {args.task} is built as mjlab's, not the seed's, so "
                f"there is no step-by-step parity (BENCHMARKS.md lists the differences); parity covers "
                f"{', '.join(PARITY_TASKS)}")
    if args.train and args.env_steps is None:
        p.error("--train needs --env-steps")
    try:
        args.seed_list = list(dict.fromkeys(int(s) for s in args.seeds.split(",")))
    except ValueError:
        p.error(f"--seeds: expected comma-separated integers, got {args.seeds!r}")
    args.appo_runs = {}
    for given in args.appo_run:
        seed, sep, run = given.partition("=")
        if not sep or not seed.strip().lstrip("-").isdigit() or not run:
            p.error(f"--appo-run {given!r}: expected SEED=RUN, e.g. 102=logs/milestone/{args.task}/seed_102")
        if int(seed) not in args.seed_list:
            p.error(f"--appo-run {given!r}: seed {int(seed)} is not one of --seeds {args.seeds}")
        if not (Path(run) / "config.yaml").is_file():
            p.error(f"--appo-run {given!r}: {run} is not a run directory (it has no config.yaml)")
        args.appo_runs[int(seed)] = Path(run)
    if args.policy is not None and not args.policy.exists():
        p.error(f"--policy {args.policy}: no such run directory or checkpoint")
    args.out = args.out or Path(f"logs/vs_unilab/{args.task}_{time.strftime('%Y-%m-%d_%H-%M-%S')}")
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        p.error(f"--out {args.out}: not an empty folder (the runs would mix with earlier ones)")
    return args


def seed_ready(venv: Path) -> dict:
    """The seed's venv set up (once; seconds after); raises SetupError naming the failed step."""
    from benchmarks.unilab_setup import setup

    return setup(venv.resolve())


# ---------------------------------------------------------------- --parity


def scripted_actions(joint_names: list[str], dt: float):
    """A stepping sequence: the legs' pitch joints swing at 1.5 Hz, diagonal pairs (Go2) or sides (G1) in antiphase."""
    amp, hz = 0.8, 1.5
    pitch = ("thigh", "calf", "hip_pitch", "knee", "ankle_pitch")
    phase = np.zeros(len(joint_names))
    for j, name in enumerate(joint_names):
        if name.startswith(("FR", "RL", "right")):
            phase[j] = np.pi
    mask = np.array([any(p in name for p in pitch) for name in joint_names], np.float64)

    def act(k: int, n: int) -> np.ndarray:
        return np.tile(amp * mask * np.sin(2 * np.pi * hz * k * dt + phase), (n, 1))

    return act


def policy_actions(path: Path, task: str):
    """Deterministic actions of a run's or checkpoint's policy; refuses one of another task."""
    import torch

    from common.checkpoint_io import find_checkpoint, load_policy

    policy = load_policy(find_checkpoint(str(path), task))
    if policy.task != task:
        raise RuntimeError(f"--policy {path} was trained on {policy.task}, not {task}")

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return policy.model.act_deterministic(torch.as_tensor(obs, dtype=torch.float32)).numpy()

    return act, policy.path


def run_parity(args: argparse.Namespace) -> int:
    from benchmarks.parity import SOLVER_NOISE, Nudged, OurDriver, compare, format_report
    from benchmarks.unilab_driver import SeedDriver

    tolerance = SOLVER_NOISE if args.tolerance is None else args.tolerance
    workdir = Path(seed_ready(args.venv)["workdir"])
    ours = OurDriver(args.task, args.envs, seed=args.seed)
    seed = SeedDriver(args.task, args.envs, args.venv.resolve(), workdir, (ours.obs_names, ours.critic_names))
    try:
        ours_terms = set(ours.state_terms())
        if set(seed.term_names) != ours_terms:
            raise RuntimeError(f"reward terms differ: only the seed's {sorted(set(seed.term_names) - ours_terms)}, "
                               f"only ours {sorted(ours_terms - set(seed.term_names))}")
        start = seed.state()  # the seed's own reset draw: root pose and twist, command, gait clock, gains
        joints = ours.joint_names
        if args.policy is not None:
            policy, source = policy_actions(args.policy, args.task)

            def actions(k, obs):
                return policy(ours.env.observe()[0] if obs is None else obs)
        else:
            script, source = scripted_actions(joints, ours.env.dt), "scripted stepping (1.5 Hz pitch joints)"

            def actions(k, obs):
                return script(k, args.envs)
        reports = compare(seed, ours, start, actions, args.steps)
        twin = OurDriver(args.task, args.envs, seed=args.seed)  # the noise floor: ours against ours, float32-nudged
        try:
            floor = compare(ours, Nudged(twin), start, actions, args.steps)
        finally:
            twin.close()
    finally:
        seed.close()
        ours.close()
    print(f"parity  {args.task}: UniLab 1.5.2 (side a) against this project (side b), {args.envs} envs, "
          f"{args.steps} control steps per mode, actions: {source}")
    print(format_report(reports, tolerance, floor=floor))
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"task": args.task, "envs": args.envs, "steps": args.steps, "actions": str(source),
              "tolerance": tolerance, "modes": {m: vars(r) for m, r in reports.items()},
              "noise_floor": {m: vars(r) for m, r in floor.items()}}
    (args.out / "parity.json").write_text(json.dumps(record, indent=2))
    print(f"full report: {args.out}/parity.json")
    return 0


# ---------------------------------------------------------------- --train


def seed_rows(run: Path) -> list[dict]:
    """The seed's curve from its TensorBoard scalars (its step axis is env steps; its tags are appo-train's)."""
    from benchmarks.rslrl_curve import CURVE_TAGS
    from tools.tb_scalars import read_scalars

    scalars = read_scalars(run)
    by_step: dict[int, dict] = {}
    first_wall = min((w for series in scalars.values() for w, _, _ in series), default=0.0)
    for wall, step, value in scalars.get("Train/iteration", []):
        by_step[step] = {"iteration": int(value), "env_steps": int(step), "wall_s": wall - first_wall}
    for name, tag in CURVE_TAGS.items():
        for _, step, value in scalars.get(tag, []):
            if step in by_step and math.isfinite(value):
                by_step[step][name] = float(value)
    return [by_step[s] for s in sorted(by_step)]


def seed_env_steps(run: Path) -> int:
    """The env steps the seed's run has logged so far (0 before its first iteration)."""
    from tools.tb_scalars import read_scalars

    try:
        return max((step for _, step, _ in read_scalars(run).get("Train/iteration", [])), default=0)
    except (OSError, ValueError):  # an event file being written may end mid-record
        return 0


def train_seed(args: argparse.Namespace, workdir: Path, seed: int) -> dict:
    """The seed's own trainer on one seed, stopped as Ctrl+C stops it once its collectors pass the budget.

    Its collectors run ahead of its learner (they count every env step they take, used or not), so its
    iterations do not fix its env steps: it is given iterations enough for the budget at one batch each
    and stopped when its logged env steps reach the budget."""
    spec = SEED_TASKS[args.task]
    num_envs = args.num_envs or spec["num_envs"]
    iterations = math.ceil(args.env_steps / (num_envs * SEED_STEPS_PER_ENV))
    cmd = [str(args.venv.resolve() / "bin" / "train"), "--algo", "appo", "--task", args.task, "--sim", "mujoco",
           f"algo.seed={seed}", f"algo.num_envs={num_envs}", f"algo.max_iterations={iterations}",
           f"algo.save_interval={SEED_SAVE_INTERVAL}", "training.no_play=true", "training.device=cpu"]
    runs = workdir / "logs" / "appo" / spec["registry"]
    before = set(runs.iterdir()) if runs.is_dir() else set()
    log = args.out / f"train_unilab_seed_{seed}.log"
    print(f"$ (cd {workdir} && {' '.join(['train', *cmd[1:]])})", flush=True)
    start = time.monotonic()
    stopped = False
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **SEED_ENV}, start_new_session=True)
        while proc.poll() is None:
            time.sleep(POLL_S)
            new = sorted(set(runs.iterdir()) - before) if runs.is_dir() else []
            if not stopped and new and seed_env_steps(new[-1]) >= args.env_steps:
                os.killpg(proc.pid, signal.SIGINT)  # its own cooperative shutdown, as a terminal's Ctrl+C
                stopped = True
                try:
                    proc.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    seconds = time.monotonic() - start
    new = sorted(set(runs.iterdir()) - before) if runs.is_dir() else []
    if (proc.returncode != 0 and not stopped) or not new:
        raise RuntimeError(f"the seed's train exited {proc.returncode}{'' if new else ' without a run directory'}; "
                           f"see {log}")
    run = new[-1]
    rows = seed_rows(run)
    if not rows:
        raise RuntimeError(f"the seed's run {run} logged no training scalars; see {log}")
    checkpoints = sorted(run.glob("model_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    figures = {}
    if checkpoints and args.task in PARITY_TASKS:  # the same task here: its policy runs in our env as it is
        from benchmarks.unilab_policy import evaluate_seed

        figures = {"eval": evaluate_seed(checkpoints[-1], args.task, args.episodes)}
    return {"learner": "unilab", "label": "UniLab APPO", "seed": seed, "num_envs": num_envs,
            "steps_per_env": SEED_STEPS_PER_ENV, "iterations": rows[-1]["iteration"],
            "env_steps": rows[-1]["env_steps"], "stopped_at_budget": stopped, "process_seconds": seconds,
            "dir": str(run), "checkpoint": str(checkpoints[-1]) if checkpoints else None, "rows": rows, **figures}


def train_ours(args: argparse.Namespace, seed: int) -> dict:
    """appo-train with the task's preset on one seed, to the same env-step budget."""
    from benchmarks import appo_run
    from benchmarks.ablation import iterations_for
    from benchmarks.vs_rslrl_report import appo_rows

    iterations, per = iterations_for(args.env_steps, args.task, [])
    run, seconds = appo_run.train(args.task, seed, iterations, [], (args.out / "appo").resolve(), f"seed_{seed}",
                                  args.out / f"train_appo_seed_{seed}.log")
    rows = appo_rows(run)
    return {"learner": "appo", "label": "appo-train preset", "seed": seed, "num_envs": per // 24,
            "steps_per_env": 24, "iterations": iterations, "env_steps": rows[-1]["env_steps"],
            "process_seconds": seconds, "dir": str(run), "rows": rows,
            "eval": appo_run.evaluate(run, args.episodes)}


def _flat(data: dict, prefix: str) -> dict:
    out = {}
    for key, value in data.items():
        out.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


def check_reused_run(run: Path, task: str, seed: int, env_steps: int) -> AppoConfig:
    """Refuse an earlier run of ours that is not the one train_ours would make: preset, seed and budget."""
    from benchmarks.ablation import iterations_for
    from common.checkpoint_io import CheckpointError
    from common.config import load_config
    from tools.play.sources import run_config

    try:
        cfg = run_config(run)
    except CheckpointError as exc:
        raise RuntimeError(f"--appo-run {run}: {exc}") from None
    preset = load_config([], extra={"task": task}, environ={})
    if cfg.task != task or cfg.algo.seed != seed:
        raise RuntimeError(f"--appo-run {run}: trained {cfg.task} on seed {cfg.algo.seed}, not {task} on seed {seed}")
    free = {"algo.seed", "algo.save_interval", "algo.max_iterations"}  # the seed and budget are checked apart
    ran = {**_flat(cfg.algo.model_dump(), "algo."), **_flat(cfg.task_options.model_dump(), "task_options.")}
    want = {**_flat(preset.algo.model_dump(), "algo."), **_flat(preset.task_options.model_dump(), "task_options.")}
    differ = sorted(k for k in set(ran) | set(want) if k not in free and ran.get(k) != want.get(k))
    if differ:
        raise RuntimeError(f"--appo-run {run}: not the {task} preset: "
                           + ", ".join(f"{k}={ran.get(k)!r} (preset {want.get(k)!r})" for k in differ))
    iterations, _ = iterations_for(env_steps, task, [])
    if cfg.algo.max_iterations != iterations:
        raise RuntimeError(f"--appo-run {run}: ran algo.max_iterations={cfg.algo.max_iterations}; the budget of "
                           f"{env_steps:,} env steps is {iterations} iterations")
    return cfg


def reuse_ours(args: argparse.Namespace, seed: int, run: Path) -> dict:
    """A finished run of ours (checked by check_reused_run) in train_ours's place."""
    from benchmarks import appo_run
    from benchmarks.vs_rslrl_report import appo_rows

    cfg = check_reused_run(run, args.task, seed, args.env_steps)
    rows = appo_rows(run)
    if not rows or rows[-1]["env_steps"] < args.env_steps:
        logged = rows[-1]["env_steps"] if rows else 0
        raise RuntimeError(f"--appo-run {run}: logged {logged:,} of {args.env_steps:,} env steps (not finished)")
    print(f"(seed {seed}: appo-train's run {run}, reused)", flush=True)
    return {"learner": "appo", "label": "appo-train preset", "seed": seed, "num_envs": cfg.algo.num_envs,
            "steps_per_env": cfg.algo.steps_per_env, "iterations": rows[-1]["iteration"],
            "env_steps": rows[-1]["env_steps"], "process_seconds": rows[-1]["wall_s"], "dir": str(run),
            "reused": True, "rows": rows, "eval": appo_run.evaluate(run, args.episodes)}


def behind_points(seed: list[dict], ours: list[dict], after: int = AHEAD_AFTER) -> tuple[int, list[dict]]:
    """The seed's logged points past `after` env steps, counted, and those where ours is below it in training
    return or episode length; ours at a point is its last row logged at or before the same env steps."""
    past = [r for r in seed if r["env_steps"] > after and "return" in r and "episode_length" in r]
    behind = []
    for point in past:
        before = [r for r in ours if r["env_steps"] <= point["env_steps"]]
        mine = before[-1] if before else {}
        if not (mine.get("return", -math.inf) >= point["return"]
                and mine.get("episode_length", -math.inf) >= point["episode_length"]):
            behind.append({"env_steps": point["env_steps"], "seed_return": point["return"],
                           "seed_episode_length": point["episode_length"], "our_return": mine.get("return"),
                           "our_episode_length": mine.get("episode_length")})
    return len(past), behind


def ahead_by_seed(runs: list[dict]) -> dict[int, dict]:
    """Per seed with both trainers' curves: the seed's points past 1 M and those where ours is below it."""
    ahead = {}
    for seed in sorted({r["seed"] for r in runs}):
        by = {r["learner"]: r for r in runs if r["seed"] == seed}
        if {"unilab", "appo"} <= by.keys():
            count, behind = behind_points(by["unilab"]["rows"], by["appo"]["rows"])
            ahead[seed] = {"seed_points_past": count, "ours_below_at": behind}
    return ahead


def ahead_summary(runs: list[dict]) -> list[str]:
    """Per seed with both trainers' curves: is ours at or above the seed's at every point it logged past 1 M?"""
    lines = []
    for seed, a in ahead_by_seed(runs).items():
        count, behind = a["seed_points_past"], a["ours_below_at"]
        verdict = "yes" if count and not behind else "no"
        where = "".join(f"; below at {b['env_steps']:,}" for b in behind[:5])
        lines.append(f"  seed {seed}: {verdict}, {count - len(behind)} of the seed's {count} points past "
                     f"{AHEAD_AFTER:,} env steps{where}")
    return lines


def run_train(args: argparse.Namespace) -> int:
    from benchmarks import vs_rslrl_report as report

    for seed, run in args.appo_runs.items():  # refused before hours of the seed's training, not after
        check_reused_run(run, args.task, seed, args.env_steps)
    workdir = Path(seed_ready(args.venv)["workdir"])
    args.out.mkdir(parents=True, exist_ok=True)
    runs: list[dict] = []
    for seed in args.seed_list:
        runs.append(train_seed(args, workdir, seed))
        runs.append(reuse_ours(args, seed, args.appo_runs[seed]) if seed in args.appo_runs
                    else train_ours(args, seed))
        meta = {"task": args.task, "env_steps_budget": args.env_steps, "seeds": args.seed_list}
        report.write_curves(runs, args.out / "curves.json", args.out / "curves.csv", meta)  # kept after each run
    report.plot(runs, args.out / "curves.png", f"{args.task}: UniLab's APPO vs appo-train, "
                f"{args.env_steps / 1e6:g} M env steps")
    evals = [{"learner": r["learner"], "seed": r["seed"], "env_steps": r["env_steps"], "figures": r["eval"]}
             for r in runs if "eval" in r]
    ahead = {str(seed): a for seed, a in ahead_by_seed(runs).items()}
    (args.out / "eval.json").write_text(json.dumps({"task": args.task, "evaluations": evals,
                                                    "ahead_past_env_steps": AHEAD_AFTER, "ahead": ahead}, indent=2))
    print(f"\nvs UniLab  task {args.task}  budget {args.env_steps:,} env steps")
    print(report.table(runs, args.env_steps))
    print("ours at or above the seed's APPO in training return and episode length at every point the seed logged "
          f"past {AHEAD_AFTER:,} env steps:")
    print("\n".join(ahead_summary(runs)))
    print(f"results: {args.out}/curves.json, curves.csv, curves.png, eval.json")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from benchmarks.unilab_setup import SetupError

    try:
        if args.train:
            return run_train(args)
        return run_parity(args)
    except SetupError as exc:
        print(f"error: the seed's venv {args.venv}: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
