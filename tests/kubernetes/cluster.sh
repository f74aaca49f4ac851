#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine for agentgate's tests.
#
#   tests/kubernetes/cluster.sh build [BINARY...]
#                                       build (or reuse) the binaries and images `up` needs, or
#                                       only the named binaries (e.g. `build kubectl`)
#   tests/kubernetes/cluster.sh up      build if needed, start everything, wait for a Ready node;
#                                       prints KUBECONFIG=PATH and IMAGE=NAME
#   tests/kubernetes/cluster.sh down    stop everything and remove the cluster's state
#   tests/kubernetes/cluster.sh status  say what runs
#   tests/kubernetes/cluster.sh smoke   run a pod that prints hello on the running cluster (with
#                                       kubectl, built on demand: nothing else needs it)
#
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet on its own
# containerd (runc, CNI bridge). Kubernetes and etcd are built from Go modules (no prebuilt
# download is reachable here); containerd, runc and the CNI plugins come from Debian. Builds are
# cached under $AGENTGATE_K8S_DIR (default /var/cache/agentgate/kubernetes, outside any clone, so
# CI runs and worktrees on one machine share them), so a second `up` only starts processes. See README.md beside this script for versions, timings and pitfalls.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BASE=${AGENTGATE_K8S_DIR:-/var/cache/agentgate/kubernetes}   # builds: safe to delete, rebuilt
BIN=$BASE/bin
# Everything a running cluster owns; `down` removes it. One cluster per machine (ports, bridge
# and $RUN are fixed), so one fixed place: the kubeconfig path stays the same across `up`s.
STATE=${AGENTGATE_K8S_STATE:-/var/lib/agentgate-k8s}
RUN=/run/agentgate-k8s      # sockets and runtime state: short paths (unix sockets), gone at boot
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
# What `up` runs; kubectl is built only for `smoke` or on demand (`build kubectl`).
CLUSTER_BINARIES=(etcd pause kube-apiserver kube-controller-manager kube-scheduler kubelet)

# Messages go to the script's own stderr (fd 3) even from commands whose stderr is silenced.
exec 3>&2
log() { printf 'cluster.sh: %s\n' "$*" >&3; }
die() { log "error: $*"; exit 1; }
need() { command -v "$1" >/dev/null || die "needs $1 ($2)"; }

# Go builds share this 2-core machine with CI and other builds: one core, and by default the
# lowest priority. Under a full load nice 19 gets almost no CPU (a cold etcd build made no
# progress in 40 minutes at a load of 16), so CI, which needs the build to overlap its cargo
# build, sets AGENTGATE_K8S_NICE=0.
go_build() {
    need go "Go 1.26 or newer builds the binaries; see tests/kubernetes/README.md"
    CGO_ENABLED=0 GOMAXPROCS=1 GOFLAGS=-p=1 nice -n "${AGENTGATE_K8S_NICE:-19}" go build "$@"
}

# A build is reused while the inputs that made it are unchanged.
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }
fresh() { [[ -x $1 && -f $1.stamp && $(cat "$1.stamp") == "$2" ]]; }

# build [BINARY...]: the named binaries, or all that `up` needs and the images. One build
# per $AGENTGATE_K8S_DIR at a time (tests of several test binaries, and CI, may all ask).
build() {
    mkdir -p "$BASE"
    need flock "apt-get install util-linux"
    exec 8>"$BASE/.lock"
    flock 8
    if (($# == 0)); then
        local binary
        for binary in "${CLUSTER_BINARIES[@]}"; do build_binary "$binary"; done
        build_images
    else
        for binary in "$@"; do build_binary "$binary"; done
    fi
    exec 8>&-
}

# build_binary NAME: build one binary into $BIN unless the inputs that made it are unchanged.
build_binary() {
    local name=$1 module stamp flags='-s -w' package=.
    case $name in
        etcd)
            module=$HERE/etcd
            stamp=$(stamp_of "$module/go.mod" "$module/go.sum" "$module/main.go") ;;
        pause)
            module=$HERE/pause
            stamp=$(stamp_of "$module/go.mod" "$module/main.go") ;;
        kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kubectl)
            module=$HERE/build
            stamp=$(stamp_of "$module/go.mod" "$module/go.sum")
            package=k8s.io/kubernetes/cmd/$name
            # The version the binaries report (kubelet and kubectl check skew against the
            # API server).
            local minor=${K8S_VERSION#v1.} pkg
            minor=${minor%%.*}
            for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
                flags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
                flags+=" -X $pkg.gitTreeState=clean"
            done ;;
        *) die "no binary called $name (known: ${CLUSTER_BINARIES[*]} kubectl)" ;;
    esac
    fresh "$BIN/$name" "$stamp" && return
    mkdir -p "$BIN"
    local t=$SECONDS
    log "building $name"
    (cd "$module" && go_build -ldflags "$flags" -o "$BIN/$name" "$package")
    echo "$stamp" > "$BIN/$name.stamp"
    log "built $name in $((SECONDS - t))s"
}

