"""The one typed configuration every APPO process reads.

Sources, highest priority first:
  1. dotted CLI overrides      algo.num_envs=2048 training.replay_queue_size=2
  2. environment variables     APPO_ALGO__NUM_ENVS=2048
  3. a YAML file               --config run.yaml
  4. the task's preset         common/presets.py (visible, overridable tuning per task)
  5. the defaults below        (the reference configuration, docs/design.md#reference-defaults)

Key names keep the reference tool's (algo.*, algo.algorithm.*, training.*) so
its users' overrides carry over.  Anything unknown, mistyped or out of range is
refused by `load_config` with a `ConfigError` naming the key.
"""

from __future__ import annotations

import contextvars
import difflib
import math
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from common.hub import MOTIONS_REPO, SEED_MOTION_FILE
from common.symmetry import task_mirror
from common.task_spec import TASK_SPECS, task_engines, tasks_on

ENV_PREFIX = "APPO_"
_ENDPOINT = re.compile(r"^tcp://[^\s:/]+:(6553[0-4]|655[0-2]\d|65[0-4]\d\d|6[0-4]\d{3}|[1-5]\d{4}|[1-9]\d{0,3})$")
ENV_DELIMITER = "__"
# APPO_* variables that are process settings, not part of the config model.
NON_CONFIG_ENV = {"APPO_LOG_FORMAT", "APPO_LOG_LEVEL"}


class ConfigError(ValueError):
    """A configuration problem, phrased for the user (names the key and what is allowed)."""


