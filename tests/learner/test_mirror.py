"""Symmetry augmentation: a batch and its mirror image, trained on together, with symmetric normaliser statistics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from common.config import ConfigError, load_config
from common.symmetry import MIRRORS
from common.synthetic import synthetic_batch
from common.task_spec import task_spec
from learner.appo import APPO
from learner.mirror import BatchMirror

TASK = task_spec("g1_velocity_flat")
MIRROR = MIRRORS["g1_velocity_flat"]
CPU = torch.device("cpu")
N, T = 8, 6


def _cfg(*overrides: str):
    return load_config([f"algo.num_envs={N}", f"algo.steps_per_env={T}", "algo.policy.actor_hidden_dims=[32,16]",
                        "algo.policy.critic_hidden_dims=[24]", "training.device=cpu", "training.precision=fp32",
                        "algo.algorithm.num_mini_batches=2", *overrides], extra={"task": TASK.name}, environ={})


def _batch(appo: APPO) -> dict[str, torch.Tensor]:
    return synthetic_batch(TASK, N, T, 1, CPU, appo.model, seed=3)


def _by_hand(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch with its mirror appended, built with the NumPy maps of common/symmetry.py."""
    maps = {"obs": MIRROR.obs, "critic": MIRROR.critic, "actions": MIRROR.actions, "last_obs": MIRROR.obs,
            "last_critic": MIRROR.critic}
    out = {}
    for k, x in batch.items():
        mirrored = torch.from_numpy(maps[k].apply(x.numpy())) if k in maps else x
        out[k] = torch.cat([x, mirrored], dim=0 if k.startswith("last_") else 1)
    return out


def test_augment_appends_the_mirror_image_as_more_envs():
    """Observations, critic inputs and actions of the appended envs are the mapped originals; the rest is copied."""
    torch.manual_seed(0)
    appo = APPO(_cfg(), TASK, CPU)
    batch = _batch(appo)
    out = BatchMirror(MIRROR, CPU).augment(batch)
    expected = _by_hand(batch)
    assert out.keys() == batch.keys()
    for k in batch:
        torch.testing.assert_close(out[k], expected[k], rtol=0, atol=0)
    assert out["obs"].shape == (T, 2 * N, TASK.obs_dim) and out["last_critic"].shape == (2 * N, TASK.critic_dim)
    # The vy command (column 97) of an appended env is minus its original's.
    torch.testing.assert_close(out["obs"][:, N:, 97], -batch["obs"][:, :, 97])