# The pod sandbox (pause) image and the test image, built from scratch (no registry is
# reachable): saved once as archives that containerd imports on every `up`.
build_images() {
    local dir=$BASE/images
    mkdir -p "$dir"
    local busybox=/bin/busybox
    [[ -x $busybox && $(LC_ALL=C ldd "$busybox" 2>&1) == *"not a dynamic"* ]] \
        || die "needs a static busybox: apt-get install busybox-static"
    local stamp
    stamp=$(stamp_of "$BIN/pause" "$busybox" <(declare -f build_images))
    if [[ -f $dir/images.tar && $(cat "$dir/images.stamp" 2>/dev/null) == "$stamp" ]]; then
        return
    fi
    need docker "Docker builds the pause and test images"
    local ctx
    ctx=$(mktemp -d)
    mkdir -p "$ctx/pause" "$ctx/busybox/rootfs/bin"
    cp "$BIN/pause" "$ctx/pause/pause"
    printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' > "$ctx/pause/Dockerfile"
    cp "$busybox" "$ctx/busybox/rootfs/bin/busybox"
    local applet
    for applet in $("$busybox" --list); do
        [[ $applet == busybox ]] || ln -s busybox "$ctx/busybox/rootfs/bin/$applet"
    done
    # A world-writable /tmp, as images usually have (tar over exec unpacks there).
    mkdir -m 1777 "$ctx/busybox/rootfs/tmp"
    printf 'FROM scratch\nCOPY rootfs /\nENV PATH=/bin\nCMD ["sh"]\n' > "$ctx/busybox/Dockerfile"
    local image out
    for image in pause busybox; do
        local tag=$PAUSE_IMAGE
        [[ $image == busybox ]] && tag=$TEST_IMAGE
        out=$(docker build -q -t "$tag" "$ctx/$image" 2>&1) || die "docker build of $tag failed: $out"
    done
    docker save -o "$dir/images.tar" "$PAUSE_IMAGE" "$TEST_IMAGE"
    docker rmi "$PAUSE_IMAGE" "$TEST_IMAGE" >/dev/null
    echo "$stamp" > "$dir/images.stamp"
    rm -rf "$ctx"
}

# --- certificates and kubeconfigs -------------------------------------------------------------

PKI=$STATE/pki

# cert NAME SUBJECT USAGE [SAN]: a key and a certificate signed by the cluster's CA.
cert() {
    local name=$1 subject=$2 usage=$3 san=${4:-}
    openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subject" \
        -out "$PKI/$name.csr" 2>/dev/null
    {
        echo "extendedKeyUsage=$usage"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        [[ -n $san ]] && echo "subjectAltName=$san"
    } > "$PKI/$name.ext"
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
        -days 30 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
    rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

# kubeconfig NAME: a kubeconfig that authenticates with the certificate NAME.
kubeconfig() {
    local name=$1
    cat > "$STATE/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: agentgate-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $name
  user:
    client-certificate: $PKI/$name.crt
    client-key: $PKI/$name.key
contexts:
- name: agentgate-test
  context: {cluster: agentgate-test, user: $name}
current-context: agentgate-test
EOF
}

make_pki() {
    [[ -f $PKI/done ]] && return
    mkdir -p "$PKI"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -out "$PKI/ca.crt" \
        -days 30 -subj "/CN=agentgate-test-ca" 2>/dev/null
    cert apiserver "/CN=kube-apiserver" serverAuth \
        "IP:127.0.0.1,IP:${SERVICE_CIDR%.*}.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    cert admin "/O=system:masters/CN=agentgate-test-admin" clientAuth
    cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
    cert controller-manager "/CN=system:kube-controller-manager" clientAuth
    cert scheduler "/CN=system:kube-scheduler" clientAuth
    cert kubelet "/O=system:nodes/CN=system:node:$NODE" clientAuth
    openssl genrsa -out "$PKI/service-accounts.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/service-accounts.key" -pubout -out "$PKI/service-accounts.pub" 2>/dev/null
    local name
    for name in admin controller-manager scheduler kubelet; do kubeconfig "$name"; done
    touch "$PKI/done"
}

# --- processes --------------------------------------------------------------------------------

# running PID: the process exists and is not a zombie (PID 1 here may never reap orphans,
# and `kill -0` succeeds on a zombie).
running() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z ]]
}

alive() { [[ -f $STATE/pids/$1 ]] && running "$(cat "$STATE/pids/$1")"; }

