"""Builds the transport a config asks for: shared memory on one host, ZeroMQ between hosts."""

from __future__ import annotations

import os
import socket

from common.config import AppoConfig
from common.rollout_spec import RolloutSpec
from common.transport.curve import client_keys, server_keys
from common.transport.interface import CollectorTransport, LearnerTransport


def learner_transport(cfg: AppoConfig, spec: RolloutSpec, num_weights: int, run_id: str) -> LearnerTransport:
    """The learner's end of the configured transport: shared memory under shm_root, or ZeroMQ on listen."""
    t = cfg.transport
    if t.kind == "shm":
        from common.transport.shm import LearnerShm

        return LearnerShm(t.shm_root, run_id, spec, num_weights)
    from common.transport.zmq_learner import LearnerZmq

    curve = server_keys(t.curve_dir) if t.curve_dir else None
    return LearnerZmq(t.listen, spec, num_weights, t.max_in_flight, t.heartbeat_s, t.peer_timeout_s, curve,
                      max_peers=t.max_peers, max_queued_per_peer=t.max_queued_per_peer)


def collector_name(cfg: AppoConfig, collector_id: int) -> str:
    return cfg.transport.collector_name or f"{socket.gethostname()}-{os.getpid()}-{collector_id}"


def collector_transport(cfg: AppoConfig, spec: RolloutSpec, num_weights: int, collector_id: int,
                        shm_dir: str | None) -> CollectorTransport:
    """A collector's end: shared memory when given the learner's run directory, else ZeroMQ to transport.learner."""
    t = cfg.transport
    if shm_dir:
        from common.transport.shm import CollectorShm

        return CollectorShm(shm_dir, collector_id, spec, t.buffers_per_collector)
    from common.transport.zmq_collector import CollectorZmq

    curve = client_keys(t.curve_dir, t.curve_client_name) if t.curve_dir else None
    return CollectorZmq(t.learner, spec, collector_name(cfg, collector_id), num_weights, t.max_in_flight,
                        t.heartbeat_s, t.peer_timeout_s, curve)
