"""appo-bench: every throughput figure of one task, on the machine it runs on, in one run.

    appo-bench                                         # go2_joystick_flat at its preset's sizes
    appo-bench --task half_cheetah --num-envs 2048 --json bench.json
    appo-bench --only physics,learner --seconds 5      # a subset
    appo-bench --only physics --collector-inference torch,numpy   # the collector with each inference backend
    appo-bench --only physics,e2e training.collector_threads=1 training.collector_nice=0   # a static core split

Each part runs as its own process (own threads, own GIL), one after the other:
  physics    threaded MuJoCo stepping, no policy, with random actions drawn each step from the
             initial policy's spread (the ceiling), with one held uniform array, and fed the
             actions the collector's policy sampled (the collector's own physics)  (python -m benchmarks.physics)
  collector  the real rollout loop: inference + recording, no learner (same process as physics, interleaved);
             --collector-inference torch,numpy measures it with each backend in the same rounds
  learner    process + update on synthetic rollouts, ours against a
             straightforward reference loop, with per-phase times       (python -m benchmarks.update)
  ingest     rollouts/s into the ring through each transport           (python -m benchmarks.ingest)
  e2e        appo-train for a fixed number of iterations: trained env-steps/s, the fraction of
             simulated env steps trained on, learner wait, policy lag, and the core split it chose
             (KEY=VALUE config overrides apply to this run)
Ratios are printed beside the absolute figures; --json writes everything.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.physics import inference_list
from common.cli import at_least, duration
from common.config import ConfigError, load_config
from common.cores import usable_cores
from tools.tb_scalars import read_scalars

PARTS = ("physics", "learner", "ingest", "e2e")  # physics includes the collector-alone figure


def _run_json(args: list[str], out: Path, timeout: float) -> dict:
    """Run one benchmark module with --json OUT; its console output passes through."""
    cmd = [sys.executable, "-m", *args, "--json", str(out)]
    print(f"\n$ {' '.join(cmd[1:])}", flush=True)
    subprocess.run(cmd, check=True, timeout=timeout)
    return json.loads(out.read_text())


def bench_physics(task: str, num_envs: int, seconds: float, tmp: Path, inference: tuple[str, ...] = ()) -> dict:
    # The physics cost per step depends on the actions (benchmarks.physics's docstring), so the
    # held-action and the collector's-own-actions ceilings are measured beside the random one.
    extra = ["--collector-inference", ",".join(inference)] if inference else []
    return _run_json(["benchmarks.physics", "--task", task, "--num-envs", str(num_envs), "--replay-ceiling",
                      "--held-ceiling", "--seconds", str(seconds), *extra], tmp / "physics.json",
                     timeout=60 + (12 + 4 * max(1, len(inference))) * seconds)


def bench_learner(task: str, num_envs: int, steps: int, seconds: float, tmp: Path) -> dict:
    return _run_json(["benchmarks.update", "--task", task, "--num-envs", str(num_envs),
                      "--steps-per-env", str(steps), "--seconds", str(seconds)],
                     tmp / "learner.json", timeout=600 + 8 * seconds)


def bench_ingest(task: str, num_envs: int, steps: int, seconds: float, tmp: Path) -> dict:
    return _run_json(["benchmarks.ingest", "--task", task, "--num-envs", str(num_envs), "--steps", str(steps),
                      "--seconds", str(seconds), "--warmup", str(max(2.0, seconds / 3))],
                     tmp / "ingest.json", timeout=180 + 6 * seconds)


def steady_state(summary: dict, scalars: dict, warmup_fraction: float = 0.2) -> dict:
    """Rates over the iterations after the first `warmup_fraction` (start-up and the first
    weights are not what a long run sees)."""
    steps = scalars["perf/total_env_steps"]
    k = min(len(steps) - 2, int(len(steps) * warmup_fraction))
    (t0, _, s0), (t1, _, s1) = steps[k], steps[-1]
    laps = slice(k + 1, None)

    def mean(tag: str) -> float:
        vals = [v for _, _, v in scalars[tag][laps]]
        return sum(vals) / len(vals)

    wait, lap = mean("perf/collector_wait_ms"), mean("perf/iter_ms")
    fraction = summary["trained_fraction"]
    return {
        "iterations": summary["completed_iterations"],
        "simulated_env_steps": summary["total_env_steps"],
        "trained_env_steps": summary["trained_env_steps"],
        "trained_fraction": fraction,
        # Includes rollouts still in the ring when the run stopped (never staged, never trained).
        "trained_of_received": summary["trained_env_steps"] / summary.get("received_env_steps", summary[
            "total_env_steps"]),
        "env_steps_per_s": (s1 - s0) / (t1 - t0),
        "trained_env_steps_per_s": (s1 - s0) / (t1 - t0) * fraction,
        "learner_wait_ms_mean": wait,
        "iter_ms_mean": lap,
        "learner_wait_fraction": wait / lap,
        "train_ms_mean": mean("perf/train_ms"),
        "policy_lag_mean": mean("Learner/policy_lag_mean"),
        "policy_lag_max": max(v for _, _, v in scalars["Learner/policy_lag_max"]),
        "wall_s": summary["training_wall_time_sec"],
        "staging_overflow": summary["staging_overflow"],
    }


def _sibling_script(name: str) -> str:
    """An entry point installed beside this interpreter (a venv's bin/ need not be on PATH)."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name) or name


def bench_e2e(task: str, num_envs: int, steps: int, iterations: int, collectors: int, tmp: Path,
              overrides: list[str] = ()) -> dict:
    log_dir = tmp / "logs"
    cmd = [_sibling_script("appo-train"), "--task", task, "--collectors", str(collectors),
           f"algo.num_envs={num_envs}", f"algo.steps_per_env={steps}", f"algo.max_iterations={iterations}",
           f"algo.save_interval={iterations}", f"training.log_dir={log_dir}", "training.run_name=bench",
           "training.console=false", "training.no_play=true", *overrides]
    print(f"\n$ {' '.join(cmd)}", flush=True)
    proc = subprocess.run(cmd, timeout=120 + 60 * iterations, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env={**os.environ, "APPO_LOG_FORMAT": "json"})
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    run = log_dir / task / "bench"
    summary = json.loads((run / "summary.json").read_text())
    return {**steady_state(summary, read_scalars(run)), "core_split": core_split(proc.stderr)}


def core_split(log: str) -> dict:
    """The core split appo-train chose, from its "run" log line."""
    for line in log.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == "run":
            return {k: record[k] for k in ("usable_cores", "learner_threads", "collector_threads", "cores_shared",
                                           "collector_nice") if k in record}
    raise RuntimeError("appo-train logged no 'run' line with its core split")


def ratios(res: dict) -> dict:
    out = {}
    phys, learn, ingest, e2e = (res.get(k) for k in PARTS)
    if phys:
        out["collector / physics ceiling"] = phys["ratio"]
        if "held_ratio" in phys:
            out["collector / held-action ceiling"] = phys["held_ratio"]
        if "replay_ratio" in phys:
            out["collector / replay ceiling (its own actions)"] = phys["replay_ratio"]
        for name, fig in _other_inference(phys):
            out[f"collector ({name} inference) / physics ceiling"] = fig["ratio"]
    if learn:
        out[f"learner ours ({learn.get('precision', 'fp32')}) / reference loop"] = learn["ratio"]
        if "fp32_ratio" in learn:
            out["learner ours (fp32) / reference loop"] = learn["fp32_ratio"]
    if ingest:
        out["ingest zmq / raw pyzmq"] = ingest["zmq_vs_raw"]
        out["ingest shm / zmq"] = ingest["shm"]["mb_per_s"] / ingest["zmq"]["mb_per_s"]
    if e2e and phys:
        out["e2e trained env-steps/s / physics ceiling"] = e2e["trained_env_steps_per_s"] / phys[
            "physics_ceiling_steps_per_s"]
    if e2e and learn:
        out["e2e trained env-steps/s / learner-alone env-steps/s"] = e2e["trained_env_steps_per_s"] / learn[
            "ours_env_steps_per_s"]
    return out


def _other_inference(phys: dict) -> list[tuple[str, dict]]:
    """The physics part's collector figures with inference backends other than the main one."""
    return [(name, fig) for name, fig in phys.get("by_inference", {}).items()
            if name != phys.get("collector_inference")]


def print_table(res: dict) -> None:
    rows: list[tuple[str, str]] = []
    phys, learn, ingest, e2e = (res.get(k) for k in PARTS)
    if phys:
        rows += [("physics ceiling", f"{phys['physics_ceiling_steps_per_s']:,.0f} env-steps/s  (random actions, "
                                     f"std {phys.get('random_action_std', '?')})"),
                 ("collector alone", f"{phys['collector_steps_per_s']:,.0f} env-steps/s"
                                     + (f"  ({phys['collector_inference']} inference)"
                                        if "collector_inference" in phys else ""))]
        rows += [(f"collector alone, {name} inference", f"{fig['collector_steps_per_s']:,.0f} env-steps/s  "
                                                        f"(inference {fig['collector_infer_ms_per_step']:.1f} ms "
                                                        f"per step)") for name, fig in _other_inference(phys)]
        if "held_ceiling_steps_per_s" in phys:
            rows.append(("physics, held random actions", f"{phys['held_ceiling_steps_per_s']:,.0f} env-steps/s"))
        if "replay_ceiling_steps_per_s" in phys:
            rows.append(("physics, collector's actions", f"{phys['replay_ceiling_steps_per_s']:,.0f} env-steps/s"))
    if learn:
        rows += [(f"learner (ours, {learn.get('precision', 'fp32')})",
                  f"{learn['ours_samples_per_s']:,.0f} samples/s  ({learn['ours_env_steps_per_s']:,.0f} env-steps/s "
                  f"at {learn['epochs']} epochs)")]
        if "ours_fp32_samples_per_s" in learn:
            rows.append(("learner (ours, fp32)", f"{learn['ours_fp32_samples_per_s']:,.0f} samples/s"))
        rows.append(("learner (reference loop, fp32)", f"{learn['reference_samples_per_s']:,.0f} samples/s"))
        rows += [(f"  phase {k}", f"{v:.1f} ms") for k, v in learn.get("phases_ms", {}).items()]
    if ingest:
        for k in ("raw", "zmq", "shm"):
            rows.append((f"ingest {k}", f"{ingest[k]['rollouts_per_s']:,.1f} rollouts/s  "
                                        f"{ingest[k]['env_steps_per_s']:,.0f} env-steps/s"))
    if e2e:
        rows += [("e2e trained", f"{e2e['trained_env_steps_per_s']:,.0f} env-steps/s "
                                 f"({e2e['iterations']} iterations)"),
                 ("e2e trained fraction", f"{e2e['trained_fraction']:.4f} "
                                          f"({e2e['trained_env_steps']:,} of {e2e['simulated_env_steps']:,})"),
                 ("e2e learner wait", f"{e2e['learner_wait_ms_mean']:.0f} ms of {e2e['iter_ms_mean']:.0f} ms "
                                      f"per iteration ({e2e['learner_wait_fraction']:.0%})"),
                 ("e2e policy lag", f"mean {e2e['policy_lag_mean']:.2f}, max {e2e['policy_lag_max']:.0f}"),
                 ("e2e core split", _split_text(e2e["core_split"]))]
    rows += [(k, f"{v:.2f}") for k, v in res["ratios"].items()]
    width = max(len(k) for k, _ in rows)
    print(f"\nappo-bench  task {res['task']}  {res['num_envs']} envs x {res['steps_per_env']} steps  "
          f"{res['machine']}  {res['date']}" + (f"  e2e with {' '.join(res['overrides'])}" if res.get("overrides")
                                                else ""))
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")


def _split_text(split: dict) -> str:
    shared = (f"shared, collectors at nice {split['collector_nice']}" if split.get("cores_shared")
              else f"static, collectors at nice {split.get('collector_nice', 0)}")
    return (f"learner {split['learner_threads']} torch threads, collector {split['collector_threads']} MuJoCo "
            f"threads of {split.get('usable_cores', '?')} cores ({shared})")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="appo-bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="go2_joystick_flat")
    p.add_argument("--num-envs", type=at_least(0), default=0, help="envs per collector (default: the task's preset)")
    p.add_argument("--steps-per-env", type=at_least(0), default=0, help="rollout length (default: the task's preset)")
    p.add_argument("--seconds", type=duration(), default=10.0, help="length of each throughput measurement")
    p.add_argument("--iterations", type=at_least(2), default=30, help="learner iterations of the end-to-end run")
    p.add_argument("--collectors", type=at_least(1), default=1, help="local collectors of the end-to-end run")
    p.add_argument("--only", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    p.add_argument("--collector-inference", type=inference_list, default=(),
                   help="physics part: collector inference backends to measure, e.g. torch,numpy (default: the "
                        "config's training.collector_inference)")
    p.add_argument("--json", help="write every figure here")
    p.add_argument("overrides", nargs="*", help="KEY=VALUE config overrides for the end-to-end run "
                                                 "(e.g. training.collector_threads=1 training.collector_nice=0)")
    args = p.parse_intermixed_args(argv)
    unknown = set(args.only.split(",")) - set(PARTS)
    if unknown:
        p.error(f"--only: unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:  # the end-to-end run's overrides, refused here rather than after the other parts
        cfg = load_config(args.overrides, extra={"task": args.task}, environ={})
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    num_envs = args.num_envs or cfg.algo.num_envs
    steps = args.steps_per_env or cfg.algo.steps_per_env
    parts = args.only.split(",")
    res: dict = {"task": args.task, "num_envs": num_envs, "steps_per_env": steps,
                 "machine": f"{platform.machine()} {platform.processor() or ''}".strip()
                            + f", {usable_cores()} usable cores of {os.cpu_count()}",
                 "date": time.strftime("%Y-%m-%d %H:%M"), "overrides": args.overrides}
    with tempfile.TemporaryDirectory(prefix="appo-bench-") as tmp_name:
        tmp = Path(tmp_name)
        if "physics" in parts:
            res["physics"] = bench_physics(args.task, num_envs, args.seconds, tmp, args.collector_inference)
        if "learner" in parts:
            res["learner"] = bench_learner(args.task, num_envs, steps, args.seconds, tmp)
        if "ingest" in parts:
            res["ingest"] = bench_ingest(args.task, num_envs, steps, args.seconds, tmp)
        if "e2e" in parts:
            res["e2e"] = bench_e2e(args.task, num_envs, steps, args.iterations, args.collectors, tmp, args.overrides)
    res["ratios"] = ratios(res)
    print_table(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
