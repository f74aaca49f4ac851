#!/usr/bin/env bash
# What the host itself costs per run: a whole `agentgate run` of `true` with provider
# `none` (no sandbox) against a raw spawn of `true`, and the same run in a FRESH
# `AGENTGATE_HOME` (every CI job has one: empty caches, no registry) against a warm
# one, pair by pair in one run so machine noise hits every side alike. Prints medians,
# the difference (target: at most 10 ms over a raw spawn) and the ratio (target: a
# fresh home at most 1.2x a warm one), then one `RESULT` line per row for bench/run:
#   RESULT <name> <agentgate> <baseline> <unit> <gap>
# Every run must succeed: a run that fails fast would otherwise look cheap.
#
#   bench/host_overhead.sh [PAIRS]   (default 20; builds the release binary first, or
#                                     uses AGENTGATE_BIN when set)
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
mkdir -p "$work/ws"
cat >"$work/none.yaml" <<YAML
apiVersion: agentgate.io/v1
kind: TaskSpec
metadata: {name: bench-host}
spec:
  goal: {prompt: "run true"}
  execution:
    workspace: {source: local, path: "$work/ws"}
    sandbox: {provider: none}
    agent: {driver: command, options: {command: ["true"]}}
YAML

now_us() { echo $(($(date +%s%N) / 1000)); }
# Runs "$@" (with AGENTGATE_HOME=$home) and prints its wall time in µs; the run must
# succeed and say so in its JSON.
run_us() { # home
    local t0 out
    t0=$(now_us)
    out=$(AGENTGATE_HOME="$1" "$bin" run --json "$work/none.yaml" 2>&1) || { echo "FAILED ($1): $out" >&2; exit 1; }
    local t1; t1=$(now_us)
    grep -q '"status": *"succeeded"' <<<"$out" || { echo "NOT SUCCEEDED ($1): $out" >&2; exit 1; }
    echo $((t1 - t0))
}
raw_us() { local t0; t0=$(now_us); /bin/true || exit 1; echo $(($(now_us) - t0)); }

# The warm home: its caches and registry made by one run that is not measured.
warm="$work/warm"
run_us "$warm" >/dev/null

raw=() warm_runs=() fresh_runs=()
for i in $(seq "$pairs"); do
    raw+=("$(raw_us)")
    warm_runs+=("$(run_us "$warm")")
    fresh_runs+=("$(run_us "$work/fresh-$i")")
    rm -rf "$work/fresh-$i"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# Decimal arithmetic in awk, not bc: bc prints `.52` without its leading zero.
ms() { awk -v us="$1" 'BEGIN { printf "%.2f", us / 1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", a / b }'; }
m_raw=$(median "${raw[@]}") m_warm=$(median "${warm_runs[@]}") m_fresh=$(median "${fresh_runs[@]}")
# The same costs read pair by pair: less swayed by a burst of load on one side.
over=() ratio=()
for i in "${!warm_runs[@]}"; do
    over+=("$((warm_runs[i] - raw[i]))")
    ratio+=("$(ratio "${fresh_runs[i]}" "${warm_runs[i]}")")
done
m_over=$(median "${over[@]}") m_ratio=$(median "${ratio[@]}")
printf 'pairs: %d\n' "$pairs"
printf 'raw spawn of true:                       %8.2f ms\n' "$(ms "$m_raw")"
printf 'agentgate run, provider none, warm home: %8.2f ms\n' "$(ms "$m_warm")"
printf 'agentgate run, provider none, fresh home:%8.2f ms\n' "$(ms "$m_fresh")"
printf 'the host costs (warm - raw):             %8.2f ms (target <= 10 ms)\n' "$(ms "$((m_warm - m_raw))")"
printf '  median of the pairs%s differences:      %8.2f ms\n' "'" "$(ms "$m_over")"
printf 'fresh home / warm home:                  %8.2f (target <= 1.2)\n' "$(ratio "$m_fresh" "$m_warm")"
printf '  median of the pairs%s ratios:           %8.2f\n' "'" "$m_ratio"
# The gap is a bare number (the unit is its own field): `+12.30` or `x1.05`.
echo "RESULT host_run_none_vs_raw_spawn $(ms "$m_warm") $(ms "$m_raw") ms $(awk -v d="$((m_warm - m_raw))" 'BEGIN { printf "%+.2f", d / 1000 }')"
echo "RESULT host_run_fresh_vs_warm_home $(ms "$m_fresh") $(ms "$m_warm") ms x$(awk -v a="$m_fresh" -v b="$m_warm" 'BEGIN { printf "%.2f", a / b }')"
