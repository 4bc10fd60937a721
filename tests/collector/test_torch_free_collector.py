"""appo-collector runs where torch cannot be imported: NumPy inference from the published weights, real rollouts."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import torch

from common.config import load_config
from common.policy import ActorCritic, flat_weights
from common.rollout_spec import RolloutSpec
from common.task_spec import task_spec
from common.transport.shm import LearnerShm
from common.weight_layout import layout_for

TASK, N, T, VERSION, ROLLOUTS = "inverted_pendulum", 4, 16, 3, 3

# appo-collector's main() in an interpreter where every import of torch fails, as in an image without it.
# Afterwards it reports which modules tried to import torch (attempts that caught the error included)
# and whether torch got loaded anyway.
NO_TORCH_COLLECTOR = """
import sys

class NoTorch:
    importers = set()

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            frame = sys._getframe(1)
            while frame is not None and frame.f_globals.get("__name__", "").startswith("importlib"):
                frame = frame.f_back  # out of the import machinery, to the module whose code imports torch
            self.importers.add(frame.f_globals.get("__name__") if frame is not None else "?")
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, NoTorch())
from collector.main import main

code = main(sys.argv[1:])
print(f"TORCH_IMPORTERS={','.join(sorted(NoTorch.importers))} TORCH_LOADED={'torch' in sys.modules}", flush=True)
sys.exit(code)
"""


def _collector_without_torch(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", NO_TORCH_COLLECTOR, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _published_policy(cfg, spec) -> ActorCritic:
    """The learner's policy: initial weights with non-trivial normaliser statistics and noise."""
    torch.manual_seed(0)
    policy = ActorCritic.from_config(cfg, spec)
    with torch.no_grad():
        policy.obs_normalizer.update(torch.randn(500, spec.obs_dim) * 0.3 + 0.1)
        policy.critic_normalizer.update(torch.randn(500, spec.critic_dim) * 0.3)
        policy.log_std.fill_(-0.5)
    return policy


def test_collector_without_torch_sends_rollouts_of_the_published_policy(shm_root):
    """With torch unimportable, appo-collector takes the weights, fills real rollouts and sends them until the
    learner stops it; their log-probs are the published policy's density of the actions taken; only the
    backend probe tried to import torch, and torch is not loaded."""
    cfg = load_config(extra={"task": TASK, "algo": {"num_envs": N, "steps_per_env": T}}, environ={})
    spec = task_spec(TASK)
    rollout_spec = RolloutSpec.for_task(spec, N, T)
    policy = _published_policy(cfg, spec)
    learner = LearnerShm(shm_root, "torchfree", rollout_spec, num_weights=layout_for(cfg, spec).size)
    proc = None
    try:
        learner.publish_weights(VERSION, flat_weights(policy))
        proc = _collector_without_torch("--task", TASK, "--shm-dir", str(learner.run_dir), "--num-envs", str(N),
                                        "--threads", "1", f"algo.steps_per_env={T}")
        received = []
        deadline = time.monotonic() + 60
        while len(received) < ROLLOUTS and time.monotonic() < deadline and proc.poll() is None:
            for arrival in learner.poll(0.2):
                received.append((arrival.policy_version, {k: v.copy() for k, v in arrival.arrays.items()}))
                arrival.release()
        learner.request_stop()  # the end of a run: the collector exits 0 at its next check
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        learner.close()
    assert proc.returncode == 0, out
    assert len(received) >= ROLLOUTS, out
    assert "TORCH_IMPORTERS=collector.inference TORCH_LOADED=False" in out, out
    assert "numpy" in out  # the start-up log names the inference backend
    for version, arrays in received:
        assert version == VERSION
        for name, shape in rollout_spec.shapes().items():
            assert arrays[name].shape == shape, name
            assert np.isfinite(arrays[name]).all(), name
        obs = torch.from_numpy(arrays["obs"].reshape(-1, spec.obs_dim))
        actions = torch.from_numpy(arrays["actions"].reshape(-1, spec.act_dim))
        with torch.no_grad():
            density = policy.distribution(obs).log_prob(actions).sum(-1).reshape(N, T)
        np.testing.assert_allclose(arrays["log_probs"], density.numpy(), rtol=1e-5, atol=1e-4)
        assert arrays["actions"].std() > 0.1  # sampled, not the means


def test_collector_told_to_use_torch_without_it_exits_2(shm_root):
    """training.collector_inference=torch where torch is missing is refused at start, with the reason."""
    proc = _collector_without_torch("--task", TASK, "--shm-dir", str(shm_root / "none"),
                                    "training.collector_inference=torch")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out
    assert "torch cannot be imported" in out
