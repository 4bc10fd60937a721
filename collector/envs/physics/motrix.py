"""MotrixSim behind the physics interface: N worlds of one batched `SceneData`, read and written in MuJoCo's layout.

MotrixSim (motrixsim on PyPI) loads the task's MJCF itself and steps every world of a batched SceneData
on its own thread pool.  It computes in float32 and stores a free joint as [x, y, z, qx, qy, qz, qw]; this
file keeps float64 mirrors of the state in MuJoCo's layout (`qpos`, `qvel`, `ctrl`) and converts at the
boundary:

- State: after every step and forward the mirrors are refilled from the engine.  A row the task changed
  (set_state, a direct write to `qpos`/`qvel`, reset) differs from the engine's copy and is pushed to the
  engine at the next step or forward; `ctrl` is pushed before every step.
- Timing, as MuJoCo's: after a step, sensors and body frames describe the state at the start of the last
  substep (MotrixSim computes them there too); forward kinematics (a forward at STAGE_POS or later, or a
  step ending at such a stage) recomputes positions, velocities and their sensors at the current state.
  MotrixSim's forward kinematics detects no contacts and computes no accelerations, so contact sensors
  and the accelerometer keep the values of the last step.
- Sensors, in MuJoCo's sensordata columns: those MotrixSim reads as MuJoCo does (gyro, velocimeter,
  accelerometer, frame position, axes and velocities, geom-pair contacts) come from its own sensors.  The
  rest are removed from the MJCF it loads (it panics on a sensor of the world body and on subtree contact
  sensors, and its subtree angular momentum is not MuJoCo's): frame axes of the world and the subtree
  angular momentum are computed here from link and site states; a subtree's contacts with a geom or with
  itself are combined here from one MotrixSim contact sensor per geom or body pair (_PairedContact).
- Body frames: xpos, xquat (w, x, y, z), cvel (MuJoCo's [angular, linear] at the subtree CoM of the
  body's root) and subtree_com, from MotrixSim's link states and the per-env body CoMs.
- Fields: per-env actuator gains (general actuators: gain, bias, stiffness, damping), geom friction and
  body CoM map to MotrixSim's per-world overrides; a change MotrixSim cannot express raises.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

# MotrixSim warns on stderr, at every model load, of each MJCF option it ignores (docs/design.md lists them);
# a collector loads one per env group, so only its errors are shown unless RUST_LOG says otherwise.
os.environ.setdefault("RUST_LOG", "error")

import motrixsim  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from motrixsim import query  # noqa: E402

from collector.envs.physics.interface import STAGE_NONE, STAGE_POS, BackgroundStep  # noqa: E402

_F32 = np.float32
_SENS = mujoco.mjtSensor
_OBJ = mujoco.mjtObj
# Sensor types MotrixSim 0.10.1 reads by name in MuJoCo's frame and units (checked against MuJoCo by
# tests/collector/test_physics_motrix.py), unless they refer to the world body.
_NATIVE = {_SENS.mjSENS_GYRO, _SENS.mjSENS_VELOCIMETER, _SENS.mjSENS_ACCELEROMETER, _SENS.mjSENS_FRAMEPOS,
           _SENS.mjSENS_FRAMEXAXIS, _SENS.mjSENS_FRAMEYAXIS, _SENS.mjSENS_FRAMEZAXIS, _SENS.mjSENS_FRAMELINVEL,
           _SENS.mjSENS_FRAMEANGVEL}
_AXES = {_SENS.mjSENS_FRAMEXAXIS: 0, _SENS.mjSENS_FRAMEYAXIS: 1, _SENS.mjSENS_FRAMEZAXIS: 2}
_FIELDS = ("actuator_gainprm", "actuator_biasprm", "geom_friction", "body_ipos")
_BODY_OUTPUTS = ("xpos", "xquat", "cvel", "subtree_com")
_POOL_THREADS: list[int] = []  # the size MotrixSim's one thread pool of this process was made with


def init_pool(nthread: int) -> None:
    """Make MotrixSim's process-wide thread pool with `nthread` workers, once (later calls keep the first)."""
    if _POOL_THREADS:
        return
    with contextlib.suppress(RuntimeError):  # a MotrixSim call before us made the default pool; it stays
        motrixsim.init_thread_pool(max(1, nthread))
    _POOL_THREADS.append(max(1, nthread))


