#!/usr/bin/env bash
# What loading a plugin costs by language: cold compile, cached load and instantiate of
# a Rust, a Python and a JavaScript agent driver, in one run: end to end through the
# CLI against the same command without the plugin, then per step in the engine
# (host/benches/plugin_load.rs), each against the cold compile of the same plugin.
# Builds the Python and JavaScript example plugins with examples/plugins/build.sh
# (installing the pinned toolchains on first use) and uses the Rust plugins as
# host/build.rs compiled them (target/plugins).
#
# Prints, last, RESULT lines for bench/run: per language, the CLI's first use and
# cached use (ms over the command without the plugin) and the engine's cold compile,
# cached load (against the cold compile) and instantiate.
#
#   bench/plugin_load.sh [PAIRS]    (default 3; the CLI is the release binary, built
#                                    first or AGENTGATE_BIN when set; PROFILE=release
#                                    for a release-built engine bench: the default
#                                    `dev` profile already optimises cranelift, so
#                                    compile figures are representative, while
#                                    deserialize/instantiate run slower than release)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs="${1:-3}"
profile="${PROFILE:-dev}"
out="$PWD/target/polyglot-plugins"  # absolute: cargo bench runs in host/
bash examples/plugins/build.sh "$out"
bin="${AGENTGATE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release -q -p agentgate
    bin="$PWD/target/release/agentgate"
fi
# host/build.rs compiles the built-in and fixture plugins into target/plugins, whatever
# the target folder.
rust_driver="$(find "$PWD/target/plugins" -path '*wasm32-wasip2/release/agent_command.wasm' 2>/dev/null | head -1)"
rust_fixture="$PWD/target/plugins/fixtures/hostile-driver.wasm"
if [ -z "$rust_driver" ] || [ ! -f "$rust_fixture" ]; then
    cargo build --workspace -q
    rust_driver="$(find "$PWD/target/plugins" -path '*wasm32-wasip2/release/agent_command.wasm' | head -1)"
fi
[ -n "$rust_driver" ] || { echo "plugin_load.sh: agent_command.wasm not found under target/plugins" >&2; exit 1; }

# 1. End to end through the CLI: `agentgate plugins list` with one plugin in the
#    directory, its compile cache empty (first use: compile, instantiate, describe()) and
#    then warm (cached: the description cache answers), against the same command with
#    no plugin directory. The built-ins are in every home's cache beforehand.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
ms_of() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1 || { echo "FAILED: $*" >&2; exit 1; }; e=$(date +%s%N); echo "$(( (e - s) / 1000 ))"; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms() { awk -v v="$1" 'BEGIN {printf "%.1f", v / 1000}'; }
"$bin" plugins list --home "$work/base" >/dev/null
# The built-ins are precompiled into the binary, so a home may have no cache folder yet.
mkdir -p "$work/base/cache"
results=()
rows=("rust hostile-driver=$rust_fixture" "python py-shell=$out/py-shell.wasm" "javascript js-shell=$out/js-shell.wasm")
declare -A first cached base
for row in "${rows[@]}"; do
    label="${row%%=*}" file="${row#*=}" name="${label#* }" lang="${label%% *}"
    mkdir -p "$work/$name/plugins" && cp "$file" "$work/$name/plugins/$name.wasm"
    for i in $(seq "$pairs"); do
        rm -rf "$work/$name/home" && mkdir -p "$work/$name/home" && cp -a "$work/base/cache" "$work/$name/home/"
        cmd=("$bin" plugins list --home "$work/$name/home" --plugin-dir "$work/$name/plugins" --grant "$name=events,sandbox")
        base[$lang]+="$(ms_of "$bin" plugins list --home "$work/base") "
        first[$lang]+="$(ms_of "${cmd[@]}") "
        cached[$lang]+="$(ms_of "${cmd[@]}") "
    done
    # The plugin was listed, not refused or broken.
    "${cmd[@]}" 2>&1 | grep -q "$name" || { echo "FAILED: plugins list does not show $name" >&2; exit 1; }
done
echo
echo "agentgate plugins list ($bin), one plugin in the directory; medians of $pairs"
echo
echo "| plugin | without it | first use (compile + instantiate + describe) | cached |"
echo "| --- | --- | --- | --- |"
for row in "${rows[@]}"; do
    label="${row%%=*}" lang="${label%% *}"
    b=$(median ${base[$lang]}) f=$(median ${first[$lang]}) c=$(median ${cached[$lang]})
    echo "| $label | $(ms "$b") ms | $(ms "$f") ms | $(ms "$c") ms |"
    results+=("RESULT plugin-$lang-cli-first-use $(ms "$f") $(ms "$b") ms +$(ms $((f - b)))")
    results+=("RESULT plugin-$lang-cli-cached $(ms "$c") $(ms "$b") ms +$(ms $((c - b)))")
done

# 2. The engine's own costs, per step (host/benches/plugin_load.rs prints its RESULT
#    lines last).
cargo bench --workspace -q --profile "$profile" --bench plugin_load -- \
    "rust=$rust_driver" "python=$out/py-shell.wasm" "javascript=$out/js-shell.wasm" | tee "$work/engine"
printf '%s\n' "${results[@]}"
grep '^RESULT ' "$work/engine" >/dev/null || { echo "FAILED: the engine bench printed no RESULT line" >&2; exit 1; }