# start NAME COMMAND...: run COMMAND in its own session, logging to $LOGS/NAME.log, with no
# descriptor but those three. An inherited one outlives this script in the daemon: the lock
# of `serialise` (the next `down` then waits for it forever) or a caller's output pipe (CI
# then waits for its end forever).
start() {
    local name=$1; shift
    alive "$name" && return
    mkdir -p "$STATE/pids" "$LOGS"
    (
        close_inherited_descriptors
        # A background subshell leads no process group, so setsid does not fork: $! is the
        # daemon's pid.
        exec setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null
    ) &
    echo $! > "$STATE/pids/$name"
}

# Closes every descriptor of this (sub)shell above 2.
close_inherited_descriptors() {
    local fd
    for fd in /proc/"$BASHPID"/fd/*; do
        fd=${fd##*/}
        if ((fd > 2)); then { exec {fd}>&-; } 2>/dev/null || true; fi
    done
}

# failed COMPONENT WHY: the end of COMPONENT's log, then exit.
failed() {
    log "the last lines of $LOGS/$1.log:"
    tail -n 40 "$LOGS/$1.log" >&3 2>&1 || true
    die "$2 (all logs: $LOGS/)"
}

# wait_for COMPONENT WHAT SECONDS COMMAND...: poll COMMAND until it succeeds, while the
# process COMPONENT runs.
wait_for() {
    local component=$1 what=$2 limit=$3; shift 3
    local deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        alive "$component" || failed "$component" "$component exited before $what was ready"
        ((SECONDS < deadline)) || failed "$component" "$what not ready after ${limit}s"
        sleep 1
    done
}

# api PATH: GET PATH from the API server as the cluster's admin.
api() {
    curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        "https://127.0.0.1:$API_PORT$1"
}

node_ready() {
    api "/api/v1/nodes/$NODE" | jq -e '.status.conditions[] | select(.type == "Ready") | .status == "True"'
}

kubectl() { "$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" "$@"; }

ctr_() { ctr --address "$RUN/containerd.sock" -n k8s.io "$@"; }

write_configs() {
    mkdir -p "$STATE/cni" "$RUN"
    cat > "$STATE/containerd.toml" <<EOF
version = 2
root = "$STATE/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$RUN/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  disable_apparmor = true
  # Sandboxes here may lack CAP_SYS_RESOURCE, and then runc cannot give pods the negative
  # oom_score_adj the kubelet asks for ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$RUN/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni"
EOF
    cat > "$STATE/cni/10-agentgate.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "agentgate-test",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "agentgate0",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "dataDir": "$STATE/cni-ipam"
      }
    }
  ]
}
EOF
    cat > "$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine runs cgroup v1; Kubernetes $K8S_VERSION still supports it when told so.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$RUN/containerd.sock
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
failSwapOn: false
podCIDR: $POD_CIDR
serializeImagePulls: false
# The disk and memory are shared with CI: never evict or taint for pressure.
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
EOF
}

up() {
    [[ $EUID == 0 ]] || die "must run as root (containerd, the kubelet and CNI need it)"
    need containerd "apt-get install containerd"
    need runc "apt-get install runc"
    [[ -x /usr/lib/cni/bridge ]] || die "needs the CNI plugins: apt-get install containernetworking-plugins"
    need iptables "apt-get install iptables"
    need openssl "apt-get install openssl"
    need curl "apt-get install curl"
    need jq "apt-get install jq"
    local t0=$SECONDS
    build
    local t1=$SECONDS
    make_pki
    write_configs

    start etcd "$BIN/etcd" --name agentgate-test --data-dir "$STATE/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 10))" \
        --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 10))" \
        --initial-cluster "agentgate-test=http://127.0.0.1:$((ETCD_PORT + 10))" \
        --unsafe-no-fsync
    start containerd containerd --config "$STATE/containerd.toml"
    wait_for etcd etcd 60 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

    start kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
        --client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
        --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
        --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
        --kubelet-preferred-address-types InternalIP \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --service-account-key-file "$PKI/service-accounts.pub" \
        --service-account-signing-key-file "$PKI/service-accounts.key" \
        --service-cluster-ip-range "$SERVICE_CIDR" --authorization-mode Node,RBAC \
        --allow-privileged=false
    wait_for kube-apiserver kube-apiserver 180 api /readyz

    start kube-controller-manager "$BIN/kube-controller-manager" \
        --kubeconfig "$STATE/controller-manager.kubeconfig" --bind-address 127.0.0.1 \
        --leader-elect=false --use-service-account-credentials \
        --service-account-private-key-file "$PKI/service-accounts.key" --root-ca-file "$PKI/ca.crt" \
        --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key"
    start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$STATE/scheduler.kubeconfig" \
        --bind-address 127.0.0.1 --leader-elect=false

    wait_for containerd containerd 60 ctr_ version
    ctr_ images import "$BASE/images/images.tar" >/dev/null

    # The kubelet refuses a loopback or link-local node IP: take the address this machine uses
    # on the interface of its default route.
    local node_ip dev
    dev=$(ip -4 route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}')
    node_ip=$(ip -4 -o addr show dev "${dev:-none}" scope global 2>/dev/null | awk '{sub(/\/.*/, "", $4); print $4; exit}')
    [[ -n $node_ip ]] || die "no IPv4 address with a route on this machine for the kubelet's node IP"
    start kubelet "$BIN/kubelet" --config "$STATE/kubelet.yaml" --kubeconfig "$STATE/kubelet.kubeconfig" \
        --root-dir "$STATE/kubelet" --cert-dir "$STATE/kubelet-pki" --hostname-override "$NODE" \
        --node-ip "$node_ip"
    wait_for kubelet "node $NODE" 180 node_ready
    # Pods are admitted only once their namespace's default service account exists.
    wait_for kube-controller-manager "the default service account" 60 \
        api /api/v1/namespaces/default/serviceaccounts/default
    log "up in $((SECONDS - t0))s (builds $((t1 - t0))s, start $((SECONDS - t1))s)"
    echo "KUBECONFIG=$STATE/admin.kubeconfig"
    echo "IMAGE=$TEST_IMAGE"
}

