"""Collector throughput against the physics ceiling, measured in one run.

    python -m benchmarks.physics --task half_cheetah --num-envs 512
    python -m benchmarks.physics --task go2_joystick_flat,g1_velocity_flat --num-envs 256   # ceilings side by side
    python -m benchmarks.physics --task go2_joystick_flat --sim mujoco,motrix --num-envs 512  # engines side by side

ceiling:   env.step of one batch of N envs (threaded physics + vectorised obs/reward), no policy,
           with random actions drawn afresh each step from the initial policy's distribution,
           N(0, init_noise_std^2) per action dim (arrays drawn before the clock starts)
share:     the part of the ceiling's env.step spent in the engine's native step (the rest: the task's NumPy
           observations, rewards and resets), timed inside env.step on the ceiling's actions
collector: the real rollout loop on the collector's env (make_collector_env: two double-buffered
           groups from 256 envs on) with policy inference, recording and timeout bootstrap, no learner;
           with --collector-inference torch,numpy one collector per inference backend, each measured
           every round (the first backend's figures are the main ones), all with the same weights
held:      (--held-ceiling) the ceiling's env.step with one uniform [-1, 1] action array per round, held
replay:    (--replay-ceiling) the ceiling's env.step fed the actions the collector's policy sampled in
           its last rollout, cycled: the collector's own physics workload without the policy.

The physics cost per step depends on the actions: held actions let Go2 robots settle into cheap
static poses, uniform [-1, 1] drawn every step makes them flail and costs more than the actions a
policy samples (see BENCHMARKS.md, section "Collector against the physics ceiling, 2 and 16 cores"),
hence a ceiling drawn from the distribution the collector's policy samples at the start.

With several tasks or physics engines (--sim, comma-separated), the ceilings of every task on every engine
are first measured side by side, round by round in turn, each one's cost per env step given against the
first's; then each one's ceiling/collector run as above, one after the other.

Figures are medians over the rounds; a ratio is the median of the rounds' own ratios (each
round measures its figures back to back, so the machine's slow drifts divide out).
`run(...)` returns the figures as a dict (the --json file's content).
"""

from __future__ import annotations

import argparse
import json
import platform
import threading
import time
from typing import get_args

import numpy as np

from common.cli import at_least, duration
from common.config import TrainingConfig, load_config
from common.cores import collector_mujoco_threads, usable_cores
from common.hub import motion_clip
from common.rollout_spec import allocate

INFERENCE_CHOICES = get_args(TrainingConfig.model_fields["collector_inference"].annotation)  # auto, torch, numpy


def measure_physics(env, seconds: float, actions: list[np.ndarray]) -> float:
    """env.step throughput from reset, step k taking actions[k % len(actions)] (no policy)."""
    env.reset()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(actions[steps % len(actions)])
        steps += 1
    return steps * env.num_envs / (time.perf_counter() - start)


def measure_physics_share(env, seconds: float, actions: list[np.ndarray]) -> float | None:
    """The share of env.step's wall time spent in the physics engine's step, from reset with `actions` as
    measure_physics takes them; the rest is the task's NumPy (observations, rewards, resets).  None for an
    env without a native batch (gym:<id>)."""
    sim = getattr(env, "_sim", None)
    if sim is None:
        return None
    native, in_native = sim.step, [0.0]

    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return native(*args, **kwargs)
        finally:
            in_native[0] += time.perf_counter() - t

    env.reset()
    sim.step = timed  # an instance attribute over the method, for this measurement only
    try:
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            env.step(actions[steps % len(actions)])
            steps += 1
        total = time.perf_counter() - start
    finally:
        del sim.step
    return in_native[0] / total


def random_policy_actions(env, std: float, count: int, rng: np.random.Generator) -> list[np.ndarray]:
    """`count` action arrays drawn from N(0, std^2), the initial policy's spread around a zero mean."""
    shape = (env.num_envs, env.spec.act_dim)
    return [(std * rng.standard_normal(shape)).astype(np.float32) for _ in range(count)]


def held_actions(env, rng: np.random.Generator) -> list[np.ndarray]:
    """One uniform [-1, 1] action array, to be held for a whole measurement."""
    return [rng.uniform(-1, 1, size=(env.num_envs, env.spec.act_dim)).astype(np.float32)]


