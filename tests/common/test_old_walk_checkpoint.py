"""An old g1_walk_flat checkpoint (mjlab's walker, by its actor width) loads as g1_velocity_flat; nothing else is
renamed, and the digest still guards the file."""

import pytest
import torch
from old_walk_checkpoints import NEW, OLD, SMALL, write_old_checkpoint

from common.checkpoint_io import CheckpointError, load_checkpoint, load_policy
from common.config import load_config
from common.policy import ActorCritic
from learner.checkpoint import save_checkpoint


def test_old_walker_checkpoint_loads_as_g1_velocity_flat(tmp_path):
    """load_checkpoint and load_policy give the task g1_velocity_flat, with the saved weights and mirror options."""
    model = write_old_checkpoint(tmp_path / "model_3.pt")
    assert torch.load(tmp_path / "model_3.pt", weights_only=True)["config"]["task"] == OLD  # the file is old
    state = load_checkpoint(tmp_path / "model_3.pt")
    assert state["config"]["task"] == NEW and state["task"] == NEW
    policy = load_policy(tmp_path / "model_3.pt")
    assert policy.task == NEW and policy.config.task == NEW and (policy.obs_dim, policy.act_dim) == (99, 29)
    assert policy.config.algo.algorithm.symmetry and policy.config.algo.algorithm.mirror_loss_coef == 10.0
    obs = torch.randn(4, 99, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(policy.model.act_deterministic(obs), model.act_deterministic(obs))


def test_a_g1_walk_flat_checkpoint_of_another_size_keeps_its_task(tmp_path):
    """A g1_walk_flat checkpoint whose actor width is not the walker's is one of the new g1_walk_flat: left alone."""
    cfg = load_config(SMALL, extra={"task": "inverted_pendulum"}, environ={})
    model = ActorCritic(98, 101, 29, cfg.algo.policy, cfg.algo.empirical_normalization)
    state = {"appo": {"model": model.state_dict()}, "iteration": 1, "config": {**cfg.to_dict(), "task": OLD},
             "task": OLD}
    save_checkpoint(state, tmp_path / "model_1.pt")
    loaded = load_checkpoint(tmp_path / "model_1.pt")
    assert loaded["config"]["task"] == OLD and loaded["task"] == OLD


def test_other_tasks_are_not_renamed(tmp_path):
    """A checkpoint already named g1_velocity_flat, or of any other task, loads with its own task."""
    for task in (NEW, "inverted_pendulum"):
        cfg = load_config(SMALL, extra={"task": task}, environ={})
        state = {"appo": {"model": {"obs_normalizer.mean": torch.zeros(99)}}, "config": cfg.to_dict(), "task": task}
        save_checkpoint(state, tmp_path / f"{task}.pt")
        assert load_checkpoint(tmp_path / f"{task}.pt")["config"]["task"] == task


@pytest.mark.parametrize("damage", ["weights", "task"])
def test_a_damaged_old_checkpoint_is_still_refused_as_corrupt(tmp_path, damage):
    """An old walker checkpoint whose contents no longer match its stored SHA-256 (a weight, or the task name
    itself changed) is refused as corrupt, never renamed and loaded."""
    path = tmp_path / "model_3.pt"
    write_old_checkpoint(path)
    state = torch.load(path, weights_only=True)
    if damage == "weights":
        state["appo"]["model"]["obs_normalizer.mean"][0] += 1.0
    else:
        state["config"]["task"] = NEW
    torch.save(state, path)  # the old digest kept
    with pytest.raises(CheckpointError, match="model_3.pt is corrupt"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="corrupt"):
        load_policy(path)

