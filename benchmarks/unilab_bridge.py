"""The seed's env (UniLab 1.5.2) as a parity driver, run by the seed's own Python in a child process.

    <seed venv>/bin/python benchmarks/unilab_bridge.py --task go2_joystick_flat --envs 8   # from its workdir

The seed pins MuJoCo 3.11 and this project needs 4, so the seed's env cannot share a process with ours:
benchmarks/unilab_driver.py starts this file with the seed's Python and speaks to it over stdin/stdout.
Each message is a JSON header and a dict of arrays (numpy's .npz, read with allow_pickle=False), each
behind a 4-byte length.  Requests: state, load (arrays of benchmarks.parity.SyncState), step (actions),
close.  Only numpy and the standard library here at the top: the project side imports the framing.

The env is composed as the seed's APPO trainer composes it (Hydra, `task=<task>/mujoco`, its play
adapter's overrides), with actor noise off.  Loading a state writes, for every env: qpos and qvel, each
actuator's kp and kd in the batch's per-world model, the velocity command, the gait clock (the Go2's
per-term phase in [0, 1), the G1's two-foot phase context), the last action, and an episode counter of 0.
Reward terms are returned as weight x term x dt (the seed's step_rewards are weight x term).
"""

from __future__ import annotations

import io
import json
import struct
import sys

import numpy as np

# The seed's reward names -> this project's, where they differ; terms of weight 0 are left out.
TERM_NAMES = {
    "go2_joystick_flat": {"contact": "feet_contact", "swing_feet_z": "feet_swing_height"},
    "g1_walk_flat": {},
}


def send(stream, header: dict, arrays: dict[str, np.ndarray] | None = None) -> None:
    """One message: a JSON header, then the arrays as .npz, each behind its 4-byte length."""
    head = json.dumps(header).encode()
    buf = io.BytesIO()
    np.savez(buf, **(arrays or {}))
    body = buf.getvalue()
    stream.write(struct.pack("<I", len(head)) + head + struct.pack("<I", len(body)) + body)
    stream.flush()


def _read_exact(stream, n: int) -> bytes:
    data = stream.read(n)
    if data is None or len(data) != n:
        raise EOFError(f"the stream ended after {0 if not data else len(data)} of {n} bytes")
    return data


