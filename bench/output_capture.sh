#!/usr/bin/env bash
# What capturing an agent's output costs: a whole `agentgate run` whose agent prints
# 1 GiB on stdout, with provider `none` and in the subprocess sandbox (network: none),
# against the same stream piped into `cat > /dev/null` (the raw baseline: one pipe, one
# reader that keeps nothing), pair by pair in one run. The host reads every byte, masks
# secrets in it, keeps the first 64 MiB in stdout.log and counts the rest, and the
# command driver turns each line into an event; each run is checked to have received
# the whole GiB (result.json's logs.stdout: bytes kept + bytes past the bound).
#
# The stream is text, 100-byte lines as a chatty agent prints them (`yes LINE | head
# -c 1G`). Not `head -c 1G /dev/zero`: the command driver keeps an agent's last line
# as its summary, and a summary over 1 MiB fails the run (MAX_OUTCOME_TEXT_BYTES).
#
#   bench/output_capture.sh [PAIRS]   (default 3; BYTES=1073741824; builds the release
#                                      binary first, or uses AGENTGATE_BIN when set)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs="${1:-3}"
bytes="${BYTES:-1073741824}"
bin="${AGENTGATE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release -q -p agentgate
    bin="$PWD/target/release/agentgate"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export AGENTGATE_HOME="$work/home"
mkdir -p "$work/ws"

# The agent: the stream on stdout, from the workspace (the same file in every sandbox).
printf "yes '%s' | head -c %d\n" "$(printf 'x%.0s' $(seq 99))" "$bytes" >"$work/ws/agent.sh"

spec() { # provider, network setting, command
    cat <<YAML
apiVersion: agentgate.io/v1
kind: TaskSpec
metadata: {name: bench-output-$1}
spec:
  goal: {prompt: "print"}
  execution:
    workspace: {source: local, path: "$work/ws"}
    sandbox: {provider: $1$2, resources: {timeout: 30m}}
    agent: {driver: command, options: {command: $3}}
YAML
}
spec none "" "[sh, agent.sh]" >"$work/none.yaml"
spec subprocess ", network: none" "[sh, agent.sh]" >"$work/subprocess.yaml"
spec none "" "[\"true\"]" >"$work/warm-none.yaml"
spec subprocess ", network: none" "[\"true\"]" >"$work/warm-subprocess.yaml"

now_us() { echo $(($(date +%s%N) / 1000)); }

# Runs one agentgate run, checks it succeeded with every byte received, and prints its
# wall time in µs. The run folder (64 MiB of log) is removed after the check.
run_us() {
    rm -rf "$AGENTGATE_HOME/runs"
    local t0 took result
    t0=$(now_us)
    "$bin" run --json "$work/$1.yaml" >"$work/$1.out" 2>&1 || { echo "FAILED: the $1 run: $(tail -n 5 "$work/$1.out")" >&2; exit 1; }
    took=$(($(now_us) - t0))
    result="$(find "$AGENTGATE_HOME/runs" -name result.json | head -1)"
    python3 - "$result" "$bytes" <<'PY' || exit 1
import json, sys
result = json.load(open(sys.argv[1]))
out = result["logs"]["stdout"]
received = out["bytes"] + out["truncatedBytes"]
if result["status"] != "succeeded" or received != int(sys.argv[2]):
    sys.exit(f"FAILED: status {result['status']}, {received} of {sys.argv[2]} bytes received")
PY
    echo "$took"
}
raw_us() {
    local t0
    t0=$(now_us)
    (cd "$work/ws" && sh agent.sh | cat >/dev/null)
    echo $(($(now_us) - t0))
}

# Warm the compile cache so it is not measured.
"$bin" run --json "$work/warm-none.yaml" >/dev/null
"$bin" run --json "$work/warm-subprocess.yaml" >/dev/null

raw=() none=() sub=()
for _ in $(seq "$pairs"); do
    raw+=("$(raw_us)")
    none+=("$(run_us none)")
    sub+=("$(run_us subprocess)")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
m_raw=$(median "${raw[@]}") m_none=$(median "${none[@]}") m_sub=$(median "${sub[@]}")
if [ "$bytes" = 1073741824 ]; then
    size=1GiB
elif [ $((bytes % 1048576)) = 0 ]; then
    size="$((bytes / 1048576))MiB"
else
    size="${bytes}B"
fi
s() { awk -v v="$1" 'BEGIN {printf "%.2f", v / 1e6}'; }
rate() { awk -v v="$1" -v b="$bytes" 'BEGIN {printf "%.0f", b / 1048576 / (v / 1e6)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "x%.2f", a / b}'; }
printf 'pairs: %d; %d bytes in 100-byte lines, medians\n' "$pairs" "$bytes"
printf '%-38s %8s s %6s MiB/s\n' "sh agent.sh | cat > /dev/null" "$(s "$m_raw")" "$(rate "$m_raw")"
printf '%-38s %8s s %6s MiB/s\n' "agentgate run, provider none" "$(s "$m_none")" "$(rate "$m_none")"
printf '%-38s %8s s %6s MiB/s\n' "agentgate run, provider subprocess" "$(s "$m_sub")" "$(rate "$m_sub")"
echo "RESULT output-${size}-none $(s "$m_none") $(s "$m_raw") s $(ratio "$m_none" "$m_raw")"
echo "RESULT output-${size}-subprocess $(s "$m_sub") $(s "$m_raw") s $(ratio "$m_sub" "$m_raw")"