class _Section(BaseModel):
    """Base of every config section: unknown keys are refused, assignments validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class PolicyConfig(_Section):
    """algo.policy: the actor and critic networks and the initial action noise."""

    actor_hidden_dims: list[int] = Field([512, 256, 128], min_length=1, description="Actor MLP layer widths.")
    critic_hidden_dims: list[int] = Field([512, 256, 128], min_length=1, description="Critic MLP layer widths.")
    activation: Literal["elu", "relu", "tanh", "selu", "leaky_relu"] = Field("elu", description="Hidden activation.")
    init_noise_std: float = Field(1.0, gt=0, description="Initial std of the state-independent Gaussian policy.")
    init_noise_std_by_action: dict[int, float] = Field(
        {}, description="Initial std of single action dimensions, {index into the task's action vector: std}, in "
        "place of init_noise_std for those: more noise where the task needs exploring (the joints a gait moves), "
        "less where noise only costs. Each index below the task's action count, each std > 0. Entries given on the "
        "command line or in a file merge over the preset's, index by index.")
    action_noise_beta: float = Field(
        0.0, ge=0, le=2, description="Colour of the collectors' exploration noise over time: each env's standard-"
        "normal draws follow a sequence with power spectrum 1/f^beta (collector/action_noise.py). 0: drawn afresh "
        "every step (white); 1: pink, successive draws correlated. Each draw stays N(0, 1), so the log-probs and "
        "the update are unchanged.")
    periodic_inputs: bool = Field(
        False, description="Feed the networks the sine and cosine of the task's angle observations (a gait "
        "phase: TaskSpec.obs_angles) in place of the raw radians, whose wrap from 2 pi to 0 is a jump in the "
        "input where the angle itself moves on smoothly. Only for tasks with angle observations.")

    @field_validator("actor_hidden_dims", "critic_hidden_dims")
    @classmethod
    def _positive_widths(cls, v: list[int]) -> list[int]:
        if any(w <= 0 for w in v):
            raise ValueError("every layer width must be > 0")
        return v

    @field_validator("init_noise_std_by_action")
    @classmethod
    def _valid_stds(cls, v: dict[int, float]) -> dict[int, float]:
        bad = {i: std for i, std in v.items() if i < 0 or not std > 0 or not math.isfinite(std)}
        if bad:
            raise ValueError(f"indices must be >= 0 and stds finite and > 0, not {bad}")
        return v


class AlgorithmConfig(_Section):
    """algo.algorithm: the PPO loss, V-trace clips, optimizer and learning-rate schedule."""

    num_learning_epochs: int = Field(5, ge=1, description="Passes over the batch per update.")
    num_mini_batches: int = Field(4, ge=1, description="Minibatches per epoch (split over envs).")
    clip_param: float = Field(0.2, gt=0, lt=1, description="PPO ratio clip epsilon (also the value clip).")
    gamma: float = Field(0.99, gt=0, le=1, description="Discount factor.")
    lam: float = Field(0.95, ge=0, le=1, description="V-trace's trace-cutting lambda: c_t = lam * min(c_clip, rho_t); "
                       "on-policy the targets are GAE(lam)'s lambda-returns, and 1 is plain V-trace.")
    advantage: Literal["impala", "gae"] = Field(
        "impala", description="Policy-gradient advantage: impala = rho_bar_t * (r_t + gamma * vs_{t+1} - V(x_t)) "
        "(the IMPALA paper's); gae = vs_t - V(x_t), on-policy GAE(lam)'s advantage.")
    value_loss_coef: float = Field(1.0, ge=0, description="Weight of the value loss.")
    entropy_coef: float = Field(0.01, ge=0, description="Weight of the entropy bonus.")
    learning_rate: float = Field(1e-3, gt=0, le=1, description="Initial learning rate.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient-norm clip (see grad_clip).")
    grad_clip: Literal["joint", "per_network"] = Field(
        "joint", description="Clip the gradient norm of actor and critic together (joint) or of each on its own "
        "(per_network, as rsl_rl's PPO with separate actor and critic).")
    use_clipped_value_loss: bool = Field(True, description="Clip the value loss around the old values.")
    schedule: Literal["adaptive", "fixed"] = Field("adaptive", description="Learning-rate schedule.")
    desired_kl: float = Field(0.01, gt=0, description="Target KL(target policy || current) of the adaptive schedule.")
    kl_factor: float = Field(1.2, gt=1, description="KL band: adapt outside [desired/kl_factor, desired*kl_factor].")
    lr_factor: float = Field(1.1, gt=1, description="Multiply/divide the learning rate by this outside the band.")
    lr_min: float = Field(1e-5, gt=0, le=1, description="Floor of the adaptive learning rate.")
    lr_max: float = Field(1e-2, gt=0, le=1, description="Cap of the adaptive learning rate.")
    optimizer: Literal["adam", "adamw", "sgd"] = Field("adam", description="Optimizer.")
    tau: float = Field(1.0, gt=0, le=1, description="Target update: target <- tau*actor + (1-tau)*target.")
    target_update_freq: int = Field(1, ge=1, description="Update the target policy every this many updates.")
    symmetry: bool = Field(
        False, description="Train on every batch and its left-right mirror image (symmetry data augmentation, "
        "as rsl_rl's; learner/mirror.py); only tasks with a mirror map in common/symmetry.py.")
    mirror_log_probs: Literal["copied", "shifted"] = Field(
        "copied", description="Behaviour log-prob of a mirrored sample (with symmetry): copied = its original's, as "
        "rsl_rl's augmentation, right only for a policy that is its own mirror image; shifted = its original's plus "
        "the target policy's log-prob of the mirrored sample minus that of the original, so that a mirrored sample "
        "keeps its original's importance weight however asymmetric the policy is.")
    mirror_loss_coef: float = Field(
        0.0, ge=0, description="Weight of the mirror loss (rsl_rl's use_mirror_loss): the mean squared gap between "
        "the policy's mean on a mirrored observation and the mirror of its mean on the original; 0 = off. Only "
        "tasks with a mirror map; the normalisers then see the mirror images too.")
    rho_clip: float = Field(1.0, gt=0, description="V-trace rho-bar (importance weight clip for the TD error).")
    c_clip: float = Field(1.0, gt=0, description="V-trace c-bar (trace-cutting clip).")

    @property
    def uses_mirror(self) -> bool:
        """Whether the update needs the task's mirror map (augmentation or mirror loss)."""
        return self.symmetry or self.mirror_loss_coef > 0

    @model_validator(mode="after")
    def _lr_bounds_ordered(self) -> AlgorithmConfig:
        if self.lr_min > self.lr_max:
            raise ValueError(f"lr_min ({self.lr_min}) must not exceed lr_max ({self.lr_max})")
        return self


class AlgoConfig(_Section):
    """algo: rollout size, run length, seeding and normalisation, with the policy and algorithm sections."""

    num_envs: int = Field(2048, ge=1, description="Environments per collector.")
    steps_per_env: int = Field(24, ge=1, description="Rollout length T (steps per env per rollout).")
    max_iterations: int = Field(150, ge=1, description="Learner iterations (updates) to run.")
    save_interval: int = Field(50, ge=1, description="Checkpoint every this many iterations (and at the end).")
    seed: int = Field(1, ge=0, description="Base seed; collector i uses seed + 1000*(i+1).")
    empirical_normalization: bool = Field(True, description="Normalize observations with running statistics.")
    normalizer_warmup: bool = Field(
        False, description="Rollouts acted by the first policy (version 0, whose normaliser is still the identity) "
        "only set the normalisers' statistics and are not trained on: the first update then sees the input "
        "scale its rollouts were acted on.")
    policy: PolicyConfig = PolicyConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()


