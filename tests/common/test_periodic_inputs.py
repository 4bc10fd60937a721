"""algo.policy.periodic_inputs: the networks see an angle observation as its sine and cosine, in every backend."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from collector.actor_snapshot import ActorSnapshot
from collector.numpy_actor import NumpyActor
from collector.numpy_inference import NumpyInference
from common.checkpoint_io import CheckpointError, load_policy
from common.config import ConfigError, PolicyConfig, load_config
from common.policy import ActorCritic, flat_weights
from common.symmetry import MIRRORS, SignedPermutation, with_angle_columns
from common.synthetic import synthetic_batch
from common.task_spec import task_spec
from common.weight_layout import layout_for, weight_layout
from learner.appo import APPO
from learner.checkpoint import save_checkpoint

WALK = task_spec("g1_walk_flat")
CPU = torch.device("cpu")
POLICY = PolicyConfig(actor_hidden_dims=[32, 16], critic_hidden_dims=[24], init_noise_std=0.7)
OBS, CRITIC, ACT, ANGLES = 6, 7, 3, (2, 4)


def _cfg(*overrides: str):
    return load_config(["algo.num_envs=8", "algo.steps_per_env=6", "algo.policy.actor_hidden_dims=[32,16]",
                        "algo.policy.critic_hidden_dims=[24]", "training.device=cpu", "training.precision=fp32",
                        "algo.policy.periodic_inputs=true", *overrides], extra={"task": WALK.name}, environ={})


def _policy(normalize: bool = True) -> ActorCritic:
    """A small policy with angle columns 2 and 4 and fitted normaliser statistics."""
    torch.manual_seed(0)
    pol = ActorCritic(OBS, CRITIC, ACT, POLICY, normalize, obs_angles=ANGLES, critic_angles=ANGLES)
    with torch.no_grad():
        pol.obs_normalizer.update(torch.rand(500, OBS) * 2 * math.pi)
        pol.critic_normalizer.update(torch.rand(500, CRITIC) * 2 * math.pi)
    return pol


def test_the_networks_input_is_the_raw_columns_with_sines_in_place_and_cosines_appended():
    """The normaliser's input matches NumPy's sin and cos of the angle columns; the other columns pass unchanged."""
    pol = _policy(normalize=False)
    x = torch.randn(10, OBS) * 4
    got = pol.obs_normalizer(x).numpy()
    want = np.concatenate([x.numpy(), np.cos(x.numpy()[:, ANGLES])], axis=1)
    want[:, ANGLES] = np.sin(x.numpy()[:, ANGLES])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert pol.obs_normalizer.mean.shape == (OBS + 2,) and pol.obs_normalizer.in_dim == OBS


def test_an_angle_and_the_same_angle_a_turn_later_give_the_same_action():
    """With periodic inputs a phase just past 0 and the same phase written past 2 pi act alike; the raw input
    does not (the wrap is a jump the raw network sees)."""
    x = torch.rand(32, OBS)
    later = x.clone()
    later[:, list(ANGLES)] += 2 * math.pi
    with torch.no_grad():
        gap = (_policy().act_deterministic(x) - _policy().act_deterministic(later)).abs().max().item()
        torch.manual_seed(0)
        raw = ActorCritic(OBS, CRITIC, ACT, POLICY, False)
        raw_gap = (raw.act_deterministic(x) - raw.act_deterministic(later)).abs().max().item()
    assert gap < 1e-5
    assert raw_gap > 1e-2


def test_the_numpy_actor_and_critic_compute_the_torch_policy():
    """NumpyInference, read from the flat weights by the layout with the angle columns, gives torch's mean action
    and value; the layout's size is the network's."""
    pol = _policy()
    layout = weight_layout(OBS, CRITIC, ACT, POLICY, ANGLES, ANGLES)
    flat = flat_weights(pol)
    assert layout.size == flat.size
    actor = NumpyActor(layout, POLICY.activation, True, np.random.default_rng(0))
    actor.load(flat)
    obs = (torch.rand(16, OBS) * 8).numpy()
    with torch.no_grad():
        want = pol.act_deterministic(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(actor.mean(obs), want, rtol=1e-5, atol=1e-5)


def test_numpy_inference_of_the_walker_takes_its_phase_columns():
    """For g1_walk_flat with periodic inputs the NumPy collector's actor and critic equal the learner's model."""
    cfg = _cfg()
    torch.manual_seed(1)
    model = ActorCritic.from_config(cfg, WALK)
    batch = synthetic_batch(WALK, 8, 6, 1, CPU, model, seed=3)
    with torch.no_grad():
        model.obs_normalizer.update(batch["obs"])
        model.critic_normalizer.update(batch["critic"])
    inference = NumpyInference(cfg, WALK, seed=0)
    inference.load(flat_weights(model))
    obs, critic = batch["obs"][0].numpy(), batch["critic"][0].numpy()
    with torch.no_grad():
        np.testing.assert_allclose(inference.actor.mean(obs), model.act_deterministic(batch["obs"][0]).numpy(),
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(inference.value(critic), model.value(batch["critic"][0]).numpy(),
                                   rtol=1e-5, atol=1e-5)
    assert layout_for(cfg, WALK).obs_angles == WALK.obs_angles == (96, 97)


def test_the_actor_snapshot_samples_what_act_samples():
    """The collector's torch sampler encodes the angles as act() does: same draws, same actions and log-probs."""
    pol = _policy()
    obs = torch.rand(20, OBS) * 8
    torch.manual_seed(5)
    want_a, want_lp = pol.act(obs)
    torch.manual_seed(5)
    got_a, got_lp = ActorSnapshot(pol, None).sample(obs)
    torch.testing.assert_close(got_a, want_a, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_lp, want_lp, rtol=1e-4, atol=1e-4)


