"""Tests of common/config.py: sources, precedence, parsing, refusals, round trip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from common.config import AppoConfig, ConfigError, config_from_dict, load_config
from common.presets import GENERIC, PRESETS

# The tracking task requires its clip; the config layer checks only that one is named.
TASK_OPTIONS = {"g1_motion_tracking": {"task_options": {"motion_file": "clip.npz"}}}
NO_PRESET = {"task": "ant_custom"}  # a task name nobody tuned: the generic preset applies


def _yaml(tmp_path: Path, data, name: str = "run.yaml") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return p


def _refused(match: str, **kwargs) -> str:
    kwargs.setdefault("environ", {})
    with pytest.raises(ConfigError, match=match) as info:
        load_config(**kwargs)
    return str(info.value)


# ---------------------------------------------------------------- defaults and presets


def test_defaults_are_reference_configuration():
    """With nothing below the CLI (an empty base) and no other source, every value is the reference one."""
    assert "ant_custom" not in PRESETS
    c = load_config(extra=NO_PRESET, environ={}, base={})
    a, p, alg, t = c.algo, c.algo.policy, c.algo.algorithm, c.training
    assert c.task == "ant_custom"
    assert (a.num_envs, a.steps_per_env, a.max_iterations, a.save_interval, a.seed) == (2048, 24, 150, 50, 1)
    assert p.actor_hidden_dims == [512, 256, 128]
    assert p.critic_hidden_dims == [512, 256, 128]
    assert p.activation == "elu"
    assert p.init_noise_std == 1.0
    assert alg.num_learning_epochs == 5
    assert alg.num_mini_batches == 4
    assert alg.clip_param == 0.2
    assert alg.gamma == 0.99
    assert alg.lam == 0.95
    assert alg.value_loss_coef == 1.0
    assert alg.entropy_coef == 0.01
    assert alg.learning_rate == 1e-3
    assert alg.max_grad_norm == 1.0
    assert alg.use_clipped_value_loss is True
    assert alg.schedule == "adaptive"
    assert alg.desired_kl == 0.01
    assert alg.kl_factor == 1.2
    assert alg.lr_factor == 1.1
    assert alg.optimizer == "adam"
    assert alg.tau == 1.0
    assert alg.target_update_freq == 1
    assert alg.rho_clip == 1.0
    assert alg.c_clip == 1.0
    assert t.replay_queue_size == 3
    assert t.ring_slots == 4


def test_defaults_match_model_defaults_without_preset():
    """With an empty base a task resolves to exactly the model's own defaults (nothing else leaks in)."""
    c = load_config(extra=NO_PRESET, environ={}, base={})
    assert c == AppoConfig(task="ant_custom")


@pytest.mark.parametrize("task", ["ant_custom", "gym:Walker2d-v5", "mypkg.bodies:make_env"])
def test_untuned_task_gets_generic_preset(task):
    """A task with no tuned preset of its own gets GENERIC's values, not the Go2-sized reference ones."""
    c = load_config(extra={"task": task}, environ={})
    generic = GENERIC["algo"]
    assert (c.algo.num_envs, c.algo.steps_per_env) == (generic["num_envs"], generic["steps_per_env"])
    assert c.algo.policy.actor_hidden_dims == generic["policy"]["actor_hidden_dims"]
    assert c.algo.algorithm.learning_rate == generic["algorithm"]["learning_rate"]
    assert c.algo.algorithm.desired_kl == generic["algorithm"]["desired_kl"] != AppoConfig().algo.algorithm.desired_kl
    assert c.algo.algorithm.use_clipped_value_loss is False
    assert c.algo.policy.init_noise_std == generic["policy"]["init_noise_std"]
    assert c.training.replay_queue_size == GENERIC["training"]["replay_queue_size"]
    assert c.algo.num_envs != AppoConfig().algo.num_envs


