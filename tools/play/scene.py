"""The task's own MuJoCo model as meshes, and each env's body poses, contacts and reference for a viewer.

Every body's visible geoms (groups 0-2, as MuJoCo's viewer shows by default; planes are the floor) are
merged into one mesh in the body frame, so a frame moves one node per body and env.  The batch keeps no
per-env MjData, so each drawn env gets its own, loaded from the batch's state rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np
import trimesh

VISIBLE_GROUPS = (0, 1, 2)
ENV_SPACING = 2.5  # m between the envs' drawn origins (each env is its own world; they would overlap)


@dataclass
class BodyMesh:
    """One body's visible geoms merged, in the body frame, with the colour of its first geom."""

    body: int
    vertices: np.ndarray  # [V, 3] float32
    faces: np.ndarray     # [F, 3] uint32
    rgb: tuple[int, int, int]


def geom_mesh(model: mujoco.MjModel, g: int) -> trimesh.Trimesh | None:
    """Geom g as a triangle mesh in its own frame (None for planes and height fields)."""
    size, kind = model.geom_size[g], model.geom_type[g]
    if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
        return trimesh.creation.icosphere(subdivisions=2, radius=size[0])
    if kind == mujoco.mjtGeom.mjGEOM_CAPSULE:
        return trimesh.creation.capsule(height=2 * size[1], radius=size[0], count=[12, 12])
    if kind == mujoco.mjtGeom.mjGEOM_CYLINDER:
        return trimesh.creation.cylinder(radius=size[0], height=2 * size[1], sections=16)
    if kind == mujoco.mjtGeom.mjGEOM_BOX:
        return trimesh.creation.box(extents=2 * size)
    if kind == mujoco.mjtGeom.mjGEOM_ELLIPSOID:
        mesh = trimesh.creation.icosphere(subdivisions=2, radius=1.0)
        mesh.apply_scale(size)
        return mesh
    if kind == mujoco.mjtGeom.mjGEOM_MESH:
        m = model.geom_dataid[g]
        v0, nv = model.mesh_vertadr[m], model.mesh_vertnum[m]
        f0, nf = model.mesh_faceadr[m], model.mesh_facenum[m]
        return trimesh.Trimesh(model.mesh_vert[v0:v0 + nv].copy(), model.mesh_face[f0:f0 + nf].copy(), process=False)
    return None


def body_meshes(model: mujoco.MjModel) -> list[BodyMesh]:
    """The robot's bodies that have visible geoms, each as one merged mesh in its body frame."""
    parts: dict[int, list[trimesh.Trimesh]] = {}
    colour: dict[int, tuple[int, int, int]] = {}
    for g in range(model.ngeom):
        body = int(model.geom_bodyid[g])
        if body == 0 or model.geom_group[g] not in VISIBLE_GROUPS or model.geom_rgba[g, 3] == 0:
            continue
        mesh = geom_mesh(model, g)
        if mesh is None:
            continue
        pose = np.eye(4)
        pose[:3, :3] = _quat_matrix(model.geom_quat[g])
        pose[:3, 3] = model.geom_pos[g]
        mesh.apply_transform(pose)
        parts.setdefault(body, []).append(mesh)
        colour.setdefault(body, tuple(int(c * 255) for c in model.geom_rgba[g, :3]))
    out = []
    for body, meshes in sorted(parts.items()):
        merged = trimesh.util.concatenate(meshes)
        out.append(BodyMesh(body, np.asarray(merged.vertices, np.float32), np.asarray(merged.faces, np.uint32),
                            colour[body]))
    return out


def env_offsets(num_envs: int) -> np.ndarray:
    """[N, 3] where each env's world origin is drawn: a square grid, env 0 at the origin."""
    cols = int(np.ceil(np.sqrt(num_envs)))
    i = np.arange(num_envs)
    return np.stack([(i % cols) * ENV_SPACING, (i // cols) * ENV_SPACING, np.zeros(num_envs)], axis=1)


class EnvPoses:
    """Body poses of every env, from the batch's qpos rows (kinematics only); full physics for one env on demand."""

    def __init__(self, model: mujoco.MjModel, num_envs: int):
        self.model = model
        self.datas = [mujoco.MjData(model) for _ in range(num_envs)]
        self.offsets = env_offsets(num_envs)

    def update(self, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions [N, nbody, 3] with the env offsets added, quaternions [N, nbody, 4] wxyz)."""
        pos = np.empty((len(self.datas), self.model.nbody, 3))
        quat = np.empty((len(self.datas), self.model.nbody, 4))
        for i, d in enumerate(self.datas):
            d.qpos[:] = qpos[i]
            mujoco.mj_kinematics(self.model, d)
            pos[i] = d.xpos + self.offsets[i]
            quat[i] = d.xquat
        return pos, quat

    def contacts(self, i: int, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Env i's contact points [k, 3] (offset) and contact forces on them [k, 3] in the world frame (N)."""
        d = self.datas[i]
        d.qpos[:], d.qvel[:], d.ctrl[:] = qpos, qvel, ctrl
        mujoco.mj_forward(self.model, d)
        points = np.empty((d.ncon, 3))
        forces = np.empty((d.ncon, 3))
        wrench = np.zeros(6)
        for k in range(d.ncon):
            c = d.contact[k]
            mujoco.mj_contactForce(self.model, d, k, wrench)
            # The contact frame's rows are its axes in the world: normal first.
            forces[k] = c.frame.reshape(3, 3).T @ wrench[:3]
            points[k] = c.pos + self.offsets[i]
        return points, forces


def _quat_matrix(q: np.ndarray) -> np.ndarray:
    m = np.empty(9)
    mujoco.mju_quat2Mat(m, np.asarray(q, np.float64))
    return m.reshape(3, 3)