class TrainingConfig(_Section):
    """training: devices, staging and ring, run directory, threads, precision, stop and status settings."""

    device: str = Field("auto", description="Learner device: auto (cuda, else mps, else cpu), cpu, cuda, cuda:N, mps.")
    collector_device: str = Field(
        "cpu", description="Device the collectors' environments and policy run on (the seed's "
        "training.collector_device): cpu; a GPU device needs a GPU physics engine, which training.sim_backend "
        "does not offer yet.")
    sim_backend: Literal["mujoco", "motrix"] = Field(
        "mujoco", description="Physics engine of the built-in tasks (the seed's training.sim_backend, --sim): "
        "mujoco, or motrix (MotrixSim: the Go2 and G1 tasks; the Gymnasium bodies are MuJoCo only).")
    replay_queue_size: int = Field(
        3, ge=1, description="Staging pool capacity in rollouts; each update trains on all of them."
    )
    staging_overflow: Literal["wait", "overwrite"] = Field(
        "wait",
        description="More rollouts ready than the pool holds: wait (leave them in the ring, holding collectors "
        "back; every simulated step is trained on) or overwrite (stage them all, pushing out rollouts never "
        "trained on: fresher data, wasted samples, counted in Learner/overwritten_unused).",
    )
    ring_slots: int = Field(4, ge=2, description="Slots of the learner's pinned-memory ring.")
    log_dir: str = Field("logs/appo", description="Runs go to <log_dir>/<task>/<run_name>/.")
    run_name: str = Field("", description="Run directory name; empty means a timestamp.")
    collector_wait_warn_s: float = Field(
        10.0, gt=0, description="Warn each time the learner waits this long for data."
    )
    collector_gone_timeout_s: float = Field(
        120.0, gt=0, description="Stop with an error if no collector for this long."
    )
    learner_threads: int = Field(0, ge=0, description="torch intra-op threads in the learner; 0 = automatic split.")
    compile: bool = Field(False, description="torch.compile the learner's minibatch forward and loss (compiles on "
                          "the first update; measure with python -m benchmarks.update --compile).")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "fp32",
        description="Arithmetic of the policy's hidden layers in the learner's update and the collectors' "
        "inference. bf16: their matmuls run in bfloat16 under torch.autocast (parameters, optimizer state, "
        "normalizers, the actor's and critic's output layers, log-probs, losses and V-trace stay float32, so "
        "checkpoints and weights are unchanged); "
        "pays on CPUs whose native bf16 is fast (avx512_bf16 on AMD Zen 4, AMX), not on every CPU with the flag; "
        "on a GPU only with networks large enough for the "
        "matmuls to dominate (at small sizes a GPU update is bound by kernel launches and bf16's casts slow it "
        "down). auto: bf16 on a CPU with native bf16 where one hidden layer, timed both ways at start-up, runs at "
        "least 1.15x faster in bf16, else fp32 (always fp32 with training.deterministic); the go2_joystick_flat, "
        "G1 and half_cheetah presets use it. float32 by default: with bf16, "
        "inverted_pendulum learned less reliably "
        "(BENCHMARKS.md, section 'Learner in bf16'). "
        "Measure with python -m benchmarks.update --precision bf16.",
    )
    collector_inference: Literal["auto", "torch", "numpy"] = Field(
        "auto",
        description="How collectors run the policy. torch: ActorCritic on training.collector_device, in the "
        "hidden-layer precision of training.precision; numpy: float32 NumPy on the CPU from the published flat "
        "weights, with no torch installed or imported (the collector image can leave torch out); auto: torch "
        "when it can be imported, else numpy. Compare both with appo-bench --collector-inference torch,numpy.",
    )
    collector_threads: int = Field(0, ge=0, description="MuJoCo stepping threads per collector; 0 = automatic split.")
    collector_nice: int = Field(
        -1, ge=-1, le=19,
        description="Niceness a collector process adds to the one it started with. -1 = automatic: appo-train's "
        "collectors, which share the learner's cores (common/cores.py), add 10, so the learner's work comes first "
        "and the physics takes every cycle it leaves; a standalone appo-collector adds 0. Set 10 where "
        "appo-collector shares a host with a learner (compose).",
    )
    console: bool = Field(True, description="Print the live console line each iteration.")
    max_policy_lag: int = Field(20, ge=0, description="Refuse rollouts whose policy is more versions behind than this.")
    keep_checkpoints: int = Field(5, ge=1, description="Keep the newest this many model_<i>.pt (the final one always).")
    deterministic: bool = Field(
        False, description="Lock-step debugging mode: one collector, each rollout from the newest policy, "
        "envs reset per rollout from (seed, policy version); two runs give bit-identical weights on CPU.")
    lockstep: bool = Field(
        False, description="On-policy mode: each collector waits for a policy newer than its last rollout's before "
        "the next (policy lag 0, as synchronous PPO); the physics idles during every update. For measuring what "
        "the asynchrony costs per env step; episodes carry on across rollouts.")
    stop_grace_s: float = Field(20.0, gt=0, description="On SIGTERM/SIGINT, exit within this many seconds.")
    collector_max_restarts: int = Field(
        5, ge=0, description="appo-train restarts a crashed local collector this often."
    )
    collector_restart_backoff_s: float = Field(
        1.0, ge=0, description="First restart delay; doubles each time, max 60 s."
    )
    no_play: bool = Field(
        False, description="Skip rendering the final policy after training (the seed's training.no_play): by "
        "default appo-train, once it reaches algo.max_iterations, renders play.mp4 and, for velocity-command "
        "tasks, play.png into the run directory and its TensorBoard events (tools/play_video.py).")
    play_env_num: int = Field(16, ge=1, description="Environments the final policy is played in after training "
                              "(the seed's training.play_env_num); the first 16 are drawn, as tiles.")
    play_steps: int = Field(150, ge=1, description="Control steps of that play (the seed's training.play_steps).")
    status_port: int = Field(0, ge=0, le=65535, description="HTTP /metrics, /healthz, /readyz of the learner; 0 = off.")
    collector_status_port: int = Field(0, ge=0, le=65535, description="The same for appo-collector; 0 = off.")
    status_host: str = Field("0.0.0.0", description="Address the status server binds.")
    liveness_timeout_s: float = Field(120.0, gt=0, description="/healthz fails when the main loop stalls this long.")
    idle_when_complete: bool = Field(
        False,
        description="appo-learner on a run already at algo.max_iterations: false exits 0 at once; true logs "
        "'run already complete', tells collectors to stop and stays up, ready, until stopped (for supervisors "
        "that restart an exited learner or wait for it to be ready: compose, Kubernetes).",
    )

    @field_validator("device", "collector_device")
    @classmethod
    def _known_device(cls, v: str) -> str:
        base = v.split(":", 1)[0]
        if base not in {"auto", "cpu", "cuda", "mps"}:
            raise ValueError("allowed: auto, cpu, cuda, cuda:N, mps")
        if ":" in v and not (base == "cuda" and v.split(":", 1)[1].isdigit()):
            raise ValueError("only cuda takes an index, as cuda:N")
        return v

    @field_validator("collector_device")
    @classmethod
    def _cpu_collectors(cls, v: str) -> str:
        # The collectors step the physics; mujoco and motrix run on the CPU, so their data lives there.
        if v not in {"cpu", "auto"}:
            raise ValueError(f"{v} needs a GPU physics engine; training.sim_backend mujoco and motrix run on the "
                             "CPU: use cpu")
        return "cpu"


