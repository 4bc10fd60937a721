"""User tools around a trained policy: evaluation, videos, ONNX export, learning-curve plots."""

from common import gl

# Before any submodule imports MuJoCo: EGL on headless Linux where it loads, for this process alone (only
# tools render), and a missing GL library never stops what does not draw (figures, exports, clip checks).
with gl.rendering_backend():
    import mujoco  # noqa: F401 - MuJoCo fixes its GL backend when it is first imported