def replay_actions(rollout_actions: np.ndarray) -> list[np.ndarray]:
    """A rollout's actions [N, T, act_dim] as T per-step arrays."""
    return [np.ascontiguousarray(rollout_actions[:, t]) for t in range(rollout_actions.shape[1])]


def measure_collector(collector, seconds: float, out: dict[str, np.ndarray] | None = None) -> tuple[float, dict]:
    """(env-steps/s, main-thread ms per control step in inference+recording and in the env).

    `out` (default: a fresh rollout) holds the last rollout afterwards."""
    out = allocate(collector.spec) if out is None else out
    obs, critic = collector.env.reset()
    rollouts, infer_ms, step_ms, start = 0, 0.0, 0.0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        obs, critic, perf = collector.fill_rollout(out, obs, critic)
        infer_ms += perf["infer_ms"]
        step_ms += perf["step_ms"]
        rollouts += 1
    rate = rollouts * collector.spec.env_steps / (time.perf_counter() - start)
    steps = rollouts * collector.spec.steps
    return rate, {"infer_ms": infer_ms / steps, "step_ms": step_ms / steps}


def round_ratios(ours: list[float], ceiling: list[float]) -> list[float]:
    """ours / ceiling within each round."""
    return [a / b for a, b in zip(ours, ceiling, strict=True)]


def paired_ratio(ours: list[float], ceiling: list[float]) -> float:
    """Median over rounds of ours / ceiling within each round.

    A round's figures are measured back to back, so a slow spell of a shared machine
    (whose speed can wander over minutes) divides out of its ratio.
    """
    return float(np.median(round_ratios(ours, ceiling)))


def make_collectors(cfg, env, inference: tuple[str, ...]) -> dict:
    """One hand-driven Collector on `env` per inference backend (the config's when `inference` is empty), by the
    backend's name, all loaded with the same weights: one initial actor-critic, as the learner publishes it."""
    import torch  # here, not at the top: appo-bench imports this module for its arguments only

    from collector.inference import limit_inference_threads
    from collector.rollout import Collector
    from common.policy import ActorCritic, flat_weights

    torch.manual_seed(0)
    flat = flat_weights(ActorCritic.from_config(cfg, env.spec))
    collectors = {}
    for choice in inference or (cfg.training.collector_inference,):
        c = Collector(cfg.model_copy(update={"training": cfg.training.model_copy(
            update={"collector_inference": choice})}), env, channel=None, stop_event=threading.Event())
        c.inference.load(flat)
        # As appo-collector: inference on the main thread, one thread, the MuJoCo threads get the cores.
        limit_inference_threads(c.inference.name)
        collectors[c.inference.name] = c
    return collectors


def task_config(task: str, num_envs: int, motion_file: str = ""):
    """The task's configuration (its preset) at num_envs, with the motion clip a tracking task needs (default: the
    seed's, common/hub.py)."""
    extra: dict = {"task": task, "algo": {"num_envs": num_envs}}
    if motion_file:
        extra["task_options"] = {"motion_file": motion_file}
    return load_config(extra=extra)


def label(task: str, sim: str, sims: list[str]) -> str:
    """A task's name in the reports, with its engine where several are compared."""
    return f"{task} ({sim})" if len(sims) > 1 else task


def compare_ceilings(tasks: list[str], num_envs: int, threads: int = 0, seconds: float = 10.0, rounds: int = 3,
                     motion_file: str = "", sims: list[str] | None = None) -> dict:
    """Each task's physics ceiling on each engine, all taking turns within every round; the costs against the
    first's."""
    from collector.envs import make_env

    sims = sims or ["mujoco"]
    threads = threads or usable_cores()
    rng = np.random.default_rng(0)
    envs, actions = {}, {}
    pairs = [(task, sim) for task in tasks for sim in sims]
    rates: dict[str, list[float]] = {label(t, s, sims): [] for t, s in pairs}
    try:
        for task, sim in pairs:
            name = label(task, sim, sims)
            cfg = task_config(task, num_envs, motion_file)
            envs[name] = make_env(task, num_envs, threads, seed=0, motion_file=motion_clip(cfg),
                                  sim=sim)
            actions[name] = random_policy_actions(envs[name], cfg.algo.policy.init_noise_std,
                                                  cfg.algo.steps_per_env, rng)
        for _ in range(rounds):
            for name in rates:
                rates[name].append(measure_physics(envs[name], seconds, actions[name]))
    finally:
        for env in envs.values():
            env.close()
    first = next(iter(rates.values()))
    return {"num_envs": num_envs, "mujoco_threads": threads, "tasks": {task: {
        "physics_ceiling_steps_per_s": float(np.median(r)),
        "us_per_env_step": float(1e6 / np.median(r)),
        # A round's figures are back to back, so this pairs them as the collector ratio does.
        "cost_vs_first": paired_ratio(first, r),
        "rounds": r,
    } for task, r in rates.items()}}


