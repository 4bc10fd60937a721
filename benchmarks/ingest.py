"""Ingest benchmark: how many rollouts per second the learner can accept, per transport, in one run.

    python -m benchmarks.ingest                       # default-size rollouts, all measurements
    python -m benchmarks.ingest --scale 32 --scale-seconds 180

Synthetic collectors (separate processes, no physics) send rollouts of the
reference size (2048 envs x 24 steps, Go2-sized observations) as fast as flow
control allows; the learner side runs the real receiver into the real ring, and a
consumer drains the ring as the learner would.  Measured:
  zmq   ZeroMQ on loopback through LearnerZmq + Receiver + Ring
  shm   shared memory through LearnerShm + Receiver + Ring
  raw   plain pyzmq PUSH/PULL of the same frames (the ceiling)
  latency  weight publish -> collector receive, default actor+critic
  scale    N synthetic collectors at once for a while: ingest, policy lag, learner RSS, weights served
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import signal
import statistics
import sys
import threading
import time

import numpy as np
import zmq

from common.cli import at_least, duration
from common.config import AppoConfig
from common.policy import ActorCritic, flat_weights, flat_weights_size
from common.rollout_spec import RolloutSpec, allocate
from common.task_spec import TaskSpec
from common.transport.wire import encode_rollout
from learner.receiver import Receiver
from learner.ring import Ring

# Go2-sized rollouts (docs/design.md#go2-observations): 49 policy obs, 52 critic obs, 12 actions.
GO2_LIKE = TaskSpec("bench_go2_like", 49, 52, 12, 1000, 0.02, ("r",))


def bench_spec(num_envs: int, steps: int) -> RolloutSpec:
    return RolloutSpec.for_task(GO2_LIKE, num_envs, steps)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# ------------------------------------------------------------------ synthetic collectors (child processes)


def _zmq_sender(endpoint: str, spec: RolloutSpec, seconds: float, name: str, result: mp.Queue) -> None:
    from common.transport.zmq_collector import CollectorZmq

    num_weights = flat_weights_size(ActorCritic.from_config(AppoConfig(task="bench"), GO2_LIKE))
    ch = CollectorZmq(endpoint, spec, name, num_weights, 2, 1.0, 30.0)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    for b in ch.buffers:
        for a in b.arrays.values():
            a.fill(0.25)
    sent, version, got_weights = 0, 0, False
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop.is_set():
        w = ch.read_weights(version)
        if w is not None:
            version, got_weights = w[0], True
        buf = ch.acquire(0.5)
        if buf is not None:
            ch.commit(buf, sent, version, {"episodes": 0})
            sent += 1
    ch.close()
    result.put((name, sent, got_weights))


def _shm_sender(run_dir: str, cid: int, spec: RolloutSpec, seconds: float, result: mp.Queue) -> None:
    from common.transport.shm import CollectorShm

    ch = CollectorShm(run_dir, cid, spec, buffers=2)
    for b in ch.buffers:
        for a in b.arrays.values():
            a.fill(0.25)
    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        buf = ch.acquire(0.5)
        if buf is not None:
            ch.commit(buf, sent, 0, {"episodes": 0})
            sent += 1
    ch.close()
    result.put((cid, sent, True))


def _raw_sender(endpoint: str, spec: RolloutSpec, seconds: float) -> None:
    frames = encode_rollout(spec, "raw", 0, 0, {}, allocate(spec, 0.25))
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.SNDHWM, 2)
    s.connect(endpoint)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        s.send_multipart(frames, copy=False)
    s.send(b"done")
    s.close(linger=2000)
    ctx.term()


# ------------------------------------------------------------------ learner side


class RingDrain(threading.Thread):
    """Takes ready slots and frees them, as the learner's lap does; counts rollouts after a warm-up."""

    def __init__(self, ring: Ring, version_ref: list[int], bump_every_s: float | None):
        super().__init__(daemon=True)
        self.ring = ring
        self.stop = threading.Event()
        self.count = 0
        self.lags: list[int] = []
        self.version_ref = version_ref
        self.bump_every_s = bump_every_s

    def run(self) -> None:
        last_bump = time.monotonic()
        while not self.stop.is_set():
            for s in self.ring.take_ready(0.1):
                self.lags.append(self.version_ref[0] - self.ring.meta[s].policy_version)
                self.ring.release(s)
                self.count += 1
            if self.bump_every_s and time.monotonic() - last_bump > self.bump_every_s:
                self.version_ref[0] += 1
                last_bump = time.monotonic()


