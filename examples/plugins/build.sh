#!/usr/bin/env bash
# Builds the Python and JavaScript example plugins from ../../wit into OUTDIR.
#
# Usage: examples/plugins/build.sh OUTDIR
#
# Toolchains are pinned and installed on first use under target/polyglot-tools/ (never in
# the repository): componentize-py from PyPI into a venv, jco + componentize-js from npm.
# Every component is built against a narrow world, with the flags that keep its imports
# to the world's own interfaces (see docs/plugins/python.md and javascript.md).
set -euo pipefail

COMPONENTIZE_PY_VERSION=0.25.1
JCO_VERSION=1.34.0
COMPONENTIZE_JS_VERSION=0.23.0

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
wit="$root/wit"
tools="${AGENTGATE_POLYGLOT_TOOLS:-$root/target/polyglot-tools}"

if [ $# -ne 1 ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
mkdir -p "$1"
out="$(cd "$1" && pwd)"
mkdir -p "$tools"

# componentize-py in a venv of its own.
py="$tools/venv/bin/componentize-py"
if ! "$py" --version 2>/dev/null | grep -q "$COMPONENTIZE_PY_VERSION"; then
    echo "build.sh: installing componentize-py $COMPONENTIZE_PY_VERSION into $tools/venv" >&2
    python3 -m venv "$tools/venv"
    "$tools/venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY_VERSION"
fi

# jco and componentize-js, exact versions, in target/polyglot-tools/node_modules.
jco="$tools/node_modules/.bin/jco"
installed_js() {
    node -e 'const [d, n, v] = process.argv.slice(1); process.exit(require(d + "/node_modules/" + n + "/package.json").version === v ? 0 : 1)' "$tools" "$1" "$2" 2>/dev/null
}
if ! installed_js @bytecodealliance/jco "$JCO_VERSION" || ! installed_js @bytecodealliance/componentize-js "$COMPONENTIZE_JS_VERSION"; then
    echo "build.sh: installing jco $JCO_VERSION and componentize-js $COMPONENTIZE_JS_VERSION into $tools/node_modules" >&2
    [ -f "$tools/package.json" ] || echo '{"private": true}' > "$tools/package.json"
    (cd "$tools" && npm install --silent --no-audit --no-fund --save-exact \
        "@bytecodealliance/jco@$JCO_VERSION" "@bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION")
fi

# name, language, world, source directory, entry[, jco features to disable]
build() {
    local name=$1 lang=$2 world=$3 dir=$here/$4 entry=$5 disable=${6:-}
    # Up to date when newer than its sources, the WIT and this script.
    if [ -f "$out/$name.wasm" ] && [ -z "$(find "$dir" "$wit" "$here/build.sh" -newer "$out/$name.wasm" -type f | head -1)" ]; then
        echo "build.sh: $name is up to date" >&2
        return
    fi
    echo "build.sh: $name ($lang, world $world)" >&2
    case $lang in
        python)
            # Default WASI imports stay (the host links WASI granting nothing), so
            # `print` reaches the run's plugins.log; `--stub-wasi` would drop them.
            (cd "$dir" && "$py" -d "$wit" -w "$world" componentize "$entry" -o "$out/$name.wasm.tmp") ;;
        javascript)
            # `disable` is the jco features to leave out. Both choices import no
            # wasi:http (which this host does not link yet): `all` leaves only the world's
            # own imports (and console.log goes nowhere); `http fetch-event` keeps stdio,
            # clocks and random (WASI the host links granting nothing), so console.log
            # reaches the run's plugins.log.
            # shellcheck disable=SC2086 # $disable is a list of features
            (cd "$dir" && "$jco" componentize "$entry" --wit "$wit" -n "$world" --disable $disable -o "$out/$name.wasm.tmp" >/dev/null) ;;
    esac
    mv "$out/$name.wasm.tmp" "$out/$name.wasm"
}

build py-shell   python     agent-driver             python/driver       app
build py-sealed  python     process-sandbox-provider python/provider     app
build js-shell   javascript agent-driver             javascript/driver   driver.js   "http fetch-event"
build js-sealed  javascript process-sandbox-provider javascript/provider provider.js all
echo "build.sh: built py-shell, py-sealed, js-shell, js-sealed into $out" >&2