@pytest.mark.parametrize("task", sorted(PRESETS))
def test_preset_applies_for_its_task(task):
    """A task with a preset gets the preset's values over the defaults."""
    c = load_config(extra={"task": task, **TASK_OPTIONS.get(task, {})}, environ={})
    preset = PRESETS[task]["algo"]
    assert c.task == task
    assert c.algo.num_envs == preset["num_envs"]
    assert c.algo.steps_per_env == preset["steps_per_env"]
    assert c.algo.policy.actor_hidden_dims == preset["policy"]["actor_hidden_dims"]
    assert c.algo.algorithm.learning_rate == preset["algorithm"]["learning_rate"]
    assert c.algo.algorithm.gamma == preset["algorithm"].get("gamma", 0.99)
    # keys the preset does not name keep their defaults
    assert c.algo.algorithm.clip_param == 0.2
    assert c.training.replay_queue_size == PRESETS[task].get("training", {}).get("replay_queue_size", 3)
    assert c.training.ring_slots == 4


def test_default_task_gets_its_preset():
    """With no task given the default task is used and its preset applies."""
    c = load_config(environ={})
    assert c.task == "go2_joystick_flat"
    assert c.algo.num_envs == PRESETS["go2_joystick_flat"]["algo"]["num_envs"]


def test_preset_overridden_by_yaml(tmp_path):
    """A YAML value beats the task's preset value."""
    f = _yaml(tmp_path, {"algo": {"num_envs": 99}})
    c = load_config(extra={"task": "hopper"}, config_file=f, environ={})
    assert c.algo.num_envs == 99
    assert c.algo.steps_per_env == 32  # preset still applies to other keys


def test_preset_overridden_by_env():
    """An APPO_ environment variable beats the task's preset value."""
    c = load_config(extra={"task": "hopper"}, environ={"APPO_ALGO__NUM_ENVS": "99"})
    assert c.algo.num_envs == 99
    assert c.algo.steps_per_env == 32


def test_preset_overridden_by_cli():
    """A dotted CLI override beats the task's preset value."""
    c = load_config(extra={"task": "hopper"}, overrides=["algo.policy.actor_hidden_dims=[32]"], environ={})
    assert c.algo.policy.actor_hidden_dims == [32]
    assert c.algo.policy.critic_hidden_dims == [256, 256]


def test_task_from_yaml_selects_preset(tmp_path):
    """A task named in the YAML file selects that task's preset."""
    f = _yaml(tmp_path, {"task": "inverted_pendulum"})
    c = load_config(config_file=f, environ={})
    assert c.task == "inverted_pendulum"
    assert c.algo.num_envs == 64


def test_task_from_env_selects_preset():
    """A task named by APPO_TASK selects that task's preset."""
    c = load_config(environ={"APPO_TASK": "inverted_pendulum"})
    assert c.task == "inverted_pendulum"
    assert c.algo.num_envs == 64


def test_cli_task_override_beats_extra_and_selects_preset():
    """A dotted task= override wins over the --task flag value and its preset is the one used."""
    c = load_config(extra={"task": "ant_custom"}, overrides=["task=inverted_pendulum"], environ={})
    assert c.task == "inverted_pendulum"
    assert c.algo.num_envs == 64


# ---------------------------------------------------------------- precedence


def test_full_precedence_chain_key_by_key(tmp_path):
    """Each key takes its value from the highest source naming it: CLI > env > YAML > preset > default."""
    f = _yaml(
        tmp_path,
        {"algo": {"num_envs": 3, "steps_per_env": 30, "max_iterations": 40}},
    )
    environ = {"APPO_ALGO__NUM_ENVS": "2", "APPO_ALGO__STEPS_PER_ENV": "20"}
    c = load_config(
        overrides=["algo.num_envs=1"],
        config_file=f,
        environ=environ,
        extra={"task": "hopper"},
    )
    assert c.algo.num_envs == 1  # CLI over env, YAML, preset (256), default (2048)
    assert c.algo.steps_per_env == 20  # env over YAML, preset (32), default (24)
    assert c.algo.max_iterations == 40  # YAML over preset (500), default (150)
    assert c.algo.algorithm.learning_rate == 3e-4  # preset over default (1e-3)
    assert c.algo.algorithm.gamma == 0.99  # default


def test_nested_sources_merge_not_replace(tmp_path):
    """Sources naming different keys of one nested section merge rather than replace the section."""
    f = _yaml(tmp_path, {"algo": {"algorithm": {"gamma": 0.9}}})
    c = load_config(
        overrides=["algo.algorithm.lam=0.5"],
        config_file=f,
        environ={"APPO_ALGO__ALGORITHM__TAU": "0.5"},
        extra=NO_PRESET,
    )
    alg = c.algo.algorithm
    assert (alg.lam, alg.tau, alg.gamma) == (0.5, 0.5, 0.9)
    assert alg.clip_param == 0.2 and alg.num_learning_epochs == 5