def test_an_update_with_symmetry_is_the_update_on_the_hand_mirrored_batch():
    """algo.algorithm.symmetry trains exactly as an update without it on the batch and its mirror image."""
    torch.manual_seed(0)
    sym = APPO(_cfg("algo.algorithm.symmetry=true"), TASK, CPU)
    torch.manual_seed(0)
    plain = APPO(_cfg("algo.algorithm.symmetry=false"), TASK, CPU)
    batch = _batch(sym)
    sym.update_normalizers(batch)
    plain.update_normalizers(_by_hand(batch))
    before = [p.detach().clone() for p in sym.model.parameters()]
    torch.manual_seed(7)
    m_sym = sym.update(batch)
    torch.manual_seed(7)
    m_plain = plain.update(_by_hand(batch))
    assert m_sym == pytest.approx(m_plain, rel=1e-5)
    for a, b in zip(sym.model.parameters(), plain.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert any(not torch.equal(a, b) for a, b in zip(sym.model.parameters(), before, strict=True))  # it trained


def test_normaliser_statistics_are_their_own_mirror_image():
    """With symmetry the normalisers see the mirror images too: their mean mirrors to itself, their variance too."""
    torch.manual_seed(0)
    appo = APPO(_cfg("algo.algorithm.symmetry=true"), TASK, CPU)
    batch = _batch(appo)
    batch["obs"] += torch.linspace(-2, 2, TASK.obs_dim)  # an asymmetric mean to start from
    appo.update_normalizers(batch)
    for norm, m in ((appo.model.obs_normalizer, MIRROR.obs), (appo.model.critic_normalizer, MIRROR.critic)):
        mean, var = norm.mean.double().numpy(), norm.var.double().numpy()
        assert np.abs(mean).max() > 0.1
        np.testing.assert_allclose(m.apply(mean), mean, atol=1e-6)
        np.testing.assert_allclose(np.abs(m.apply(var)), var, rtol=1e-6)


def test_symmetry_on_a_task_without_a_mirror_map_is_refused():
    """The config names the problem and the tasks that have a map."""
    with pytest.raises(ConfigError, match="go2_joystick_flat.*no left-right mirror map.*g1_velocity_flat"):
        load_config(["algo.algorithm.symmetry=true"], extra={"task": "go2_joystick_flat"}, environ={})


def _asymmetry(appo: APPO, obs: torch.Tensor) -> float:
    """Mean squared gap between the actor's mean on mirrored observations and the mirrored mean, via NumPy maps."""
    with torch.no_grad():
        x = appo.model.obs_normalizer(obs)
        mu = appo.model.actor_mean(x, appo.hidden_dtype).numpy()
        mirrored_mu = appo.model.actor_mean(torch.from_numpy(MIRROR.obs.apply(x.numpy())), appo.hidden_dtype).numpy()
    return float(np.mean((mirrored_mu - MIRROR.actions.apply(mu)) ** 2))


def test_the_mirror_loss_is_the_squared_gap_to_the_mirrored_mean():
    """_mirror_loss on normalised observations equals the gap computed with the NumPy maps."""
    torch.manual_seed(0)
    appo = APPO(_cfg("algo.algorithm.mirror_loss_coef=1.0"), TASK, CPU)
    batch = _batch(appo)
    appo.update_normalizers(batch)
    obs = batch["obs"].reshape(-1, TASK.obs_dim)
    x = appo.model.obs_normalizer(obs)
    with torch.no_grad():
        got = appo._mirror_loss(x, appo.model.actor_mean(x, appo.hidden_dtype)).item()
    assert got == pytest.approx(_asymmetry(appo, obs), rel=1e-5)
    assert got > 1e-3  # an untrained actor is not symmetric: the loss has something to remove


def test_the_mirror_loss_makes_the_policy_symmetric():
    """Updates with mirror_loss_coef shrink the actor's asymmetry on held-out states; without it they do not."""
    gaps = {}
    for coef in (0.0, 10.0):
        torch.manual_seed(0)
        appo = APPO(_cfg(f"algo.algorithm.mirror_loss_coef={coef}", "algo.algorithm.num_learning_epochs=5"), TASK, CPU)
        batch, held_out = _batch(appo), synthetic_batch(TASK, N, T, 1, CPU, appo.model, seed=11)["obs"]
        appo.update_normalizers(batch)
        before = _asymmetry(appo, held_out.reshape(-1, TASK.obs_dim))
        for _ in range(6):
            metrics = appo.update(batch)
        gaps[coef] = _asymmetry(appo, held_out.reshape(-1, TASK.obs_dim)) / before
        assert ("Loss/mirror" in metrics) == (coef > 0)
    assert gaps[10.0] < 0.6
    assert gaps[0.0] > 0.9


def test_the_mirror_loss_on_a_task_without_a_mirror_map_is_refused():
    """mirror_loss_coef needs a mirror map as symmetry does; a negative weight is refused too."""
    with pytest.raises(ConfigError, match="go2_joystick_flat.*no left-right mirror map.*mirror_loss_coef"):
        load_config(["algo.algorithm.mirror_loss_coef=1.0"], extra={"task": "go2_joystick_flat"}, environ={})
    with pytest.raises(ConfigError, match="mirror_loss_coef"):
        load_config(["algo.algorithm.mirror_loss_coef=-1"], extra={"task": "g1_velocity_flat"}, environ={})


def test_shifted_log_probs_give_mirrored_samples_their_originals_importance_weights():
    """mirror_log_probs=shifted: a mirrored sample's behaviour log-prob is its original's plus the target policy's
    log pi(mirrored) - log pi(original), computed here through the whole policy with the NumPy maps, so both halves
    get the same V-trace weights; copied leaves them unequal for an asymmetric policy. The staged batch is untouched."""
    for mode in ("shifted", "copied"):
        torch.manual_seed(0)
        appo = APPO(_cfg("algo.algorithm.symmetry=true", f"algo.algorithm.mirror_log_probs={mode}"), TASK, CPU)
        batch = _batch(appo)
        appo.update_normalizers(batch)
        staged = {k: v.clone() for k, v in batch.items()}
        augmented = appo.mirror.augment(batch)
        fixed = appo.process(augmented)
        behaviour, target = augmented["log_probs"], fixed["target_log_probs"]
        rho = (target - behaviour).exp()
        assert all(torch.equal(batch[k], staged[k]) for k in batch)
        torch.testing.assert_close(behaviour[:, :N], staged["log_probs"])
        if mode == "copied":
            torch.testing.assert_close(behaviour[:, N:], staged["log_probs"])
            assert (rho[:, N:] - rho[:, :N]).abs().max() > 0.1
            continue
        mirrored = _by_hand(staged)
        with torch.no_grad():
            dist = appo.target.distribution(mirrored["obs"])
            lp = dist.log_prob(mirrored["actions"]).sum(-1)
        want = staged["log_probs"] + lp[:, N:] - lp[:, :N]
        torch.testing.assert_close(behaviour[:, N:], want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(rho[:, N:], rho[:, :N], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(fixed["packed"][:, :, appo.layout.log_probs].T, behaviour)
