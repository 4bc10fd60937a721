"""CPU-node side: batched MuJoCo tasks and the rollout loop that streams to the learner."""

from common import gl

gl.guard()  # before any submodule imports MuJoCo: the physics needs no GL library, so a missing one must not stop it
