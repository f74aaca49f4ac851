#!/usr/bin/env bash
# What agentgate costs on top of Docker: a whole `agentgate run` whose agent is `true`
# in a `docker` sandbox (create + start the container, exec `true` in it, sample its
# usage, destroy it) against `docker run --rm IMAGE true` on the same engine, pair by
# pair in one run so machine noise hits both sides alike. Prints medians and the
# ratio (target: at most 1.2), then, last, one line for bench/run:
# `RESULT <name> <agentgate> <baseline> <unit> <gap>`.
#
#   bench/docker_overhead.sh [PAIRS]   (default 20; builds the release binary first,
#                                       or uses AGENTGATE_BIN when set; needs a running
#                                       Docker engine and busybox-static for the image)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs="${1:-20}"
image="agentgate-bench/busybox:1"
bin="${AGENTGATE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release -q -p agentgate
    bin="$PWD/target/release/agentgate"
fi
docker info >/dev/null 2>&1 || { echo "no Docker engine answers; start dockerd first" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export AGENTGATE_HOME="$work/home"
mkdir -p "$work/ws" "$work/image"

# No registry is reachable: the image is busybox alone, built FROM scratch.
if ! docker image inspect "$image" >/dev/null 2>&1; then
    cp "$(command -v busybox)" "$work/image/busybox"
    printf 'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\n' >"$work/image/Dockerfile"
    DOCKER_BUILDKIT=0 docker build -q -t "$image" "$work/image" >/dev/null
fi

cat >"$work/docker.yaml" <<YAML
apiVersion: agentgate.io/v1
kind: TaskSpec
metadata: {name: bench-docker}
spec:
  goal: {prompt: "run true"}
  execution:
    workspace: {source: local, path: "$work/ws"}
    sandbox: {provider: docker, image: "$image", network: none}
    agent: {driver: command, options: {command: ["true"]}}
YAML

now_us() { echo $(($(date +%s%N) / 1000)); }
time_us() { local t0; t0=$(now_us); "$@" >/dev/null 2>&1 || { echo "FAILED: $*" >&2; exit 1; }; echo $(($(now_us) - t0)); }

# Warm the compile cache and the engine so neither first time is measured.
"$bin" run --json "$work/docker.yaml" >/dev/null
docker run --rm --network none "$image" true

raw=() ours=()
for _ in $(seq "$pairs"); do
    raw+=("$(time_us docker run --rm --network none "$image" true)")
    ours+=("$(time_us "$bin" run --json "$work/docker.yaml")")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
m_raw=$(median "${raw[@]}") m_ours=$(median "${ours[@]}")
printf 'pairs: %d\n' "$pairs"
printf 'docker run --rm IMAGE true:        %8.1f ms\n' "$(bc -l <<<"$m_raw/1000")"
printf 'agentgate run (docker, true):      %8.1f ms\n' "$(bc -l <<<"$m_ours/1000")"
printf 'ratio agentgate / docker run:      %8.2f (target <= 1.2)\n' "$(bc -l <<<"$m_ours/$m_raw")"
left="$(docker ps -aq --filter label=io.agentgate.run-id)"
[ -z "$left" ] || { echo "FAILED: containers left behind: $left" >&2; exit 1; }
echo "RESULT docker-run-true $(bc -l <<<"$m_ours/1000" | xargs printf '%.1f') $(bc -l <<<"$m_raw/1000" | xargs printf '%.1f') ms x$(bc -l <<<"$m_ours/$m_raw" | xargs printf '%.2f')"
