"""tools/tb_scalars.py: waiting for a run's first logged iteration."""

import subprocess
import sys
import time

import pytest

from tools.tb_scalars import wait_first_iteration


def _python(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


def test_returns_once_the_events_file_appears_not_before(tmp_path):
    """The wait ends when the process writes its events file, after the process's own delay."""
    run = tmp_path / "run"
    proc = _python(f"import time, pathlib; time.sleep(1.0); p = pathlib.Path({str(run)!r}); p.mkdir(); "
                   "(p / 'events.out.tfevents.1.host.1.0').write_bytes(b''); time.sleep(30)")
    try:
        start = time.monotonic()
        seen = wait_first_iteration(proc, run, timeout=30)
        assert seen - start >= 0.9
        assert any(run.glob("events.out.tfevents*"))
    finally:
        proc.kill()
        proc.wait()


def test_a_process_that_exits_first_is_named_with_its_exit_code(tmp_path):
    """A learner that dies before its first iteration fails the wait at once, with its exit code."""
    proc = _python("raise SystemExit(3)")
    with pytest.raises(RuntimeError, match="exited 3 before its first iteration"):
        wait_first_iteration(proc, tmp_path / "run", timeout=30)


def test_no_iteration_within_the_timeout_is_an_error(tmp_path):
    """A live process that never logs fails the wait when the deadline passes."""
    proc = _python("import time; time.sleep(30)")
    try:
        with pytest.raises(RuntimeError, match="no iteration of .* within 1 s"):
            wait_first_iteration(proc, tmp_path / "run", timeout=1)
    finally:
        proc.kill()
        proc.wait()
