"""The seed's --sim on the real executables: the engine reaches the config and checkpoint; bad choices exit 2."""

import os
import subprocess

import torch
import yaml
from e2e_helpers import exe
from g1_clips import walking_qpos
from hub_server import HubServer

from collector.envs.g1.motion import clip_from_qpos, write_clip
from common.hub import MOTIONS_REPO, SEED_MOTION_FILE

TINY = ["algo.num_envs=16", "algo.steps_per_env=8", "algo.max_iterations=2", "algo.save_interval=2",
        "algo.policy.actor_hidden_dims=[32]", "algo.policy.critic_hidden_dims=[32]", "training.console=false",
        "training.no_play=true"]


def _run(args: list[str], timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def test_seed_quick_start_on_mujoco_records_the_engine_in_config_and_checkpoint(tmp_path, shm_root):
    """`appo-train --task go2_joystick_flat --sim mujoco` (shortened) trains; config.yaml and checkpoint say mujoco."""
    run = tmp_path / "run"
    proc = _run([exe("appo-train"), "--task", "go2_joystick_flat", "--sim", "mujoco", "--log-dir", str(run), *TINY,
                 f"transport.shm_root={shm_root}"], timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert yaml.safe_load((run / "config.yaml").read_text())["training"]["sim_backend"] == "mujoco"
    state = torch.load(run / "model_2.pt", weights_only=True)
    assert state["config"]["training"]["sim_backend"] == "mujoco"


def test_seed_quick_starts_on_motrix_train_and_record_motrix(tmp_path, shm_root):
    """`appo-train --task go2_joystick_flat --sim motrix` and the seed's `--task g1_motion_tracking --sim motrix
    training.no_play=true` as typed (shortened; no clip given: the seed's is fetched once from a local stand-in
    of its Hugging Face dataset) train on MotrixSim; config and checkpoint say motrix and name the seed's clip."""
    clip = tmp_path / "walk.npz"
    write_clip(clip, clip_from_qpos(walking_qpos(60)))
    assets = tmp_path / "assets"
    with HubServer(MOTIONS_REPO, {SEED_MOTION_FILE: clip.read_bytes()}) as hub:
        env = {"HF_ENDPOINT": hub.url, "APPO_TASK_OPTIONS__ASSETS_DIR": str(assets)}
        for task in ("go2_joystick_flat", "g1_motion_tracking"):
            run = tmp_path / task
            proc = _run([exe("appo-train"), "--task", task, "--sim", "motrix", "--log-dir", str(run), *TINY,
                         f"transport.shm_root={shm_root}"], timeout=300, env=env)
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert yaml.safe_load((run / "config.yaml").read_text())["training"]["sim_backend"] == "motrix"
            state = torch.load(run / "model_2.pt", weights_only=True)
            assert state["config"]["training"]["sim_backend"] == "motrix" and state["total_env_steps"] >= 2 * 16 * 8
    assert state["config"]["task_options"]["motion_file"] == SEED_MOTION_FILE
    assert (assets / SEED_MOTION_FILE).read_bytes() == clip.read_bytes()
    gets = [r for r in hub.requests if r[0] == "GET" and r[1].endswith(SEED_MOTION_FILE)]
    assert len(gets) == 1  # appo-train fetched it; its collector found it on disk


def test_the_seed_clip_out_of_reach_stops_appo_train_before_its_run_directory(tmp_path):
    """With the hub out of reach (HF_HUB_OFFLINE) and no clip on disk, g1_motion_tracking exits 2 naming the clip
    and its dataset, and leaves no run directory."""
    run = tmp_path / "run"
    proc = _run([exe("appo-train"), "--task", "g1_motion_tracking", "--sim", "motrix", "--log-dir", str(run),
                 "training.no_play=true"], env={"HF_HUB_OFFLINE": "1", "APPO_TASK_OPTIONS__ASSETS_DIR": str(tmp_path)})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert SEED_MOTION_FILE in proc.stderr and MOTIONS_REPO in proc.stderr and "cannot be reached" in proc.stderr
    assert not run.exists()


def test_an_engine_a_task_lacks_is_refused_naming_what_it_runs_on(tmp_path, shm_root):
    """A Gymnasium task on motrix exits 2 before any run directory exists, naming its engine; so does a collector."""
    run = tmp_path / "run"
    proc = _run([exe("appo-train"), "--task", "hopper", "--sim", "motrix", "--log-dir", str(run),
                 f"transport.shm_root={shm_root}"])
    assert proc.returncode == 2
    assert "task hopper runs on mujoco, not training.sim_backend=motrix" in proc.stderr
    assert not run.exists()
    proc = _run([exe("appo-collector"), "--task", "hopper", "--sim", "motrix", "--shm-dir", str(tmp_path / "none")])
    assert proc.returncode == 2 and "task hopper runs on mujoco" in proc.stderr


def test_an_unknown_engine_and_a_gpu_collector_device_are_refused(tmp_path):
    """--sim names the engines it takes; training.collector_device=cuda says it needs a GPU engine."""
    proc = _run([exe("appo-train"), "--sim", "bullet", "--log-dir", str(tmp_path / "run")])
    assert proc.returncode == 2 and "invalid choice: 'bullet'" in proc.stderr and "'motrix'" in proc.stderr
    proc = _run([exe("appo-eval"), "--sim", "bullet"])
    assert proc.returncode == 2 and "'mujoco'" in proc.stderr
    proc = _run([exe("appo-train"), "training.collector_device=cuda", "--log-dir", str(tmp_path / "run")])
    assert proc.returncode == 2
    assert "training.collector_device" in proc.stderr and "needs a GPU physics engine" in proc.stderr