class TransportConfig(_Section):
    """transport: shared memory or ZeroMQ, buffers and credits, heartbeats, CURVE keys."""

    kind: Literal["shm", "zmq"] = Field("shm", description="shm on one host; zmq between hosts.")
    shm_root: str = Field("/dev/shm", description="Where shared-memory run directories live.")
    buffers_per_collector: int = Field(2, ge=1, description="Rollout buffers each collector fills in turn.")
    shm_run_id: str = Field("", pattern=r"^[A-Za-z0-9._-]*$",
                            description="Fixed name of the shm run directory (appo-<id>); empty = <run>-<pid>.")
    listen: str = Field("tcp://0.0.0.0:5555", description="Learner: ZeroMQ endpoint for rollouts (weights on port+1).")
    learner: str = Field("", description="Collector: the learner's address, tcp://HOST:PORT.")
    max_in_flight: int = Field(2, ge=1, le=64, description="Credits: rollouts a collector may have unacknowledged.")
    heartbeat_s: float = Field(1.0, gt=0, description="Heartbeat period, both directions.")
    peer_timeout_s: float = Field(10.0, gt=0, description="A peer silent this long is considered gone.")
    max_peers: int = Field(
        1024, ge=1, description="Learner: collectors it keeps track of at once; idle ones make room, else refused."
    )
    max_queued_per_peer: int = Field(
        64, ge=1, description="Learner: messages queued per connection each way (HWM); keep above max_in_flight."
    )
    collector_name: str = Field("", description="Collector name shown in metrics; empty = host-pid.")
    curve_dir: str = Field(
        "", description="CurveZMQ keys (appo-keys output or a mounted Secret); empty = open transport."
    )
    curve_client_name: str = Field("collector", description="Collector: which key pair of curve_dir to use.")

    @field_validator("listen", "learner")
    @classmethod
    def _tcp_endpoint(cls, v: str) -> str:
        if v and not _ENDPOINT.match(v):
            raise ValueError("expected tcp://HOST:PORT with a port in 1..65534")
        return v


