#!/usr/bin/env bash
# What loading a plugin costs by language: cold compile, cached load and instantiate of
# a Rust, a Python and a JavaScript agent driver, in one run, with ratios against the
# Rust one (the raw baseline). Builds the Python and JavaScript example plugins with
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
cargo bench --workspace -q --profile "$profile" --bench plugin_load -- \
    "rust agent-command=$rust" "python py-shell=$out/py-shell.wasm" "javascript js-shell=$out/js-shell.wasm"
