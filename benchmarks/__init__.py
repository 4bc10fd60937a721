"""Measurements: appo-bench and its parts (physics, update, ingest), and the soak run."""

from common import gl

gl.guard()  # before any submodule imports MuJoCo: measuring needs no GL library, so a missing one must not stop it
