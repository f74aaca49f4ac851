#!/usr/bin/env bash
# What many runs at once cost the machine: RUNS (default 32) `agentgate run`s of `true`
# started together, in the subprocess sandbox (network: none) and with provider `none`,
# against RUNS raw processes started together as the baseline (`bwrap` with every
# namespace and `/` bound for the sandbox, `true` for `none`). For each side it measures
# the wall time until the last one ends and the host memory: the sum over the RUNS
# processes of each one's peak RSS (GNU time's %M: the largest of the process and the
# children it reaped), i.e. what the machine must hold if all peak at once. Every run
# must succeed; the round's figures are medians over ROUNDS rounds, the sides taking
# turns within a round so machine noise hits both alike.
#
#   bench/concurrency.sh [ROUNDS]   (default 3; RUNS=32; builds the release binary
#                                    first, or uses AGENTGATE_BIN when set)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
runs="${RUNS:-32}"
bin="${AGENTGATE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release -q -p agentgate
    bin="$PWD/target/release/agentgate"
fi
[ -x /usr/bin/time ] || { echo "concurrency.sh needs GNU time (/usr/bin/time; apt-get install time)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# One home for all: runs on one machine share its registry and compile cache.
export AGENTGATE_HOME="$work/home"

spec() { # provider, network setting, workspace
    cat <<YAML
apiVersion: agentgate.io/v1
kind: TaskSpec
metadata: {name: bench-concurrent-$1}
spec:
  goal: {prompt: "run true"}
  execution:
    workspace: {source: local, path: "$3"}
    sandbox: {provider: $1$2}
    agent: {driver: command, options: {command: ["true"]}}
YAML
}
for i in $(seq "$runs"); do
    mkdir -p "$work/ws/$i"
    spec none "" "$work/ws/$i" >"$work/none-$i.yaml"
    spec subprocess ", network: none" "$work/ws/$i" >"$work/subprocess-$i.yaml"
done

# Warm the compile cache (and the registry's schema) so neither is measured.
"$bin" run --json "$work/none-1.yaml" >/dev/null
"$bin" run --json "$work/subprocess-1.yaml" >/dev/null

now_us() { echo $(($(date +%s%N) / 1000)); }

# Starts RUNS copies of a command together (`{}` is replaced by the copy's number), waits
# for all, fails on any failure; prints "wall-µs sum-of-peak-RSS-KiB".
together() {
    local side=$1
    shift
    local pids=() t0 i failed=0
    rm -f "$work/$side".*
    t0=$(now_us)
    for i in $(seq "$runs"); do
        local argv=("${@//\{\}/$i}")
        /usr/bin/time -f %M -o "$work/$side.rss.$i" "${argv[@]}" >"$work/$side.out.$i" 2>&1 &
        pids+=($!)
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || { failed=1; echo "FAILED ($side, copy $((i + 1))): $(tail -n 5 "$work/$side.out.$((i + 1))")" >&2; }
    done
    local wall=$(($(now_us) - t0))
    [ "$failed" = 0 ] || exit 1
    # GNU time appends "Command exited with non-zero status" before %M on failure; a
    # success leaves the number alone on its line.
    echo "$wall $(cat "$work/$side".rss.* | awk '{s += $1} END {print s}')"
}

bwrap_floor=(bwrap --unshare-all --die-with-parent --bind / / true)
declare -A wall rss
for side in raw floor none subprocess; do wall[$side]="" rss[$side]=""; done
for _ in $(seq "$rounds"); do
    for side in raw none floor subprocess; do
        case $side in
            raw) cmd=(/bin/true) ;;
            floor) cmd=("${bwrap_floor[@]}") ;;
            none) cmd=("$bin" run --json "$work/none-{}.yaml") ;;
            subprocess) cmd=("$bin" run --json "$work/subprocess-{}.yaml") ;;
        esac
        together "$side" "${cmd[@]}" >"$work/figures"
        read -r w r <"$work/figures"
        wall[$side]+="$w " rss[$side]+="$r "
    done
done
# Every run ended in success, not just exited 0.
ok=$(grep -l '"status": *"succeeded"' "$AGENTGATE_HOME"/runs/*/result.json 2>/dev/null | wc -l)
expected=$((2 + 2 * runs * rounds))
[ "$ok" = "$expected" ] || { echo "FAILED: $ok of $expected runs have status succeeded in result.json" >&2; exit 1; }

median() { printf '%s\n' $1 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms() { awk -v v="$1" 'BEGIN {printf "%.1f", v / 1000}'; }
mib() { awk -v v="$1" 'BEGIN {printf "%.1f", v / 1024}'; }
diff_of() { awk -v a="$1" -v b="$2" 'BEGIN {printf "+%.1f", a - b}'; }
for side in raw floor none subprocess; do
    declare "w_$side=$(median "${wall[$side]}")" "r_$side=$(median "${rss[$side]}")"
done
printf 'rounds: %d; %d at once; medians\n' "$rounds" "$runs"
printf '%-34s %10s %14s %12s\n' "" "wall" "sum peak RSS" "per process"
for side in raw floor none subprocess; do
    w="w_$side" r="r_$side"
    case $side in
        raw) label="true" ;;
        floor) label="bwrap floor" ;;
        none) label="agentgate run, provider none" ;;
        subprocess) label="agentgate run, provider subprocess" ;;
    esac
    printf '%-34s %7s ms %10s MiB %8s MiB\n' "$label" "$(ms "${!w}")" "$(mib "${!r}")" "$(mib $((${!r} / runs)))"
done
echo "all $((2 * runs * rounds)) measured runs succeeded"
echo "RESULT concurrent-${runs}-none-wall $(ms "$w_none") $(ms "$w_raw") ms $(diff_of "$(ms "$w_none")" "$(ms "$w_raw")")"
echo "RESULT concurrent-${runs}-none-memory $(mib "$r_none") $(mib "$r_raw") MiB $(diff_of "$(mib "$r_none")" "$(mib "$r_raw")")"
echo "RESULT concurrent-${runs}-subprocess-wall $(ms "$w_subprocess") $(ms "$w_floor") ms $(diff_of "$(ms "$w_subprocess")" "$(ms "$w_floor")")"
echo "RESULT concurrent-${runs}-subprocess-memory $(mib "$r_subprocess") $(mib "$r_floor") MiB $(diff_of "$(mib "$r_subprocess")" "$(mib "$r_floor")")"
