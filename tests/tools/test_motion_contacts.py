"""Self-penetration of G1 clips (tools/motion_contacts.py) against clips whose penetration is known by construction.

The clips come from tests/g1_clips.py: the home pose walking forward, one with the right hand
reaching into the right hip capsule for some frames (its depth measured independently from the
capsules' axes), one with the legs crossed, and the home pose sunk into the floor.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from g1_clips import HAND, HIP, capsule_depth, crossed_legs_qpos, reaching_qpos, walking_qpos

from collector.envs.g1.base import SELF_COLLISION_SENSOR
from collector.envs.g1.model import build_model, build_xml
from collector.envs.g1.motion import clip_from_qpos
from tools.motion_contacts import SelfContacts, report_lines, self_penetration

FRAMES, START, STOP = 40, 10, 30


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return build_model()


@pytest.fixture(scope="module")
def reaching(model):
    """The reaching clip as written (float32) and the hand-hip depth of each of its frames, measured independently."""
    clip = clip_from_qpos(reaching_qpos(FRAMES, START, STOP), model=model)
    depth = np.array([capsule_depth(model, q, HAND, HIP) for q in clip.qpos()])
    return clip, depth


def test_the_hand_in_the_hip_is_found_with_its_pair_depth_and_share(model, reaching):
    """The one penetrating pair is the hand/hip, its per-frame depth is the capsules' overlap, its share the frames'."""
    clip, depth = reaching
    pen = self_penetration(clip.qpos(), model)
    inside = depth > 0
    assert 0 < inside.sum() < FRAMES and depth.max() > 0.015  # some frames, and deep enough to matter
    assert list(pen.pairs) == [(HIP, HAND)]
    np.testing.assert_allclose(pen.pairs[(HIP, HAND)], np.clip(depth, 0, None), atol=1e-4)
    np.testing.assert_array_equal(pen.frames, inside)
    assert pen.share == pytest.approx(inside.mean())
    assert pen.max_depth == pytest.approx(depth.max(), abs=1e-4)
    assert pen.typical_depth == pytest.approx(np.median(depth[inside]), abs=1e-4)
    assert pen.bodies == {HAND: "right_wrist_yaw_link", HIP: "right_hip_roll_link"}


def test_the_report_names_the_share_the_depths_and_the_pair(model, reaching):
    """report_lines gives frames and share, max and median depth, and the pair with its bodies."""
    clip, depth = reaching
    lines = report_lines(self_penetration(clip.qpos(), model))
    inside = depth > 0
    assert lines[0] == f"self-penetration: {inside.sum()} of {FRAMES} frames ({100 * inside.mean():.1f}%)"
    assert lines[1] == f"max penetration depth: {depth.max():.4f} m"
    assert lines[3].startswith(f"penetrating pair {HIP} (right_hip_roll_link) / {HAND} (right_wrist_yaw_link): "
                               f"{inside.sum()} frames, max {depth.max():.4f} m")
    assert report_lines(self_penetration(walking_qpos(5), model)) == ["self-penetration: none (0 of 5 frames)"]


def test_the_floor_does_not_count(model):
    """Feet 5 cm under the floor are floor contacts, which MuJoCo reports, but no self-penetration."""
    qpos = walking_qpos(3)
    qpos[:, 2] -= 0.05
    data = mujoco.MjData(model)
    data.qpos[:] = qpos[0]
    mujoco.mj_forward(model, data)
    assert any(c.dist < 0 for c in data.contact[:data.ncon])  # the floor is in the model and penetrated
    assert not self_penetration(qpos, model).frames.any()


def test_contacts_between_the_legs_count_too(model):
    """Crossed legs penetrate each other (thigh into thigh): every robot pair counts, as in the task's sensor."""
    pen = self_penetration(crossed_legs_qpos(3), model)
    assert pen.frames.all()
    assert ("left_thigh_collision", "right_thigh_collision") in pen.pairs


def test_penetration_is_what_the_task_self_collision_sensor_feels(model, reaching):
    """The tracking task's self_collision sensor, added to the model, reads a force just in the penetrating frames."""
    clip, depth = reaching
    xml = build_xml().replace("  </sensor>", SELF_COLLISION_SENSOR + "\n  </sensor>")
    task_model = mujoco.MjModel.from_xml_string(xml)
    # At rest without gravity or motors, a contact pushes exactly when it penetrates.
    task_model.opt.gravity[:] = 0
    task_model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_ACTUATION
    data = mujoco.MjData(task_model)
    sensor = task_model.sensor("self_collision")
    force = []
    for q in clip.qpos():
        data.qpos[:] = q
        data.qvel[:] = 0
        mujoco.mj_forward(task_model, data)
        force.append(np.linalg.norm(data.sensordata[sensor.adr[0]:sensor.adr[0] + sensor.dim[0]]))
    clear = np.abs(depth) > 1e-4  # leave out frames at the very edge of contact
    found = self_penetration(clip.qpos(), model).frames
    np.testing.assert_array_equal((np.array(force) > 0)[clear], found[clear])


def test_the_model_given_is_not_changed(model):
    """SelfContacts switches the floor off and sets margins in its own copy of the model only."""
    floor = model.geom("floor").id
    before = (model.geom_contype.copy(), model.geom_margin.copy())
    contacts = SelfContacts(model, clearance=0.01)
    assert contacts.model.geom_contype[floor] == 0 and contacts.model.geom_margin.max() == 0.01
    assert np.array_equal(model.geom_contype, before[0]) and np.array_equal(model.geom_margin, before[1])
    assert model.geom_contype[floor] == 1
