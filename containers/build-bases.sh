#!/usr/bin/env bash
# Base images for sites without registry access, built from a Debian mirror and a Python
# package index (a mirror of it, or the public one) plus, optionally, a local wheel directory.
#
#   containers/build-bases.sh [options] > bases.env     # then: containers/build-images.sh --bases bases.env
#
# It builds (run as root: debootstrap needs it; a Docker engine must be running):
#   appo-base/debian:<suite>          debootstrap --variant=minbase <suite> with python3, python3-venv,
#                                     python3-pip, ca-certificates; apt pointed at the mirror; docs pruned
#   appo-base/python:<suite>          in place of python:3.11-slim-bookworm (PYTHON_IMAGE): Debian's
#                                     Python as /usr/local/bin/python3, pip not externally managed
#   appo-base/python-build:<suite>    the same plus the wheel directory at /opt/wheels as pip's
#                                     find-links (PYTHON_BUILD_IMAGE: the build stages only, so the
#                                     wheels never reach the collector image)
#   appo-base/pytorch:<torch>-cpu     in place of the PyTorch image (PYTORCH_IMAGE): the same Debian
#                                     with torch pip-installed into /usr/local (Python stays
#                                     externally managed, as in the PyTorch image)
# Every base's pip uses the given index (/etc/pip.conf) and trusts the given CA certificates,
# and apt inside uses the given mirror.  An image whose inputs (label org.appo.base.inputs)
# are unchanged is not built again; --force rebuilds.
#
# Prints the build arguments for the project's Dockerfiles on stdout, NAME=VALUE a line:
#   PYTHON_IMAGE, PYTHON_BUILD_IMAGE, PYTORCH_IMAGE, TORCH_VERSION (<v>+cpu: the CPU build only),
#   TORCH_INDEX_URL (empty: the eval stage takes torch from the base's pip configuration).
#
# Options (each also an environment variable):
#   --debian-mirror URL    APPO_DEBIAN_MIRROR    default: the host's apt source (else deb.debian.org)
#   --security-mirror URL  APPO_SECURITY_MIRROR  default: the host's, else <mirror>-security
#   --suite NAME           APPO_DEBIAN_SUITE     default: bookworm (Python 3.11, as the public base)
#   --index-url URL        APPO_PIP_INDEX_URL    default: https://pypi.org/simple; "none": no index at
#                                                all, every wheel from --wheels (see the end)
#   --wheels DIR           APPO_WHEELS           wheels the index lacks (here: the CPU build of torch)
#   --ca-cert FILE         APPO_CA_CERTS         CA certificates to trust inside, repeatable (space-
#                                                separated in the variable); default: the host's
#                                                /usr/local/share/ca-certificates/*.crt (a site's own
#                                                CAs, e.g. of a TLS-inspecting proxy)
#   --torch-version V      APPO_TORCH_VERSION    default: the TORCH_VERSION of Dockerfile.collector
#   --force                                      rebuild every base
#
# With no index at all (--index-url none) DIR must hold every wheel the images install, torch's
# dependencies and the build backend included, e.g. (in this repository, with Python 3.11):
#   pip download -d DIR "torch==<v>+cpu" ".[learner,tools]" "setuptools>=69" wheel
# The PyTorch base then keeps those wheels (but torch's) for Dockerfile.learner's own install, so a
# learner image built on it is larger by their size.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
# shellcheck source=containers/lib.sh
. "$HERE/lib.sh"

apt_uri() {  # the first URIs of the host's deb822 sources whose Suites match $1 (grep -E)
    awk -v want="$1" 'BEGIN { RS = ""; FS = "\n" }
        { uri = ""; suites = "";
          for (i = 1; i <= NF; i++) { if ($i ~ /^URIs:/) { uri = $i; sub(/^URIs: */, "", uri); sub(/ .*/, "", uri) }
                                      if ($i ~ /^Suites:/) suites = $i }
          if (uri != "" && suites ~ want) { print uri; exit } }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true
}

