"""benchmarks.unilab_setup without the seed: its stand-in meshes load as 2 cm cubes in MuJoCo, every mesh an MJCF
names is found under its meshdir, and a venv that cannot be made fails in one line naming the step."""

from __future__ import annotations

import subprocess
import sys

import mujoco
import numpy as np
import pytest

from benchmarks import unilab_setup


@pytest.mark.parametrize("name", ["part.STL", "box.obj"])
def test_stand_in_meshes_are_2cm_cubes_mujoco_loads(tmp_path, name):
    """A stand-in written as binary STL or OBJ loads in MuJoCo as a closed 2 cm cube (volume 8e-6 m^3)."""
    (tmp_path / name).write_bytes(unilab_setup.cube(tmp_path / name))
    xml = f"""<mujoco><compiler meshdir="{tmp_path}"/><asset><mesh name="m" file="{name}"/></asset>
      <worldbody><body><geom type="mesh" mesh="m" density="1000"/></body></worldbody></mujoco>"""
    m = mujoco.MjModel.from_xml_string(xml)
    np.testing.assert_allclose(m.body_mass[1], 1000 * unilab_setup.CUBE ** 3, rtol=1e-6)
    np.testing.assert_allclose(m.mesh_vert.max(axis=0) - m.mesh_vert.min(axis=0), [unilab_setup.CUBE] * 3, rtol=1e-6)


def test_every_named_mesh_is_written_once_under_its_meshdir(tmp_path):
    """Meshes named by any MJCF of a robot folder land under that folder's meshdir; files present stay as they are."""
    robot = tmp_path / "assets" / "robots" / "bot"  # as in the installed package
    robot.mkdir(parents=True)
    (robot / "bot.xml").write_text('<mujoco><compiler meshdir="assets"/><asset><mesh file="a.STL"/>'
                                   '<mesh file="sub/b.obj"/></asset></mujoco>')
    (robot / "scene.xml").write_text('<mujoco><include file="bot.xml"/><asset><mesh file="c.obj"/></asset></mujoco>')
    (robot / "assets").mkdir()
    (robot / "assets" / "a.STL").write_bytes(b"real mesh")
    assert unilab_setup.write_stand_ins(tmp_path) == 2
    assert (robot / "assets" / "a.STL").read_bytes() == b"real mesh"
    assert (robot / "assets" / "sub" / "b.obj").is_file() and (robot / "assets" / "c.obj").is_file()
    assert unilab_setup.write_stand_ins(tmp_path) == 0


def test_a_venv_that_cannot_be_made_is_one_line_naming_the_step(tmp_path):
    """--venv under a regular file: exit 1 and one stderr line that names the step."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.unilab_setup", "--venv", str(blocker / "venv")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "creating the seed's venv failed" in lines[0]
