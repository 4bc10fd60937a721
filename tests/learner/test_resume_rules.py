"""Resume rules: a changed task or network shape is refused by name; a new learning rate replaces the adapted one."""

import pytest

from common.config import load_config
from learner.resume import ResumeError, check_compatible, learning_rate_override

BASE = ["algo.policy.actor_hidden_dims=[32,32]", "algo.algorithm.learning_rate=0.001"]


def _cfg(*extra, task="hopper"):
    return load_config([*BASE, *extra], extra={"task": task}, environ={})


def test_same_shapes_and_safe_overrides_are_accepted():
    """max_iterations, save_interval and the learning rate may change on resume."""
    saved = _cfg().to_dict()
    check_compatible(saved, _cfg("algo.max_iterations=999", "algo.save_interval=3",
                                 "algo.algorithm.learning_rate=0.0005"))


def test_learner_arithmetic_may_change_on_resume():
    """training.precision and training.compile may change: the saved weights are float32 either way."""
    check_compatible(_cfg().to_dict(), _cfg("training.precision=bf16", "training.compile=true"))
    check_compatible(_cfg("training.precision=bf16").to_dict(), _cfg())


@pytest.mark.parametrize("change, key", [
    (("algo.policy.actor_hidden_dims=[64,32]",), "algo.policy"),
    (("algo.policy.activation=tanh",), "algo.policy"),
    (("algo.empirical_normalization=false",), "algo.empirical_normalization"),
])
def test_network_changes_are_refused_by_name(change, key):
    """Another network shape, activation or normalisation cannot load the saved weights: refused, key named."""
    with pytest.raises(ResumeError, match=key):
        check_compatible(_cfg().to_dict(), _cfg(*change))


def test_another_task_is_refused():
    """A checkpoint of one task never continues as another."""
    with pytest.raises(ResumeError, match="task"):
        check_compatible(_cfg(task="hopper").to_dict(), _cfg(task="ant"))


def test_learning_rate_given_now_overrides_only_when_changed():
    """The adapted learning rate is kept unless the configured one was changed for this run."""
    saved = _cfg().to_dict()
    assert learning_rate_override(saved, _cfg()) is None
    assert learning_rate_override(saved, _cfg("algo.algorithm.learning_rate=0.0002")) == 0.0002