def receive(stream) -> tuple[dict, dict[str, np.ndarray]]:
    """One message from `stream`: (header, arrays)."""
    (n,) = struct.unpack("<I", _read_exact(stream, 4))
    header = json.loads(_read_exact(stream, n))
    (n,) = struct.unpack("<I", _read_exact(stream, 4))
    with np.load(io.BytesIO(_read_exact(stream, n)), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return header, arrays


class SeedEnv:
    """The seed's env of one task, with the state reads and writes parity needs."""

    def __init__(self, task: str, num_envs: int):
        from pathlib import Path

        import torch
        import unilab
        from hydra import compose, initialize_config_dir
        from unilab.base.config_adapter import create_env
        from unilab.visualization.interactive_playback import build_play_backend_adapter

        self.torch, self.task, self.n = torch, task, num_envs
        overrides = [f"task={task}/mujoco", "training.device=cpu"]
        if task == "g1_walk_flat":
            overrides.append("env.observations.policy.enable_corruption=false")
        with initialize_config_dir(config_dir=str(Path(unilab.__file__).parent / "conf" / "appo"),
                                   version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        env_override = build_play_backend_adapter(cfg, root_dir=Path.cwd(), algo_name="appo") \
            .build_task_env_cfg_override()
        self.env = create_env(cfg, num_envs=num_envs, env_cfg_override=env_override, sim_backend="mujoco",
                              task_name=str(cfg.training.task_name))
        self.env.reset()
        self.backend = self.env.backend
        model = self.backend._model
        # actuator j drives joint trn[j]; the task's order (actions, observations) is the joints'
        self.act_joint = np.asarray(model.actuator_trnid[:, 0]) - 1
        self.rows = np.arange(num_envs)
        self.dt = float(self.env.step_dt)
        self.names = list(self.env.reward_manager.step_reward_names)
        weights = [float(self.env.reward_manager.get_term_cfg(n).weight) for n in self.names]
        self.kept = [i for i, w in enumerate(weights) if w != 0.0]
        rename = TERM_NAMES[task]
        self.term_names = [rename.get(self.names[i], self.names[i]) for i in self.kept]

    # -- the gait clock
    def _go2_terms(self):
        import gc

        from unilab.tasks.locomotion.common.manager_terms import _GaitTerm

        return [o for o in gc.get_objects() if isinstance(o, _GaitTerm) and o._env is self.env]

    def _g1_context(self):
        from unilab.tasks.locomotion.g1 import manager_terms

        ctx = manager_terms._GAIT_CONTEXTS.get(self.env)
        if ctx is None:
            raise RuntimeError("the seed's G1 gait context does not exist after its reset")
        return manager_terms, ctx

    def _clock(self) -> np.ndarray:
        if self.task == "g1_walk_flat":
            module, ctx = self._g1_context()
            return module._advance_gait(self.env, ctx).double().numpy().copy()
        term = self._go2_terms()[0]
        term._advance_to(self.env, term._counter(self.env))
        return term._phase_value.double().numpy()[:, None].copy()

    def _set_clock(self, clock: np.ndarray) -> None:
        torch, counter = self.torch, int(self.env.common_step_counter)
        if self.task == "g1_walk_flat":
            module, ctx = self._g1_context()
            ctx.phase = torch.as_tensor(clock, dtype=torch.float32).clone()
            ctx.last_counter = counter
            module._GAIT_PHASE_CACHE.pop(self.env, None)
            return
        phase = torch.as_tensor(clock[:, 0], dtype=torch.float32)
        for term in self._go2_terms():
            term._phase_value = phase.clone()
            term._last_counter = counter

    # -- parity's requests
    def state(self) -> dict[str, np.ndarray]:
        b, am = self.backend, self.env.action_manager
        pool = b._pool
        kp = np.empty((self.n, len(self.act_joint)))
        kd = np.empty_like(kp)
        kp[:, self.act_joint] = np.array(pool.expand("actuator_gainprm")[:, :, 0])
        kd[:, self.act_joint] = -np.array(pool.expand("actuator_biasprm")[:, :, 2])
        return {"qpos": np.array(b._qpos_view, np.float64), "qvel": np.array(b._qvel_view, np.float64),
                "command": self.env.command_manager.get_term("twist").command.double().numpy().copy(),
                "clock": self._clock(), "last_action": am.action.double().numpy().copy(), "kp": kp, "kd": kd}

    def load(self, s: dict[str, np.ndarray]) -> None:
        torch, env, b = self.torch, self.env, self.backend
        pool = b._pool
        kp, kd = s["kp"][:, self.act_joint], s["kd"][:, self.act_joint]
        pool.expand("actuator_gainprm")[:, :, 0] = kp
        pool.expand("actuator_biasprm")[:, :, 1] = -kp
        pool.expand("actuator_biasprm")[:, :, 2] = -kd
        pool.set_const(self.rows)
        b._qpos_view[:] = s["qpos"]
        b._qvel_view[:] = s["qvel"]
        b._warm_view[:] = 0  # a fresh start for the solver, as this project's set_state
        pool.forward(self.rows)
        env.scene._invalidate_state_reads()
        env._refresh_tensor_reads_after_mutation()
        command = env.command_manager.get_term("twist")._tensor_command
        command[:] = torch.as_tensor(s["command"], dtype=command.dtype)
        last = torch.as_tensor(s["last_action"], dtype=env.action_manager._action.dtype)
        env.action_manager._action[:] = last
        env.action_manager._prev_action[:] = last
        env.set_episode_length_buf(torch.zeros(self.n, dtype=torch.int64))
        self._set_clock(s["clock"])

    def step(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        torch, env = self.torch, self.env
        out = env.step(torch.as_tensor(actions, dtype=torch.float32))
        ended = (out.terminated | out.truncated).numpy()
        obs = {k: v.double().numpy().copy() for k, v in out.obs.items()}
        final = out.final_observation
        if ended.any() and final is not None:  # the ended rows' own last observation, before their reset
            for k in obs:
                obs[k][ended] = final[k].double().numpy()[ended]
        terms = env.reward_manager.step_rewards.double().numpy()[:, self.kept] * self.dt
        return {"obs": obs["obs"], "critic": obs["critic"], "terms": terms,
                "terminated": out.terminated.numpy().copy(), "truncated": out.truncated.numpy().copy(),
                "root_pos": np.array(self.backend._qpos_view[:, :3], np.float64)}


def serve(task: str, num_envs: int) -> None:
    """Answer requests on stdin until `close` or the end of the stream."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # the seed's prints must not mix with the replies
    env = SeedEnv(task, num_envs)
    send(stdout, {"ok": True, "terms": env.term_names, "dt": env.dt})
    while True:
        try:
            header, arrays = receive(stdin)
        except EOFError:
            return
        op = header.get("op")
        try:
            if op == "state":
                send(stdout, {"ok": True}, env.state())
            elif op == "load":
                env.load(arrays)
                send(stdout, {"ok": True})
            elif op == "step":
                out = env.step(arrays["actions"])
                send(stdout, {"ok": True}, out)
            elif op == "close":
                send(stdout, {"ok": True})
                return
            else:
                send(stdout, {"ok": False, "error": f"unknown request {op!r}"})
        except Exception as exc:  # reported to the parent, which raises it with the seed's message
            send(stdout, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, choices=sorted(TERM_NAMES))
    p.add_argument("--envs", type=int, default=8)
    a = p.parse_args()
    serve(a.task, a.envs)
