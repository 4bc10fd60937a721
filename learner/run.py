"""Run a prepared learner on its transport until it finishes, then shut down in order (appo-learner, appo-train)."""

from __future__ import annotations

import threading

from common.logging import get_logger
from common.transport.interface import LearnerTransport
from learner.learner import CollectorsGone, Learner
from learner.local_collectors import LocalCollectors
from learner.session import Session
from learner.status import start_learner_status

log = get_logger("learner")


def run_learner(session: Session, transport: LearnerTransport, stop: threading.Event,
                collectors: LocalCollectors | None = None, idle_when_complete: bool = False) -> int:
    """Train until done or stopped; the process exit code: 0, or 1 when every collector is gone.

    idle_when_complete (training.idle_when_complete): a run that was already complete when this
    process started (resumed at algo.max_iterations) is not trained; the learner says so, tells collectors to stop
    and stays up, ready, until stopped.  A supervisor that starts collectors once the learner is
    ready (compose's depends_on) then sees every service start and end cleanly, instead of a
    learner that exited before it was ready.
    """
    status = None
    finished = False
    try:
        learner = session.learner(transport, stop)
        if collectors:
            learner.health.append(collectors.check)
        status = start_learner_status(learner)
        already_complete = learner.progress.iteration >= session.cfg.algo.max_iterations
        if collectors:
            collectors.start()
        summary = learner.run()
        finished = True
        if idle_when_complete and already_complete and not stop.is_set():
            _idle_complete(session, learner, transport, stop)
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


def _idle_complete(session: Session, learner: Learner, transport: LearnerTransport, stop: threading.Event) -> None:
    log.warning("run already complete", iterations=learner.progress.iteration,
                max_iterations=session.cfg.algo.max_iterations, run_dir=str(session.run_dir),
                hint="nothing to train: raise algo.max_iterations to continue this run, or set training.run_name "
                     "for a new one; idle until stopped")
    transport.request_stop()  # collectors that attach now are told to stop, and exit 0
    while not stop.wait(1.0):
        learner.heartbeat.beat()  # idle is alive: the liveness probe must not restart it