def _all_sending(transport, senders: int) -> bool:
    peers = getattr(transport, "peers", None)
    if peers is None:  # shared memory: attached is as far as the transport can tell
        return len(transport.collectors()) >= senders
    return len(peers) >= senders and all(p.rollouts > 0 for p in list(peers.values()))


def _measure(transport, spec: RolloutSpec, seconds: float, warmup: float, publish=None, bump_every_s=None,
             senders: int = 0, max_policy_lag: int | None = None):
    ring = Ring(spec, 4, pin=False)
    version = [0]
    receiver = Receiver(transport, ring, lambda: version[0], max_policy_lag)
    drain = RingDrain(ring, version, None)  # versions advance only once measuring starts
    receiver.start()
    drain.start()
    # Warm-up ends once every synthetic collector is connected and sending (spawning 32 takes a while).
    deadline = time.monotonic() + 600
    while not _all_sending(transport, senders) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(warmup)
    drain.bump_every_s = bump_every_s
    drain.lags.clear()
    refused0 = sum(receiver.refused_counts().values())
    c0, t0, rss0 = drain.count, time.monotonic(), rss_mb()
    samples = []
    last_publish = version[0]
    while time.monotonic() - t0 < seconds:
        time.sleep(min(1.0, seconds))
        if publish and version[0] != last_publish:
            publish(version[0])
            last_publish = version[0]
        samples.append(rss_mb())
    count, wall = drain.count - c0, time.monotonic() - t0
    drain.stop.set()
    receiver.stop()
    lags = np.asarray(drain.lags or [0])
    return {
        "rollouts_per_s": count / wall,
        "mb_per_s": count * spec.nbytes() / wall / 1e6,
        "env_steps_per_s": count * spec.env_steps / wall,
        "rss_mb_start": rss0,
        "rss_mb_max": max(samples) if samples else rss0,
        "rss_mb_end": samples[-1] if samples else rss_mb(),
        # One sample per tenth of the measurement: flat after the credit-bounded queues fill.
        "rss_mb_timeline": [samples[int(i * (len(samples) - 1) / 10)] for i in range(11)] if samples else [],
        "policy_lag_p50": float(np.percentile(lags, 50)),
        "policy_lag_p99": float(np.percentile(lags, 99)),
        "policy_lag_max": int(lags.max()),
        "refused_during_measurement": sum(receiver.refused_counts().values()) - refused0,
        "refused": receiver.refused_counts(),
    }


