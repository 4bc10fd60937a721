"""The APPO update: V-trace targets, then PPO epochs against a target policy (DESIGN.md section 4).

Readable top to bottom: `process` computes everything that stays fixed during
the update (values, target log-probs, V-trace targets, advantages); `update`
runs the epochs x minibatches SGD steps with the adaptive learning rate.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from common.config import AppoConfig
from common.policy import ActorCritic
from common.task_spec import TaskSpec
from learner.lr_schedule import adaptive_lr
from learner.ppo_loss import gaussian_kl, impact_ratio, surrogate_loss, value_loss
from learner.vtrace import vtrace, vtrace_stats


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


class APPO:
    def __init__(self, cfg: AppoConfig, task: TaskSpec, device: torch.device):
        self.cfg = cfg.algo.algorithm
        self.device = device
        self.model = ActorCritic.from_config(cfg, task).to(device)
        self.target = copy.deepcopy(self.model).requires_grad_(False)
        # The target shares the live normalizers: only actor weights lag behind.
        self.target.obs_normalizer = self.model.obs_normalizer
        self.target.critic_normalizer = self.model.critic_normalizer
        self.learning_rate = self.cfg.learning_rate
        self.optimizer = make_optimizer(self.cfg.optimizer, self.model.parameters(), self.learning_rate)
        self.num_updates = 0

    def update_normalizers(self, fresh: dict[str, torch.Tensor]) -> None:
        """Feed only newly arrived rollouts, so replayed ones are not counted twice."""
        self.model.obs_normalizer.update(fresh["obs"])
        self.model.critic_normalizer.update(fresh["critic"])

    @torch.no_grad()
    def process(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Fixed quantities of one update from a time-major batch [T, B, ...]."""
        c = self.cfg
        values = self.model.value(batch["critic"])
        bootstrap = self.model.value(batch["last_critic"])
        target_dist = self.target.distribution(batch["obs"])
        target_log_probs = target_dist.log_prob(batch["actions"]).sum(-1)
        vs, advantages = vtrace(
            batch["log_probs"], target_log_probs, batch["rewards"], values, bootstrap, batch["dones"],
            c.gamma, c.rho_clip, c.c_clip,
        )
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return {
            "values": values,
            "returns": vs,
            "advantages": advantages,
            "target_log_probs": target_log_probs,
            "target_mu": target_dist.mean,
            "target_sigma": target_dist.stddev,
        }

    def update(self, batch: dict[str, torch.Tensor], abort=lambda: False) -> dict[str, float]:
        """One APPO update on the whole batch; returns metrics reduced once at the end.

        `abort()` is checked between minibatch steps: a stop request abandons the rest.
        """
        c = self.cfg
        fixed = self.process(batch)
        stats = vtrace_stats(batch["log_probs"], fixed["target_log_probs"], c.rho_clip)
        data = {**{k: batch[k] for k in ("obs", "critic", "actions", "log_probs")}, **fixed}
        num_envs = batch["obs"].shape[1]
        mb_size = max(1, num_envs // c.num_mini_batches)
        sums = {k: torch.zeros((), device=self.device) for k in ("surrogate", "value", "entropy", "clip", "grad_norm")}
        kl_sum, steps = 0.0, 0
        for _ in range(c.num_learning_epochs):
            if steps and abort():
                break
            perm = torch.randperm(num_envs, device=self.device)
            for start in range(0, num_envs - mb_size + 1, mb_size):
                if steps and abort():
                    break
                mb = {k: v[:, perm[start : start + mb_size]].flatten(0, 1) for k, v in data.items()}
                kl, parts = self._step(mb)
                kl_sum += kl
                for k, v in parts.items():
                    sums[k] += v
                steps += 1
        self.num_updates += 1
        if self.num_updates % c.target_update_freq == 0:
            self._update_target()
        metrics = {k: (v / steps).item() for k, v in sums.items()}
        return {
            "Loss/surrogate": metrics["surrogate"],
            "Loss/value": metrics["value"],
            "Loss/entropy": metrics["entropy"],
            "Loss/learning_rate": self.learning_rate,
            "Train/approx_kl": kl_sum / steps,
            "Train/clip_fraction": metrics["clip"],
            "Train/global_gradient_norm": metrics["grad_norm"],
            "Train/vtrace_rho_clip_fraction": stats["rho_clip_fraction"].item(),
            "Train/vtrace_rho_p99": stats["rho_p99"].item(),
            "Train/behavior_to_current_log_prob_delta": stats["log_prob_delta_abs_mean"].item(),
            "Policy/mean_std": self.model.log_std.exp().mean().item(),
        }

    def _step(self, mb: dict[str, torch.Tensor]) -> tuple[float, dict[str, torch.Tensor]]:
        c = self.cfg
        dist = self.model.distribution(mb["obs"])
        log_probs = dist.log_prob(mb["actions"]).sum(-1)
        entropy = dist.entropy().sum(-1).mean()
        values = self.model.value(mb["critic"])
        kl = gaussian_kl(mb["target_mu"], mb["target_sigma"], dist.mean.detach(), dist.stddev.detach()).mean().item()
        if c.schedule == "adaptive":
            self.learning_rate = adaptive_lr(self.learning_rate, kl, c.desired_kl, c.kl_factor, c.lr_factor)
            for group in self.optimizer.param_groups:
                group["lr"] = self.learning_rate
        ratio = impact_ratio(log_probs, mb["log_probs"], mb["target_log_probs"])
        surrogate, clip_fraction = surrogate_loss(mb["advantages"], ratio, c.clip_param)
        v_loss = value_loss(values, mb["values"], mb["returns"], c.clip_param, c.use_clipped_value_loss)
        loss = surrogate + c.value_loss_coef * v_loss - c.entropy_coef * entropy
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), c.max_grad_norm)
        self.optimizer.step()
        parts = {
            "surrogate": surrogate.detach(),
            "value": v_loss.detach(),
            "entropy": entropy.detach(),
            "clip": clip_fraction.detach(),
            "grad_norm": grad_norm.detach(),
        }
        return kl, parts

    @torch.no_grad()
    def _update_target(self) -> None:
        tau = self.cfg.tau
        for name in ("actor", "log_std"):
            src, dst = getattr(self.model, name), getattr(self.target, name)
            src_params = [src] if isinstance(src, nn.Parameter) else list(src.parameters())
            dst_params = [dst] if isinstance(dst, nn.Parameter) else list(dst.parameters())
            for s, d in zip(src_params, dst_params, strict=True):
                d.mul_(1 - tau).add_(s, alpha=tau)

    def set_learning_rate(self, lr: float) -> None:
        self.learning_rate = lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "learning_rate": self.learning_rate,
            "num_updates": self.num_updates,
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.num_updates = int(state["num_updates"])
        self.set_learning_rate(float(state["learning_rate"]))
