"""The task's own MuJoCo model for a viewer: every visible geom of every env as an instance of a unit shape.

Boxes, spheres, ellipsoids and cylinders are a unit cube, sphere or cylinder scaled per axis (exactly); a
capsule is a cylinder and two spheres.  So a whole scene is a handful of instanced meshes, and a redraw
sends a few arrays of poses, however many bodies and envs there are.  Visible means groups 0-2, as
MuJoCo's viewer shows by default; planes are the floor, drawn by the viewer.  The batch keeps no per-env
MjData, so each drawn env gets its own, loaded from the batch's state rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import numpy as np
import trimesh

VISIBLE_GROUPS = (0, 1, 2)
ENV_SPACING = 2.5  # m between the envs' drawn origins (each env is its own world; they would overlap)
G = mujoco.mjtGeom


@dataclass
class Shape:
    """One unit shape and its instances per env: which geom, where in the geom's frame, scaled how, what colour."""

    name: str
    vertices: np.ndarray  # [V, 3] float32, the unit shape
    faces: np.ndarray     # [F, 3] uint32
    geoms: list[int] = field(default_factory=list)
    offsets: list[np.ndarray] = field(default_factory=list)  # in the geom's frame (a capsule's end spheres)
    scales: list[np.ndarray] = field(default_factory=list)
    colours: list[np.ndarray] = field(default_factory=list)

    def add(self, geom: int, scale, colour, offset=(0.0, 0.0, 0.0)) -> None:
        self.geoms.append(geom)
        self.scales.append(np.asarray(scale, np.float64))
        self.colours.append(colour)
        self.offsets.append(np.asarray(offset, np.float64))


def _unit(mesh: trimesh.Trimesh) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(mesh.vertices, np.float32), np.asarray(mesh.faces, np.uint32)


def shapes(model: mujoco.MjModel) -> list[Shape]:
    """The model's visible geoms as instances of a unit box (half-extent 1), sphere (radius 1) and cylinder
    (radius 1, half-length 1, along z); shapes without instances are left out."""
    box = Shape("box", *_unit(trimesh.creation.box(extents=(2.0, 2.0, 2.0))))
    sphere = Shape("sphere", *_unit(trimesh.creation.icosphere(subdivisions=2, radius=1.0)))
    cylinder = Shape("cylinder", *_unit(trimesh.creation.cylinder(radius=1.0, height=2.0, sections=20)))
    for g in range(model.ngeom):
        if model.geom_bodyid[g] == 0 or model.geom_group[g] not in VISIBLE_GROUPS or model.geom_rgba[g, 3] == 0:
            continue
        size, kind = model.geom_size[g], model.geom_type[g]
        colour = np.round(255 * model.geom_rgba[g, :3]).astype(np.uint8)
        if kind == G.mjGEOM_BOX:
            box.add(g, size, colour)
        elif kind == G.mjGEOM_SPHERE:
            sphere.add(g, [size[0]] * 3, colour)
        elif kind == G.mjGEOM_ELLIPSOID:
            sphere.add(g, size, colour)
        elif kind == G.mjGEOM_CYLINDER:
            cylinder.add(g, [size[0], size[0], size[1]], colour)
        elif kind == G.mjGEOM_CAPSULE:
            cylinder.add(g, [size[0], size[0], size[1]], colour)
            for end in (-1.0, 1.0):
                sphere.add(g, [size[0]] * 3, colour, (0.0, 0.0, end * size[1]))
    return [s for s in (box, sphere, cylinder) if s.geoms]


def env_offsets(num_envs: int) -> np.ndarray:
    """[N, 3] where each env's world origin is drawn: a square grid, env 0 at the origin."""
    cols = int(np.ceil(np.sqrt(num_envs)))
    i = np.arange(num_envs)
    return np.stack([(i % cols) * ENV_SPACING, (i // cols) * ENV_SPACING, np.zeros(num_envs)], axis=1)


def matrix_to_wxyz(m: np.ndarray) -> np.ndarray:
    """Unit quaternions (w, x, y, z) [..., 4] of rotation matrices [..., 3, 3] (Shepperd's method, vectorised)."""
    m = np.asarray(m, np.float64)
    t = np.stack([1 + m[..., 0, 0] + m[..., 1, 1] + m[..., 2, 2], 1 + m[..., 0, 0] - m[..., 1, 1] - m[..., 2, 2],
                  1 - m[..., 0, 0] + m[..., 1, 1] - m[..., 2, 2], 1 - m[..., 0, 0] - m[..., 1, 1] + m[..., 2, 2]], -1)
    k = np.argmax(t, axis=-1)[..., None]
    r = np.sqrt(np.maximum(np.take_along_axis(t, k, -1), 1e-12)) * 2  # 4 x the largest component
    d = {"w": (m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0], m[..., 1, 0] - m[..., 0, 1]),
         "x": (m[..., 0, 1] + m[..., 1, 0], m[..., 0, 2] + m[..., 2, 0]),
         "y": (m[..., 1, 2] + m[..., 2, 1],)}
    r = r[..., 0]
    q = np.empty(m.shape[:-2] + (4,))
    cases = [  # the quaternion when w, x, y or z is the largest component
        (r / 4, d["w"][0] / r, d["w"][1] / r, d["w"][2] / r),
        (d["w"][0] / r, r / 4, d["x"][0] / r, d["x"][1] / r),
        (d["w"][1] / r, d["x"][0] / r, r / 4, d["y"][0] / r),
        (d["w"][2] / r, d["x"][1] / r, d["y"][0] / r, r / 4),
    ]
    for case, parts in enumerate(cases):
        sel = k[..., 0] == case
        q[sel] = np.stack([np.broadcast_to(p, r.shape)[sel] for p in parts], -1)
    return q


class EnvPoses:
    """Geom poses of every env from the batch's qpos rows (kinematics only); full physics for one env on demand."""

    def __init__(self, model: mujoco.MjModel, num_envs: int):
        self.model = model
        self.datas = [mujoco.MjData(model) for _ in range(num_envs)]
        self.offsets = env_offsets(num_envs)

    def update(self, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(geom positions [N, ngeom, 3] with the env offsets added, geom rotations [N, ngeom, 3, 3])."""
        for d, q in zip(self.datas, qpos, strict=True):
            d.qpos[:] = q
            mujoco.mj_kinematics(self.model, d)
        pos = np.stack([d.geom_xpos for d in self.datas]) + self.offsets[:, None]
        rot = np.stack([d.geom_xmat for d in self.datas]).reshape(len(self.datas), -1, 3, 3)
        return pos, rot

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


def instance_poses(shape: Shape, pos: np.ndarray, rot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions [N * k, 3] and quaternions [N * k, 4] of a shape's k instances in each of N envs."""
    g = np.asarray(shape.geoms)
    r = rot[:, g]                                                     # [N, k, 3, 3]
    p = pos[:, g] + np.einsum("nkij,kj->nki", r, np.asarray(shape.offsets))
    return p.reshape(-1, 3), matrix_to_wxyz(r).reshape(-1, 4)
