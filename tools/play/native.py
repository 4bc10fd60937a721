"""appo-play --viewer native: MuJoCo's own viewer window on a desktop, showing the followed env.

The same keys as the seed's play_interactive: space pause, N single step, +/- speed, Backspace reset;
the arrows drive (up/down vx, left/right yaw rate) and Enter stops, for velocity tasks.
"""

from __future__ import annotations

import os
import sys
import threading

import mujoco
import numpy as np

from common.logging import get_logger
from tools.play.budget import CpuBudget
from tools.play.session import Pacer, PlaySession

log = get_logger("play")

KEY_ENTER, KEY_KP_ENTER, KEY_BACKSPACE = 257, 335, 259
KEY_RIGHT, KEY_LEFT, KEY_DOWN, KEY_UP = 262, 263, 264, 265
NUDGE = np.array([0.1, 0.1, 0.2])
SPEED_STEP = 1.25


class NoDisplay(RuntimeError):
    """MuJoCo's viewer needs a window system, and this process has none."""


def check_display() -> None:
    """Fail early, naming the alternative, where no window can open (a headless node, an ssh session)."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise NoDisplay("--viewer native needs a display (DISPLAY and WAYLAND_DISPLAY are unset): use --viewer web "
                        "and open the page from any machine that can reach the port")


class NativeViewer:
    """A passive mujoco.viewer window on the followed env's state; keys steer the session."""

    def __init__(self, session: PlaySession, budget: CpuBudget | None = None):
        check_display()
        self.session = session
        self.budget = budget
        env = session.env
        self.data = mujoco.MjData(env.model)
        self.command = np.zeros(3)
        try:
            from mujoco import viewer

            self.handle = viewer.launch_passive(env.model, self.data, key_callback=self.on_key)
        except Exception as exc:  # GLFW raises its own types where no window can open
            raise NoDisplay(f"MuJoCo's viewer cannot open a window ({exc}): use --viewer web") from None
        self.pacer = Pacer(env.spec.control_dt)

    def on_key(self, keycode: int) -> None:
        s = self.session
        if keycode == ord(" "):
            with s.lock:
                s.paused = not s.paused
            self.pacer.resync()
        elif keycode in (ord("N"), ord("n")):
            with s.lock:
                s.paused = True
            s.request_step()
        elif keycode in (ord("+"), ord("=")):
            with s.lock:
                s.speed = min(4.0, s.speed * SPEED_STEP)
        elif keycode in (ord("-"), ord("_")):
            with s.lock:
                s.speed = max(0.25, s.speed / SPEED_STEP)
        elif keycode == KEY_BACKSPACE:
            s.request_reset()
        elif s.command_box is not None and keycode in (KEY_UP, KEY_DOWN, KEY_LEFT, KEY_RIGHT, KEY_ENTER, KEY_KP_ENTER):
            axis, sign = {KEY_UP: (0, 1), KEY_DOWN: (0, -1), KEY_LEFT: (2, 1), KEY_RIGHT: (2, -1)}.get(keycode, (0, 0))
            self.command = np.zeros(3) if sign == 0 else self.command + sign * NUDGE[axis] * np.eye(3)[axis]
            self.command = s.set_command(self.command)
            log.info("command", vx=float(self.command[0]), vy=float(self.command[1]), yaw_rate=float(self.command[2]))

    def run(self, stop: threading.Event) -> None:
        s, env = self.session, self.session.env
        while not stop.is_set() and self.handle.is_running():
            if s.due():
                s.advance()
            i = s.followed_env
            self.data.qpos[:], self.data.qvel[:] = env.qpos[i], env.qvel[i]
            mujoco.mj_forward(env.model, self.data)
            self.handle.sync()
            if s.paused:
                stop.wait(0.02)
            else:
                self.pacer.wait(s.speed, stop)
            if self.budget is not None:
                self.budget.rest(stop)

    def close(self) -> None:
        self.handle.close()
