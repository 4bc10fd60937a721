"""The APPO update: V-trace targets, then PPO epochs against a target policy (docs/design.md#the-algorithm).

Readable top to bottom: `process` computes everything that stays fixed during
the update (normalized observations, values, target log-probs and means, V-trace
targets, advantages) into one env-major tensor, so that a minibatch is one row
gather; `update` runs the epochs x minibatches SGD steps with the adaptive
learning rate.  With algo.algorithm.symmetry the batch first gets its left-right mirror image appended
(learner/mirror.py), and everything below runs on both; with mirror_loss_coef the actor's loss also pulls
its mean on each mirrored observation towards the mirror of its mean on the original.

Nothing inside the minibatch loop waits for the device: the learning rate is a
0-dim tensor updated on the device from the on-device KL (torch.where, the rule
of learner/lr_schedule.py) and read by a fused optimizer; losses, KL and gradient
norms are summed on the device and reduced to floats once per update.

On a CPU two more things change how the same operations are scheduled, not what
they compute.  With two or more torch threads the actor's and the critic's work
(their forward, loss and backward share no parameters) run side by side, on this
thread and on one helper thread, each with half the threads, instead of handing
every mid-sized operation between threads.  And forward/backward passes go
through a batch a few thousand rows at a time (the gradients of the parts'
means, weighted by their share of the rows, add up to that of the minibatch
mean), so activations stay in cache.

With training.precision=bf16 (what `auto` picks on a CPU where it measures faster) the hidden
layers of every actor and critic pass (the target pass of `process` and the minibatch
passes, whichever thread or compiled function runs them) compute in bfloat16 under
torch.autocast; the output layers, normalizers, log-probs, losses, V-trace, the
learning rate and the optimizer stay float32, and so do the parameters
(common.policy.mlp_forward).
"""

from __future__ import annotations

import copy
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from common.config import AppoConfig
from common.policy import ActorCritic, gaussian_log_prob
from common.precision import HIDDEN_DTYPES, resolve_precision
from common.symmetry import task_mirror
from common.task_spec import TaskSpec
from learner.lr_schedule import adaptive_lr_
from learner.mirror import BatchMirror
from learner.ppo_loss import (
    gaussian_entropy,
    gaussian_kl,
    impact_ratio,
    surrogate_loss,
    value_loss,
)
from learner.vtrace import vtrace, vtrace_stats

_OPTIMIZERS = {
    "adam": (torch.optim.Adam, {}),
    "adamw": (torch.optim.AdamW, {}),
    "sgd": (torch.optim.SGD, {"momentum": 0.9}),
}
# Rows per forward (and backward) part on a CPU: a [rows, 256] activation stays within a few MB of cache.
_CPU_CHUNK_ROWS = 4096
# Per-minibatch sums kept on the device, in this order.
_SUMS = ("surrogate", "value", "entropy", "clip", "mirror", "grad_norm", "actor_grad_norm", "critic_grad_norm", "kl")


def _fused_takes_tensor_lr(cls, kwargs: dict, lr: torch.Tensor) -> bool:
    """Whether `cls(fused=True)` steps with this lr tensor on its device (one probe step on a dummy)."""
    try:
        p = torch.zeros(2, device=lr.device, requires_grad=True)
        p.grad = torch.ones_like(p)
        cls([p], lr=lr.clone(), fused=True, **kwargs).step()
        return True
    except (RuntimeError, ValueError, TypeError, NotImplementedError):
        return False


def make_optimizer(name: str, params, lr: torch.Tensor) -> tuple[torch.optim.Optimizer, torch.Tensor | None]:
    """The optimizer and the lr tensor it reads (None: it reads a float, set from `lr` each step).

    A fused kernel reads a Tensor lr on the device, so the adaptive schedule never
    syncs.  `lr` itself (float64, the exact schedule) is used where the kernel takes
    it, else a float32 copy of it; a device with neither falls back to a float.
    """
    cls, kwargs = _OPTIMIZERS[name]
    params = list(params)
    for opt_lr in (lr, lr.float()):
        if _fused_takes_tensor_lr(cls, kwargs, opt_lr):
            return cls(params, lr=opt_lr, fused=True, **kwargs), opt_lr
    return cls(params, lr=float(lr), **kwargs), None