class TaskOptionsConfig(_Section):
    """task_options: inputs a task needs beyond its name (`task` itself is the task name)."""

    motion_file: str = Field(
        "", description="Reference motion clip (.npz, BeyondMimic layout, 50 fps) of g1_motion_tracking; other "
        "tasks ignore it. Empty: the seed's clip, " + SEED_MOTION_FILE + ". A relative path that is no file here "
        "is looked up under assets_dir and downloaded there from the seed's Hugging Face dataset "
        + MOTIONS_REPO + " (common/hub.py). Check a clip with appo-motion check CLIP.npz.",
    )
    assets_dir: str = Field(
        "", description="Folder of downloaded motion clips (empty: ~/.cache/appo/assets, or $XDG_CACHE_HOME/appo/"
        "assets); a collector on another host keeps its own.",
    )


# Tasks that track a reference motion (task_options.motion_file, the seed's clip by default).
MOTION_TASKS = ("g1_motion_tracking",)


class AppoConfig(BaseSettings):
    """Everything a run needs; printed and saved as config.yaml in the run directory."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_DELIMITER, extra="forbid", validate_assignment=True
    )

    task: str = Field(
        "go2_joystick_flat", min_length=1, description="Task name (see README: built-ins, gym:ID, module:factory)."
    )
    algo: AlgoConfig = AlgoConfig()
    training: TrainingConfig = TrainingConfig()
    transport: TransportConfig = TransportConfig()
    task_options: TaskOptionsConfig = TaskOptionsConfig()

    @model_validator(mode="after")
    def _task_defaults_and_fit(self) -> AppoConfig:
        if self.task in MOTION_TASKS and not self.task_options.motion_file:
            self.task_options.motion_file = SEED_MOTION_FILE  # as the seed's config does; config.yaml shows it
        if self.algo.algorithm.uses_mirror:
            task_mirror(self.task)  # a task without a mirror map: the error names those with one
        if self.algo.policy.periodic_inputs and self.task in TASK_SPECS and not TASK_SPECS[self.task].obs_angles:
            with_angles = sorted(name for name, spec in TASK_SPECS.items() if spec.obs_angles)
            raise ValueError(f"algo.policy.periodic_inputs: task {self.task} has no angle observations "
                             f"(tasks with some: {', '.join(with_angles)})")
        by_action = self.algo.policy.init_noise_std_by_action
        if by_action and self.task in TASK_SPECS and max(by_action) >= TASK_SPECS[self.task].act_dim:
            raise ValueError(f"algo.policy.init_noise_std_by_action: index {max(by_action)} is past task "
                             f"{self.task}'s {TASK_SPECS[self.task].act_dim} actions (indices 0 to "
                             f"{TASK_SPECS[self.task].act_dim - 1})")
        engines = task_engines(self.task)
        if self.training.sim_backend not in engines:
            raise ValueError(f"task {self.task} runs on {' and '.join(engines)}, not training.sim_backend="
                             f"{self.training.sim_backend} (motrix runs: {', '.join(tasks_on('motrix')) or 'none'})")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment is parsed by load_config (like CLI overrides, and with a check
        # for unknown APPO_* names), so pydantic-settings' own env source is not used.
        env, yaml_data, preset = _LOWER_SOURCES.get()
        return (
            init_settings,
            InitSettingsSource(settings_cls, init_kwargs=env),
            InitSettingsSource(settings_cls, init_kwargs=yaml_data),
            InitSettingsSource(settings_cls, init_kwargs=preset),
        )

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# (env dict, yaml dict, preset dict) for the sources below CLI and env; set only inside load_config.
_LOWER_SOURCES: contextvars.ContextVar[tuple[dict, dict, dict]] = contextvars.ContextVar(
    "_LOWER_SOURCES", default=({}, {}, {})
)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """Turn ["algo.num_envs=8", "training.device=cpu"] into a nested dict; values parse as YAML scalars/lists."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override {item!r} is not of the form section.key=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            if not _is_str_key(key):
                raise ConfigError(f"{key}: cannot parse value {raw!r}: {exc}") from None
            value = raw.strip()
        if not isinstance(value, str) and _is_str_key(key):
            value = raw.strip()  # run_name=2024, run_name=007, task=no stay text, not int/bool
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r} conflicts with an earlier override of {part}")
        node[parts[-1]] = value
    return out


