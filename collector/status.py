"""The collector's /metrics, /healthz and /readyz (common/status_server.py)."""

from __future__ import annotations

from collector.rollout import Collector
from common.status_server import StatusServer


def _connected(channel) -> bool:
    event = getattr(channel, "connected", None)
    return event.is_set() if event is not None else channel.learner_alive()


def collector_metrics(c: Collector) -> dict:
    perf = c.last_perf
    return {
        "appo_collector_rollouts_sent_total": c.seq,
        "appo_collector_env_steps_total": c.seq * c.spec.env_steps,
        "appo_collector_policy_version": c.version if c.version >= 0 else None,
        "appo_collector_connected": int(_connected(c.channel)),
        "appo_collector_env_step_seconds": perf["step_ms"] / 1e3 / c.spec.steps if perf else None,
        "appo_collector_inference_seconds": perf["infer_ms"] / 1e3 / c.spec.steps if perf else None,
    }


def start_collector_status(c: Collector) -> StatusServer | None:
    """Serve on training.collector_status_port (0: none). Ready once the collector holds weights."""
    t = c.cfg.training
    if not t.collector_status_port:
        return None
    return StatusServer(
        t.collector_status_port,
        metrics=lambda: collector_metrics(c),
        health=c.heartbeat,
        ready=lambda: (c.version >= 0, f"acting with policy version {c.version}" if c.version >= 0
                       else "no weights yet"),
        host=t.status_host,
        process="collector",
    ).start()
