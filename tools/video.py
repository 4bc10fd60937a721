"""Offscreen rendering of one environment's MuJoCo state, written as an MP4.

MuJoCo picks its OpenGL backend once, at import, from MUJOCO_GL, and a headless
Linux machine (no X display, CPU only) has a context only through EGL: the
tools package chooses it before MuJoCo is imported (common/gl.py), and where no
GL library loads, a render fails with one line saying what to install.  imageio
with imageio-ffmpeg's bundled binary encodes the MP4, so no system ffmpeg is needed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# Imported after tools/__init__.py chose the GL backend (common/gl.py).
import mujoco
import numpy as np

from common import gl


class RenderError(RuntimeError):
    """No video can be rendered: no offscreen OpenGL context, or a task without MuJoCo state."""


def has_mujoco_state(env) -> bool:
    """Whether the env exposes its physics (model, qpos and qvel rows) for rendering and root velocities."""
    return all(hasattr(env, name) for name in ("model", "qpos", "qvel"))


class RowState:
    """One environment's state copied into its own MjData (the batch keeps no per-env MjData)."""

    def __init__(self, model: mujoco.MjModel):
        self.model = model
        self.data = mujoco.MjData(model)
        # The robot's root: the first body below the world.
        self.root_body = 1 if model.nbody > 1 else 0
        self._vel = np.zeros(6)

    def load(self, qpos: np.ndarray, qvel: np.ndarray) -> None:
        self.data.qpos[:] = qpos
        self.data.qvel[:] = qvel
        mujoco.mj_forward(self.model, self.data)

    def root_velocity(self) -> np.ndarray:
        """World-frame linear velocity [3] of the root body, at the state last loaded."""
        mujoco.mj_objectVelocity(self.model, self.data, mujoco.mjtObj.mjOBJ_BODY, self.root_body, self._vel, 0)
        return self._vel[3:].copy()


@dataclass(frozen=True)
class Markers:
    """Spheres of one radius and colour at world positions [k, 3], drawn over a frame (e.g. reference bodies)."""

    positions: np.ndarray
    radius: float = 0.04
    rgba: tuple[float, float, float, float] = (0.1, 0.9, 0.2, 0.5)  # translucent green


class FrameRenderer:
    """RGB frames of a RowState, from a camera that tracks the root body."""

    def __init__(self, state: RowState, width: int, height: int):
        model = state.model
        # The offscreen buffer bounds the frame size; raising it changes nothing but rendering.
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, height)
        if gl.render_unavailable():
            raise RenderError(gl.render_unavailable())
        try:
            self.renderer = mujoco.Renderer(model, height, width)
        except Exception as exc:  # the GL backends raise their own error types
            raise RenderError(
                f"cannot create an offscreen OpenGL context (MUJOCO_GL={os.environ.get('MUJOCO_GL', '')!r}): "
                f"{exc}; on a machine without a display set MUJOCO_GL=egl (or osmesa) before starting"
            ) from None
        self.state = state
        self.camera = mujoco.MjvCamera()
        mujoco.mjv_defaultFreeCamera(model, self.camera)
        self.camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        self.camera.trackbodyid = state.root_body
        self.camera.elevation = -20.0
        self._framed = False

    def _frame_robot(self) -> None:
        # The model's extent counts the floor; frame the robot's own bodies instead.
        m, d = self.state.model, self.state.data
        mine = m.body_rootid[m.geom_bodyid] == self.state.root_body
        reach = np.linalg.norm(d.geom_xpos[mine] - d.xpos[self.state.root_body], axis=1) + m.geom_rbound[mine]
        radius = float(reach.max()) if reach.size else float(m.stat.extent)
        self.camera.distance = max(1.0, 3.0 * radius)
        self._framed = True

    def render(self, markers: tuple[Markers, ...] = ()) -> np.ndarray:
        """The current frame, with `markers` (spheres drawn into the scene, not simulated) added."""
        if not self._framed:
            self._frame_robot()
        self.renderer.update_scene(self.state.data, camera=self.camera)
        for marker in markers:
            self._add_spheres(marker)
        return self.renderer.render()

    def _add_spheres(self, marker: Markers) -> None:
        scene = self.renderer.scene
        size = np.array([marker.radius, 0.0, 0.0])
        rgba = np.asarray(marker.rgba, np.float32)
        for pos in np.asarray(marker.positions, np.float64).reshape(-1, 3):
            if scene.ngeom >= scene.maxgeom:  # the scene's fixed geom buffer is full: draw what fits
                return
            mujoco.mjv_initGeom(scene.geoms[scene.ngeom], mujoco.mjtGeom.mjGEOM_SPHERE, size, pos,
                                np.eye(3).ravel(), rgba)
            scene.ngeom += 1

    def close(self) -> None:
        self.renderer.close()


class Mp4Writer:
    """Frames streamed to an H.264 MP4 (yuv420p, playable everywhere), not held in memory."""

    def __init__(self, path: str, fps: float):
        import imageio.v2 as imageio

        self.path = path
        self.frames = 0
        self._writer = imageio.get_writer(path, format="FFMPEG", fps=fps, codec="libx264",
                                          pixelformat="yuv420p", macro_block_size=2)

    def append(self, frame: np.ndarray) -> None:
        self._writer.append_data(frame)
        self.frames += 1

    def close(self) -> None:
        self._writer.close()


def parse_size(text: str) -> tuple[int, int]:
    """'640x480' -> (640, 480); even sizes, as H.264's 4:2:0 chroma needs."""
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"video size {text!r} is not WIDTHxHEIGHT, e.g. 640x480") from None
    if width < 16 or height < 16 or width % 2 or height % 2:
        raise ValueError(f"video size {text!r}: width and height must be even and at least 16")
    return width, height