def _is_str_key(key: str) -> bool:
    """Whether a dotted key names a str field, whose CLI/env text is kept as is rather than read as YAML."""
    model: Any = AppoConfig
    for part in key.split("."):
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in model.model_fields:
            return False
        model = model.model_fields[part].annotation
    return model is str


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {p} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a mapping of sections, not {type(data).__name__}")
    return data


def _all_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys += _all_keys(ann, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def _check_env(environ: dict[str, str]) -> None:
    """Refuse APPO_* variables that name no config key (a typo would otherwise be ignored silently)."""
    valid = {ENV_PREFIX + k.upper().replace(".", ENV_DELIMITER) for k in _all_keys(AppoConfig)}
    sections = {ENV_PREFIX + k.upper() for k in AppoConfig.model_fields}
    for name in environ:
        if name.startswith(ENV_PREFIX) and name not in valid | sections | NON_CONFIG_ENV:
            guess = difflib.get_close_matches(name, sorted(valid), n=1)
            hint = f"; did you mean {guess[0]}?" if guess else ""
            raise ConfigError(f"environment variable {name} names no config key{hint}")


def _format_error(exc: ValidationError) -> str:
    lines = []
    keys = _all_keys(AppoConfig)
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if not loc:  # a check across keys (model validator): its message names them
            lines.append(err["msg"].removeprefix("Value error, "))
        elif err["type"] == "extra_forbidden":
            guess = difflib.get_close_matches(loc, keys, n=1)
            hint = f"; did you mean {guess[0]}?" if guess else ""
            lines.append(f"{loc}: unknown key{hint}")
        else:
            got = err.get("input")
            lines.append(f"{loc}: {err['msg']} (got {got!r})")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def load_config(
    overrides: list[str] | None = None,
    config_file: str | Path | None = None,
    environ: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
    base: dict[str, Any] | None = None,
) -> AppoConfig:
    """Resolve the config from every source; raise ConfigError naming the problem.

    `extra` holds values from dedicated CLI flags (--task, --num-envs ...) and ranks
    with the dotted overrides, which win over it when both name a key.
    """
    from common.presets import preset_for  # local: presets import this module

    environ = dict(os.environ if environ is None else environ)
    _check_env(environ)
    cli = _deep_merge(extra or {}, parse_overrides(overrides or []))
    env = _env_overrides(environ)
    yaml_data = read_yaml(config_file) if config_file else {}
    task = cli.get("task") or env.get("task") or yaml_data.get("task") or AppoConfig.model_fields["task"].default
    # A resumed run starts from the checkpoint's own config (`base`) instead of the preset.
    token = _LOWER_SOURCES.set((env, yaml_data, base if base is not None else preset_for(str(task))))
    try:
        return AppoConfig(**cli)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc)) from None
    finally:
        _LOWER_SOURCES.reset(token)


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    """APPO_ALGO__NUM_ENVS=8 -> {"algo": {"num_envs": 8}}; values parse like CLI overrides."""
    items = [
        name[len(ENV_PREFIX):].lower().replace(ENV_DELIMITER, ".") + "=" + value
        for name, value in sorted(environ.items())
        if name.startswith(ENV_PREFIX) and name not in NON_CONFIG_ENV
    ]
    return parse_overrides(items)


def _deep_merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for k, v in top.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def config_from_dict(data: dict[str, Any]) -> AppoConfig:
    """Rebuild a config saved with to_dict() (checkpoints, config.yaml); no env or presets applied."""
    try:
        return AppoConfig(**data)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc)) from None
