"""appo-play's page: a viser server drawing every env's robot, the controls, and the live plots.

viser serves its own prebuilt client (inside its wheel, so it works offline) and pushes scene and GUI
updates over one websocket.  The loop here steps the session at the chosen speed and redraws at most
DRAW_HZ; plots and text refresh at TEXT_HZ.  A follower is polled by a thread of its own, which also writes
the status line, so a new version reaches the page even while the loop is starved by a run on this host.
Keys (viser's command hotkeys), the seed's: space pause, N step,
Backspace reset, up/down vx, left/right yaw rate, Enter zero; A/D vy.
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections.abc import Callable

import numpy as np
import trimesh
import viser
import viser.uplot

from common.checkpoint_io import CheckpointError, load_policy
from common.logging import get_logger
from tools.eval import reference_bodies
from tools.play.budget import CpuBudget
from tools.play.scene import EnvPoses, instance_poses, shapes
from tools.play.session import Pacer, PlaySession, PolicySource

log = get_logger("play")

DRAW_HZ = 20.0  # redraws per wall second: smooth enough to watch, cheap beside a training run
TEXT_HZ = 4.0
FOLLOW_POLL_S = 0.1
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0)
NUDGE = np.array([0.1, 0.1, 0.2])  # vx, vy (m/s) and yaw rate (rad/s) per key press, as the seed's viewer
CONTACT_FORCE_SCALE = 0.002  # m of arrow per N
PLOT_MARGIN = 0.5  # m/s (rad/s) of the velocity plot beyond the command box
BAR_WIDTH = 12  # characters of the longest reward bar
CAMERA_OFFSET = np.array([1.6, -1.6, 0.8])  # the first view: from the front left, above


class PortInUse(OSError):
    """The page's port is taken by another process."""