def test_extra_ranks_with_cli():
    """Dedicated-flag values (extra) beat env, and a dotted override of the same key beats them."""
    env = {"APPO_ALGO__NUM_ENVS": "2"}
    assert load_config(extra={**NO_PRESET, "algo": {"num_envs": 7}}, environ=env).algo.num_envs == 7
    c = load_config(extra={**NO_PRESET, "algo": {"num_envs": 7}}, overrides=["algo.num_envs=1"], environ=env)
    assert c.algo.num_envs == 1


def test_later_cli_override_wins():
    """When one key is overridden twice on the CLI, the later override wins."""
    c = load_config(overrides=["algo.seed=3", "algo.seed=4"], extra=NO_PRESET, environ={})
    assert c.algo.seed == 4


# ---------------------------------------------------------------- value parsing


def test_parse_ints_and_scientific_floats():
    """Ints parse as ints and floats parse in decimal and scientific notation (1e-4)."""
    c = load_config(
        overrides=["algo.num_envs=8", "algo.algorithm.learning_rate=1e-4", "algo.algorithm.desired_kl=2.5e-3",
                   "algo.algorithm.gamma=0.98"],
        extra=NO_PRESET,
        environ={"APPO_ALGO__ALGORITHM__ENTROPY_COEF": "1e-5"},
    )
    assert c.algo.num_envs == 8 and isinstance(c.algo.num_envs, int)
    assert c.algo.algorithm.learning_rate == pytest.approx(1e-4)
    assert c.algo.algorithm.desired_kl == pytest.approx(2.5e-3)
    assert c.algo.algorithm.gamma == pytest.approx(0.98)
    assert c.algo.algorithm.entropy_coef == pytest.approx(1e-5)


def test_parse_scientific_float_in_yaml(tmp_path):
    """A YAML file's 1e-4 (a string to PyYAML) still becomes the float 1e-4."""
    f = _yaml(tmp_path, "algo:\n  algorithm:\n    learning_rate: 1e-4\n")
    c = load_config(config_file=f, extra=NO_PRESET, environ={})
    assert c.algo.algorithm.learning_rate == pytest.approx(1e-4)


@pytest.mark.parametrize("text,expected", [("true", True), ("false", False), ("True", True), ("False", False)])
def test_parse_booleans(text, expected):
    """Boolean words parse to booleans from both CLI and env."""
    c = load_config(overrides=[f"algo.algorithm.use_clipped_value_loss={text}"], extra=NO_PRESET,
                    environ={"APPO_TRAINING__CONSOLE": text})
    assert c.algo.algorithm.use_clipped_value_loss is expected
    assert c.training.console is expected


def test_parse_lists():
    """Bracketed lists parse to lists of ints from both CLI and env."""
    c = load_config(overrides=["algo.policy.actor_hidden_dims=[64,64]"], extra=NO_PRESET,
                    environ={"APPO_ALGO__POLICY__CRITIC_HIDDEN_DIMS": "[32, 16, 8]"})
    assert c.algo.policy.actor_hidden_dims == [64, 64]
    assert c.algo.policy.critic_hidden_dims == [32, 16, 8]


def test_parse_strings():
    """Plain strings parse as strings, including device names with an index."""
    c = load_config(overrides=["training.device=cuda:1", "training.log_dir=/tmp/runs", "transport.kind=zmq",
                               "algo.policy.activation=tanh", "algo.algorithm.optimizer=sgd"],
                    extra=NO_PRESET, environ={"APPO_TRAINING__RUN_NAME": "my_run"})
    assert c.training.device == "cuda:1"
    assert c.training.log_dir == "/tmp/runs"
    assert c.transport.kind == "zmq"
    assert c.algo.policy.activation == "tanh"
    assert c.algo.algorithm.optimizer == "sgd"
    assert c.training.run_name == "my_run"


@pytest.mark.parametrize("text", ["2024", "007", "no", "null", "2024_06_01", "1:30", "a: b"])
def test_string_fields_keep_number_like_text(text):
    """A string field keeps CLI/env text that YAML would read as a number, bool or null, verbatim."""
    assert load_config(overrides=[f"training.run_name={text}"], extra=NO_PRESET,
                       environ={}).training.run_name == text
    assert load_config(extra=NO_PRESET, environ={"APPO_TRAINING__RUN_NAME": text}).training.run_name == text


