#!/usr/bin/env bash
# Build the project's four images with BuildKit, timing each, then list their sizes.
#
#   containers/build-images.sh                       # on the public bases (the Dockerfiles' defaults)
#   containers/build-images.sh --bases bases.env     # on the bases containers/build-bases.sh made
#
#   appo-collector:<version>   Dockerfile.collector (default target): no torch
#   appo-collector-motrix:<version>   Dockerfile.collector --target collector-motrix: + MotrixSim (--sim motrix)
#   appo-eval:<version>        Dockerfile.collector --target eval: appo-eval, appo-export
#   appo-learner:<version>     Dockerfile.learner
#
# --bases FILE: NAME=VALUE lines (build-bases.sh's output), each passed as --build-arg to the
# Dockerfiles that declare it.  --timings FILE: appends "image seconds" lines.
# Builds reuse the engine's layer cache: after a code change only the source layers rebuild.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
# shellcheck source=containers/lib.sh
. "$HERE/lib.sh"

BASES="" TIMINGS=/dev/null
while [ $# -gt 0 ]; do
    case $1 in
        --bases) BASES=$2; shift 2 ;;
        --timings) TIMINGS=$2; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
        *) die "unknown option $1 (see --help)" ;;
    esac
done
pick_docker || die "no docker CLI that can build with BuildKit (install the buildx plugin, or Debian's docker.io)"
read -r -a NET <<<"$(build_network_args)"
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml" | head -1)

build_args_for() {  # Dockerfile: --build-arg NAME=VALUE for each line of $BASES that it declares
    local dockerfile=$1 name value
    [ -n "$BASES" ] || return 0
    while IFS='=' read -r name value; do
        case $name in "" | \#*) continue ;; esac
        if grep -q "^ARG $name\\b" "$ROOT/$dockerfile"; then printf '%s\n' --build-arg "$name=$value"; fi
    done <"$BASES"
}

build() {  # image, Dockerfile, extra build arguments...
    local image=$1 dockerfile=$2 t0 secs log args
    shift 2
    log=$(mktemp "${TMPDIR:-/tmp}/appo-build.XXXXXX")
    mapfile -t args < <(build_args_for "$dockerfile")
    say "building $image"
    t0=$(date +%s.%N)
    if ! (cd "$ROOT" && nice -n 10 "${BUILD_CMD[@]}" "${NET[@]}" --progress plain "${args[@]}" "$@" \
        -f "$dockerfile" -t "$image:$VERSION" . >"$log" 2>&1); then
        tail -60 "$log" >&2
        rm -f "$log"
        die "building $image failed"
    fi
    rm -f "$log"
    secs=$(seconds_since "$t0")
    say "built $image:$VERSION in $secs s"
    echo "$image $secs" >>"$TIMINGS"
}

build appo-collector Dockerfile.collector --target collector
build appo-collector-motrix Dockerfile.collector --target collector-motrix
build appo-eval Dockerfile.collector --target eval
build appo-learner Dockerfile.learner
"$DOCKER" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' \
    | grep -E "^appo-(collector|collector-motrix|eval|learner):$VERSION " | sed 's/^/    /' >&2