@dataclass(frozen=True)
class _Layout:
    """Column ranges of the packed per-sample tensor [N, T, width]."""

    obs: slice
    critic: slice
    actions: slice
    target_mu: slice
    log_probs: int
    target_log_probs: int
    values: int
    returns: int
    advantages: int
    width: int


def _layout(obs_dim: int, critic_dim: int, act_dim: int) -> _Layout:
    o, c, a = obs_dim, critic_dim, act_dim
    s = o + c + 2 * a  # the scalar columns follow the vector ones
    return _Layout(slice(0, o), slice(o, o + c), slice(o + c, o + c + a), slice(o + c + a, s),
                   s, s + 1, s + 2, s + 3, s + 4, s + 5)


class APPO:
    """The learner's update: actor-critic, target policy, optimizer and adaptive learning rate, one batch at a time."""

    def __init__(self, cfg: AppoConfig, task: TaskSpec, device: torch.device):
        self.cfg = cfg.algo.algorithm
        self.device = device
        self.model = ActorCritic.from_config(cfg, task).to(device)
        self.target = copy.deepcopy(self.model).requires_grad_(False)
        # The target shares the live normalizers: only actor weights lag behind.
        self.target.obs_normalizer = self.model.obs_normalizer
        self.target.critic_normalizer = self.model.critic_normalizer
        # The packed rows hold the networks' inputs: with periodic inputs, wider than the raw observations.
        self.layout = _layout(self.model.obs_normalizer.mean.numel(), self.model.critic_normalizer.mean.numel(),
                              task.act_dim)
        self.mirror = (BatchMirror(task_mirror(task.name), device, self.model.obs_normalizer.angles)
                       if self.cfg.uses_mirror else None)
        self.precision = resolve_precision(cfg.training.precision, device, cfg.training.deterministic)
        self.hidden_dtype = HIDDEN_DTYPES[self.precision]
        # The schedule's state: float64 on the training device (MPS has no float64: float32), so
        # the sequence of rates equals the float rule's exactly; `learning_rate` is its value as
        # of the last update.
        lr_dtype = torch.float32 if device.type == "mps" else torch.float64
        self._lr = torch.tensor(float(self.cfg.learning_rate), dtype=lr_dtype, device=device)
        self._lr_value = float(self.cfg.learning_rate)
        self.optimizer, self._opt_lr = make_optimizer(self.cfg.optimizer, self.model.parameters(), self._lr)
        # The actor's side of the gradient (its std included) and the critic's, for per-network clipping.
        self._actor_params = [self.model.log_std, *self.model.actor.parameters()]
        self._critic_params = list(self.model.critic.parameters())
        self.num_updates = 0
        self._helper = _HelperThread()
        self.compiled = bool(cfg.training.compile)
        self._actor_losses, self._critic_losses = self._actor_loss_terms, self._critic_loss_terms
        if self.compiled:
            # Inductor's CPU kernels take their thread count when compiled: that of one stream.
            options = {"cpp.threads": self._stream_threads() or torch.get_num_threads()} if device.type == "cpu" else {}
            self._actor_losses = torch.compile(self._actor_loss_terms, options=options)
            self._critic_losses = torch.compile(self._critic_loss_terms, options=options)
        self._compiled_shapes: set[torch.Size] = set()  # first call of a shape compiles: not side by side
        self.chunk_rows = _CPU_CHUNK_ROWS if device.type == "cpu" else 0  # rows per forward/backward part

    # ------------------------------------------------------------------ learning rate

    @property
    def learning_rate(self) -> float:
        """The learning rate as of the end of the last update (no device access)."""
        return self._lr_value

    @learning_rate.setter
    def learning_rate(self, lr: float) -> None:
        self.set_learning_rate(lr)

    def set_learning_rate(self, lr: float) -> None:
        self._lr.fill_(float(lr))
        self._lr_value = float(lr)
        if self._opt_lr is not None and self._opt_lr is not self._lr:
            self._opt_lr.fill_(float(lr))
        for group in self.optimizer.param_groups:
            group["lr"] = self._opt_lr if self._opt_lr is not None else float(lr)

    def _adapt_lr(self, kl: torch.Tensor) -> None:
        c = self.cfg
        adaptive_lr_(self._lr, kl, c.desired_kl, c.kl_factor, c.lr_factor, c.lr_min, c.lr_max)
        if self._opt_lr is None:  # no fused kernel with a Tensor lr on this device: one sync per step
            lr = self._lr.item()
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        elif self._opt_lr is not self._lr:
            self._opt_lr.copy_(self._lr)

    # ------------------------------------------------------------------ the update

    def update_normalizers(self, fresh: dict[str, torch.Tensor]) -> None:
        """Feed only newly arrived rollouts, so replayed ones are not counted twice.

        With symmetry or the mirror loss their mirror images too: statistics of the augmented data, symmetric
        themselves, so a mirrored observation is normalised as the mirror of the normalised original.
        """
        if self.mirror is not None:
            fresh = {k: torch.cat([fresh[k], self.mirror.apply(k, fresh[k])], dim=1) for k in ("obs", "critic")}
        self.model.obs_normalizer.update(fresh["obs"])
        self.model.critic_normalizer.update(fresh["critic"])

    @torch.no_grad()
    def process(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Fixed quantities of one update from a time-major batch [T, B, ...].

        Everything per sample lands in one env-major tensor ("packed", [B, T, width]): a
        minibatch (a set of envs, all their steps) is then one contiguous row gather.
        The normalizers do not change during an update, so observations are normalized
        once here rather than in every minibatch.  On a CPU the forward passes go through
        the batch a few thousand rows at a time, so their activations stay in cache.
        The other entries are time-major [T, B, ...] views into "packed".
        """
        c, L = self.cfg, self.layout
        num_steps, num_envs = batch["log_probs"].shape
        packed = torch.empty(num_envs, num_steps, L.width, device=self.device, dtype=batch["obs"].dtype)
        packed[:, :, L.log_probs] = batch["log_probs"].T
        with self._streams() as threads:
            critic_side = self._helper.submit(threads, self._critic_pass, batch, packed) if threads else None
            try:
                self._actor_pass(batch, packed)
            finally:
                bootstrap = critic_side.result() if critic_side else self._critic_pass(batch, packed)
        if c.symmetry and c.mirror_log_probs == "shifted":
            self._shift_mirrored_log_probs(batch, packed)
        fixed = {k: packed[:, :, getattr(L, k)].transpose(0, 1)
                 for k in ("target_mu", "target_log_probs", "values", "returns", "advantages")}
        vs, advantages = vtrace(
            batch["log_probs"], fixed["target_log_probs"], batch["rewards"], fixed["values"], bootstrap,
            batch["dones"], c.gamma, c.rho_clip, c.c_clip, c.lam, c.advantage,
        )
        fixed["returns"].copy_(vs)
        fixed["advantages"].copy_((advantages - advantages.mean()) / (advantages.std() + 1e-8))
        return {"packed": packed, **fixed}

    def _shift_mirrored_log_probs(self, batch: dict[str, torch.Tensor], packed: torch.Tensor) -> None:
        """The mirrored envs' (the augmented batch's second half) behaviour log-probs: the original's plus the
        target's gap log pi(mirrored) - log pi(original), so both halves get the same importance weights."""
        L, half = self.layout, packed.shape[0] // 2
        target, behaviour = packed[:, :, L.target_log_probs], packed[:, :, L.log_probs]  # views [B, T]
        behaviour[half:] = behaviour[:half] + (target[half:] - target[:half])
        batch["log_probs"][:, half:] = behaviour[half:].T  # augment's own tensor: the staged batch is untouched

    def _env_chunks(self, num_envs: int, num_steps: int) -> list[tuple[int, int]]:
        """Env ranges of about chunk_rows samples on a CPU; the whole batch elsewhere."""
        per = max(1, self.chunk_rows // num_steps) if self.chunk_rows else num_envs
        return [(i, min(i + per, num_envs)) for i in range(0, num_envs, per)]

    @torch.no_grad()
    def _actor_pass(self, batch: dict[str, torch.Tensor], packed: torch.Tensor) -> None:
        """Normalized observations, actions, target means and target log-probs into `packed`."""
        L, target = self.layout, self.target
        num_steps = packed.shape[1]
        for a, b in self._env_chunks(packed.shape[0], num_steps):
            rows = packed[a:b].view(-1, L.width)
            rows[:, L.obs] = target.obs_normalizer(batch["obs"][:, a:b].transpose(0, 1)).reshape(-1, L.obs.stop)
            actions = rows[:, L.actions]
            actions.copy_(batch["actions"][:, a:b].transpose(0, 1).reshape(actions.shape))
            mu = target.actor_mean(rows[:, L.obs], self.hidden_dtype)
            rows[:, L.target_mu] = mu
            rows[:, L.target_log_probs] = gaussian_log_prob(mu, target.log_std, actions)

    @torch.no_grad()
    def _critic_pass(self, batch: dict[str, torch.Tensor], packed: torch.Tensor) -> torch.Tensor:
        """Normalized critic observations and V(x_t) into `packed`; returns V(x_T) [B]."""
        L, model = self.layout, self.model
        width = L.critic.stop - L.critic.start
        for a, b in self._env_chunks(packed.shape[0], packed.shape[1]):
            rows = packed[a:b].view(-1, L.width)
            rows[:, L.critic] = model.critic_normalizer(batch["critic"][:, a:b].transpose(0, 1)).reshape(-1, width)
            rows[:, L.values] = model.critic_value(rows[:, L.critic], self.hidden_dtype)
        # The bootstrap from the same function as the other values, at the same precision.
        return model.critic_value(model.critic_normalizer(batch["last_critic"]), self.hidden_dtype)

    def update(
        self, batch: dict[str, torch.Tensor], abort=lambda: False, timings: dict | None = None
    ) -> dict[str, float]:
        """One APPO update on the whole batch; returns metrics reduced once at the end.

        `abort()` is checked between minibatch steps: a stop request abandons the rest.
        `timings`, when given, receives seconds per phase (the device is synchronised
        at each phase boundary then, so leave it None in training).
        """
        c = self.cfg
        clock = _PhaseClock(self.device, timings)
        if self.cfg.symmetry:
            batch = self.mirror.augment(batch)
        fixed = self.process(batch)
        stats = vtrace_stats(batch["log_probs"], fixed["target_log_probs"], c.rho_clip)
        stats["explained_variance"] = explained_variance(fixed["values"], fixed["returns"])
        packed = fixed["packed"]
        del fixed
        clock.lap("process")
        sums, steps = self._minibatch_loop(packed, abort)
        clock.lap("minibatch_loop")
        self.num_updates += 1
        if self.num_updates % c.target_update_freq == 0:
            self._update_target()
        clock.lap("target_update")
        metrics = self._reduce(sums, steps, stats)
        clock.lap("metrics")
        return metrics

    def _minibatch_loop(self, packed: torch.Tensor, abort) -> tuple[torch.Tensor, int]:
        c = self.cfg
        num_envs = packed.shape[0]
        mb_size = max(1, num_envs // c.num_mini_batches)
        sums = torch.zeros(len(_SUMS), dtype=torch.float64, device=self.device)
        steps = 0
        with self._streams() as threads:
            for _ in range(c.num_learning_epochs):
                if steps and abort():
                    break
                perm = torch.randperm(num_envs, device=self.device)
                for start in range(0, num_envs - mb_size + 1, mb_size):
                    if steps and abort():
                        break
                    mb = packed.index_select(0, perm[start : start + mb_size]).flatten(0, 1)
                    sums += self._step(mb, threads)
                    steps += 1
        return sums, steps

    def _actor_loss_terms(self, mb: torch.Tensor, target_log_std: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(actor loss, surrogate, entropy, clip fraction, mirror loss, KL) of one packed minibatch [B, width]."""
        c, L, m = self.cfg, self.layout, self.model
        mu = m.actor_mean(mb[:, L.obs], self.hidden_dtype)
        log_probs = gaussian_log_prob(mu, m.log_std, mb[:, L.actions])
        entropy = gaussian_entropy(m.log_std)
        kl = gaussian_kl(mb[:, L.target_mu], target_log_std.exp(), mu.detach(), m.log_std.detach().exp()).mean()
        ratio = impact_ratio(log_probs, mb[:, L.log_probs], mb[:, L.target_log_probs])
        surrogate, clip_fraction = surrogate_loss(mb[:, L.advantages], ratio, c.clip_param)
        loss = surrogate - c.entropy_coef * entropy
        mirror = torch.zeros((), device=mu.device)
        if c.mirror_loss_coef > 0:
            mirror = self._mirror_loss(mb[:, L.obs], mu)
            loss = loss + c.mirror_loss_coef * mirror
        return loss, surrogate, entropy, clip_fraction, mirror, kl

    def _mirror_loss(self, obs: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
        """Mean squared gap between the actor's mean on mirrored `obs` and the mirror of `mu` (held fixed).

        `obs` is normalised: the normaliser's statistics are their own mirror image (update_normalizers), so
        the mirror of a normalised observation is the normalised mirror observation.
        """
        mirrored_mu = self.model.actor_mean(self.mirror.apply("obs_input", obs), self.hidden_dtype)
        return (mirrored_mu - self.mirror.apply("actions", mu.detach())).square().mean()

    def _critic_loss_terms(self, mb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weighted value loss, value loss) of one packed minibatch [B, width]."""
        c, L = self.cfg, self.layout
        values = self.model.critic_value(mb[:, L.critic], self.hidden_dtype)
        v_loss = value_loss(values, mb[:, L.values], mb[:, L.returns], c.clip_param, c.use_clipped_value_loss)
        return c.value_loss_coef * v_loss, v_loss

    def _row_chunks(self, mb: torch.Tensor) -> list[tuple[torch.Tensor, float]]:
        """(rows, weight) parts of a minibatch: about self.chunk_rows each on a CPU, weight = share of rows."""
        n = mb.shape[0]
        parts = mb.tensor_split(max(1, -(-n // self.chunk_rows))) if self.chunk_rows else (mb,)
        return [(part, part.shape[0] / n) for part in parts]

    def _critic_backward(self, chunks: list[tuple[torch.Tensor, float]]) -> torch.Tensor:
        total = None
        for part, w in chunks:
            weighted, v_loss = self._critic_losses(part)
            (weighted if w == 1.0 else weighted * w).backward()
            v_loss = v_loss.detach() * w
            total = v_loss if total is None else total + v_loss
        return total

    def _actor_backward(self, chunks: list[tuple[torch.Tensor, float]]) -> torch.Tensor:
        total = None
        for part, w in chunks:
            loss, *terms = self._actor_losses(part, self.target.log_std)
            (loss if w == 1.0 else loss * w).backward()
            terms = torch.stack(terms).detach() * w
            total = terms if total is None else total + terms
        return total

    def _step(self, mb: torch.Tensor, threads: int = 0) -> torch.Tensor:
        """One SGD step; returns this minibatch's `_SUMS` terms as one float64 tensor (no sync).

        The loss is surrogate + value_loss_coef * value loss - entropy_coef * entropy (+ mirror_loss_coef *
        mirror loss), every term a mean over the minibatch.  The critic's term and the actor's share no
        parameters, so each is backpropagated on its own (side by side when `threads`: the
        critic's on the helper thread).  On a CPU each goes through the minibatch in parts
        of about `chunk_rows` rows, the gradients of the parts' means weighted by their share
        of the rows adding up to the gradient of the minibatch mean, with activations that
        stay in cache.
        """
        c = self.cfg
        chunks = self._row_chunks(mb)
        if self.compiled and any(part.shape not in self._compiled_shapes for part, _ in chunks):
            self._compiled_shapes.update(part.shape for part, _ in chunks)
            threads = 0
        self.optimizer.zero_grad(set_to_none=True)
        critic_side = self._helper.submit(threads, self._critic_backward, chunks) if threads else None
        try:
            surrogate, entropy, clip_fraction, mirror, kl = self._actor_backward(chunks)
        finally:
            v_loss = critic_side.result() if critic_side else None
        if v_loss is None:
            v_loss = self._critic_backward(chunks)
        if c.schedule == "adaptive":
            self._adapt_lr(kl)  # before this minibatch's optimizer step
        actor_norm, critic_norm = self._clip_gradients()
        self.optimizer.step()
        grad_norm = torch.hypot(actor_norm, critic_norm)
        return torch.stack([surrogate, v_loss, entropy, clip_fraction, mirror, grad_norm, actor_norm, critic_norm,
                            kl]).detach().double()

    def _clip_gradients(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Clip by grad_clip (joint: one norm over both networks; per_network: each its own); pre-clip norms."""
        c = self.cfg
        actor_grads = [p.grad for p in self._actor_params if p.grad is not None]
        critic_grads = [p.grad for p in self._critic_params if p.grad is not None]
        actor_norm, critic_norm = _grad_norm(actor_grads, self.device), _grad_norm(critic_grads, self.device)
        if c.grad_clip == "per_network":
            _scale_to(actor_grads, actor_norm, c.max_grad_norm)
            _scale_to(critic_grads, critic_norm, c.max_grad_norm)
        else:
            _scale_to(actor_grads + critic_grads, torch.hypot(actor_norm, critic_norm), c.max_grad_norm)
        return actor_norm, critic_norm

    # ------------------------------------------------------------------ CPU streams

    def _stream_threads(self) -> int:
        """Torch threads of each of the two streams, or 0 where the work runs as one stream."""
        n = torch.get_num_threads()
        return n // 2 if self.device.type == "cpu" and n >= 2 else 0

    @contextmanager
    def _streams(self):
        """Yield the threads per stream (0: one stream); this thread runs with that many meanwhile."""
        n, threads = torch.get_num_threads(), self._stream_threads()
        if not threads:
            yield 0
            return
        torch.set_num_threads(threads)
        try:
            yield threads
        finally:
            torch.set_num_threads(n)

    def _reduce(self, sums: torch.Tensor, steps: int, stats: dict[str, torch.Tensor]) -> dict[str, float]:
        """Every metric of the update in one device-to-host transfer."""
        extra = torch.stack([
            stats["rho_clip_fraction"], stats["rho_p99"], stats["log_prob_delta_abs_mean"],
            stats["explained_variance"], self.model.log_std.detach().exp().mean(),
        ]).double()
        values = torch.cat([sums / steps, extra, self._lr.reshape(1)]).tolist()
        names = (*_SUMS, "rho_clip", "rho_p99", "lp_delta", "explained_variance", "mean_std", "lr")
        m = dict(zip(names, values, strict=True))
        self._lr_value = m["lr"]
        mirror = {"Loss/mirror": m["mirror"]} if self.cfg.mirror_loss_coef > 0 else {}
        return {
            **mirror,
            "Loss/surrogate": m["surrogate"],
            "Loss/value": m["value"],
            "Loss/entropy": m["entropy"],
            "Loss/learning_rate": self._lr_value,
            "Train/approx_kl": m["kl"],
            "Train/clip_fraction": m["clip"],
            "Train/global_gradient_norm": m["grad_norm"],
            "Train/actor_gradient_norm": m["actor_grad_norm"],
            "Train/critic_gradient_norm": m["critic_grad_norm"],
            "Train/value_explained_variance": m["explained_variance"],
            "Train/vtrace_rho_clip_fraction": m["rho_clip"],
            "Train/vtrace_rho_p99": m["rho_p99"],
            "Train/behavior_to_current_log_prob_delta": m["lp_delta"],
            "Policy/mean_std": m["mean_std"],
        }

    @torch.no_grad()
    def _update_target(self) -> None:
        tau = self.cfg.tau
        src = [self.model.log_std, *self.model.actor.parameters()]
        dst = [self.target.log_std, *self.target.actor.parameters()]
        torch._foreach_mul_(dst, 1 - tau)
        torch._foreach_add_(dst, src, alpha=tau)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        optimizer = self.optimizer.state_dict()
        # Saved with a plain float lr, so a checkpoint does not depend on the optimizer kernel (fused or not).
        optimizer["param_groups"] = [{**g, "lr": self._lr_value} for g in optimizer["param_groups"]]
        return {
            "model": self.model.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": optimizer,
            "learning_rate": self._lr_value,
            "num_updates": self.num_updates,
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        # The saved groups replace ours: keep this optimizer's kernel choice (fused or not) and
        # its step counters where that kernel wants them (a fused step reads them on the device).
        fused = bool(self.optimizer.defaults.get("fused"))
        for group in self.optimizer.param_groups:
            for key in ("fused", "foreach", "capturable"):
                if key in self.optimizer.defaults:
                    group[key] = self.optimizer.defaults[key]
            for p in group["params"]:
                st = self.optimizer.state.get(p, {})
                if fused and isinstance(st.get("step"), torch.Tensor):
                    st["step"] = st["step"].to(device=p.device, dtype=torch.float32)
        self.num_updates = int(state["num_updates"])
        self.set_learning_rate(float(state["learning_rate"]))


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """1 - Var(returns - values) / Var(returns): the share of the targets' variance the critic predicts."""
    var = returns.var()
    return torch.where(var > 0, 1.0 - (returns - values).var() / var, torch.zeros_like(var))


def _grad_norm(grads: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The 2-norm of all `grads` together (0 without any), on the device: no sync."""
    if not grads:
        return torch.zeros((), device=device)
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


def _scale_to(grads: list[torch.Tensor], norm: torch.Tensor, max_norm: float) -> None:
    """Scale `grads` in place so their norm is at most max_norm (as nn.utils.clip_grad_norm_)."""
    if grads:
        torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + 1e-6), max=1.0))


class _HelperThread:
    """One worker thread, started on first use, running a function with a given number of torch threads."""

    def __init__(self):
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, threads: int, fn, *args) -> Future:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="appo-critic")
        return self._pool.submit(self._run, threads, fn, *args)

    @staticmethod
    def _run(threads: int, fn, *args):
        if torch.get_num_threads() != threads:  # per-thread setting: the first task, or a changed split
            torch.set_num_threads(threads)
        return fn(*args)


class _PhaseClock:
    """Seconds per phase into `out` (synchronising the device at each lap); a no-op without `out`."""

    def __init__(self, device: torch.device, out: dict | None):
        self.device, self.out = device, out
        self.t = time.perf_counter() if out is not None else 0.0

    def lap(self, name: str) -> None:
        if self.out is None:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.out[name] = self.out.get(name, 0.0) + now - self.t
        self.t = now