def test_empty_override_value_is_empty_string():
    """key= with nothing after it sets a string field to the empty string."""
    c = load_config(overrides=["training.run_name="], extra=NO_PRESET, environ={"APPO_TRAINING__RUN_NAME": "x"})
    assert c.training.run_name == ""


# ---------------------------------------------------------------- refusals


def test_refuse_unknown_cli_key_with_hint():
    """An unknown CLI key is refused by name, with a did-you-mean hint for a near miss."""
    msg = _refused("algo.num_env", overrides=["algo.num_env=8"], extra=NO_PRESET)
    assert "unknown key" in msg
    assert "did you mean algo.num_envs" in msg


def test_refuse_unknown_top_level_cli_key():
    """An unknown top-level CLI key is refused by name."""
    msg = _refused("bogus", overrides=["bogus=1"], extra=NO_PRESET)
    assert "unknown key" in msg


def test_refuse_unknown_yaml_key(tmp_path):
    """An unknown key in the YAML file is refused by name."""
    f = _yaml(tmp_path, {"algo": {"num_envz": 8}})
    msg = _refused(r"algo\.num_envz", config_file=f, extra=NO_PRESET)
    assert "unknown key" in msg


def test_refuse_unknown_nested_yaml_key(tmp_path):
    """An unknown key deep in the YAML file is refused with its full dotted path."""
    f = _yaml(tmp_path, {"algo": {"algorithm": {"clip_parm": 0.1}}})
    msg = _refused(r"algo\.algorithm\.clip_parm", config_file=f, extra=NO_PRESET)
    assert "unknown key" in msg
    assert "did you mean algo.algorithm.clip_param" in msg


def test_refuse_unknown_env_var():
    """An APPO_ env var that names no config key is refused by name, with a hint."""
    msg = _refused("APPO_ALGO__NUM_ENV", environ={"APPO_ALGO__NUM_ENV": "8"}, extra=NO_PRESET)
    assert "APPO_ALGO__NUM_ENVS" in msg


def test_non_config_env_vars_allowed():
    """APPO_LOG_FORMAT/APPO_LOG_LEVEL and non-APPO variables are accepted and do not change the config."""
    c = load_config(extra=NO_PRESET,
                    environ={"APPO_LOG_FORMAT": "json", "APPO_LOG_LEVEL": "DEBUG", "HOME": "/x", "NUM_ENVS": "3"})
    assert c == load_config(extra=NO_PRESET, environ={})


def test_refuse_wrong_type():
    """A value of the wrong type is refused, naming the key and the value given."""
    msg = _refused(r"algo\.num_envs", overrides=["algo.num_envs=abc"], extra=NO_PRESET)
    assert "'abc'" in msg


def test_refuse_wrong_type_in_yaml_and_env(tmp_path):
    """Wrong types are refused by key from the YAML file and from the environment too."""
    f = _yaml(tmp_path, {"algo": {"policy": {"actor_hidden_dims": "wide"}}})
    _refused(r"algo\.policy\.actor_hidden_dims", config_file=f, extra=NO_PRESET)
    _refused(r"training\.ring_slots", environ={"APPO_TRAINING__RING_SLOTS": "many"}, extra=NO_PRESET)


@pytest.mark.parametrize(
    "override,key",
    [
        ("algo.num_envs=0", r"algo\.num_envs"),
        ("algo.algorithm.clip_param=1.5", r"algo\.algorithm\.clip_param"),
        ("algo.algorithm.gamma=0", r"algo\.algorithm\.gamma"),
        ("training.ring_slots=1", r"training\.ring_slots"),
        ("algo.policy.actor_hidden_dims=[64,0]", r"algo\.policy\.actor_hidden_dims"),
        ("algo.policy.actor_hidden_dims=[]", r"algo\.policy\.actor_hidden_dims"),
        ("training.collector_nice=20", r"training\.collector_nice"),
        ("training.collector_nice=-2", r"training\.collector_nice"),
        ("algo.algorithm.lam=1.5", r"algo\.algorithm\.lam"),
        ("algo.algorithm.kl_factor=1.0", r"algo\.algorithm\.kl_factor"),
        ("algo.algorithm.lr_min=0", r"algo\.algorithm\.lr_min"),
    ],
)
def test_refuse_out_of_range(override, key):
    """An out-of-range value is refused, naming the key."""
    _refused(key, overrides=[override], extra=NO_PRESET)