def run(task: str, num_envs: int, threads: int = 0, seconds: float = 10.0, rounds: int = 3,
        replay_ceiling: bool = False, held_ceiling: bool = False, collector_threads: int = 0,
        inference: tuple[str, ...] = (), motion_file: str = "", sim: str = "mujoco") -> dict:
    """Interleaved ceiling/collector(/held/replay) rounds in this process; the figures as a JSON-ready dict.

    `threads` cores (0: all usable): the ceiling steps on all of them, the collector on as many MuJoCo
    threads as appo-collector takes from them (`collector_mujoco_threads`; `collector_threads` if given),
    its main thread on the rest.  `inference`: the collectors' backends (training.collector_inference values),
    each measured every round; the main collector figures are the first one's (default: the config's).
    """
    from collector.envs import make_collector_env, make_env

    cfg = task_config(task, num_envs, motion_file)
    motion = motion_clip(cfg)
    threads = threads or usable_cores()
    collector_threads = collector_threads or collector_mujoco_threads(threads)
    env = make_env(task, num_envs, threads, seed=0, motion_file=motion, sim=sim)
    collector_env = make_collector_env(task, num_envs, collector_threads, seed=0, motion_file=motion, sim=sim)
    collectors = make_collectors(cfg, collector_env, inference)
    main_name, collector = next(iter(collectors.items()))
    rng = np.random.default_rng(0)
    random_actions = random_policy_actions(env, cfg.algo.policy.init_noise_std, cfg.algo.steps_per_env, rng)
    outs = {name: allocate(c.spec) for name, c in collectors.items()}
    out = outs[main_name]
    figures: dict[str, list[float]] = {"physics_ceiling_steps_per_s": [], "collector_steps_per_s": []}
    by_inference: dict[str, dict[str, list]] = {name: {"rates": [], "phases": []} for name in collectors}
    try:
        # Interleaved rounds so all see the same machine load.
        names = list(collectors)
        for r in range(rounds):
            figures["physics_ceiling_steps_per_s"].append(measure_physics(env, seconds, random_actions))
            share = measure_physics_share(env, seconds, random_actions)
            if share is not None:
                figures.setdefault("physics_share_of_step", []).append(share)
            # Backends take turns at going first, so none is always the furthest from its round's ceiling.
            for name in names[r % len(names):] + names[:r % len(names)]:
                rate, phase = measure_collector(collectors[name], seconds, outs[name])
                by_inference[name]["rates"].append(rate)
                by_inference[name]["phases"].append(phase)
            figures["collector_steps_per_s"].append(by_inference[main_name]["rates"][-1])
            if held_ceiling:
                figures.setdefault("held_ceiling_steps_per_s", []).append(
                    measure_physics(env, seconds, held_actions(env, rng)))
            if replay_ceiling:
                figures.setdefault("replay_ceiling_steps_per_s", []).append(
                    measure_physics(env, seconds, replay_actions(out["actions"])))
    finally:
        env.close()
        collector_env.close()
    median = {k: float(np.median(v)) for k, v in figures.items()}
    ceiling = figures["physics_ceiling_steps_per_s"]
    phases = by_inference[main_name]["phases"]
    ours = median["collector_steps_per_s"]
    extra = {}
    if "physics_share_of_step" in median:
        extra["physics_share_of_step"] = median["physics_share_of_step"]
    for name in ("held", "replay"):
        if f"{name}_ceiling_steps_per_s" in median:
            extra[f"{name}_ceiling_steps_per_s"] = median[f"{name}_ceiling_steps_per_s"]
            extra[f"{name}_ratio"] = paired_ratio(figures["collector_steps_per_s"],
                                                  figures[f"{name}_ceiling_steps_per_s"])
    return {
        "task": task,
        "sim": sim,
        "num_envs": num_envs,
        "mujoco_threads": threads,
        "collector_mujoco_threads": collector_threads,
        "collector_groups": len(collector.groups),
        "steps_per_env": cfg.algo.steps_per_env,
        "random_action_std": cfg.algo.policy.init_noise_std,
        "physics_ceiling_steps_per_s": median["physics_ceiling_steps_per_s"],
        "collector_steps_per_s": ours,
        "ratio": paired_ratio(figures["collector_steps_per_s"], figures["physics_ceiling_steps_per_s"]),
        "round_ratios": round_ratios(figures["collector_steps_per_s"], figures["physics_ceiling_steps_per_s"]),
        "ratio_of_medians": ours / median["physics_ceiling_steps_per_s"],
        # Per control step of all N envs, main thread: policy inference + recording, and stepping
        # the env (with two groups: waiting for the physics and the NumPy work of each step).
        "collector_infer_ms_per_step": float(np.median([p["infer_ms"] for p in phases])),
        "collector_env_ms_per_step": float(np.median([p["step_ms"] for p in phases])),
        "ceiling_ms_per_step": float(num_envs / median["physics_ceiling_steps_per_s"] * 1e3),
        "collector_inference": main_name,
        # Every backend measured (the main one included), each paired with the same rounds' ceilings.
        "by_inference": {name: {
            "collector_steps_per_s": float(np.median(f["rates"])),
            "ratio": paired_ratio(f["rates"], ceiling),
            "round_ratios": round_ratios(f["rates"], ceiling),
            "collector_infer_ms_per_step": float(np.median([p["infer_ms"] for p in f["phases"]])),
            "collector_env_ms_per_step": float(np.median([p["step_ms"] for p in f["phases"]])),
        } for name, f in by_inference.items()},
        **extra,
        "rounds": figures,
        "machine": f"{platform.machine()}, {usable_cores()} cores, {platform.processor() or platform.platform()}",
        "date": time.strftime("%Y-%m-%d"),
    }


