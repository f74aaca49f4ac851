#!/usr/bin/env bash
# What the subprocess sandbox costs: a whole `agentgate run` of `true` sealed in the
# subprocess sandbox (bubblewrap, seccomp, cgroup, network: none) against the same run
# with `provider: none`, and both against a raw spawn of `true`, pair by pair in one
# run so machine noise hits every side alike. Prints medians and the sandbox's own cost
# (target: at most 6 ms over `provider: none`), then, last, one line per row for
# bench/run: `RESULT <name> <agentgate> <baseline> <unit> <gap>`. For scale it also times bubblewrap's own floor, `bwrap` with
# every namespace and `/` bound, which no bubblewrap-based sandbox can go below.
# Every run must succeed: a run that fails fast would otherwise look cheap.
#
#   bench/sandbox_overhead.sh [PAIRS]   (default 20; builds the release binary first,
#                                        or uses AGENTGATE_BIN when set)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs="${1:-20}"
bin="${AGENTGATE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release -q -p agentgate
    bin="$PWD/target/release/agentgate"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export AGENTGATE_HOME="$work/home"
mkdir -p "$work/ws"

spec() { # provider network
    cat <<YAML
apiVersion: agentgate.io/v1
kind: TaskSpec
metadata: {name: bench-$1}
spec:
  goal: {prompt: "run true"}
  execution:
    workspace: {source: local, path: "$work/ws"}
    sandbox: {provider: $1$2}
    agent: {driver: command, options: {command: ["true"]}}
YAML
}
spec none "" >"$work/none.yaml"
spec subprocess ", network: none" >"$work/subprocess.yaml"

now_us() { echo $(($(date +%s%N) / 1000)); }
time_us() { local t0; t0=$(now_us); "$@" >/dev/null 2>&1 || { echo "FAILED: $*" >&2; exit 1; }; echo $(($(now_us) - t0)); }
bwrap_floor=(bwrap --unshare-all --die-with-parent --bind / / true)

# Warm the compile cache so it is not measured.
"$bin" run --json "$work/none.yaml" >/dev/null
"$bin" run --json "$work/subprocess.yaml" >/dev/null

raw=() floor=() none=() sub=()
for _ in $(seq "$pairs"); do
    raw+=("$(time_us /bin/true)")
    floor+=("$(time_us "${bwrap_floor[@]}")")
    none+=("$(time_us "$bin" run --json "$work/none.yaml")")
    sub+=("$(time_us "$bin" run --json "$work/subprocess.yaml")")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
m_raw=$(median "${raw[@]}") m_floor=$(median "${floor[@]}") m_none=$(median "${none[@]}") m_sub=$(median "${sub[@]}")
printf 'pairs: %d\n' "$pairs"
printf 'raw spawn of true:                 %8.2f ms\n' "$(bc -l <<<"$m_raw/1000")"
printf 'bwrap floor (%s):\n                                   %8.2f ms\n' "${bwrap_floor[*]}" "$(bc -l <<<"$m_floor/1000")"
printf 'agentgate run, provider none:      %8.2f ms\n' "$(bc -l <<<"$m_none/1000")"
printf 'agentgate run, provider subprocess:%8.2f ms\n' "$(bc -l <<<"$m_sub/1000")"
# The same cost read pair by pair: less swayed by a burst of load on one side.
added=()
for i in "${!sub[@]}"; do added+=("$((sub[i] - none[i]))"); done
m_added=$(median "${added[@]}")
printf 'the sandbox itself adds:           %8.2f ms (target <= 6 ms)\n' "$(bc -l <<<"($m_sub-$m_none)/1000")"
printf '  median of the pairs\x27 differences: %6.2f ms\n' "$(bc -l <<<"$m_added/1000")"
printf 'bubblewrap floor over a raw spawn: %8.2f ms\n' "$(bc -l <<<"($m_floor-$m_raw)/1000")"
printf 'ratio subprocess / none:           %8.2f\n' "$(bc -l <<<"$m_sub/$m_none")"
ms() { awk -v us="$1" 'BEGIN {printf "%.2f", us / 1000}'; }
gap() { awk -v us="$1" 'BEGIN {printf "%+.2f", us / 1000}'; }
echo "RESULT subprocess-vs-none $(ms "$m_sub") $(ms "$m_none") ms $(gap "$m_added")"
echo "RESULT bwrap-floor-vs-raw-spawn $(ms "$m_floor") $(ms "$m_raw") ms $(gap $((m_floor - m_raw)))"