def bench_zmq(spec: RolloutSpec, senders: int, seconds: float, warmup: float, port: int,
              bump_every_s: float | None = None, max_policy_lag: int | None = None) -> dict:
    from common.transport.zmq_learner import LearnerZmq

    num_weights = flat_weights_size(ActorCritic.from_config(AppoConfig(task="bench"), GO2_LIKE))
    endpoint = f"tcp://127.0.0.1:{port}"
    learner = LearnerZmq(endpoint, spec, num_weights, 2, 1.0, 30.0)
    weights = np.zeros(num_weights, np.float32)
    learner.publish_weights(0, weights)
    result: mp.Queue = mp.get_context("spawn").Queue()
    ctx = mp.get_context("spawn")
    # Senders run until told to stop (their own clock cannot know how long the warm-up takes).
    procs = [ctx.Process(target=_zmq_sender, args=(endpoint, spec, 3600.0,
                                                    f"s{i}", result)) for i in range(senders)]
    for p in procs:
        p.start()
    out = _measure(learner, spec, seconds, warmup, lambda v: learner.publish_weights(v, weights), bump_every_s,
                   senders, max_policy_lag)
    for p in procs:
        p.terminate()  # SIGTERM: the sender's handler reports and exits
    per_sender = [result.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    learner.close()
    out["collectors_with_weights"] = sum(1 for _, _, got in per_sender if got)
    out["collectors"] = senders
    out["collectors_with_rollouts_sent"] = sum(1 for _, sent, _ in per_sender if sent > 0)
    return out


def bench_shm(spec: RolloutSpec, senders: int, seconds: float, warmup: float) -> dict:
    from common.transport.shm import LearnerShm

    learner = LearnerShm("/dev/shm", f"bench-{os.getpid()}", spec, 16)
    learner.publish_weights(0, np.zeros(16, np.float32))
    ctx = mp.get_context("spawn")
    result: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_shm_sender, args=(str(learner.run_dir), i, spec,
                                                    seconds + warmup + 5, result)) for i in range(senders)]
    for p in procs:
        p.start()
    out = _measure(learner, spec, seconds, warmup, senders=senders)
    learner.request_stop()
    for _ in procs:
        result.get(timeout=120)
    for p in procs:
        p.join()
    learner.close()
    return out


def bench_raw(spec: RolloutSpec, senders: int, seconds: float, warmup: float, port: int) -> dict:
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 2)
    endpoint = f"tcp://127.0.0.1:{port}"
    pull.bind(endpoint)
    mpctx = mp.get_context("spawn")
    procs = [mpctx.Process(target=_raw_sender, args=(endpoint, spec, seconds + warmup))
             for _ in range(senders)]
    for p in procs:
        p.start()
    start = time.monotonic()
    count, t0, done = 0, None, 0
    while done < senders:
        frames = pull.recv_multipart(copy=False)
        if len(frames) == 1:
            done += 1
            continue
        now = time.monotonic()
        if t0 is None and now - start >= warmup:
            t0, count = now, 0
        if t0 is not None and now - t0 <= seconds:
            count += 1
    wall = min(seconds, time.monotonic() - t0) if t0 else seconds
    for p in procs:
        p.join()
    pull.close()
    ctx.term()
    return {"rollouts_per_s": count / wall, "mb_per_s": count * spec.nbytes() / wall / 1e6,
            "env_steps_per_s": count * spec.env_steps / wall}