def test_the_mirror_of_the_encoded_observation_is_the_encoding_of_the_mirror():
    """with_angle_columns extends the walker's mirror map to the sines and cosines: encode(mirror(x)) equals the
    extended map applied to encode(x); a map sending an angle to a non-angle column is refused."""
    mirror = MIRRORS["g1_walk_flat"].obs
    x = np.random.default_rng(0).normal(size=(40, WALK.obs_dim)) * 3

    def encode(v: np.ndarray) -> np.ndarray:
        out = np.concatenate([v, np.cos(v[:, [96, 97]])], axis=1)
        out[:, [96, 97]] = np.sin(v[:, [96, 97]])
        return out

    extended = with_angle_columns(mirror, WALK.obs_angles)
    np.testing.assert_allclose(extended.apply(encode(x)), encode(mirror.apply(x)), atol=1e-12)
    with pytest.raises(ValueError, match="angle column 0 to column 1, which is not an angle"):
        with_angle_columns(SignedPermutation((1, 0), (1.0, 1.0)), (0,))


def test_the_mirror_loss_with_periodic_inputs_is_the_gap_on_mirrored_raw_observations():
    """The learner's mirror loss on encoded, normalised inputs equals the gap computed from mirrored raw
    observations through the whole policy, and an update with symmetry runs on the walker."""
    torch.manual_seed(0)
    appo = APPO(_cfg("algo.algorithm.symmetry=true", "algo.algorithm.mirror_loss_coef=1.0"), WALK, CPU)
    batch = synthetic_batch(WALK, 8, 6, 1, CPU, appo.model, seed=3)
    appo.update_normalizers(batch)
    maps = MIRRORS["g1_walk_flat"]
    obs = batch["obs"].reshape(-1, WALK.obs_dim)
    with torch.no_grad():
        mu = appo.model.act_deterministic(obs)
        mirrored_mu = appo.model.act_deterministic(torch.from_numpy(maps.obs.apply(obs.numpy())))
        want = (mirrored_mu - torch.from_numpy(maps.actions.apply(mu.numpy()))).square().mean().item()
        x = appo.model.obs_normalizer(obs)
        got = appo._mirror_loss(x, appo.model.actor_mean(x)).item()
    assert got == pytest.approx(want, rel=1e-4)
    assert "Loss/mirror" in appo.update(batch)


def test_a_checkpoint_with_periodic_inputs_loads_at_the_raw_width(tmp_path):
    """load_policy rebuilds the walker with its angle columns: raw width 98, same actions as the saved model."""
    cfg = _cfg()
    torch.manual_seed(2)
    model = ActorCritic.from_config(cfg, WALK)
    path = tmp_path / "model_1.pt"
    save_checkpoint({"config": cfg.to_dict(), "task": WALK.name, "iteration": 1,
                     "appo": {"model": model.state_dict()}}, path)
    loaded = load_policy(path)
    obs = torch.rand(4, WALK.obs_dim) * 6
    with torch.no_grad():
        torch.testing.assert_close(loaded.model.act_deterministic(obs), model.act_deterministic(obs))
    assert loaded.obs_dim == 98


def test_periodic_inputs_on_a_task_without_angles_is_refused():
    """The config names the option, the task and the tasks that have angle observations."""
    with pytest.raises(ConfigError, match="periodic_inputs: task go2_joystick_flat has no angle.*g1_walk_flat"):
        load_config(["algo.policy.periodic_inputs=true"], extra={"task": "go2_joystick_flat"}, environ={})


def test_a_checkpoint_whose_config_asks_for_angles_its_task_lacks_is_refused(tmp_path):
    """A hand-edited checkpoint config with periodic inputs on a task without angles is a CheckpointError."""
    cfg = load_config(["algo.policy.actor_hidden_dims=[8]", "algo.policy.critic_hidden_dims=[8]"],
                      extra={"task": "inverted_pendulum"}, environ={})
    model = ActorCritic.from_config(cfg, task_spec("inverted_pendulum"))
    config = cfg.to_dict()
    config["algo"]["policy"]["periodic_inputs"] = True
    path = tmp_path / "model_1.pt"
    save_checkpoint({"config": config, "task": "inverted_pendulum", "iteration": 1,
                     "appo": {"model": model.state_dict()}}, path)
    with pytest.raises(CheckpointError, match="(?s)no usable config.*task inverted_pendulum has no angle"):
        load_policy(path)
