# shellcheck shell=bash
# Shell helpers shared by the scripts in containers/ (sourced, not run).
# shellcheck disable=SC2034  # DOCKER and BUILD_CMD are for the scripts that source this file

# Progress goes to stderr: the scripts keep stdout for what they hand on (build arguments).
say() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { say "error: $*"; exit 1; }

# The docker CLI to use and how it builds with BuildKit, set by pick_docker:
#   DOCKER        the CLI (docker, or Debian's /usr/bin/docker when the docker on PATH cannot build)
#   BUILD_CMD     the build command as an array: "docker buildx build --load" where the buildx
#                 plugin is installed, else "docker build" with DOCKER_BUILDKIT=1 (built into CLIs
#                 before 23.0, such as Debian 12's docker.io 20.10).  CLIs from 23.0 on without
#                 buildx only have the legacy builder, which builds every stage before --target.
pick_docker() {
    local candidate major
    for candidate in ${DOCKER:-} docker /usr/bin/docker; do
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" buildx version >/dev/null 2>&1; then
            DOCKER=$candidate BUILD_CMD=("$candidate" buildx build --load)
            return 0
        fi
        major=$("$candidate" version --format '{{.Client.Version}}' 2>/dev/null | cut -d. -f1)
        if [ -n "$major" ] && [ "$major" -lt 23 ] 2>/dev/null; then
            export DOCKER_BUILDKIT=1
            DOCKER=$candidate BUILD_CMD=("$candidate" build)
            return 0
        fi
    done
    return 1
}

# Builds need the host's network where the engine has no bridge (dockerd --bridge=none).
build_network_args() {
    if [ -z "$("$DOCKER" network ls -q --filter driver=bridge 2>/dev/null)" ]; then
        echo "--network host"
    fi
}

# The label every base image carries: a hash of the inputs it was built from.
INPUTS_LABEL=org.appo.base.inputs

image_inputs() { "$DOCKER" image inspect -f "{{index .Config.Labels \"$INPUTS_LABEL\"}}" "$1" 2>/dev/null; }

seconds_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }'; }