def engine_list(text: str) -> tuple[str, ...]:
    """argparse type: comma-separated physics engines, e.g. mujoco,motrix."""
    from common.task_spec import ENGINES

    names = tuple(n for n in text.split(",") if n)
    bad = [n for n in names if n not in ENGINES]
    if bad or not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected a comma-separated subset of {','.join(ENGINES)}, got {text!r}")
    return names


def inference_list(text: str) -> tuple[str, ...]:
    """argparse type: comma-separated training.collector_inference values, e.g. torch,numpy."""
    names = tuple(n for n in text.split(",") if n)
    bad = [n for n in names if n not in INFERENCE_CHOICES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated subset of {','.join(INFERENCE_CHOICES)}, "
                                         f"got {text!r}")
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.physics", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="half_cheetah", help="a task, or several comma-separated to compare")
    p.add_argument("--num-envs", type=at_least(1), default=512)
    p.add_argument("--threads", type=at_least(0), default=0,
                   help="cores: the ceiling's MuJoCo threads, shared by the collector's (0: all usable cores)")
    p.add_argument("--collector-threads", type=at_least(0), default=0,
                   help="the collector's MuJoCo threads (0: as appo-collector takes them from --threads cores)")
    p.add_argument("--seconds", type=duration(), default=10.0, help="duration of each measurement")
    p.add_argument("--rounds", type=at_least(1), default=3, help="alternate ceiling/collector this many times")
    p.add_argument("--replay-ceiling", action="store_true",
                   help="also measure env.step replaying the collector's sampled actions (see above)")
    p.add_argument("--held-ceiling", action="store_true",
                   help="also measure env.step with one uniform random action array held (see above)")
    p.add_argument("--collector-inference", type=inference_list, default=(),
                   help="comma-separated collector inference backends to measure, each every round, e.g. "
                        "torch,numpy (default: training.collector_inference of the config, auto)")
    p.add_argument("--motion-file", default="",
                   help="the motion clip of a tracking task (g1_motion_tracking; default: the seed's, downloaded once)")
    p.add_argument("--sim", type=engine_list, default=("mujoco",),
                   help="physics engines, comma-separated to compare them, e.g. mujoco,motrix (default mujoco)")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_intermixed_args(argv)

    tasks = [t for t in args.task.split(",") if t]
    if len(tasks) > 1 or len(args.sim) > 1:
        return compare_main(tasks, args)
    result = run(args.task, args.num_envs, args.threads, args.seconds, args.rounds, args.replay_ceiling,
                 args.held_ceiling, args.collector_threads, args.collector_inference, args.motion_file, args.sim[0])
    print_run(args, result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


def compare_main(tasks: list[str], args: argparse.Namespace) -> int:
    """Several tasks or engines: the ceilings side by side, then each one's ceiling/collector run."""
    sims = list(args.sim)
    comparison = compare_ceilings(tasks, args.num_envs, args.threads, args.seconds, args.rounds, args.motion_file,
                                  sims)
    first = label(tasks[0], sims[0], sims)
    print(f"physics ceilings side by side: envs {args.num_envs}, threads {comparison['mujoco_threads']}")
    for name, fig in comparison["tasks"].items():
        print(f"  {name:<30}: {fig['physics_ceiling_steps_per_s']:12,.0f} env-steps/s  "
              f"{fig['us_per_env_step']:8.1f} us per env step  cost x{fig['cost_vs_first']:.2f} of {first}")
    runs = []
    for task in tasks:
        for sim in sims:
            result = run(task, args.num_envs, args.threads, args.seconds, args.rounds, args.replay_ceiling,
                         args.held_ceiling, args.collector_threads, args.collector_inference, args.motion_file, sim)
            print()
            print_run(argparse.Namespace(**{**vars(args), "task": label(task, sim, sims)}), result)
            runs.append(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"comparison": comparison, "runs": runs}, f, indent=2)
    return 0


