#!/usr/bin/env bash
# What the egress proxy (host/src/egress) costs against a direct TCP connection, in one
# run: the median per connection (one small request: direct, absolute-form through the
# proxy, CONNECT tunnel through the proxy) and a 100 MiB download through a tunnel, as
# differences and ratios. Upstream on 127.0.0.2; nothing leaves the machine.
#
#   bench/egress_proxy.sh   (PROFILE=release for an optimised proxy; the default `dev`
#                            profile runs the proxy unoptimised, so its figures are an
#                            upper bound of the cost; ROUNDS, BIG_ROUNDS set the samples)
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-dev}"
cargo bench -p agentgate -q --profile "$profile" --bench egress_proxy
# The same costs seen by a client inside the subprocess sandbox (relay + proxy), against
# the bridge network: bench/egress_sandbox.sh.
bench/egress_sandbox.sh
