#!/usr/bin/env bash
# Change detection on a 100k-file git work tree against `git status --porcelain` on the
# same tree, in one run: git mode (the baseline before the agent, the collect step after
# it) and snapshot mode (the same two steps for a workspace that is not a repository),
# each as a median and a ratio to `git status` (target: the git collect step at most
# 1.0x git status). See host/benches/change_detection.rs for what each line measures.
# Prints `RESULT changes-100k-<mode>-<step> <ours> <git status> ms x<ratio>` lines.
#
#   bench/change_detection.sh [ROUNDS]   (default 5; FILES=100000; PROFILE=release
#                                         for a release build; the dev profile builds
#                                         libgit2, SHA-1 and BLAKE3 with -O3 already,
#                                         our own tree walk unoptimised)
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-dev}"
export FILES="${FILES:-100000}" ROUNDS="${1:-${ROUNDS:-5}}"
cargo bench --workspace -q --profile "$profile" --bench change_detection