def print_run(args: argparse.Namespace, result: dict) -> None:
    """The console report of one task's run()."""
    print(f"task {args.task}  envs {args.num_envs}  physics threads: ceiling {result['mujoco_threads']}, "
          f"collector {result['collector_mujoco_threads']}  collector groups {result['collector_groups']}")
    print(f"physics ceiling : {result['physics_ceiling_steps_per_s']:12,.0f} env-steps/s  "
          f"(random actions, std {result['random_action_std']})")
    if "physics_share_of_step" in result:
        print(f"physics share   : {result['physics_share_of_step']:12.3f}  of env.step's time in the engine's step "
              "(the rest: the task's NumPy observations, rewards and resets)")
    print(f"collector       : {result['collector_steps_per_s']:12,.0f} env-steps/s  "
          f"(main thread per step: inference {result['collector_infer_ms_per_step']:.1f} ms, "
          f"env {result['collector_env_ms_per_step']:.1f} ms)")
    per_round = ", ".join(f"{r:.3f}" for r in result["round_ratios"])
    print(f"ratio           : {result['ratio']:12.3f}  (median of the rounds' ratios: {per_round})  "
          f"inference {result['collector_inference']}")
    for name, fig in list(result["by_inference"].items())[1:]:
        per_round = ", ".join(f"{r:.3f}" for r in fig["round_ratios"])
        print(f"collector {name:<6}: {fig['collector_steps_per_s']:12,.0f} env-steps/s  "
              f"(main thread per step: inference {fig['collector_infer_ms_per_step']:.1f} ms, "
              f"env {fig['collector_env_ms_per_step']:.1f} ms)  ratio {fig['ratio']:.3f} ({per_round})")
    if args.held_ceiling:
        print(f"held ceiling    : {result['held_ceiling_steps_per_s']:12,.0f} env-steps/s  "
              f"(collector / held {result['held_ratio']:.3f})")
    if args.replay_ceiling:
        print(f"replay ceiling  : {result['replay_ceiling_steps_per_s']:12,.0f} env-steps/s  "
              f"(collector / replay {result['replay_ratio']:.3f})")


if __name__ == "__main__":
    raise SystemExit(main())
