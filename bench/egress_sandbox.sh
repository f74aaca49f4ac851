#!/usr/bin/env bash
# What egress costs a client inside the subprocess sandbox: the same agent, timed from
# inside the sandbox so sandbox start-up is left out, once with `network: bridge`
# (slirp4netns, straight to the upstream) and once held to `egress.allow` (the in-sandbox
# relay on 127.0.0.1:3128, the host's egress proxy, then the upstream). It prints the
# median time per connection (ROUNDS small requests with curl, one connection each) and
# the time of a 100 MiB download, for both, with their differences and ratios.
# bench/egress_proxy.sh measures the proxy alone at the socket level; this adds the
# relay and the sandbox's side.
#
# The upstream is python3's http.server on the host's own address (nothing leaves the
# machine); egress allows it by that exact IP literal.
#
#   bench/egress_sandbox.sh   (ROUNDS, default 50; AGENTGATE_BIN, else a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${ROUNDS:-50}"
bin="${AGENTGATE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release -q -p agentgate
    bin="$PWD/target/release/agentgate"
fi
work="$(mktemp -d)"
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
export AGENTGATE_HOME="$work/home"
mkdir -p "$work/ws" "$work/www"
head -c $((100 * 1024 * 1024)) /dev/zero >"$work/www/big"
echo small >"$work/www/small"

host_ip="$(python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("10.255.255.255", 9)); print(s.getsockname()[0])')"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("'"$host_ip"'", 0)); print(s.getsockname()[1])')"
python3 -m http.server --bind "$host_ip" --directory "$work/www" "$port" >/dev/null 2>&1 &
server_pid=$!
for _ in $(seq 50); do
    curl -s -o /dev/null --noproxy '*' "http://$host_ip:$port/small" && break
    sleep 0.1
done

# The agent: ROUNDS requests, then the download, each timed in nanoseconds inside the
# sandbox. curl uses the proxy variables when egress sets them.
cat >"$work/ws/agent.sh" <<SH
set -e
url="http://$host_ip:$port"
for i in \$(seq $rounds); do
    start=\$(date +%s%N)
    curl -sf -o /dev/null "\$url/small"
    echo "connection \$(( \$(date +%s%N) - start ))"
done
start=\$(date +%s%N)
curl -sf -o /dev/null "\$url/big"
echo "download \$(( \$(date +%s%N) - start ))"
SH

spec() { # name, extra sandbox lines
    cat <<YAML
apiVersion: agentgate.io/v1
kind: TaskSpec
metadata: {name: bench-$1}
spec:
  goal: {prompt: "fetch"}
  execution:
    workspace: {source: local, path: "$work/ws"}
    sandbox:
      provider: subprocess
      network: bridge
$2
      resources: {timeout: 10m}
    agent: {driver: command, options: {command: [sh, /workspace/agent.sh]}}
YAML
}
spec direct "" >"$work/direct.yaml"
spec egress "      egress: {allow: [\"$host_ip:$port\"]}" >"$work/egress.yaml"

measure() { # name -> "median-connection-ns download-ns"
    rm -rf "$AGENTGATE_HOME"
    "$bin" run "$work/$1.yaml" >/dev/null 2>"$work/$1.err" || {
        echo "the $1 run failed:" >&2
        cat "$work/$1.err" >&2
        exit 1
    }
    local log
    log="$(find "$AGENTGATE_HOME/runs" -name stdout.log | head -1)"
    local median download
    median="$(grep '^connection ' "$log" | awk '{print $2}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
    download="$(grep '^download ' "$log" | awk '{print $2}')"
    [ -n "$median" ] && [ -n "$download" ] || { echo "the $1 run printed no timings" >&2; exit 1; }
    echo "$median $download"
}
# Not in a command substitution, so a failed run stops the script.
measure direct >"$work/direct.out"
measure egress >"$work/egress.out"
read -r direct_conn direct_dl <"$work/direct.out"
read -r egress_conn egress_dl <"$work/egress.out"
awk -v dc="$direct_conn" -v ec="$egress_conn" -v dd="$direct_dl" -v ed="$egress_dl" -v n="$rounds" 'BEGIN {
    printf "per connection (median of %d, curl in the sandbox): bridge %.2f ms, egress %.2f ms, +%.2f ms (%.2fx)\n", n, dc/1e6, ec/1e6, (ec-dc)/1e6, ec/dc
    printf "100 MiB download: bridge %.0f ms (%.0f MiB/s), egress %.0f ms (%.0f MiB/s), %.2fx\n", dd/1e6, 100/(dd/1e9), ed/1e6, 100/(ed/1e9), ed/dd
}'
