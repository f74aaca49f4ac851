#!/usr/bin/env bash
# Change detection on a 100k-file git work tree against `git status --porcelain` on the
# same tree, in one run: prints medians and ratios (target: the collect step at most
# 1.0x git status). See host/benches/change_detection.rs for what each line measures.
#
#   bench/change_detection.sh            (FILES=100000 ROUNDS=5 by default;
#                                         PROFILE=release for a release build; the dev
#                                         profile builds libgit2 with -O3 already)
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-dev}"
export FILES="${FILES:-100000}" ROUNDS="${ROUNDS:-5}"
cargo bench --workspace -q --profile "$profile" --bench change_detection
