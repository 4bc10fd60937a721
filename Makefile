# Two commands do everything on a fresh machine: `make train` and `make test`.
# TORCH_SPEC pins the torch build; override it (e.g. TORCH_SPEC='torch>=2.4') to pick another.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
# The reference learner of benchmarks/vs_rslrl.py; installed without its declared dependencies (see `rslrl`).
RSLRL_SPEC ?= rsl-rl-lib==5.4.2
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The venv's own torch as a requirement, so that no extra's dependency makes pip replace it.
KEEP_TORCH = "torch==$$($(PY) -c 'import sys, importlib.metadata as m; print(m.version(sys.argv[1]))' torch)"

.PHONY: install rslrl unilab train lint sysdeps test test-benchmarks test-containers bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned, so the learner extra's "torch>=2.4" is already met and no
	# multi-GB CUDA build gets resolved where a local CPU wheel exists.
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[learner,test,rslrl,motrix]" $(KEEP_TORCH)
	$(PY) -m pip install -q --no-deps "$(RSLRL_SPEC)"
	touch $(STAMP)

install: $(STAMP)

# rsl_rl into an existing venv: the `rslrl` extra (what its PPO path imports), then the wheel with --no-deps, since
# it declares torchvision, which it never imports there and which would pull a second, multi-GB torch build.
rslrl:
	@test -x $(PY) || { echo "no venv at $(VENV) (with torch): run make install first"; exit 1; }
	$(PY) -m pip install -q -e ".[rslrl]" $(KEEP_TORCH)
	$(PY) -m pip install -q --no-deps "$(RSLRL_SPEC)"

# The seed system (UniLab 1.5.2) in a venv of its own (UNILAB_VENV), ready to run offline, for the
# benchmarks that measure this project beside it; done once, later calls take seconds. Not part of `make test`.
UNILAB_VENV ?= .venv-unilab
unilab: $(STAMP)
	$(PY) -m benchmarks.unilab_setup --venv $(UNILAB_VENV)

train: $(STAMP)
	$(VENV)/bin/appo-train $(TRAIN_ARGS)

# ruff's rules and their reasons are in pyproject.toml ([tool.ruff]).
lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The packet-loss tests drop packets with iptables inside the lab's network namespaces, and appo-play's page
# tests drive Debian's chromium (headless, WebGL in software): Debian's packages, installed here when missing
# and this is root on Debian; elsewhere the packet-loss tests skip, saying why, and the page tests fail naming it.
sysdeps:
	@command -v iptables >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { apt-get install -y -q iptables >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q iptables >/dev/null 2>&1; }; }; } || \
	  echo "note: iptables is not installed: the packet-loss tests will skip"
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && \
	      DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1; }; }; } || \
	  echo "note: chromium is not installed: the appo-play page tests will fail (install Debian's chromium)"

test: lint sysdeps
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The container stage: builds the base images (containers/build-bases.sh) and the three images,
# then runs tests/containers on a local Docker engine, started here (host network only) and
# installed from Debian's packages when missing; minutes, so not part of `make test`.
test-containers: $(STAMP)
	PY="$(abspath $(PY))" containers/test-containers.sh

# The short runs of the benchmarks whose every part make test already checks on its own (minutes each).
test-benchmarks: sysdeps
	$(PY) -m pytest -q -m benchmark $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks.physics --task half_cheetah --num-envs 512

clean:
	rm -rf $(VENV) logs