def bench_weight_latency(port: int, repeats: int) -> dict:
    """Publish -> receive latency of the default actor+critic over loopback (both ends in this process)."""
    from common.transport.zmq_collector import CollectorZmq
    from common.transport.zmq_learner import LearnerZmq

    cfg = AppoConfig(task="bench")
    model = ActorCritic.from_config(cfg, GO2_LIKE)
    flat = flat_weights(model)
    spec = bench_spec(8, 4)
    endpoint = f"tcp://127.0.0.1:{port}"
    learner = LearnerZmq(endpoint, spec, flat.size, 2, 1.0, 30.0)
    collector = CollectorZmq(endpoint, spec, "lat", flat.size, 2, 1.0, 30.0)
    learner.publish_weights(0, flat)
    deadline = time.monotonic() + 10
    while not collector.connected.is_set() and time.monotonic() < deadline:
        learner.poll(0.01)
    latencies = []
    for v in range(1, repeats + 1):
        collector.read_weights(-1)
        t0 = time.perf_counter()
        learner.publish_weights(v, flat)
        while True:
            got = collector.read_weights(-1)
            if got is not None and got[0] == v:
                # When the link thread had the weights, not when this loop noticed.
                latencies.append((collector.weights_received_at - t0) * 1e3)
                break
            time.sleep(0.0002)  # yield the GIL to the link thread, as stepping physics does
        time.sleep(0.01)
    collector.close()
    learner.close()
    return {"weights_mb": flat.nbytes / 1e6, "latency_ms_median": statistics.median(latencies),
            "latency_ms_p95": float(np.percentile(latencies, 95)), "samples": len(latencies)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ingest", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="", help="use this task's observation sizes (default: Go2-sized)")
    p.add_argument("--num-envs", type=at_least(1), default=2048)
    p.add_argument("--steps", type=at_least(1), default=24)
    p.add_argument("--senders", type=at_least(1), default=2, help="synthetic collectors for zmq/shm/raw")
    p.add_argument("--seconds", type=duration(), default=10.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--port", type=at_least(1), default=5790)
    p.add_argument("--latency-repeats", type=at_least(1), default=200)
    p.add_argument("--scale", type=at_least(0), default=0,
                   help="also run the scale rehearsal with this many collectors")
    p.add_argument("--scale-seconds", type=duration(), default=180.0)
    p.add_argument("--max-policy-lag", type=at_least(0), default=20, help="bound enforced in the scale rehearsal "
                   "(a version is published every 0.5 s there)")
    p.add_argument("--json", help="write all figures here")
    args = p.parse_args(argv)
    if args.task:
        from common.task_spec import task_spec

        spec = RolloutSpec.for_task(task_spec(args.task), args.num_envs, args.steps)
    else:
        spec = bench_spec(args.num_envs, args.steps)
    print(f"rollout: {args.num_envs} envs x {args.steps} steps, {spec.nbytes() / 1e6:.1f} MB; "
          f"{args.senders} senders, {args.seconds:.0f} s each", flush=True)
    res: dict = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
                 "rollout_mb": spec.nbytes() / 1e6}
    res["raw"] = bench_raw(spec, args.senders, args.seconds, args.warmup, args.port)
    res["zmq"] = bench_zmq(spec, args.senders, args.seconds, args.warmup, args.port + 2)
    res["shm"] = bench_shm(spec, args.senders, args.seconds, args.warmup)
    res["zmq_vs_raw"] = res["zmq"]["mb_per_s"] / res["raw"]["mb_per_s"]
    res["latency"] = bench_weight_latency(args.port + 4, args.latency_repeats)
    for k in ("raw", "zmq", "shm"):
        r = res[k]
        print(f"{k:4s} {r['rollouts_per_s']:8.1f} rollouts/s {r['mb_per_s']:9.0f} MB/s "
              f"{r['env_steps_per_s']:14,.0f} env-steps/s")
    shm_vs_zmq = res["shm"]["mb_per_s"] / res["zmq"]["mb_per_s"]
    print(f"zmq / raw ceiling: {res['zmq_vs_raw']:.2f}   shm / zmq: {shm_vs_zmq:.2f}")
    lat = res["latency"]
    print(f"weights {lat['weights_mb']:.2f} MB: publish->receive median {lat['latency_ms_median']:.2f} ms, "
          f"p95 {lat['latency_ms_p95']:.2f} ms")
    if args.scale:
        r = bench_zmq(spec, args.scale, args.scale_seconds, args.warmup, args.port + 6, bump_every_s=0.5,
                      max_policy_lag=args.max_policy_lag)
        res["scale"] = r
        print(f"scale: {args.scale} collectors, {args.scale_seconds:.0f} s: {r['rollouts_per_s']:.1f} rollouts/s "
              f"({r['env_steps_per_s']:,.0f} env-steps/s), policy lag p50/p99/max "
              f"{r['policy_lag_p50']:.0f}/{r['policy_lag_p99']:.0f}/{r['policy_lag_max']} "
              f"(bound {args.max_policy_lag}, {r['refused_during_measurement']} refused), "
              f"learner RSS {r['rss_mb_start']:.0f} -> {r['rss_mb_end']:.0f} MB (max {r['rss_mb_max']:.0f}; "
              f"by tenths {[round(x) for x in r['rss_mb_timeline']]}), "
              f"weights served to {r['collectors_with_weights']}/{r['collectors']}, "
              f"rollouts from {r['collectors_with_rollouts_sent']}/{r['collectors']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
