"""The seed system (UniLab 1.5.2) installed apart, for measuring this project beside it.

    python -m benchmarks.unilab_setup [--venv .venv-unilab]       # what `make unilab` runs

1. A venv of its own, never the project's (the seed pins MuJoCo 3.11, this project needs 4): the
   pinned torch first (the local CPU wheel where there is one), then `unilab[mujoco]==1.5.2`.
2. Stand-in meshes: the seed fetches its robots' meshes from a model hub at run time, which an offline
   machine cannot reach.  They are visual (group 2, no contact, no mass), so every mesh file its robot
   MJCF names is written as a 2 cm cube where it is missing.
3. The working directory its configs expect: a `work` folder in the seed's venv holding `src/unilab`, a
   link to the installed package (its task configs name `src/unilab/...` relative to the working directory).
4. A check in the seed's own Python: each robot's flat scene loads, and its total mass and colliding geoms
   (name, type, size, body) are those of the same scene with every mesh geom removed, so the stand-ins
   change no physics.

Done once: a stamp in the venv records what was installed and checked; a later call with the stamp in
place checks the link and the stand-ins and returns in seconds.  Any failure is one line on stderr naming
the step, exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

UNILAB_SPEC = "unilab[mujoco]==1.5.2"
TORCH_SPEC = "torch==2.13.0"
STAMP = ".appo-unilab.json"
SCENES = ("g1/scene_flat.xml", "go2/scene_flat.xml")  # the robots of g1_walk_flat and go2_joystick_flat
CUBE = 0.02  # m, the stand-in mesh's edge


class SetupError(RuntimeError):
    """A step of the seed's set-up failed; the message names the step."""


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def run(cmd: list[str], step: str, **kwargs) -> str:
    """Run `cmd`; its stdout, or a SetupError naming `step` with the command's last error line."""
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        last = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
        raise SetupError(f"{step} failed (exit {proc.returncode}): {last}")
    return proc.stdout


def install(venv: Path) -> None:
    """The venv with the pinned torch, then the seed."""
    if not venv_python(venv).exists():
        run([sys.executable, "-m", "venv", str(venv)], "creating the seed's venv")
    py = str(venv_python(venv))
    run([py, "-m", "pip", "install", "-q", TORCH_SPEC], f"installing {TORCH_SPEC} into {venv}")
    run([py, "-m", "pip", "install", "-q", UNILAB_SPEC, TORCH_SPEC], f"installing {UNILAB_SPEC} into {venv}")


def package_dir(venv: Path) -> Path:
    """Where the seed's `unilab` package is installed in its venv."""
    out = run([str(venv_python(venv)), "-c", "import importlib.util as u; print(u.find_spec('unilab').origin)"],
              f"finding the unilab package in {venv}")
    return Path(out.strip()).parent


def mesh_files(robots: Path) -> list[Path]:
    """Every mesh file the MJCF files under `robots` name, resolved against their robot folder's meshdirs."""
    wanted: list[Path] = []
    for folder in sorted(p for p in robots.iterdir() if p.is_dir()):
        meshdirs, files = set(), set()
        for xml in folder.rglob("*.xml"):
            root = ET.parse(xml).getroot()
            meshdirs |= {c.get("meshdir") for c in root.iter("compiler") if c.get("meshdir")}
            files |= {m.get("file") for m in root.iter("mesh") if m.get("file")}
        for meshdir in sorted(meshdirs) or ["."]:
            wanted += [(folder / meshdir / f).resolve() for f in sorted(files)]
    return wanted


def cube(path: Path) -> bytes:
    """A cube of edge CUBE as binary STL or OBJ text, by the file's suffix."""
    h = CUBE / 2
    v = [(x, y, z) for x in (-h, h) for y in (-h, h) for z in (-h, h)]
    faces = [(0, 1, 3), (0, 3, 2), (4, 6, 7), (4, 7, 5), (0, 4, 5), (0, 5, 1),
             (2, 3, 7), (2, 7, 6), (0, 2, 6), (0, 6, 4), (1, 5, 7), (1, 7, 3)]
    if path.suffix.lower() == ".obj":
        return ("".join(f"v {x} {y} {z}\n" for x, y, z in v)
                + "".join(f"f {a + 1} {b + 1} {c + 1}\n" for a, b, c in faces)).encode()
    body = b"".join(struct.pack("<12fH", 0, 0, 0, *v[a], *v[b], *v[c], 0) for a, b, c in faces)
    return b"appo stand-in".ljust(80, b" ") + struct.pack("<I", len(faces)) + body


