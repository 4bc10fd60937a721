"""Resuming an old g1_walk_flat checkpoint (mjlab's walker, saved by a real learner under the old name): it continues
as g1_velocity_flat; any other task, the old name included, is refused naming g1_velocity_flat."""

import threading

import pytest
import torch
from old_walk_checkpoints import NEW, OLD, SMALL, save_under_old_name

from common.config import load_config
from common.task_spec import task_spec
from common.transport.shm import LearnerShm
from learner.learner import Learner
from learner.resume import ResumeError, check_compatible
from learner.session import prepare
from learner.train import parse_args

TINY = [*SMALL, "algo.num_envs=4", "algo.steps_per_env=4", "training.console=false", "training.device=cpu"]


@pytest.fixture
def old_checkpoint(tmp_path):
    """A g1_velocity_flat learner's state some iterations in, written as the learner saved it before the rename."""
    cfg = load_config(TINY, extra={"task": NEW}, environ={})
    transport = LearnerShm(tmp_path / "shm", "old", None, 1)
    learner = Learner(cfg, task_spec(NEW), tmp_path / "old", transport, threading.Event())
    learner.progress.iteration, learner.progress.total_env_steps = 7, 448
    with torch.no_grad():
        learner.appo.model.obs_normalizer.mean.copy_(torch.linspace(-1.0, 1.0, 99))
    state = learner.state_dict()
    transport.close()
    return save_under_old_name(state, tmp_path / "old" / "model_7.pt"), state


def test_resume_as_g1_velocity_flat_continues_the_old_run(tmp_path, old_checkpoint):
    """appo-train --task g1_velocity_flat --resume OLD.pt is accepted and its learner starts from the saved state."""
    path, saved = old_checkpoint
    session = prepare(parse_args(["--task", NEW, "--resume", str(path), "--log-dir", str(tmp_path / "run"), *TINY]))
    assert session.cfg.task == NEW and session.task.name == NEW and session.resume_state["config"]["task"] == NEW
    assert session.cfg.algo.algorithm.symmetry  # the run's own options, not another task's
    transport = LearnerShm(tmp_path / "shm", "new", None, 1)
    try:
        learner = session.learner(transport, threading.Event())
        assert learner.progress.iteration == 7 and learner.progress.total_env_steps == 448
        for name, value in saved["appo"]["model"].items():
            assert torch.equal(learner.appo.model.state_dict()[name], value), name
    finally:
        transport.close()


def test_resume_without_task_continues_as_g1_velocity_flat(tmp_path, old_checkpoint):
    """--resume OLD.pt with no task given takes the checkpoint's task, now g1_velocity_flat."""
    path, _ = old_checkpoint
    session = prepare(parse_args(["--resume", str(path), "--log-dir", str(tmp_path / "run")]))
    assert session.cfg.task == NEW and session.resume_state["iteration"] == 7


@pytest.mark.parametrize("given", [["--task", OLD], [f"task={OLD}"], ["--task", "inverted_pendulum"]])
def test_resume_as_another_task_is_refused_naming_g1_velocity_flat(tmp_path, old_checkpoint, capsys, given):
    """--task g1_walk_flat (or task=g1_walk_flat, or any other task) with the old checkpoint exits 2 with a message
    naming g1_velocity_flat and its old name, and makes no run directory."""
    path, _ = old_checkpoint
    with pytest.raises(SystemExit) as exc:
        prepare(parse_args([*given, "--resume", str(path), "--log-dir", str(tmp_path / "run")]))
    err = capsys.readouterr().err
    assert exc.value.code == 2 and not (tmp_path / "run").exists()
    assert f"the checkpoint's task is '{NEW}'" in err and f"{NEW} was called {OLD}" in err


def test_check_compatible_names_the_renamed_task():
    """check_compatible's task refusal names the checkpoint's task and, for the renamed one, its old name."""
    saved = load_config(TINY, extra={"task": NEW}, environ={}).to_dict()
    with pytest.raises(ResumeError, match=f"task is '{NEW}', not 'inverted_pendulum' \\({NEW} was called {OLD}"):
        check_compatible(saved, load_config(TINY, extra={"task": "inverted_pendulum"}, environ={}))
