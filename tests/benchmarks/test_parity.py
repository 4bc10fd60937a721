"""benchmarks.parity on two copies of this project's own env: identical copies agree exactly, and a planted
difference in a PD gain, a reward weight or a sensor frame is each named by the report."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.parity import Nudged, OurDriver, compare, differences, format_report
from collector.envs.g1 import walk

N, STEPS = 4, 12


def _start(driver: OurDriver, seed: int = 0):
    """A state from the driver's own reset, with a command that moves and the nominal gains."""
    s = driver.state()
    s.command[:] = (0.5, 0.0, 0.3)
    s.kp[:] = driver.env.model.actuator_gainprm[:, 0]
    s.kd[:] = -driver.env.model.actuator_biasprm[:, 2]
    return s


def _actions(k, obs):
    return np.random.default_rng(k).normal(0.0, 0.3, (N, 29))


@pytest.fixture
def pair():
    a, b = OurDriver("g1_walk_flat", N, seed=1), OurDriver("g1_walk_flat", N, seed=2)
    yield a, b
    a.close()
    b.close()


def test_identical_copies_agree(pair):
    """Two copies of the same task from the same state: run on together they agree to the bit; re-synchronised
    every step (the solver then starts cold on one side) they differ by solver noise only."""
    a, b = pair
    reports = compare(a, b, _start(a), _actions, STEPS)
    free, resync = reports["free"], reports["resync"]
    assert differences(free, 0.0) == [] and free.drift_xy == 0.0
    assert differences(resync) == [] and max(resync.obs.values()) > 0.0  # cold-start noise, below SOLVER_NOISE
    for r in reports.values():
        assert r.steps == STEPS and r.termination_mismatches == 0
        assert len(r.obs) == 98 and len(r.critic) == 101 and set(r.terms) == set(walk.WEIGHTS)


def test_nudged_twin_gives_the_noise_floor_beside_each_difference(pair):
    """A twin loaded with states nudged by half a float32 step: each loaded value is within 2^-24 of the given one
    but not equal; both modes then show differences above the exact twins' (the floor is not zero); and the
    formatted report puts each difference beside the same column's noise floor."""
    a, b = pair
    start = _start(a)
    Nudged(b).load(start)
    got = b.state()
    assert np.all(np.abs(got.qvel - start.qvel) <= 2.0 ** -24 * np.abs(start.qvel) + 1e-300)
    assert not np.array_equal(got.qvel, start.qvel)
    exact = compare(a, b, start, _actions, STEPS)
    floor = compare(a, Nudged(b), start, _actions, STEPS)
    assert max(floor["free"].obs.values()) > 0.0 == max(exact["free"].obs.values())
    text = format_report(floor, 0.0, top=500, floor=exact)
    column = max(floor["resync"].obs, key=floor["resync"].obs.get)
    line = next(x for x in text.splitlines() if f"obs:{column} " in x)
    assert line.split("noise floor ")[1] == f"{exact['resync'].obs[column]:.4g}"


def test_a_planted_gain_is_named_at_its_joint(pair):
    """The left knee's kp 30% higher on one side, the robot hanging in the air (no contact spreads it): in resync
    mode the left knee's velocity differs most of all joint columns."""
    a, b = pair
    start = _start(a)
    start.qpos[:, 2], start.qvel[:] = 2.0, 0.0
    load = b.load

    def stiffer_knee(state):
        load(state)
        kp = b.env.kp.copy()
        kp[:, b.obs_names.index("joint_pos[left_knee]") - walk.OBS_SLICES["joint_pos"].start] *= 1.3
        b.env.set_gains(kp, b.env.kd)

    b.load = stiffer_knee
    found = differences(compare(a, b, start, _actions, STEPS)["resync"])
    joints = [name for name, _ in found if name.startswith("obs:joint_")]
    assert joints[0] == "obs:joint_vel[left_knee]" and dict(found)[joints[0]] > 1e-2


def test_a_planted_reward_weight_is_named_by_its_term(pair):
    """The pose term counted twice on one side: only that term differs; observations agree."""
    a, b = pair
    terms = b.env._rewards_and_ends

    def double_pose(t, ended):
        terms(t, ended)
        t["pose"] *= 2.0

    b.env._rewards_and_ends = double_pose
    reports = compare(a, b, _start(a), _actions, STEPS)
    for r in reports.values():
        assert [name for name, _ in differences(r)] == ["term:pose"]


def test_a_planted_sensor_frame_is_named_at_its_columns(pair):
    """One side reads its gyro in a frame turned 90 degrees about z: the gyro columns are named, and in free mode
    what follows from them too, while the pelvis still moves alike in resync mode."""
    a, b = pair
    fill = b.env._fill_obs

    def turned_gyro(out, rows):
        fill(out, rows)
        g = out[rows, 0:3].copy()
        c, s = math.cos(math.pi / 2), math.sin(math.pi / 2)
        out[rows, 0], out[rows, 1] = c * g[:, 0] - s * g[:, 1], s * g[:, 0] + c * g[:, 1]

    b.env._fill_obs = turned_gyro
    r = compare(a, b, _start(a), _actions, STEPS)["resync"]
    names = [name for name, _ in differences(r)]
    assert set(names) & {"obs:gyro[0]", "obs:gyro[1]"} and "obs:gyro[2]" not in names
    assert all(n.startswith(("obs:gyro", "critic:gyro")) for n in names)
    assert "gyro" in format_report({"resync": r})


@pytest.mark.parametrize("task", ["go2_joystick_flat", "g1_walk_flat"])
def test_a_loaded_state_reads_back_and_drives_the_physics(task):
    """OurDriver.load then state() gives back what was loaded (gains included, inside MuJoCo too), for both tasks;
    another task is refused by name."""
    src, dst = OurDriver(task, N, seed=3), OurDriver(task, N, seed=4)
    s = src.state()
    s.command[:] = np.random.default_rng(0).uniform(-0.5, 0.5, (N, 3))
    s.last_action[:] = 0.1
    s.kp *= 1.05
    dst.load(s)
    back = dst.state()
    for name in ("qpos", "qvel", "command", "clock", "last_action", "kp", "kd"):
        np.testing.assert_allclose(getattr(back, name), getattr(s, name), err_msg=name)
    m = dst.env.model
    gains = dst.env._sim.expand("actuator_gainprm").reshape(N, m.nu, -1)[:, :, 0]
    np.testing.assert_allclose(gains, s.kp)
    src.close()
    dst.close()
    with pytest.raises(ValueError, match="hopper"):
        OurDriver("hopper", 1)