# stop NAME: SIGTERM, then SIGKILL after 10s.
stop() {
    local name=$1 pid
    [[ -f $STATE/pids/$name ]] || return 0
    pid=$(cat "$STATE/pids/$name")
    if running "$pid"; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 20); do running "$pid" || break; sleep 0.5; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$STATE/pids/$name"
}

down() {
    stop kubelet
    # The pods' containers outlive the kubelet: end them through containerd, then the shims.
    if alive containerd; then
        local task
        for task in $(ctr_ tasks ls -q 2>/dev/null); do
            ctr_ tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true
        done
        sleep 1
        for task in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$task" >/dev/null 2>&1 || true; done
        local container
        for container in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$container" >/dev/null 2>&1 || true; done
    fi
    local name
    for name in kube-scheduler kube-controller-manager kube-apiserver containerd etcd; do stop "$name"; done
    # Shims started by this containerd name its socket on their command line.
    local pid
    for pid in $(pgrep -f -- "-address $RUN/containerd.sock" || true); do kill -9 "$pid" 2>/dev/null || true; done
    local mount
    for mount in $(findmnt -rn -o TARGET | grep -E "^($STATE|$RUN)/" | sort -r); do
        umount -l "$mount" 2>/dev/null || true
    done
    ip link delete agentgate0 2>/dev/null || true
    # The kubelet's pod cgroups (cgroup v1: one tree per controller), empty once the pods are gone.
    local tree
    for tree in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
        if [[ -d $tree ]]; then find "$tree" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
    done
    rm -rf "$STATE" "$RUN"
    log "down"
}

# A pod on the test image that runs `echo hello`, locked down as agentgate's pods will be:
# proof that scheduling, the kubelet, containerd, runc, CNI and logs all work.
smoke() {
    build kubectl
    local pod=agentgate-smoke-$$
    kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $pod, namespace: default}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  containers:
  - name: hello
    image: $TEST_IMAGE
    imagePullPolicy: Never
    command: [echo, hello]
    securityContext:
      runAsNonRoot: true
      runAsUser: 65534
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
      seccompProfile: {type: RuntimeDefault}
EOF
    pod_done() {
        local phase
        phase=$(kubectl get pod "$pod" -o 'jsonpath={.status.phase}')
        [[ $phase == Failed ]] && die "pod $pod failed: $(kubectl get pod "$pod" -o 'jsonpath={.status.containerStatuses[0].state}')"
        [[ $phase == Succeeded ]]
    }
    wait_for kubelet "pod $pod" 120 pod_done
    local out
    out=$(kubectl logs "$pod")
    kubectl delete pod "$pod" --wait=false >/dev/null
    [[ $out == hello ]] || die "pod printed '$out', expected 'hello'"
    log "smoke pod printed hello"
}

status() {
    local name
    for name in etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet; do
        if alive "$name"; then echo "$name: running (pid $(cat "$STATE/pids/$name"))"; else echo "$name: stopped"; fi
    done
}

# One `up`, `down` or `smoke` at a time on this machine: tests of several test binaries
# (and engineers) may all ask for the cluster at once.
serialise() {
    need flock "apt-get install util-linux"
    [[ $EUID == 0 ]] || die "must run as root (containerd, the kubelet and CNI need it)"
    exec 9>/run/agentgate-k8s.lock
    flock 9
}

case "${1:-}" in
    up|down|smoke) serialise ;;
esac
case "${1:-}" in
    build) shift; build "$@" ;;
    up) up ;;
    down) down ;;
    status) status ;;
    smoke) smoke ;;
    *) die "usage: $0 build [BINARY...]|up|down|status|smoke" ;;
esac