def test_refuse_lr_bounds_in_the_wrong_order():
    """lr_min above lr_max is refused, naming both values."""
    msg = _refused(r"algo\.algorithm", overrides=["algo.algorithm.lr_min=1e-2", "algo.algorithm.lr_max=1e-3"],
                   extra=NO_PRESET)
    assert "lr_min (0.01) must not exceed lr_max (0.001)" in msg


def test_refuse_bad_literal_names_allowed_values():
    """A value outside a Literal's choices is refused, naming the key and the allowed values."""
    msg = _refused(r"algo\.algorithm\.optimizer", overrides=["algo.algorithm.optimizer=rmsprop"], extra=NO_PRESET)
    for allowed in ("adam", "adamw", "sgd"):
        assert f"'{allowed}'" in msg
    assert "rmsprop" in msg


def test_precision_defaults_to_fp32_and_refuses_others_by_name():
    """training.precision is fp32 unless set or preset; auto and bf16 are accepted; others are refused by name."""
    assert load_config(extra=NO_PRESET, environ={}).training.precision == "fp32"
    assert load_config(["training.precision=auto"], extra=NO_PRESET, environ={}).training.precision == "auto"
    for task, expected in (("go2_joystick_flat", "auto"), ("half_cheetah", "auto"), ("inverted_pendulum", "fp32")):
        assert load_config(extra={"task": task}, environ={}).training.precision == expected, task
    assert load_config(["training.precision=bf16"], extra=NO_PRESET, environ={}).training.precision == "bf16"
    assert load_config(["training.precision=fp32"], extra=NO_PRESET, environ={}).training.precision == "fp32"
    msg = _refused(r"training\.precision", overrides=["training.precision=fp16"], extra=NO_PRESET)
    assert "'fp32'" in msg and "'bf16'" in msg and "fp16" in msg
    _refused(r"training\.precision", environ={"APPO_TRAINING__PRECISION": "half"}, extra=NO_PRESET)


@pytest.mark.parametrize("device", ["gpu", "cpu:1", "cuda:x", "tpu"])
def test_refuse_bad_device(device):
    """A device string that is not auto/cpu/cuda/cuda:N/mps is refused, naming the key."""
    _refused(r"training\.device", overrides=[f"training.device={device}"], extra=NO_PRESET)
    _refused(r"training\.collector_device", overrides=[f"training.collector_device={device}"], extra=NO_PRESET)


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:0", "cuda:3", "mps"])
def test_accept_good_device(device):
    """Each allowed device form is accepted."""
    assert load_config(overrides=[f"training.device={device}"], extra=NO_PRESET, environ={}).training.device == device


@pytest.mark.parametrize("item", ["algo.num_envs", "=3", "algo..num_envs=3", ".num_envs=3"])
def test_refuse_malformed_override(item):
    """An override not of the form section.key=value is refused, quoting it."""
    msg = _refused("section.key=value", overrides=[item], extra=NO_PRESET)
    assert repr(item) in msg


def test_refuse_missing_yaml(tmp_path):
    """A config file that does not exist is refused, naming the path."""
    missing = tmp_path / "nope.yaml"
    msg = _refused("does not exist", config_file=missing, extra=NO_PRESET)
    assert str(missing) in msg


@pytest.mark.parametrize("text", ["- 1\n- 2\n", "just a string\n", "42\n"])
def test_refuse_yaml_not_mapping(tmp_path, text):
    """A YAML file whose top level is not a mapping is refused, naming the path."""
    f = _yaml(tmp_path, text)
    msg = _refused("mapping", config_file=f, extra=NO_PRESET)
    assert str(f) in msg


def test_refuse_yaml_syntax_error(tmp_path):
    """A YAML file with a syntax error is refused, naming the path."""
    f = _yaml(tmp_path, "algo: {num_envs: 8\n  bad: [\n")
    msg = _refused("not valid YAML", config_file=f, extra=NO_PRESET)
    assert str(f) in msg