class MotrixPhysics(BackgroundStep):
    """nsim MotrixSim worlds of the MJCF `xml` (compiled by MuJoCo as `model`), in MuJoCo's layout.

    `stepper` is the one thread that runs `step_async` (None: the batch makes its own on first use and
    shuts it down on close).  `qpos`, `qvel`, `ctrl`, `output()` and `field()` are this object's own
    arrays: they must not be used between `step_async()` and `wait()`.
    """

    def __init__(self, model: mujoco.MjModel, xml: str, nsim: int, nthread: int,
                 stepper: ThreadPoolExecutor | None = None):
        init_pool(nthread)
        self.model, self.nsim, self.nthread = model, nsim, nthread
        self._sensors = _SensorPlan(model)
        self.scene = motrixsim.load_mjcf_str(self._sensors.motrix_xml(xml))
        self._to_motrix, self._from_motrix, self._quats = _layout(model, self.scene)
        self.data = motrixsim.SceneData(self.scene, batch=[nsim])
        self.qpos = np.tile(model.qpos0, (nsim, 1))
        self.qvel = np.zeros((nsim, model.nv))
        self.ctrl = np.zeros((nsim, model.nu))
        self._pushed = (self.qpos.copy(), self.qvel.copy())  # the state the engine holds, as mirrored
        self._reset_rows = np.zeros(nsim, bool)
        self._fields: dict[str, np.ndarray] = {}
        self._fields_pushed: dict[str, np.ndarray] = {}
        self._outputs: dict[str, np.ndarray] = {"sensordata": np.zeros((nsim, model.nsensordata))}
        self._bodies = _BodyFrames(model)
        self._bodies.wanted = self._sensors.needs_links
        self._query = None  # compiled at the first refresh, and again when an output needs more
        self._query_names: list[str] = []
        self._push(force=True)
        self._init_stepper(stepper)

    # ----------------------------------------------------------------- interface

    def set_state(self, ids: np.ndarray | None, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Write the state of rows `ids` (None: all); the engine gets them at the next step or forward."""
        rows = slice(None) if ids is None else ids
        self.qpos[rows] = qpos
        self.qvel[rows] = qvel

    def output(self, name: str) -> np.ndarray:
        """Read-only [N, size] view of "sensordata" or a body frame ("xpos", "xquat", "cvel", "subtree_com")."""
        if name not in self._outputs:
            if name not in _BODY_OUTPUTS:
                raise ValueError(f"MotrixSim has no output {name!r}; it has sensordata and {', '.join(_BODY_OUTPUTS)}")
            self._outputs[name] = np.zeros((self.nsim, self._bodies.size(name)))
            self._bodies.wanted = True
            self._query = None  # the next refresh reads the link states too
            self._refresh(None)
        view = self._outputs[name].view()
        view.flags.writeable = False
        return view

    def field(self, name: str) -> np.ndarray:
        """Writable [N, size] per-env values of a model field (`_FIELDS`), pushed at each env's next call."""
        if name not in _FIELDS:
            raise ValueError(f"MotrixSim cannot vary model field {name!r} per env; it can vary {', '.join(_FIELDS)}")
        if name not in self._fields:
            values = np.tile(getattr(self.model, name).ravel(), (self.nsim, 1))
            self._fields[name] = values
            self._fields_pushed[name] = values.copy()
        return self._fields[name]

    def step(self, nstep: int, ids: np.ndarray | None = None, stage: int = STAGE_NONE,
             after_substep: Callable[[int], None] | None = None) -> None:
        """nstep substeps of rows `ids` (None: all), then forward kinematics when `stage` asks for it."""
        self._check_idle()
        self._step(nstep, ids, stage, after_substep)

    def forward(self, stage: int, ids: np.ndarray | None = None) -> None:
        """Push written rows; from STAGE_POS on, forward kinematics of rows `ids`; then refresh their outputs."""
        self._check_idle()
        self._push()
        if stage >= STAGE_POS:
            self.scene.forward_kinematic(self._rows(ids))
            self._pull_state(ids)
        self._refresh(ids)

    def reset(self, ids: np.ndarray | None = None) -> None:
        """Rows `ids` (None: all) back to the model's defaults (qpos0, zero velocity and controls)."""
        self._check_idle()
        rows = slice(None) if ids is None else ids
        self.qpos[rows] = self.model.qpos0
        self.qvel[rows] = 0.0
        self.ctrl[rows] = 0.0
        self._reset_rows[rows] = True

    def close(self) -> None:
        """Join a step in flight, stop an own stepper thread and drop the engine's data."""
        self._join_stepper()
        self.data = None
        self.scene = None

    # ------------------------------------------------------------------ stepping

    def _step(self, nstep: int, ids: np.ndarray | None, stage: int,
              after_substep: Callable[[int], None] | None) -> None:
        self._push()
        self.data.actuator_ctrls = np.ascontiguousarray(self.ctrl, _F32)
        rows = self._rows(ids)
        if after_substep is None:
            self.scene.step_n(rows, nstep)
            self._finish_step(ids, stage)
            return
        for k in range(nstep):
            self.scene.step(rows)
            self._finish_step(ids, stage if k == nstep - 1 else STAGE_NONE)
            after_substep(k)

    def _finish_step(self, ids: np.ndarray | None, stage: int) -> None:
        self._pull_state(ids)
        if stage >= STAGE_POS:
            self.scene.forward_kinematic(self._rows(ids))
        self._refresh(ids)

    def _rows(self, ids: np.ndarray | None):
        return self.data if ids is None else self.data[motrixsim.DisjointIndices(np.asarray(ids, np.int64))]

    # ------------------------------------------------------------------ state

    def _push(self, force: bool = False) -> None:
        """Hand the engine every row the task wrote since the engine's state was last mirrored, and changed fields."""
        pushed_qpos, pushed_qvel = self._pushed
        changed = self._reset_rows | np.any(self.qpos != pushed_qpos, axis=1) | np.any(self.qvel != pushed_qvel, axis=1)
        if force or changed.any():
            ids = np.arange(self.nsim) if force else np.flatnonzero(changed)
            data = self.data if len(ids) == self.nsim else self.data[motrixsim.DisjointIndices(ids)]
            qpos = self.qpos[ids]
            for cols in self._quats:  # MotrixSim refuses a quaternion off unit norm by 1e-4; MuJoCo normalises
                norm = np.linalg.norm(qpos[:, cols], axis=1, keepdims=True)
                qpos[:, cols] = np.where(norm > 1e-10, qpos[:, cols] / np.maximum(norm, 1e-10), [1.0, 0.0, 0.0, 0.0])
            # MotrixSim reads the buffers' memory in C order, whatever their strides.
            qpos = np.ascontiguousarray(qpos[:, self._to_motrix], _F32)
            qvel = np.ascontiguousarray(self.qvel[ids], _F32)
            data.reset(self.scene, dof_pos=qpos, dof_vel=qvel, reset_overrides=False)
            self._reset_rows[:] = False
            pushed_qpos[ids] = self.qpos[ids]
            pushed_qvel[ids] = self.qvel[ids]
        _push_fields(self)

    def _pull_state(self, ids: np.ndarray | None) -> None:
        rows = slice(None) if ids is None else ids
        self.qpos[rows] = self.data.dof_pos[rows][:, self._from_motrix]
        self.qvel[rows] = self.data.dof_vel[rows]
        self._pushed[0][rows] = self.qpos[rows]
        self._pushed[1][rows] = self.qvel[rows]

    # ------------------------------------------------------------------ outputs

    def _refresh(self, ids: np.ndarray | None) -> None:
        """Refill the outputs of rows `ids` (None: all) from the engine's current link, site and sensor states."""
        if self._query is None:
            self._query = self._compile_query()
        if not self._query:
            return
        env_ids = None if ids is None else np.asarray(ids, np.int64)
        self._query.execute(self.data, env_ids)
        rows = slice(None) if ids is None else ids
        q = {name: np.asarray(self._query[name], np.float64)[rows] for name in self._query_names}
        fields = {name: self._fields[name][rows] for name in self._fields}
        frames = self._bodies.frames(q, fields, self.model)
        self._sensors.fill(self._outputs["sensordata"], rows, q, frames)
        for name in _BODY_OUTPUTS:
            if name in self._outputs:
                self._outputs[name][rows] = frames[name].reshape(len(frames["xpos"]), -1)

    def _compile_query(self):
        """One query of everything the outputs need (False when they need nothing)."""
        fields = {**self._sensors.query_fields(), **self._bodies.query_fields()}
        self._query_names = list(fields)
        return self.scene.compile_query(fields).allocate(self.data) if fields else False


# --------------------------------------------------------------------- layout


def _layout(model: mujoco.MjModel, scene) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Column permutations MuJoCo qpos -> MotrixSim dof_pos and back (quaternions w-last there), and the
    qpos columns of each quaternion.

    Raises when MotrixSim ordered joints, actuators or bodies otherwise than MuJoCo, which this file relies on.
    """
    names = [model.joint(j).name for j in range(model.njnt)]
    hinge_names = [n for j, n in enumerate(names) if model.jnt_type[j] != mujoco.mjtJoint.mjJNT_FREE]
    bodies = [model.body(b).name for b in range(1, model.nbody)]
    actuators = [model.actuator(a).name for a in range(model.nu)]
    mismatch = [what for what, ours, theirs in (
        ("joints", hinge_names, list(scene.joint_names)), ("bodies", bodies, list(scene.link_names)),
        ("actuators", actuators, list(scene.actuator_names)),
        ("sizes", [model.nq, model.nv, model.nu], [scene.num_dof_pos, scene.num_dof_vel, scene.num_actuators]),
    ) if ours != theirs]
    if mismatch:
        raise RuntimeError(f"MotrixSim's model differs from MuJoCo's in {', '.join(mismatch)}")
    to_motrix = np.arange(model.nq)
    quats = []
    for j in range(model.njnt):
        a = int(model.jnt_qposadr[j])
        if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            a += 3
        elif model.jnt_type[j] != mujoco.mjtJoint.mjJNT_BALL:
            continue
        to_motrix[a:a + 4] = [a + 1, a + 2, a + 3, a]
        quats.append(np.arange(a, a + 4))
    return to_motrix, np.argsort(to_motrix), quats


def _push_fields(physics: MotrixPhysics) -> None:
    """Hand MotrixSim's per-world overrides the field columns written since the last push."""
    changed = {name: np.any(values != physics._fields_pushed[name], axis=0)
               for name, values in physics._fields.items()}
    changed = {name: cols for name, cols in changed.items() if cols.any()}
    if not changed:
        return
    model, scene, data, n = physics.model, physics.scene, physics.data, physics.nsim
    if changed.keys() & {"actuator_gainprm", "actuator_biasprm"}:
        gain = physics.field("actuator_gainprm").reshape(n, model.nu, -1)
        bias = physics.field("actuator_biasprm").reshape(n, model.nu, -1)
        actuators = np.zeros(model.nu, bool)
        for name in changed.keys() & {"actuator_gainprm", "actuator_biasprm"}:
            actuators |= changed[name].reshape(model.nu, -1).any(axis=1)
        for a in np.flatnonzero(actuators):
            _push_gains(scene.actuators[a], model, a, gain[:, a], bias[:, a], data)
    if "geom_friction" in changed:
        friction = physics.field("geom_friction").reshape(n, model.ngeom, 3)
        for g in np.flatnonzero(changed["geom_friction"].reshape(model.ngeom, 3).any(axis=1)):
            scene.geoms[g].set_friction_override(data, np.ascontiguousarray(friction[:, g], _F32))
    if "body_ipos" in changed:
        ipos = physics.field("body_ipos").reshape(n, model.nbody, 3)
        for b in np.flatnonzero(changed["body_ipos"].reshape(model.nbody, 3).any(axis=1)):
            if b == 0:
                raise ValueError("the world body has no centre of mass to move")
            scene.links[b - 1].set_center_of_mass_override(data, np.ascontiguousarray(ipos[:, b], _F32))
    for name, values in physics._fields.items():
        physics._fields_pushed[name][:] = values


def _push_gains(actuator, model: mujoco.MjModel, a: int, gain: np.ndarray, bias: np.ndarray, data) -> None:
    """Per-world gain, bias, stiffness and damping of general actuator `a` from its gainprm/biasprm rows.

    MotrixSim's actuator force is gain * ctrl + bias - stiffness * q - damping * qdot: MuJoCo's fixed gain
    and affine bias (gainprm[0]; biasprm[0], -biasprm[1], -biasprm[2]); any other parameter cannot vary.
    """
    fixed = (int(model.actuator_gaintype[a]) == mujoco.mjtGain.mjGAIN_FIXED
             and int(model.actuator_biastype[a]) in (mujoco.mjtBias.mjBIAS_AFFINE, mujoco.mjtBias.mjBIAS_NONE))
    others = (np.any(gain[:, 1:] != model.actuator_gainprm[a, 1:])
              or np.any(bias[:, 3:] != model.actuator_biasprm[a, 3:]))
    if not fixed or others or actuator.typ != "general":
        raise NotImplementedError(
            f"MotrixSim cannot vary actuator {model.actuator(a).name!r} per env beyond a general actuator's fixed "
            "gain and affine bias (gainprm[0], biasprm[0:3])")
    actuator.set_gain_override(data, np.ascontiguousarray(gain[:, 0], _F32))
    actuator.set_bias_override(data, np.ascontiguousarray(bias[:, 0], _F32))
    actuator.set_stiffness_override(data, np.ascontiguousarray(-bias[:, 1], _F32))
    actuator.set_damping_override(data, np.ascontiguousarray(-bias[:, 2], _F32))


# -------------------------------------------------------------------- sensors

_FOUND, _FORCE = 1, 2                # MuJoCo's contact sensor data bits (sensor_intprm[0])
_MAXFORCE, _NETFORCE = 2, 3          # and its reduce modes (sensor_intprm[1])
_REDUCE = {_MAXFORCE: "maxforce", _NETFORCE: "netforce"}


class _SensorPlan:
    """Where each sensor of the model comes from on MotrixSim: its own sensor by name, or computed here."""

    def __init__(self, model: mujoco.MjModel):
        self.native: list[tuple[str, slice]] = []
        self.world_axes: list[tuple[slice, int, int, int]] = []  # (columns, axis, reftype, ref id)
        self.angmom: list[tuple[slice, int]] = []  # (columns, body)
        self.contacts: list[_PairedContact] = []
        self.drop: list[str] = []
        for i in range(model.nsensor):
            name, typ = model.sensor(i).name, _SENS(model.sensor_type[i])
            cols = slice(int(model.sensor_adr[i]), int(model.sensor_adr[i] + model.sensor_dim[i]))
            obj, objid = _OBJ(model.sensor_objtype[i]), int(model.sensor_objid[i])
            ref, refid = _OBJ(model.sensor_reftype[i]), int(model.sensor_refid[i])
            of_world = obj in (_OBJ.mjOBJ_BODY, _OBJ.mjOBJ_XBODY) and objid == 0
            to_world = ref in (_OBJ.mjOBJ_BODY, _OBJ.mjOBJ_XBODY) and refid == 0
            if typ == _SENS.mjSENS_CONTACT and obj == ref == _OBJ.mjOBJ_GEOM:
                self.native.append((name, cols))
            elif typ == _SENS.mjSENS_CONTACT:
                self.contacts.append(_PairedContact(model, i, cols))
                self.drop.append(name)
            elif typ in _AXES and of_world and (ref == _OBJ.mjOBJ_SITE or ref == _OBJ.mjOBJ_XBODY and refid > 0):
                self.world_axes.append((cols, _AXES[typ], ref, refid))
                self.drop.append(name)
            elif typ == _SENS.mjSENS_SUBTREEANGMOM:
                # MotrixSim 0.10.1's own value differs from MuJoCo's (tests/collector/test_physics_motrix.py).
                self.angmom.append((cols, objid))
                self.drop.append(name)
            elif typ in _NATIVE and not of_world and not to_world:
                self.native.append((name, cols))
            else:
                raise NotImplementedError(f"MotrixSim cannot provide sensor {name!r} ({typ.name} of "
                                          f"{obj.name} {objid} in {ref.name} {refid})")
        self._native_cols = np.concatenate([np.arange(c.start, c.stop) for _, c in self.native] or [[]]).astype(int)
        self.sites = sorted({refid for _, _, ref, refid in self.world_axes if ref == _OBJ.mjOBJ_SITE})
        self.needs_links = bool(self.angmom) or any(ref == _OBJ.mjOBJ_XBODY for _, _, ref, _ in self.world_axes)

    def motrix_xml(self, xml: str) -> str:
        """The MJCF for MotrixSim: the sensors it refuses (sensors of the world body, contact sensors other
        than geom pairs: it panics on them) replaced by the pair sensors this plan combines."""
        for name in self.drop:
            xml, count = re.subn(rf'\s*<\w+\s[^>]*\bname="{re.escape(name)}"[^>]*/>', "", xml)
            if count != 1:
                raise RuntimeError(f"sensor {name!r} is not one element of the MJCF text")
        added = "".join(f"\n    {element}" for c in self.contacts for element in c.elements())
        if added:
            if xml.count("</sensor>") != 1:
                raise RuntimeError("the MJCF has no single <sensor> section for MotrixSim's contact pair sensors")
            xml = xml.replace("</sensor>", added.lstrip(" ") + "\n  </sensor>")
        return xml

    def query_fields(self) -> dict:
        fields = {}
        if self.native:
            fields["sensors"] = query.SensorValues([name for name, _ in self.native])
        if self.contacts:
            fields["pairs"] = query.SensorValues([name for c in self.contacts for name in c.names])
        if self.sites:
            fields["site_rot"] = query.SiteRotation(self.sites)
        return fields

    def fill(self, sensordata: np.ndarray, rows, q: dict, frames: dict) -> None:
        """Write every sensor of `rows` from the query's values `q` and the body frames."""
        if self.native:
            cells = (rows, self._native_cols) if isinstance(rows, slice) else np.ix_(rows, self._native_cols)
            sensordata[cells] = q["sensors"]
        start = 0
        for c in self.contacts:
            width = len(c.names) * c.width
            sensordata[rows, c.cols] = c.combine(q["pairs"][:, start:start + width])
            start += width
        for cols, axis, ref, refid in self.world_axes:
            if ref == _OBJ.mjOBJ_SITE:
                quat = q["site_rot"][:, self.sites.index(refid)][:, [3, 0, 1, 2]]
            else:
                quat = frames["xquat"][:, refid]
            # The world's axis in the reference frame: R^T e_axis, i.e. row `axis` of R.
            sensordata[rows, cols] = quat_to_mat(quat)[:, axis, :]
        for cols, body in self.angmom:
            sensordata[rows, cols] = frames["angmom"](body)


class _PairedContact:
    """A MuJoCo contact sensor of a subtree against a geom or against itself, on MotrixSim as one contact
    sensor per geom pair (subtree geom, other geom) or per body pair within the subtree, combined here.

    `found` is summed.  A net force is MuJoCo's: the force the subtree exerts on the other object, world
    frame; MotrixSim reports each pair's net force on the subtree's geom in a contact frame (normal,
    tangent, normal x tangent), so it is rotated to the world and negated before the sum.  A max force is
    the pair force of largest norm in its contact frame (MuJoCo's norm; the frame's signs may differ).
    """

    def __init__(self, model: mujoco.MjModel, i: int, cols: slice):
        self.name = model.sensor(i).name
        data, reduce, num = (int(v) for v in model.sensor_intprm[i, :3])
        obj, objid = _OBJ(model.sensor_objtype[i]), int(model.sensor_objid[i])
        ref, refid = _OBJ(model.sensor_reftype[i]), int(model.sensor_refid[i])
        if data & ~(_FOUND | _FORCE) or num != 1 or (data & _FORCE and reduce not in _REDUCE):
            raise NotImplementedError(f"MotrixSim cannot provide contact sensor {self.name!r}: only found and the "
                                      "max or net force (num 1) are combined from pair sensors")
        self.cols, self.found, self.force = cols, bool(data & _FOUND), bool(data & _FORCE)
        self.reduce = reduce
        self.net = self.force and reduce == _NETFORCE
        self.width = self.found + 3 * self.force + 6 * self.net
        self.data = " ".join(["found"] * self.found + ["force"] * self.force + ["normal tangent"] * self.net)
        inside = [b for b in range(model.nbody) if _in_subtree(model, b, objid)]
        if obj == _OBJ.mjOBJ_XBODY and ref == _OBJ.mjOBJ_GEOM:
            self.kind = "geom"
            self.pairs = [(model.geom(g).name, model.geom(refid).name) for g in range(model.ngeom)
                          if model.geom_bodyid[g] in inside and _can_collide(model, g, refid)]
        elif obj == ref == _OBJ.mjOBJ_XBODY and objid == refid:
            self.kind = "body"
            self.pairs = [(model.body(a).name, model.body(b).name) for a, b in _self_body_pairs(model, inside)]
        else:
            raise NotImplementedError(f"MotrixSim cannot provide contact sensor {self.name!r} "
                                      f"({obj.name} against {ref.name})")
        if not self.pairs or not all(a and b for a, b in self.pairs):
            raise RuntimeError(f"contact sensor {self.name!r} needs named {self.kind}s that can touch")
        self.names = [f"{self.name}__motrix_pair{k}" for k in range(len(self.pairs))]

    def elements(self) -> list[str]:
        """MotrixSim's pair sensors, as MJCF elements."""
        reduce = f' reduce="{_REDUCE[self.reduce]}"' if self.force else ""
        return [f'<contact name="{name}" {self.kind}1="{a}" {self.kind}2="{b}" data="{self.data}"{reduce} num="1"/>'
                for name, (a, b) in zip(self.names, self.pairs, strict=True)]

    def combine(self, values: np.ndarray) -> np.ndarray:
        """[n, dim] MuJoCo's value from the pair sensors' [n, pairs * width]."""
        values = values.reshape(len(values), len(self.pairs), self.width)
        out = []
        if self.found:
            out.append(values[..., :1].sum(axis=1))
        if self.net:
            f, normal, tangent = (values[..., self.found + 3 * k:self.found + 3 * k + 3] for k in range(3))
            world = (f[..., :1] * normal + f[..., 1:2] * tangent + f[..., 2:] * np.cross(normal, tangent))
            out.append(-world.sum(axis=1))
        elif self.force:
            force = values[..., self.found:]
            strongest = np.argmax(np.linalg.norm(force, axis=2), axis=1)
            out.append(force[np.arange(len(force)), strongest])
        return np.concatenate(out, axis=1)


def _in_subtree(model: mujoco.MjModel, body: int, root: int) -> bool:
    while body != root and body != 0:
        body = model.body_parentid[body]
    return body == root


def _can_collide(model: mujoco.MjModel, g1: int, g2: int) -> bool:
    return bool(model.geom_contype[g1] & model.geom_conaffinity[g2]
                or model.geom_contype[g2] & model.geom_conaffinity[g1])


def _self_body_pairs(model: mujoco.MjModel, bodies: list[int]) -> list[tuple[int, int]]:
    """The pairs of `bodies` MuJoCo may find in contact: geoms that can collide, neither parent and child
    nor excluded."""
    excluded = {(int(s) >> 16, int(s) & 0xFFFF) for s in model.exclude_signature}
    pairs = set()
    for g1 in range(model.ngeom):
        for g2 in range(g1 + 1, model.ngeom):
            a, b = sorted((int(model.geom_bodyid[g1]), int(model.geom_bodyid[g2])))
            if (a == b or a not in bodies or b not in bodies or not _can_collide(model, g1, g2)
                    or model.body_parentid[b] == a or model.body_parentid[a] == b or (a, b) in excluded):
                continue
            pairs.add((a, b))
    return sorted(pairs)


# ---------------------------------------------------------------- body frames


class _BodyFrames:
    """MuJoCo's body frames (xpos, xquat, cvel, subtree_com) from MotrixSim's link states."""

    def __init__(self, model: mujoco.MjModel):
        n = model.nbody
        self.nbody = n
        self.mass = model.body_mass.copy()
        # subtree[b, i]: body i is in the subtree of body b.
        self.subtree = np.array([[_in_subtree(model, i, b) for i in range(n)] for b in range(n)], float)
        self.subtree[0] = 1.0
        # subtree_com = com_weights @ xipos: each body's subtree CoM as mass-weighted body CoMs.
        self.com_weights = self.subtree * self.mass / (self.subtree @ self.mass)[:, None]
        self.root = model.body_rootid.copy()
        self.ipos0 = model.body_ipos.copy()
        self.inertia = model.body_inertia.copy()
        self.irot = quat_to_mat(model.body_iquat)
        self.wanted = False

    def size(self, name: str) -> int:
        return self.nbody * {"xpos": 3, "xquat": 4, "cvel": 6, "subtree_com": 3}[name]

    def query_fields(self) -> dict:
        if not self.wanted:
            return {}
        return {"link_pos": query.LinkPosition(), "link_rot": query.LinkRotation(),
                "link_lin": query.LinkLinearVelocity(), "link_ang": query.LinkAngularVelocity()}

    def frames(self, q: dict, fields: dict, model: mujoco.MjModel) -> dict:
        """[n, nbody, k] arrays of the rows in `q` (empty when no link state was queried)."""
        if "link_pos" not in q:
            return {}
        n = len(q["link_pos"])
        xpos = np.zeros((n, self.nbody, 3))
        xquat = np.zeros((n, self.nbody, 4))
        xquat[:, 0, 0] = 1.0
        xpos[:, 1:] = q["link_pos"]
        xquat[:, 1:] = q["link_rot"][..., [3, 0, 1, 2]]
        rot = quat_to_mat(xquat)
        ipos = fields["body_ipos"].reshape(n, self.nbody, 3) if "body_ipos" in fields else self.ipos0
        xipos = xpos + np.einsum("nbij,nbj->nbi", rot, np.broadcast_to(ipos, xpos.shape))
        subtree_com = self.com_weights @ xipos
        ang = np.zeros((n, self.nbody, 3))
        lin = np.zeros((n, self.nbody, 3))
        ang[:, 1:] = q["link_ang"]
        lin[:, 1:] = q["link_lin"]  # of the link's origin
        # cvel's linear part is the velocity of the point at the subtree CoM of the body's root.
        vcom = lin + np.cross(ang, xipos - xpos)
        lin += np.cross(ang, subtree_com[:, self.root] - xpos)

        def angmom(body: int) -> np.ndarray:
            """MuJoCo's subtreeangmom: the subtree's angular momentum about its CoM, world frame."""
            inside = self.subtree[body] > 0
            m, c = self.mass[inside], subtree_com[:, body]
            v = np.einsum("i,nik->nk", m, vcom[:, inside]) / m.sum()
            frame = rot[:, inside] @ self.irot[inside]  # the inertia's principal axes in the world
            w = np.einsum("nbji,nbj->nbi", frame, ang[:, inside]) * self.inertia[inside]  # I w, principal axes
            spin = np.einsum("nbij,nbj->nbi", frame, w)
            orbit = m[:, None] * np.cross(xipos[:, inside] - c[:, None], vcom[:, inside] - v[:, None])
            return (spin + orbit).sum(axis=1)

        return {"xpos": xpos, "xquat": xquat, "cvel": np.concatenate([ang, lin], axis=2), "subtree_com": subtree_com,
                "angmom": angmom}


def quat_to_mat(quat: np.ndarray) -> np.ndarray:
    """[..., 3, 3] rotation matrices of unit quaternions (w, x, y, z) [..., 4]."""
    w, x, y, z = np.moveaxis(quat, -1, 0)
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], axis=-1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], axis=-1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=-1),
    ], axis=-2)