MIRROR=${APPO_DEBIAN_MIRROR:-}
SECURITY=${APPO_SECURITY_MIRROR:-}
SUITE=${APPO_DEBIAN_SUITE:-bookworm}
INDEX_URL=${APPO_PIP_INDEX_URL:-https://pypi.org/simple}
WHEELS=${APPO_WHEELS:-}
read -r -a CA_CERTS <<<"${APPO_CA_CERTS:-}"
TORCH_VERSION=${APPO_TORCH_VERSION:-$(sed -n 's/^ARG TORCH_VERSION=//p' "$ROOT/Dockerfile.collector")}
FORCE=0
while [ $# -gt 0 ]; do
    case $1 in
        --debian-mirror) MIRROR=$2; shift 2 ;;
        --security-mirror) SECURITY=$2; shift 2 ;;
        --suite) SUITE=$2; shift 2 ;;
        --index-url) INDEX_URL=$2; shift 2 ;;
        --wheels) WHEELS=$2; shift 2 ;;
        --ca-cert) CA_CERTS+=("$2"); shift 2 ;;
        --torch-version) TORCH_VERSION=$2; shift 2 ;;
        --force) FORCE=1; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
[ -n "$MIRROR" ] || MIRROR=$(apt_uri "$SUITE( |$)")
MIRROR=${MIRROR:-http://deb.debian.org/debian}
[ -n "$SECURITY" ] || SECURITY=$(apt_uri "$SUITE-security")
SECURITY=${SECURITY:-${MIRROR%/}-security}
if [ ${#CA_CERTS[@]} -eq 0 ] && [ -z "${APPO_CA_CERTS+set}" ]; then
    for f in /usr/local/share/ca-certificates/*.crt; do [ -f "$f" ] && CA_CERTS+=("$f"); done
fi
[ -z "$WHEELS" ] || [ -d "$WHEELS" ] || die "--wheels $WHEELS is not a directory"
[ "$INDEX_URL" != none ] || [ -n "$WHEELS" ] || die "--index-url none needs --wheels DIR (holding every wheel)"
for f in "${CA_CERTS[@]}"; do [ -f "$f" ] || die "--ca-cert $f: no such file"; done
pick_docker || die "no docker CLI that can build with BuildKit (install the buildx plugin, or Debian's docker.io)"
"$DOCKER" info >/dev/null 2>&1 || die "no Docker engine answers ($DOCKER info)"
read -r -a NET <<<"$(build_network_args)"

PY_TAG=appo-base/python:$SUITE
PY_BUILD_TAG=appo-base/python-build:$SUITE
DEBIAN_TAG=appo-base/debian:$SUITE
TORCH_TAG=appo-base/pytorch:${TORCH_VERSION}-cpu
TORCH_SPEC="torch==${TORCH_VERSION}+cpu"
PACKAGES=python3,python3-venv,python3-pip,ca-certificates
WORK=$(mktemp -d "${TMPDIR:-/tmp}/appo-bases.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# ---------------------------------------------------------------- inputs of each image
# Recipe versions: bump one when its recipe below changes in a way the other inputs do not show.
ROOTFS_RECIPE=1 DERIVED_RECIPE=1
ca_digest=$(cat /dev/null "${CA_CERTS[@]}" | sha256sum | cut -c1-16)
wheels_listing=$([ -z "$WHEELS" ] || (cd "$WHEELS" && find . -maxdepth 1 -type f -name '*.whl' -printf '%f %s\n' | sort))
hash_of() { printf '%s\n' "$@" | sha256sum | cut -c1-16; }
DEBIAN_INPUTS=$(hash_of rootfs-$ROOTFS_RECIPE "$SUITE" "$MIRROR" "$SECURITY" "$PACKAGES" "$ca_digest" "$INDEX_URL")
PY_INPUTS=$(hash_of python-$DERIVED_RECIPE "$DEBIAN_INPUTS")
PY_BUILD_INPUTS=$(hash_of python-build-$DERIVED_RECIPE "$PY_INPUTS" "$wheels_listing")
TORCH_INPUTS=$(hash_of pytorch-$DERIVED_RECIPE "$DEBIAN_INPUTS" "$TORCH_SPEC" "$wheels_listing")

fresh() {  # image, inputs: true when the image exists with these inputs (and --force is not given)
    [ "$FORCE" = 0 ] && [ "$(image_inputs "$1")" = "$2" ]
}

build_image() {  # tag, inputs, context dir, Dockerfile text on stdin
    local tag=$1 inputs=$2 context=$3 t0
    cat >"$WORK/Dockerfile.$inputs"
    t0=$(date +%s.%N)
    nice -n 10 "${BUILD_CMD[@]}" "${NET[@]}" --progress plain --label "$INPUTS_LABEL=$inputs" \
        -f "$WORK/Dockerfile.$inputs" -t "$tag" "$context" >"$WORK/build.log" 2>&1 \
        || { tail -40 "$WORK/build.log" >&2; die "building $tag failed"; }
    say "built $tag in $(seconds_since "$t0") s"
}

# ---------------------------------------------------------------- Debian with Python
if fresh "$DEBIAN_TAG" "$DEBIAN_INPUTS"; then
    say "$DEBIAN_TAG is up to date"
else
    command -v debootstrap >/dev/null 2>&1 || die "debootstrap is missing (apt-get install debootstrap)"
    [ "$(id -u)" = 0 ] || die "debootstrap needs root"
    ROOTFS=$WORK/rootfs
    say "debootstrap $SUITE from $MIRROR (a few minutes)"
    t0=$(date +%s.%N)
    nice -n 10 debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR" \
        >"$WORK/debootstrap.log" 2>&1 || { tail -40 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }
    say "debootstrap took $(seconds_since "$t0") s"
    rm -f "$ROOTFS/etc/apt/sources.list"
    cat >"$ROOTFS/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    # As in Debian's own container images: no package caches, documentation or man pages, now
    # or for packages installed later (the eval stage's Mesa).
    cat >"$ROOTFS/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    cat >"$ROOTFS/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
    find "$ROOTFS/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete 2>/dev/null || true
    find "$ROOTFS/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
    rm -rf "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* "$ROOTFS"/usr/share/locale/* \
        "$ROOTFS"/usr/share/lintian/* "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/cache/apt/*.bin \
        "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/log/*.log "$ROOTFS"/var/cache/debconf/*-old
    find "$ROOTFS/usr/lib/python3" "$ROOTFS"/usr/lib/python3.* -name __pycache__ -type d -prune -exec rm -rf {} + 2>/dev/null || true
    if [ ${#CA_CERTS[@]} -gt 0 ]; then
        for f in "${CA_CERTS[@]}"; do cp "$f" "$ROOTFS/usr/local/share/ca-certificates/$(basename "${f%.crt}").crt"; done
        chroot "$ROOTFS" update-ca-certificates >/dev/null 2>&1 || die "update-ca-certificates failed in the rootfs"
    fi
    # pip everywhere in these bases: the site's index, the system's CA bundle (with the site's CAs).
    if [ "$INDEX_URL" = none ]; then
        printf '[global]\nno-index = true\n' >"$ROOTFS/etc/pip.conf"
    else
        printf '[global]\nindex-url = %s\ncert = /etc/ssl/certs/ca-certificates.crt\n' "$INDEX_URL" \
            >"$ROOTFS/etc/pip.conf"
    fi
    tar --numeric-owner -C "$ROOTFS" -c . | "$DOCKER" import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change "LABEL $INPUTS_LABEL=$DEBIAN_INPUTS" \
        --change 'CMD ["python3"]' - "$DEBIAN_TAG" >/dev/null || die "docker import failed"
    rm -rf "$ROOTFS"
    say "imported $DEBIAN_TAG"
fi

# ---------------------------------------------------------------- python (PYTHON_IMAGE)
if fresh "$PY_TAG" "$PY_INPUTS"; then
    say "$PY_TAG is up to date"
else
    mkdir -p "$WORK/empty"
    build_image "$PY_TAG" "$PY_INPUTS" "$WORK/empty" <<EOF
# In place of python:3.11-slim-$SUITE: Debian's Python 3, found first as /usr/local/bin/python3,
# with pip not externally managed (the project's Dockerfiles make their own venv anyway).
FROM $DEBIAN_TAG
RUN rm -f /usr/lib/python3.*/EXTERNALLY-MANAGED \\
    && ln -sf /usr/bin/python3 /usr/local/bin/python3 \\
    && ln -sf /usr/bin/python3 /usr/local/bin/python
CMD ["python3"]
EOF
fi

# ---------------------------------------------------------------- python-build (PYTHON_BUILD_IMAGE)
if fresh "$PY_BUILD_TAG" "$PY_BUILD_INPUTS"; then
    say "$PY_BUILD_TAG is up to date"
elif [ -z "$WHEELS" ]; then
    "$DOCKER" tag "$PY_TAG" "$PY_BUILD_TAG"  # nothing to add
else
    build_image "$PY_BUILD_TAG" "$PY_BUILD_INPUTS" "$WHEELS" <<EOF
# $PY_TAG plus the site's wheel directory as pip's find-links: the image the project's venvs
# are built in (PYTHON_BUILD_IMAGE); the runtime stages start from $PY_TAG, without the wheels.
FROM $PY_TAG
COPY *.whl /opt/wheels/
RUN printf 'find-links = /opt/wheels\n' >>/etc/pip.conf
EOF
fi

# ---------------------------------------------------------------- pytorch (PYTORCH_IMAGE)
if fresh "$TORCH_TAG" "$TORCH_INPUTS"; then
    say "$TORCH_TAG is up to date"
else
    context=$WHEELS
    [ -n "$context" ] || { mkdir -p "$WORK/empty"; context=$WORK/empty; }
    keep_wheels=""
    if [ "$INDEX_URL" = none ]; then  # Dockerfile.learner's install has no index to go to: keep the wheels
        keep_wheels="mkdir -p /opt/wheels && printf 'find-links = /opt/wheels\\n' >>/etc/pip.conf \\
    && find /wheels -maxdepth 1 -name '*.whl' ! -name 'torch-*' -exec cp -t /opt/wheels/ {} + \\
    && "
    fi
    build_image "$TORCH_TAG" "$TORCH_INPUTS" "$context" <<EOF
# In place of the PyTorch image: the CPU build of torch pip-installed into /usr/local, Debian's
# Python left externally managed (Dockerfile.learner installs with PIP_BREAK_SYSTEM_PACKAGES).
# The wheels are mounted for the install only, so they do not stay in a layer (with no index
# at all, all but torch's are kept in /opt/wheels for the learner's own install).
FROM $DEBIAN_TAG
RUN --mount=type=bind,target=/wheels \\
    ${keep_wheels}python3 -m pip install --no-cache-dir --break-system-packages --find-links /wheels "$TORCH_SPEC" \\
    && python3 -c "import torch; assert torch.version.cuda is None; print('torch', torch.__version__)"
CMD ["python3"]
EOF
fi

say "bases ready; build arguments on stdout"
cat <<EOF
PYTHON_IMAGE=$PY_TAG
PYTHON_BUILD_IMAGE=$PY_BUILD_TAG
PYTORCH_IMAGE=$TORCH_TAG
TORCH_VERSION=${TORCH_VERSION}+cpu
TORCH_INDEX_URL=
EOF
