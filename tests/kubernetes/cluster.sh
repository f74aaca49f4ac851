#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine for agentgate's tests.
#
#   tests/kubernetes/cluster.sh build   build (or reuse) the binaries and images only
#   tests/kubernetes/cluster.sh up      build if needed, start everything, wait for a Ready node;
#                                       prints KUBECONFIG=PATH and IMAGE=NAME
#   tests/kubernetes/cluster.sh down    stop everything and remove the cluster's state
#   tests/kubernetes/cluster.sh status  say what runs
#
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet on its own
# containerd (runc, CNI bridge). Kubernetes and etcd are built from Go modules (no prebuilt
# download is reachable here); containerd, runc and the CNI plugins come from Debian. Builds are
# cached under $AGENTGATE_K8S_DIR (default: target/kubernetes of this repo), so a second `up`
# only starts processes. See README.md beside this script for versions, timings and pitfalls.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BASE=${AGENTGATE_K8S_DIR:-$REPO/target/kubernetes}
BIN=$BASE/bin
STATE=$BASE/state           # everything a running cluster owns; `down` removes it
RUN=/run/agentgate-k8s      # containerd's state must live on a tmpfs-like path without spaces
LOGS=$STATE/logs
K8S_VERSION=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$HERE/build/go.mod")
NODE=agentgate-node
API_PORT=${AGENTGATE_K8S_API_PORT:-16443}
ETCD_PORT=${AGENTGATE_K8S_ETCD_PORT:-23790}
KUBELET_PORT=${AGENTGATE_K8S_KUBELET_PORT:-10250}
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/24
PAUSE_IMAGE=agentgate.test/pause:1
TEST_IMAGE=agentgate.test/busybox:1
KUBE_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

log() { printf 'cluster.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Go builds share this 2-core machine with CI and other builds: one core, lowest priority.
go_build() { CGO_ENABLED=0 GOMAXPROCS=1 GOFLAGS=-p=1 nice -n 19 go build "$@"; }

# A build is reused while the inputs that made it are unchanged.
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }
fresh() { [[ -x $1 && -f $1.stamp && $(cat "$1.stamp") == "$2" ]]; }

build_binaries() {
    mkdir -p "$BIN"
    local stamp t
    stamp=$(stamp_of "$HERE/etcd/go.mod" "$HERE/etcd/go.sum" "$HERE/etcd/main.go")
    if ! fresh "$BIN/etcd" "$stamp"; then
        t=$SECONDS
        log "building etcd ($(awk '$1 == "require" {print $3}' "$HERE/etcd/go.mod"))"
        (cd "$HERE/etcd" && go_build -ldflags '-s -w' -o "$BIN/etcd" .)
        echo "$stamp" > "$BIN/etcd.stamp"
        log "built etcd in $((SECONDS - t))s"
    fi
    stamp=$(stamp_of "$HERE/pause/go.mod" "$HERE/pause/main.go")
    if ! fresh "$BIN/pause" "$stamp"; then
        (cd "$HERE/pause" && go_build -ldflags '-s -w' -o "$BIN/pause" .)
        echo "$stamp" > "$BIN/pause.stamp"
    fi
    # The version the binaries report (kubelet and kubectl check skew against the API server).
    local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
    local ldflags='-s -w' pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        ldflags+=" -X $pkg.gitTreeState=clean"
    done
    stamp=$(stamp_of "$HERE/build/go.mod" "$HERE/build/go.sum")
    local cmd
    for cmd in "${KUBE_COMMANDS[@]}"; do
        fresh "$BIN/$cmd" "$stamp" && continue
        t=$SECONDS
        log "building $cmd $K8S_VERSION"
        (cd "$HERE/build" && go_build -ldflags "$ldflags" -o "$BIN/$cmd" "k8s.io/kubernetes/cmd/$cmd")
        echo "$stamp" > "$BIN/$cmd.stamp"
        log "built $cmd in $((SECONDS - t))s"
    done
}

case "${1:-}" in
    build) build_binaries ;;
    *) die "usage: $0 build|up|down|status" ;;
esac
