"""The learner's /metrics, /healthz and /readyz (common/status_server.py) from its live state."""

from __future__ import annotations

from common.status_server import StatusServer
from learner.learner import Learner


def learner_metrics(learner: Learner) -> dict:
    """Prometheus values; read from another thread, so only plain numbers and fresh dicts."""
    p, s = learner.progress, learner._last_scalars
    return {
        "appo_iterations_total": p.iteration,
        "appo_env_steps_total": p.total_env_steps,
        "appo_policy_version": p.policy_version,
        "appo_collectors_connected": len(learner.transport.collectors()),
        "appo_policy_lag_mean": s.get("Learner/policy_lag_mean"),
        "appo_policy_lag_max": s.get("Learner/policy_lag_max"),
        "appo_refused_messages_total": learner.receiver.refused_counts(),
        "appo_rollouts_received_total": dict(learner.per_collector),
        "appo_ring_occupancy": learner.ring.occupancy(),
        "appo_ring_slots": learner.ring.num_slots,
        "appo_staging_occupancy": learner.staging.occupancy(),
        "appo_env_steps_per_second": s.get("perf/env_steps_per_s"),
        "appo_iteration_seconds": None if "perf/iter_ms" not in s else s["perf/iter_ms"] / 1e3,
        "appo_collector_wait_seconds": None if "perf/collector_wait_ms" not in s else s["perf/collector_wait_ms"] / 1e3,
        "appo_mean_reward": s.get("Train/mean_reward"),
        "appo_mean_episode_length": s.get("Train/mean_episode_length"),
        "appo_learning_rate": learner.appo.learning_rate,
        "appo_last_checkpoint_iteration": learner.last_checkpoint_iteration,
    }


def _readiness(learner: Learner) -> tuple[bool, str]:
    """Ready once weights are published (collectors can start); a lap waiting for rollouts says so, and stays
    ready, since a Service that stopped routing to it would keep the collectors it waits for away."""
    if not learner.weights_published:
        return False, "weights not published yet"
    waiting = learner.waiting_reason()
    return True, f"weights published; {waiting}" if waiting else "weights published"


def start_learner_status(learner: Learner) -> StatusServer | None:
    """Serve the learner's status on training.status_port (0: no server). Ready once weights are published."""
    t = learner.cfg.training
    if not t.status_port:
        return None
    return StatusServer(
        t.status_port,
        metrics=lambda: learner_metrics(learner),
        health=learner.heartbeat,
        ready=lambda: _readiness(learner),
        host=t.status_host,
        process="learner",
    ).start()
