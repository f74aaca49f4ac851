#!/usr/bin/env bash
# What a large plugin in the plugin directory costs a run that does not use it: a whole
# `agentgate run` whose TaskSpec uses only built-ins (local, subprocess, command `true`),
# with a large Python plugin (componentize-py 0.25.1, ~18 MB) in the plugin directory,
# against the same run with an empty plugin directory, pair by pair in one run so
# machine noise hits both sides alike. Prints medians and the ratio (target <= 1.05).
#
# The first command that sees the Python component describes it (one compile, cached
# by digest); that is done once before measuring, as a user's first `plugins list`
# would. What is measured is every later run: it must not compile or load the unused
# plugin again.
#
#   bench/plugin_dir.sh [PAIRS]   (default 20; builds the release binary first, or uses
#                                  AGENTGATE_BIN when set; componentize-py is installed
#                                  into a venv under target/bench-python/ on first use)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
pairs="${1:-20}"
bin="${AGENTGATE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release -q --workspace
    bin="$root/target/release/agentgate"
fi

# componentize-py, pinned, in a venv of its own (never in the repository).
tools="$root/target/bench-python"
py="$tools/venv/bin/componentize-py"
if ! "$py" --version 2>/dev/null | grep -q "0.25.1"; then
    python3 -m venv "$tools/venv"
    "$tools/venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==0.25.1"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export AGENTGATE_HOME="$work/home"
mkdir -p "$work/ws" "$work/empty" "$work/python" "$work/src"

# A Python agent driver built from wit/ (its size is the interpreter's, whatever it does).
cat >"$work/src/app.py" <<'PY'
from componentize_py_types import Err
from wit_world import WitWorld as World
from wit_world.exports import Driver as DriverInterface
from wit_world.imports import types


class Driver(DriverInterface):
    def run(self, task):
        raise Err(types.Error_Failed("bench-python only takes up room"))


class WitWorld(World):
    def describe(self) -> types.PluginInfo:
        return types.PluginInfo(
            name="bench-python",
            version="0.1.0",
            kind=types.PluginKind.AGENT_DRIVER,
            serves=["bench-python"],
            summary="Benchmark: a large Python plugin no run uses",
            options_schema=None,
        )
PY
(cd "$work/src" && "$py" -d "$root/wit" -w agent-driver componentize app -o "$work/python/bench-python.wasm" >/dev/null)
size=$(stat -c %s "$work/python/bench-python.wasm")

cat >"$work/task.yaml" <<YAML
apiVersion: agentgate.io/v1
kind: TaskSpec
metadata: {name: bench-plugin-dir}
spec:
  goal: {prompt: "run true"}
  execution:
    workspace: {source: local, path: "$work/ws"}
    sandbox: {provider: subprocess, network: none}
    agent: {driver: command, options: {command: ["true"]}}
YAML

run_with() { "$bin" run --json --plugin-dir "$1" "$work/task.yaml"; }
now_us() { echo $(($(date +%s%N) / 1000)); }
time_us() { local t0; t0=$(now_us); "$@" >/dev/null 2>&1; echo $(($(now_us) - t0)); }

# The first sight of each component (built-ins and the Python plugin) is not measured.
t0=$(now_us)
"$bin" plugins list --plugin-dir "$work/python" >/dev/null
first_us=$(($(now_us) - t0))
run_with "$work/empty" >/dev/null
run_with "$work/python" >/dev/null

empty=() python=()
for _ in $(seq "$pairs"); do
    empty+=("$(time_us run_with "$work/empty")")
    python+=("$(time_us run_with "$work/python")")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
m_empty=$(median "${empty[@]}") m_python=$(median "${python[@]}")
t0=$(now_us)
"$bin" plugins list --plugin-dir "$work/python" >/dev/null
list_us=$(($(now_us) - t0))

printf 'pairs: %d; Python plugin: %.1f MiB\n' "$pairs" "$(bc -l <<<"$size/1048576")"
printf 'first plugins list (describes it once): %8.2f ms\n' "$(bc -l <<<"$first_us/1000")"
printf 'later plugins list:                     %8.2f ms\n' "$(bc -l <<<"$list_us/1000")"
printf 'run, empty plugin dir:                  %8.2f ms\n' "$(bc -l <<<"$m_empty/1000")"
printf 'run, Python plugin in the dir:          %8.2f ms\n' "$(bc -l <<<"$m_python/1000")"
printf 'ratio python / empty:                   %8.3f (target <= 1.05)\n' "$(bc -l <<<"$m_python/$m_empty")"
