"""Run a prepared learner on its transport until it finishes, then shut down in order (appo-learner, appo-train)."""

from __future__ import annotations

import threading

from common.logging import get_logger
from common.transport.interface import LearnerTransport
from learner.learner import CollectorsGone
from learner.local_collectors import LocalCollectors
from learner.session import Session
from learner.status import start_learner_status

log = get_logger("learner")


def run_learner(session: Session, transport: LearnerTransport, stop: threading.Event,
                collectors: LocalCollectors | None = None) -> int:
    """Train until done or stopped; the process exit code: 0, or 1 when every collector is gone."""
    status = None
    finished = False
    try:
        learner = session.learner(transport, stop)
        if collectors:
            learner.health.append(collectors.check)
        status = start_learner_status(learner)
        if collectors:
            collectors.start()
        summary = learner.run()
        finished = True
    except CollectorsGone as exc:
        log.error("training stopped: no collectors", reason=str(exc))
        return 1
    finally:
        if status:
            status.stop()
        if finished:
            # Only a run that ended as planned (completed, or stopped by a signal) stops the collectors.
            # After a crash they find their learner gone and exit non-zero, so that a restart policy
            # (compose, Kubernetes) brings them back for the restarted learner.
            transport.request_stop()
        if collectors:
            collectors.stop()
        transport.close()
    log.info("done", status=summary["status"], iterations=summary["completed_iterations"],
             summary=str(session.run_dir / "summary.json"))
    return 0
