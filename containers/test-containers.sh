#!/usr/bin/env bash
# The container stage of CI (`make test-containers`, run by .ci/run after `make test`):
#
#   1. a Docker engine: the running one, else dockerd started here on the host's network only
#      (--bridge=none --iptables=false: no docker0, no NAT rules), installed first from Debian's
#      docker.io package when missing (as root, with apt-get; policy-rc.d keeps the package from
#      starting a bridged dockerd of its own);
#   2. base images: containers/build-bases.sh (a Debian mirror, a package index and the local wheel
#      directory; unchanged bases are reused), or with APPO_CONTAINER_BASES=public the Dockerfiles'
#      own public bases;
#   3. the three images: containers/build-images.sh (layer cache reused between runs);
#   4. the container tests: pytest -m container tests/containers (tests/containers/*.py say what
#      each checks);
#   5. dockerd stopped again if this script started it (its data root, and so the cache, stays).
#
# Where no engine can run at all (not root and none running, no overlay filesystem, no
# permission for namespaces), it prints "CONTAINER TESTS SKIPPED: <reason>" and exits 0; any
# other failure fails the stage.
#
# Environment: PY (the project's venv python, default .venv/bin/python), PYTEST_ARGS,
# APPO_CONTAINER_BASES=local|public (default local), APPO_WHEELS (default: pip's find-links
# directory, which holds the CPU torch wheel here), APPO_PIP_INDEX_URL, APPO_DEBIAN_MIRROR
# (see build-bases.sh), APPO_CONTAINER_STATE (logs and timings, default /var/tmp/appo-containers).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
# shellcheck source=containers/lib.sh
. "$HERE/lib.sh"
cd "$ROOT" || exit 1

PY=${PY:-$ROOT/.venv/bin/python}
STATE=${APPO_CONTAINER_STATE:-/var/tmp/appo-containers}
BASES_MODE=${APPO_CONTAINER_BASES:-local}
mkdir -p "$STATE"
TIMINGS=$STATE/timings.txt
: >"$TIMINGS"
STAGE_T0=$(date +%s.%N)

skip() {
    local line="CONTAINER TESTS SKIPPED: $*"
    printf '\n%s\n%s\n%s\n\n' "${line//?/=}" "$line" "${line//?/=}" >&2
    exit 0
}
phase() { echo "$1 $(seconds_since "$2")" >>"$TIMINGS"; say "$1: $(seconds_since "$2") s"; }

DOCKERD_PID="" POLICY_CREATED=0
# shellcheck disable=SC2317,SC2329  # run by the EXIT trap
cleanup() {
    [ "$POLICY_CREATED" = 1 ] && rm -f /usr/sbin/policy-rc.d
    if [ -n "$DOCKERD_PID" ]; then
        kill "$DOCKERD_PID" 2>/dev/null
        for _ in $(seq 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
        say "dockerd ($DOCKERD_PID) stopped"
    fi
}
trap cleanup EXIT

# ---------------------------------------------------------------- 1 the engine
t0=$(date +%s.%N)
engine_up() { pick_docker && "$DOCKER" info >/dev/null 2>&1; }
if engine_up; then
    say "using the running Docker engine ($("$DOCKER" version --format '{{.Server.Version}}'))"
else
    [ "$(id -u)" = 0 ] || skip "no Docker engine is running and this is not root, so none can be started"
    need=()
    command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
    [ "$BASES_MODE" = public ] || command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
    if [ ${#need[@]} -gt 0 ]; then
        command -v apt-get >/dev/null 2>&1 || skip "${need[*]} missing and no apt-get to install them"
        if [ ! -e /usr/sbin/policy-rc.d ]; then  # the package must not start a default (bridged) dockerd
            printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && POLICY_CREATED=1
        fi
        say "installing ${need[*]} from Debian's packages"
        { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" \
            || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
                "${need[@]}"; }; } >"$STATE/apt.log" 2>&1 \
            || skip "apt-get could not install ${need[*]}: $(tail -1 "$STATE/apt.log")"
    fi
    grep -qw overlay /proc/filesystems 2>/dev/null || modprobe overlay 2>/dev/null \
        || skip "the kernel has no overlay filesystem (dockerd's overlay2 storage driver needs it)"
    say "starting dockerd on the host's network only (log: $STATE/dockerd.log)"
    dockerd --bridge=none --iptables=false --ip-forward=false --ip-masq=false --ip6tables=false \
        --storage-driver=overlay2 >"$STATE/dockerd.log" 2>&1 &
    DOCKERD_PID=$!
    for _ in $(seq 120); do engine_up && break; kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
    engine_up || skip "dockerd did not come up: $(grep -m1 -iE 'level=(fatal|error)' "$STATE/dockerd.log" || tail -1 "$STATE/dockerd.log")"
fi
phase engine "$t0"

# ---------------------------------------------------------------- 2 bases
BASES_FILE=$STATE/bases.env
if [ "$BASES_MODE" = public ]; then
    : >"$BASES_FILE"
    say "building on the Dockerfiles' public base images"
else
    t0=$(date +%s.%N)
    if [ -z "${APPO_WHEELS:-}" ]; then
        links=$("$PY" -m pip config get global.find-links 2>/dev/null || true)
        [ -d "$links" ] && export APPO_WHEELS=$links
    fi
    if ! "$HERE/build-bases.sh" >"$BASES_FILE"; then
        suite=${APPO_DEBIAN_SUITE:-bookworm}
        if "$DOCKER" image inspect "appo-base/debian:$suite" >/dev/null 2>&1 \
            && ! err=$("$DOCKER" run --rm --network host "appo-base/debian:$suite" true 2>&1); then
            skip "this engine cannot run containers: $err"
        fi
        say "FAILED: building the base images"
        exit 1
    fi
    phase bases "$t0"
fi

# ---------------------------------------------------------------- 3 images
t0=$(date +%s.%N)
"$HERE/build-images.sh" --bases "$BASES_FILE" --timings "$TIMINGS" || { say "FAILED: building the images"; exit 1; }
phase images "$t0"

# ---------------------------------------------------------------- 4 tests
t0=$(date +%s.%N)
read -r -a EXTRA <<<"${PYTEST_ARGS:-}"
APPO_DOCKER=$(command -v "$DOCKER") "$PY" -m pytest -q -m container tests/containers "${EXTRA[@]}"
rc=$?
phase tests "$t0"

phase stage "$STAGE_T0"
say "container stage: $( [ $rc = 0 ] && echo passed || echo "FAILED (pytest exit $rc)"); timings in $TIMINGS"
"$DOCKER" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^appo-' | sed 's/^/    /' >&2
exit $rc