def check_port(host: str, port: int) -> None:
    """Refuse a port another process holds (viser itself would silently move to the next one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(f"port {port} is in use on {host}: give another with --port") from None
            raise


class WebViewer:
    """The viser page of a PlaySession: scene, controls, plots; `run()` steps and draws until `stop`."""

    def __init__(self, session: PlaySession, host: str, port: int, checkpoints: dict | None = None,
                 follower=None, budget: CpuBudget | None = None):
        self.session = session
        self.follower = follower
        self.budget = budget
        check_port(host, port)
        self.server = viser.ViserServer(host=host, port=port, verbose=False)
        if self.server.get_port() != port:  # taken between the check and the bind
            self.server.stop()
            raise PortInUse(f"port {port} is in use on {host}: give another with --port")
        self.port = port
        env = session.env
        self.poses = EnvPoses(env.model, env.num_envs)
        self._offsets: dict[int, np.ndarray] = {}
        self.server.on_client_connect(self._on_connect)
        self._build_scene()
        self._build_gui(checkpoints or {})
        self._last_draw = self._last_text = 0.0
        self._status_lock = threading.Lock()
        self.pacer = Pacer(env.spec.control_dt)
        self._closed = threading.Event()
        self._follow_thread = None
        if follower is not None:
            self._follow_thread = threading.Thread(target=self._follow, name="play-follow", daemon=True)
            self._follow_thread.start()

    # ------------------------------------------------------------ layout

    def _build_scene(self) -> None:
        scene, env = self.server.scene, self.session.env
        scene.set_up_direction("+z")
        scene.add_grid("/floor", width=40.0, height=40.0, plane="xy", cell_size=0.5, section_size=2.5)
        # No image-based lighting: a browser without a GPU freezes for seconds precomputing it (status lags behind).
        scene.configure_environment_map(hdri=None)
        self.shapes = shapes(env.model)
        pos, rot = self.poses.update(env.qpos)
        self.shape_nodes = []
        for shape in self.shapes:
            p, q = instance_poses(shape, pos, rot)
            self.shape_nodes.append(scene.add_batched_meshes_simple(
                f"/robots/{shape.name}", shape.vertices, shape.faces, batched_wxyzs=q, batched_positions=p,
                batched_scales=np.tile(np.asarray(shape.scales, np.float32), (env.num_envs, 1)),
                batched_colors=np.tile(np.asarray(shape.colours, np.uint8), (env.num_envs, 1)), lod="off"))
        self.contact_points = scene.add_point_cloud("/contacts/points", np.zeros((1, 3)), colors=(255, 40, 40),
                                                    point_size=0.04, visible=False)
        self.contact_forces = scene.add_line_segments("/contacts/forces", np.zeros((1, 2, 3)), colors=(255, 40, 40),
                                                      line_width=3.0, visible=False)
        self.ghost = None
        if hasattr(env, "ref_pos"):
            sphere = trimesh.creation.icosphere(subdivisions=2, radius=0.05)
            self.ghost = scene.add_batched_meshes_simple(
                "/reference", np.asarray(sphere.vertices, np.float32), np.asarray(sphere.faces, np.uint32),
                batched_wxyzs=np.tile([1.0, 0, 0, 0], (len(env.body_ids), 1)),
                batched_positions=np.zeros((len(env.body_ids), 3)), batched_colors=(40, 220, 80), opacity=0.45,
                cast_shadow=False)
        root = self._root(0)
        self.server.initial_camera.position = tuple(root + CAMERA_OFFSET)
        self.server.initial_camera.look_at = tuple(root)

    def _build_gui(self, checkpoints: dict) -> None:
        gui, s = self.server.gui, self.session
        self.status = gui.add_markdown("starting")
        with gui.add_folder("Simulation"):
            self.pause_button = gui.add_button("Pause")
            self.pause_button.on_click(lambda _: self.toggle_pause())
            gui.add_button("Step").on_click(lambda _: self.single_step())
            gui.add_button("Reset").on_click(lambda _: s.request_reset())
            self.speed = gui.add_slider("Speed (x real time)", min=0.25, max=4.0, step=0.25, initial_value=1.0,
                                        marks=SPEEDS)
            self.speed.on_update(lambda _: self._set_speed(self.speed.value))
            self.env_pick = gui.add_dropdown("Followed env", [f"env {i}" for i in range(s.env.num_envs)])
            self.env_pick.on_update(lambda _: self._follow_env(int(self.env_pick.value.split()[1])))
            self.stochastic = gui.add_checkbox("Stochastic policy", initial_value=False)
            self.stochastic.on_update(lambda _: setattr(s, "stochastic", self.stochastic.value))
            self.show_contacts = gui.add_checkbox("Contacts", initial_value=False)
        if checkpoints:
            with gui.add_folder("Checkpoint"):
                names = list(checkpoints)
                self.checkpoint_pick = gui.add_dropdown("Checkpoint", names, initial_value=names[-1])
                self.checkpoint_pick.on_update(lambda _: self._switch(checkpoints[self.checkpoint_pick.value]))
        self.command_sliders = None
        if s.command_box is not None:
            low, high = s.command_box
            with gui.add_folder("Command"):
                self.override = gui.add_checkbox("Override the sampled command", initial_value=False)
                self.override.on_update(lambda _: self._command_changed())
                self.command_sliders = [
                    gui.add_slider(label, min=float(low[k]), max=float(high[k]), step=0.05, initial_value=0.0)
                    for k, label in enumerate(("vx (m/s)", "vy (m/s)", "yaw rate (rad/s)"))]
                for slider in self.command_sliders:
                    slider.on_update(lambda _: self._command_changed())
        self._add_keys()
        self.episode_text = gui.add_markdown("")
        if s.tracks_velocity:
            zeros = tuple(np.zeros(2) for _ in range(7))
            series = [viser.uplot.Series(label="t (s)")] + [
                viser.uplot.Series(label=f"{name} {kind}", stroke=colour, width=2 if kind == "measured" else 1,
                                   dash=[6, 4] if kind == "commanded" else None)
                for name, colour in (("vx", "#d62728"), ("vy", "#2ca02c"), ("yaw rate", "#1f77b4"))
                for kind in ("commanded", "measured")]
            low, high = s.command_box if s.command_box is not None else (np.full(3, -1.0), np.full(3, 1.0))
            # The client keeps a plot's first scales; a fixed range from the command box keeps every line on it.
            scales = {"x": {"time": False}, "y": {"auto": False, "range": [float(low.min()) - PLOT_MARGIN,
                                                                          float(high.max()) + PLOT_MARGIN]}}
            self.velocity_plot = gui.add_uplot(zeros, tuple(series), title="Commanded vs measured (followed env)",
                                               scales=scales, aspect=1.4)
        self.terms_text = gui.add_markdown("")

    def _add_keys(self) -> None:
        # The seed's play_interactive keys: space pause, N single step, Backspace reset, arrows drive
        # (up/down vx, left/right yaw rate), Enter stops; A/D add vy.
        gui, s = self.server.gui, self.session
        gui.add_command("Pause / resume", hotkey="space").on_trigger(lambda _: self.toggle_pause())
        gui.add_command("Single step", hotkey="N").on_trigger(lambda _: self.single_step())
        gui.add_command("Reset", hotkey="backspace").on_trigger(lambda _: s.request_reset())
        if self.command_sliders is None:
            return
        for key, k, sign in (("arrowup", 0, 1), ("arrowdown", 0, -1), ("A", 1, 1), ("D", 1, -1),
                             ("arrowleft", 2, 1), ("arrowright", 2, -1)):
            gui.add_command(f"Command {('vx', 'vy', 'yaw rate')[k]} {'+' if sign > 0 else '-'}", hotkey=key
                            ).on_trigger(lambda _, k=k, sign=sign: self.nudge(k, sign))
        gui.add_command("Command zero (stop)", hotkey="enter").on_trigger(lambda _: self.zero_command())

    # ------------------------------------------------------------ controls

    def toggle_pause(self) -> None:
        s = self.session
        with s.lock:
            s.paused = not s.paused
            paused = s.paused
        self.pause_button.label = "Resume" if paused else "Pause"
        if not paused:
            self.pacer.resync()
        log.info("paused" if paused else "resumed", sim_time=round(s.sim_time, 4), steps=s.steps)

    def single_step(self) -> None:
        """One control step; pauses first, as the seed's viewer does."""
        if not self.session.paused:
            self.toggle_pause()
        self.session.request_step()

    def zero_command(self) -> None:
        for slider in self.command_sliders:
            slider.value = 0.0
        self.override.value = True
        self._command_changed()

    def nudge(self, k: int, sign: int) -> None:
        """A key press: the command component k moved by one nudge (switches the override on)."""
        slider = self.command_sliders[k]
        slider.value = float(np.clip(slider.value + sign * NUDGE[k], slider.min, slider.max))
        self.override.value = True
        self._command_changed()

    def _command_changed(self) -> None:
        s = self.session
        if self.override.value:
            value = s.set_command([sl.value for sl in self.command_sliders])
            log.info("command", vx=float(value[0]), vy=float(value[1]), yaw_rate=float(value[2]))
        else:
            s.release_command()
            log.info("command released to the task's sampling")

    def _set_speed(self, speed: float) -> None:
        with self.session.lock:
            self.session.speed = float(speed)
        self.pacer.resync()

    def _follow_env(self, i: int) -> None:
        with self.session.lock:
            self.session.followed_env = i
            self.session.followed.history.clear()

    def _switch(self, path) -> None:
        try:
            policy = load_policy(path)
        except CheckpointError as exc:
            log.error("checkpoint refused", error=str(exc))
            return
        if policy.task != self.session.env.spec.name or policy.act_dim != self.session.env.spec.act_dim:
            log.error("checkpoint refused", path=str(path), task=policy.task)
            return
        self.session.offer(PolicySource(path.name), policy.model)
        log.info("checkpoint queued for the next episode", path=str(path))

    # ------------------------------------------------------------ the loop

    def run(self, stop: threading.Event, on_frame: Callable[[], None] | None = None) -> None:
        """Step at the chosen speed, redraw and poll the follower until `stop` is set."""
        s = self.session
        while not stop.is_set():
            now = time.monotonic()
            if s.due():
                s.advance()
                self.pacer.stepped(s.sim_time)
            watched = bool(self.server.get_clients())  # nobody on the page: nothing to draw or send
            if watched and now - self._last_draw >= 1.0 / DRAW_HZ:
                self.draw()
                self._last_draw = now
            if watched and now - self._last_text >= 1.0 / TEXT_HZ:
                self.refresh_text()
                self._last_text = now
            if on_frame is not None:
                on_frame()
            if s.paused:
                stop.wait(0.02)
            else:
                self.pacer.wait(s.speed, stop)
            if self.budget is not None:
                self.budget.rest(stop)

    def _follow(self) -> None:
        # Its own thread: a new version reaches the page however slowly a busy host lets the loop run.
        while not self._closed.wait(FOLLOW_POLL_S):
            if self.poll_follower():
                self.refresh_status()

    def poll_follower(self) -> bool:
        """Offer the follower's newest version to the session; whether there was one."""
        s = self.session
        with s.lock:
            pending = s.pending
        newest = pending[0].version if pending and pending[0].version is not None else s.source.version
        got = self.follower.poll(-1 if newest is None else newest)
        if got is None:
            return False
        version, flat = got
        s.offer(PolicySource(f"weights v{version} from {self.follower.where}", version), flat)
        log.info("weights received", version=version)
        return True

    def draw(self) -> None:
        """Move every body node to its envs' poses; camera, contacts and reference follow the chosen env."""
        s, env = self.session, self.session.env
        pos, rot = self.poses.update(env.qpos)
        i = s.followed_env
        with self.server.atomic():
            for shape, node in zip(self.shapes, self.shape_nodes, strict=True):
                p, q = instance_poses(shape, pos, rot)
                node.batched_positions = p.astype(np.float32)
                node.batched_wxyzs = q.astype(np.float32)
            if self.show_contacts.value:
                points, forces = self.poses.contacts(i, env.qpos[i], env.qvel[i], env.ctrl[i])
                if len(points):
                    self.contact_points.points = points.astype(np.float32)
                    self.contact_forces.points = np.stack([points, points + CONTACT_FORCE_SCALE * forces], 1
                                                          ).astype(np.float32)
                self.contact_points.visible = self.contact_forces.visible = bool(len(points))
            else:
                self.contact_points.visible = self.contact_forces.visible = False
            if self.ghost is not None:
                ref = reference_bodies(env, i, self.poses.datas[i]) + self.poses.offsets[i]
                self.ghost.batched_positions = ref.astype(np.float32)
        self._move_cameras(self._root(i))

    def _root(self, i: int) -> np.ndarray:
        """Where env i's robot is drawn: its root body (the first below the world), offset to its grid cell."""
        return self.poses.datas[i].xpos[1] + self.poses.offsets[i]

    def _on_connect(self, client) -> None:
        self._offsets[client.client_id] = CAMERA_OFFSET.copy()

        def changed(cam) -> None:
            # What the user chose by orbiting or zooming (our own moves keep it): where to look from.
            offset = cam.position - cam.look_at
            if np.all(np.isfinite(offset)) and np.linalg.norm(offset) > 1e-6:
                self._offsets[client.client_id] = offset

        client.camera.on_update(changed)

    def _move_cameras(self, root: np.ndarray) -> None:
        # Every client's camera looks at the followed robot from the angle and distance its user chose.
        for client in self.server.get_clients().values():
            offset = self._offsets.get(client.client_id, CAMERA_OFFSET)
            with client.atomic():
                client.camera.look_at = root
                client.camera.position = root + offset

    def refresh_status(self) -> None:
        """The status line: task, sim time, speed, the policy's version and age, the version waiting."""
        s = self.session
        with s.lock:
            source, pending, paused = s.source, s.pending, s.paused
        age = time.monotonic() - source.arrived
        version = f"weights v{source.version}, {age:.1f} s old" if source.version is not None else source.label
        state = "paused" if paused else f"{self.pacer.realtime_factor():.2f}x real time"
        if self.budget is not None and self.budget.busy:
            state += " (the cores are busy: yielding them)"
        nxt = f" (next: {pending[0].label})" if pending else ""
        with self._status_lock:
            self.status.content = (f"**{s.env.spec.name}**, {s.env.num_envs} envs · sim time {s.sim_time:.2f} s · "
                                   f"{state}  \npolicy: {version}{nxt}")

    def refresh_text(self) -> None:
        s = self.session
        f = s.followed
        self.refresh_status()
        frame = s.frame()
        lines = [f"episode {f.episodes + 1}: {f.time:.2f} s, return {f.ret:.3f}"]
        if f.episodes:
            lines.append(f"last episode: return {f.last_return:.3f}, ended by {f.last_end}")
        if frame is not None:
            lines.append(f"clip frame {frame} of {s.env.num_frames}")
        self.episode_text.content = "  \n".join(lines)
        if s.tracks_velocity and f.history:
            t = np.array([h[0] for h in f.history])
            cmd = np.array([h[1] for h in f.history])
            meas = np.array([h[2] for h in f.history])
            self.velocity_plot.data = (t, cmd[:, 0], meas[:, 0], cmd[:, 1], meas[:, 1], cmd[:, 2], meas[:, 2])
        self.terms_text.content = reward_bars(f.terms, f.term_sums)

    def close(self) -> None:
        self._closed.set()
        if self._follow_thread is not None:
            self._follow_thread.join(timeout=2.0)
        self.server.stop()


def reward_bars(step: dict[str, float], episode: dict[str, float]) -> str:
    """Each reward term of the last step as a bar (longest = largest magnitude), with its episode sum."""
    if not step:
        return ""
    scale = max(abs(v) for v in step.values()) or 1.0
    rows = ["| reward term | last step | | episode |", "| --- | ---: | --- | ---: |"]
    for name, value in step.items():
        bar = ("▮" * max(1, round(BAR_WIDTH * abs(value) / scale))) if value else ""
        rows.append(f"| {name} | {value:+.4f} | {'-' if value < 0 else '+'}{bar} | {episode.get(name, 0.0):+.3f} |")
    return "\n".join(rows)