def write_stand_ins(package: Path) -> int:
    """Stand-in meshes where the seed's robot meshes are missing; how many were written."""
    written = 0
    for path in mesh_files(package / "assets" / "robots"):
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(cube(path))
            written += 1
    return written


def link_workdir(venv: Path, package: Path) -> Path:
    """<venv>/work with src/unilab pointing at the installed package; the working directory to run the seed in."""
    src = venv / "work" / "src"
    src.mkdir(parents=True, exist_ok=True)
    link = src / "unilab"
    if link.is_symlink() and link.resolve() != package.resolve():
        link.unlink()
    if not link.exists():
        link.symlink_to(package, target_is_directory=True)
    return venv / "work"


# Run in the seed's Python (its MuJoCo 3.11): each scene with stand-ins against the same scene, meshes removed.
_CHECK = r"""
import json, sys, mujoco
out = {}
for scene in sys.argv[2:]:
    path = sys.argv[1] + "/" + scene
    full = mujoco.MjModel.from_xml_path(path)
    spec = mujoco.MjSpec.from_file(path)
    for g in [g for g in spec.geoms if g.type == mujoco.mjtGeom.mjGEOM_MESH]:
        spec.delete(g)
    bare = spec.compile()
    def colliding(m):
        return sorted((m.geom(i).name, int(m.geom_type[i]), [round(float(s), 9) for s in m.geom_size[i]],
                       m.body(m.geom_bodyid[i]).name) for i in range(m.ngeom)
                      if m.geom_contype[i] or m.geom_conaffinity[i])
    out[scene] = {"mass": float(full.body_mass.sum()), "bare_mass": float(bare.body_mass.sum()),
                  "same_colliding": colliding(full) == colliding(bare), "colliding": len(colliding(full))}
print(json.dumps(out))
"""


def check_physics(venv: Path, package: Path) -> dict:
    """Per scene: total mass with the stand-ins and without any mesh, and whether the colliding geoms agree."""
    out = run([str(venv_python(venv)), "-c", _CHECK, str(package / "assets" / "robots"), *SCENES],
              "loading the seed's robot scenes with stand-in meshes")
    result = json.loads(out.strip().splitlines()[-1])
    for scene, r in result.items():
        if abs(r["mass"] - r["bare_mass"]) > 1e-9 or not r["same_colliding"]:
            raise SetupError(f"stand-in meshes change {scene}: mass {r['mass']} against {r['bare_mass']} without "
                             f"meshes, colliding geoms {'equal' if r['same_colliding'] else 'different'}")
    return result


def setup(venv: Path) -> dict:
    """Install (once), stand-ins, working directory, check; the stamp's content."""
    stamp = venv / STAMP
    if stamp.is_file():
        recorded = json.loads(stamp.read_text())
        if recorded.get("unilab") == UNILAB_SPEC and recorded.get("torch") == TORCH_SPEC:
            package = Path(recorded["package"])
            write_stand_ins(package)  # cheap: only files missing since are written
            link_workdir(venv, package)
            return recorded
    install(venv)
    package = package_dir(venv)
    written = write_stand_ins(package)
    workdir = link_workdir(venv, package)
    scenes = check_physics(venv, package)
    recorded = {"unilab": UNILAB_SPEC, "torch": TORCH_SPEC, "package": str(package), "workdir": str(workdir),
                "stand_in_meshes": written, "scenes": scenes}
    stamp.write_text(json.dumps(recorded, indent=2))
    return recorded


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.unilab_setup", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--venv", type=Path, default=Path(os.environ.get("UNILAB_VENV", ".venv-unilab")),
                   help="the seed's own venv (default .venv-unilab, or $UNILAB_VENV)")
    args = p.parse_args(argv)
    try:
        done = setup(args.venv.resolve())
    except (SetupError, OSError, ET.ParseError) as exc:
        print(f"error: the seed's set-up: {exc}", file=sys.stderr)
        return 1
    print(f"UniLab ready: {done['unilab']} in {args.venv} (package {done['package']}); run it from {done['workdir']}")
    for scene, r in done["scenes"].items():
        print(f"  {scene}: total mass {r['mass']:.6f} kg, {r['colliding']} colliding geoms, "
              "unchanged by the stand-in meshes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
