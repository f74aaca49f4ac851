#!/usr/bin/env bash
# What loading a plugin costs by language: cold compile, cached load and instantiate of
# a Rust, a Python and a JavaScript agent driver, in one run: end to end through the
# CLI against a run without the plugin, then per step in the engine with ratios against
# the Rust plugin. Builds the Python and JavaScript example plugins with
# examples/plugins/build.sh (installing the pinned toolchains on first use) and uses the
# built-in Rust driver `agent-command` as compiled for the binary.
#
#   bench/plugin_load.sh            (PROFILE=release for release-built wasmtime;
#                                    the default `dev` profile already optimises
#                                    cranelift, so compile figures are representative,
#                                    while deserialize/instantiate run slower than release)
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-dev}"
out="$PWD/target/polyglot-plugins"  # absolute: cargo bench runs in host/
bash examples/plugins/build.sh "$out"
# host/build.rs compiles the built-in plugins into target/plugins.
cargo build --workspace -q
rust="$(find "$PWD/target/plugins" -path '*wasm32-wasip2/release/agent_command.wasm' | head -1)"
[ -n "$rust" ] || { echo "plugin_load.sh: agent_command.wasm not found under target/plugins" >&2; exit 1; }
# 1. End to end through the CLI: `agentgate plugins list` with one plugin in the
#    directory, its compile cache empty (cold) and then warm (cached), against the same
#    command with no plugin directory (the raw baseline). Each includes instantiating the
#    plugin and calling describe().
bin="$PWD/target/debug/agentgate"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
seconds() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo "$(( (e - s) / 1000000 ))"; }
"$bin" plugins list --home "$work/base" >/dev/null
base_ms=$(seconds "$bin" plugins list --home "$work/base")
echo
echo "agentgate plugins list (debug build), one plugin in the directory; baseline without it: ${base_ms} ms"
echo
echo "| plugin | cold (compile + instantiate + describe) | cached | cached − baseline |"
echo "| --- | --- | --- | --- |"
for row in "rust hostile-driver=$PWD/target/plugins/fixtures/hostile-driver.wasm" \
           "python py-shell=$out/py-shell.wasm" "javascript js-shell=$out/js-shell.wasm"; do
    label="${row%%=*}" file="${row#*=}" name="${label#* }"
    mkdir -p "$work/$name/plugins" && cp "$file" "$work/$name/plugins/$name.wasm"
    mkdir -p "$work/$name/home" && cp -a "$work/base/cache" "$work/$name/home/"
    cmd=("$bin" plugins list --home "$work/$name/home" --plugin-dir "$work/$name/plugins" --grant "$name=events,sandbox")
    cold=$(seconds "${cmd[@]}")
    cached=$(seconds "${cmd[@]}")
    echo "| $label | ${cold} ms | ${cached} ms | $(( cached - base_ms )) ms |"
done

# 2. The engine's own costs, per step (host/benches/plugin_load.rs).
cargo bench --workspace -q --profile "$profile" --bench plugin_load -- \
    "rust agent-command=$rust" "python py-shell=$out/py-shell.wasm" "javascript js-shell=$out/js-shell.wasm"