def test_empty_yaml_is_no_values(tmp_path):
    """An empty YAML file contributes nothing."""
    f = _yaml(tmp_path, "")
    assert load_config(config_file=f, extra=NO_PRESET, environ={}, base={}) == AppoConfig(task="ant_custom")


def test_config_error_is_value_error():
    """ConfigError is a ValueError, so callers catching ValueError see it."""
    with pytest.raises(ValueError):
        load_config(overrides=["algo.num_envs=0"], extra=NO_PRESET, environ={})


def test_all_problems_reported_together():
    """Several bad keys are all named in one error, not just the first."""
    msg = _refused("algo.num_envs", overrides=["algo.num_envs=0", "algo.algorithm.gamma=2"], extra=NO_PRESET)
    assert "algo.algorithm.gamma" in msg


# ---------------------------------------------------------------- round trip


def test_round_trip_through_yaml(tmp_path):
    """A resolved config survives to_yaml -> yaml.safe_load -> config_from_dict unchanged."""
    f = _yaml(tmp_path, {"algo": {"max_iterations": 7}})
    c = load_config(
        overrides=["algo.algorithm.learning_rate=1e-4", "training.run_name=2024", "training.device=cuda:1",
                   "algo.policy.actor_hidden_dims=[64,32]"],
        config_file=f,
        environ={"APPO_ALGO__ALGORITHM__OPTIMIZER": "adamw"},
        extra={"task": "hopper"},
    )
    back = config_from_dict(yaml.safe_load(c.to_yaml()))
    assert back == c
    assert back.to_dict() == c.to_dict()


def test_config_from_dict_applies_no_preset_or_env():
    """config_from_dict rebuilds only what it is given: no preset, no environment."""
    c = load_config(extra=NO_PRESET, environ={}, base={})
    d = c.to_dict()
    d["task"] = "hopper"  # has a preset, but the saved values must be kept
    back = config_from_dict(d)
    assert back.algo.num_envs == 2048
    assert back.task == "hopper"


def test_config_from_dict_refuses_unknown_key():
    """config_from_dict refuses an unknown key by name."""
    d = load_config(extra=NO_PRESET, environ={}).to_dict()
    d["algo"]["bogus"] = 1
    with pytest.raises(ConfigError, match=r"algo\.bogus"):
        config_from_dict(d)


# ---------------------------------------------------------------- environment isolation


def test_env_read_only_from_environ_argument(monkeypatch):
    """With environ={} a conflicting real os.environ APPO_ value is ignored."""
    monkeypatch.setenv("APPO_ALGO__NUM_ENVS", "7")
    monkeypatch.setenv("APPO_ALGO__NUM_ENVZ", "7")  # would be refused if read
    c = load_config(extra=NO_PRESET, environ={})
    assert c.algo.num_envs == GENERIC["algo"]["num_envs"]
    c = load_config(extra=NO_PRESET, environ={"APPO_ALGO__NUM_ENVS": "5"})
    assert c.algo.num_envs == 5


