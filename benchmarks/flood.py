"""A hostile peer for the chaos soak: hellos from many fake identities, then garbage frames, at a learner.

    python -m benchmarks.flood --learner tcp://10.231.0.1:5555 --num-envs 64 --steps-per-env 16 --hellos 2000

Run it on a host of the namespace lab; it never waits for an answer and exits when it has sent everything.
"""

from __future__ import annotations

import argparse
import os

import zmq

from common.rollout_spec import RolloutSpec
from common.task_spec import task_spec
from common.transport.wire import encode_control

BATCH = 200  # fake identities connected at once


def flood(learner: str, hellos: int, garbage: int, task: str, spec_hash: int) -> None:
    """Each hello from its own identity (a fresh DEALER) and with the learner's own spec, as a peer that knows
    the protocol would send it; then garbage frames from one more identity."""
    ctx = zmq.Context()
    try:
        for start in range(0, hellos, BATCH):
            batch = []
            for i in range(start, min(hellos, start + BATCH)):
                s = ctx.socket(zmq.DEALER)
                s.setsockopt(zmq.ROUTING_ID, f"fake-{os.getpid()}-{i}".encode())
                s.connect(learner)
                s.send(encode_control("hello", {"name": f"fake-{i}", "task": task, "spec_hash": spec_hash}))
                batch.append(s)
            # Each open socket holds a descriptor: a batch at a time, closed once the learner answered the last.
            batch[-1].poll(2000)
            for s in batch:
                s.poll(100)
                s.close(linger=0)
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 1000)
        s.connect(learner)
        for i in range(garbage):
            s.send(os.urandom(16 + i % 200))
        s.close()
    finally:
        ctx.term()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.flood", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--learner", required=True, help="the learner's rollout endpoint, tcp://HOST:PORT")
    p.add_argument("--hellos", type=int, default=2000, help="hellos, each from a new identity")
    p.add_argument("--garbage", type=int, default=0, help="garbage frames after the hellos")
    p.add_argument("--task", default="inverted_pendulum", help="the learner's task")
    p.add_argument("--num-envs", type=int, required=True, help="the learner's algo.num_envs")
    p.add_argument("--steps-per-env", type=int, required=True, help="the learner's algo.steps_per_env")
    a = p.parse_args(argv)
    spec = RolloutSpec.for_task(task_spec(a.task), a.num_envs, a.steps_per_env)
    flood(a.learner, a.hellos, a.garbage, a.task, spec.spec_hash())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
