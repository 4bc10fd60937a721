"""The torch-free weight layout is ActorCritic's flat weight vector, tensor by tensor."""

from __future__ import annotations

from typing import get_args

import numpy as np
import pytest
import torch

from common.config import PolicyConfig, load_config
from common.policy import ActorCritic, flat_weights, flat_weights_size
from common.task_spec import task_spec
from common.weight_layout import layout_for, weight_layout

ACTIVATIONS = get_args(PolicyConfig.model_fields["activation"].annotation)


@pytest.mark.parametrize("actor,critic", [([32, 16], [8]), ([4], [64, 32, 16]), ([7, 7, 7, 7], [3])])
@pytest.mark.parametrize("normalize", [True, False])
def test_layout_names_and_shapes_are_the_state_dicts(actor, critic, normalize):
    """Every (name, shape) in order, and the size, equal ActorCritic's state_dict and flat_weights_size."""
    cfg = PolicyConfig(actor_hidden_dims=actor, critic_hidden_dims=critic)
    model = ActorCritic(5, 9, 3, cfg, normalize)
    layout = weight_layout(5, 9, 3, cfg)
    assert layout.entries == tuple((k, tuple(t.shape)) for k, t in model.state_dict().items())
    assert layout.size == flat_weights_size(model)


def test_split_reads_each_tensor_of_the_flat_vector():
    """split() gives every tensor's values of flat_weights, in place (views), and the actor's linear layers."""
    torch.manual_seed(0)
    cfg = PolicyConfig(actor_hidden_dims=[6, 4], critic_hidden_dims=[5])
    model = ActorCritic(3, 4, 2, cfg, normalize=True)
    model.obs_normalizer.update(torch.randn(50, 3) + 2)
    flat = flat_weights(model)
    layout = weight_layout(3, 4, 2, cfg)
    tensors = layout.split(flat)
    for name, t in model.state_dict().items():
        np.testing.assert_array_equal(tensors[name], t.numpy().astype(np.float32), err_msg=name)
        assert np.shares_memory(tensors[name], flat)
    layers = layout.linear_layers(tensors, "actor")
    assert [w.shape for w, _ in layers] == [(6, 3), (4, 6), (2, 4)]
    np.testing.assert_array_equal(layers[-1][1], model.actor[4].bias.detach().numpy())
    assert [w.shape for w, _ in layout.linear_layers(tensors, "critic")] == [(5, 4), (1, 5)]


def test_wrong_size_vector_is_refused():
    """A vector of another network's size is refused with both sizes named."""
    layout = weight_layout(3, 4, 2, PolicyConfig(actor_hidden_dims=[6], critic_hidden_dims=[5]))
    with pytest.raises(ValueError, match=rf"\({layout.size},\)"):
        layout.split(np.zeros(layout.size + 1, np.float32))


@pytest.mark.parametrize("task", ["go2_joystick_flat", "half_cheetah", "inverted_pendulum"])
def test_layout_for_a_task_preset_sizes_the_learners_network(task):
    """layout_for(cfg, task) has the size of the network the learner builds from the same config."""
    cfg = load_config(extra={"task": task}, environ={})
    spec = task_spec(task)
    assert layout_for(cfg, spec).size == flat_weights_size(ActorCritic.from_config(cfg, spec))


def test_every_configurable_activation_gives_the_same_layout():
    """Activations have no parameters: the layout depends on the widths only."""
    layouts = {weight_layout(5, 5, 2, PolicyConfig(activation=a)) for a in ACTIVATIONS}
    assert len(layouts) == 1 and len(ACTIVATIONS) == 5