def test_environ_none_reads_os_environ(monkeypatch):
    """With environ left out, the real os.environ is the environment source."""
    for name in [n for n in os.environ if n.startswith("APPO_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("APPO_ALGO__NUM_ENVS", "7")
    assert load_config(extra=NO_PRESET).algo.num_envs == 7


def test_load_config_leaves_os_environ_unchanged(monkeypatch, tmp_path):
    """load_config neither adds, removes nor changes os.environ entries."""
    monkeypatch.setenv("APPO_ALGO__SEED", "9")
    before = dict(os.environ)
    f = _yaml(tmp_path, {"algo": {"num_envs": 3}})
    load_config(overrides=["algo.steps_per_env=5"], config_file=f, extra={"task": "hopper"},
                environ={"APPO_ALGO__MAX_ITERATIONS": "4"})
    load_config(extra=NO_PRESET, environ={"APPO_ALGO__NUM_ENVS": "5"})
    with pytest.raises(ConfigError):
        load_config(overrides=["algo.num_envs=0"], extra=NO_PRESET, environ={"APPO_TASK": "hopper"})
    assert dict(os.environ) == before


def test_environ_argument_not_mutated():
    """The environ dict passed in is left as it was."""
    environ = {"APPO_ALGO__NUM_ENVS": "5", "APPO_LOG_LEVEL": "INFO"}
    snapshot = dict(environ)
    load_config(extra=NO_PRESET, environ=environ)
    assert environ == snapshot


def test_sources_do_not_leak_between_calls(tmp_path):
    """One call's YAML, env and preset values do not leak into the next call or into config_from_dict."""
    f = _yaml(tmp_path, {"algo": {"max_iterations": 7}})
    load_config(config_file=f, extra={"task": "hopper"}, environ={"APPO_ALGO__SEED": "9"})
    with pytest.raises(ConfigError):
        load_config(overrides=["algo.num_envs=0"], config_file=f, extra={"task": "hopper"}, environ={})
    assert load_config(extra=NO_PRESET, environ={}, base={}) == AppoConfig(task="ant_custom")
    assert config_from_dict({"task": "hopper"}).algo.num_envs == 2048


def test_half_cheetah_preset_does_not_follow_generic():
    """half_cheetah keeps its own tuning (adaptive lr, std 0.5, 2 epochs, gamma 0.98), whatever GENERIC holds."""
    c = load_config(extra={"task": "half_cheetah"}, environ={})
    alg = c.algo.algorithm
    assert (alg.schedule, alg.desired_kl, alg.num_learning_epochs, alg.gamma) == ("adaptive", 0.02, 2, 0.98)
    assert (c.algo.policy.init_noise_std, c.algo.policy.activation) == (0.5, "relu")
    assert c.training.precision == "auto"


def test_g1_presets_keep_the_reference_networks_and_take_the_measured_update():
    """Both G1 presets: 128 envs, std 0.5, 2 epochs, no entropy bonus, the reference's KL band and clipping; the walk's
    symmetry augmentation and mirror loss."""
    walk = load_config(extra={"task": "g1_velocity_flat"}, environ={})
    track = load_config(extra={"task": "g1_motion_tracking", **TASK_OPTIONS["g1_motion_tracking"]}, environ={})
    assert walk.algo.num_envs == track.algo.num_envs == 128
    assert walk.algo.max_iterations * walk.algo.num_envs == 30000 * 512  # the env steps of the old budget
    assert walk.algo.policy.init_noise_std == track.algo.policy.init_noise_std == 0.5
    for c in (walk, track):
        alg = c.algo.algorithm
        assert c.algo.policy.actor_hidden_dims == c.algo.policy.critic_hidden_dims == [512, 256, 128]
        assert c.algo.policy.activation == "elu"
        assert (alg.learning_rate, alg.schedule, alg.desired_kl) == (1e-3, "adaptive", 0.01)
        assert (alg.num_learning_epochs, alg.entropy_coef) == (2, 0.0)
        assert (alg.kl_factor, alg.lr_factor, alg.grad_clip) == (2.0, 1.5, "per_network")
        assert c.algo.normalizer_warmup is True
        assert alg.lam == 0.95
        assert c.algo.steps_per_env == 24
        assert c.training.replay_queue_size == 1
    # The walker trains on mirrored batches too; tracking has no mirror map.
    assert (walk.algo.algorithm.symmetry, track.algo.algorithm.symmetry) == (True, False)
    assert (walk.algo.algorithm.mirror_loss_coef, track.algo.algorithm.mirror_loss_coef) == (10.0, 0.0)


def test_seed_walk_preset_is_the_symmetric_humanoid_preset_at_the_seeds_budget():
    """g1_walk_flat: g1_velocity_flat's preset (symmetry and mirror loss included), for 24.6 M env steps (the seed's
    500 x 2,048 x 24), with more initial noise on the stepping joints and twice the KL target."""
    walk = load_config(extra={"task": "g1_walk_flat"}, environ={})
    velocity = load_config(extra={"task": "g1_velocity_flat"}, environ={})
    assert walk.algo.max_iterations * walk.algo.num_envs * walk.algo.steps_per_env == 500 * 2048 * 24
    assert (walk.algo.algorithm.desired_kl, velocity.algo.algorithm.desired_kl) == (0.02, 0.01)
    differs = {"max_iterations": True, "policy": {"init_noise_std_by_action"}, "algorithm": {"desired_kl"}}
    assert walk.algo.model_dump(exclude=differs) == velocity.algo.model_dump(exclude=differs)
    assert velocity.algo.policy.init_noise_std_by_action == {}
    assert (walk.algo.algorithm.symmetry, walk.algo.algorithm.mirror_loss_coef) == (True, 10.0)
    assert walk.training.replay_queue_size == 1 and walk.training.precision == "auto"


def test_go2_preset_takes_the_reference_update_rule_and_1024_envs():
    """The Go2 preset: rsl_rl's rate rule, per-network clips, normaliser warm-up, 1024 envs at the 2048-env budget."""
    go2 = load_config(extra={"task": "go2_joystick_flat"}, environ={}).algo
    assert (go2.num_envs, go2.steps_per_env) == (1024, 24)
    assert go2.max_iterations * go2.num_envs == 200 * 2048  # the env steps of the 2048-env preset
    assert (go2.algorithm.kl_factor, go2.algorithm.lr_factor, go2.algorithm.grad_clip) == (2.0, 1.5, "per_network")
    assert go2.normalizer_warmup is True
    # tasks nobody tuned keep the defaults
    generic = load_config(extra=NO_PRESET, environ={})
    assert (generic.algo.algorithm.kl_factor, generic.algo.algorithm.grad_clip) == (1.2, "joint")
    assert generic.algo.normalizer_warmup is False


@pytest.mark.parametrize("task", ["ant_custom", "hopper", "half_cheetah", "inverted_pendulum"])
def test_presets_validated_with_plain_vtrace_keep_lambda_one(task):
    """Tasks tuned before V-trace had lambda keep lam 1.0; the Go2 and G1 presets take the default 0.95."""
    assert load_config(extra={"task": task}, environ={}).algo.algorithm.lam == 1.0
    assert load_config(extra={"task": "go2_joystick_flat"}, environ={}).algo.algorithm.lam == 0.95


def test_init_noise_std_by_action_parses_and_survives_the_saved_config():
    """A YAML mapping on the command line becomes {index: std}, and config.yaml reads back the same."""
    c = load_config(["algo.policy.init_noise_std_by_action={0: 1.0, 6: 1.5}"], extra={"task": "g1_velocity_flat"},
                    environ={})
    assert c.algo.policy.init_noise_std_by_action == {0: 1.0, 6: 1.5}
    assert config_from_dict(yaml.safe_load(c.to_yaml())) == c


def test_init_noise_std_by_action_on_the_command_line_merges_over_the_presets_entries():
    """An override changes the indices it names and keeps the preset's others, as nested sections merge."""
    preset = load_config(extra={"task": "g1_walk_flat"}, environ={}).algo.policy.init_noise_std_by_action
    c = load_config(["algo.policy.init_noise_std_by_action={0: 2.0, 2: 0.8}"], extra={"task": "g1_walk_flat"},
                    environ={})
    assert c.algo.policy.init_noise_std_by_action == {**preset, 0: 2.0, 2: 0.8}


@pytest.mark.parametrize("value, message", [
    ("{29: 1.0}", "index 29 is past task g1_walk_flat's 29 actions"),
    ("{0: 0}", "stds finite and > 0"),
    ("{-1: 1.0}", "indices must be >= 0"),
    ("{0: .nan}", "stds finite and > 0"),
    ("[1.0, 0.5]", "valid dictionary"),
])
def test_init_noise_std_by_action_refuses_bad_entries(value, message):
    """A bad index or std is refused with the option named, before anything trains."""
    with pytest.raises(ConfigError, match="init_noise_std_by_action") as err:
        load_config([f"algo.policy.init_noise_std_by_action={value}"], extra={"task": "g1_walk_flat"}, environ={})
    assert message in str(err.value)


def test_seed_walk_preset_widens_the_noise_of_the_sagittal_leg_joints_by_name():
    """The walker's per-action std picks out hip_pitch, knee and ankle_pitch of both legs in the model's actuator
    order, mirror-symmetric, and leaves every other joint at init_noise_std."""
    from collector.envs.g1.walk_model import build_model

    model = build_model()
    actuated = [model.joint(model.actuator(i).trnid[0]).name for i in range(model.nu)]
    walk = load_config(extra={"task": "g1_walk_flat"}, environ={}).algo.policy
    wide = {actuated[i] for i, std in walk.init_noise_std_by_action.items() if std > walk.init_noise_std}
    stepping = ("hip_pitch", "knee", "ankle_pitch")
    assert wide == {f"{side}_{joint}_joint" for side in ("left", "right") for joint in stepping}
    assert len(walk.init_noise_std_by_action) == 6 and walk.init_noise_std == 0.5
