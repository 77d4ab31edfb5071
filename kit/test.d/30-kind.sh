#!/usr/bin/env bash
# kit-test: a two-node Kind cluster from the bundle (kind CLI + kindest/node
# image built by components/kind.sh), with the kind config devstack's Kind
# provider uses (kit/kind/cluster.yaml: control-plane + worker, kubelet
# failCgroupV1: false). Checks:
#   1. all nodes Ready, running the bundle's Kubernetes version (time measured);
#   2. CoreDNS available;
#   3. `kind load image-archive` works and a pod on each node reaches the
#      other's pod IP (pod-to-pod across nodes, default CNI = flannel host-gw);
#   4. a PVC of the default StorageClass (local-path) binds and is writable.
# Runs standalone too (bash kit/test.d/30-kind.sh). It creates its own
# cluster (devstack-kitprobe-<n>) and ignores the K3s node test.sh started;
# the cluster is always deleted (EXIT trap), unless KIT_TEST_KEEP=1 and a
# check failed. Exit 0 pass, 77 skip (no kind artifacts in the bundle), 1 fail.
set -euo pipefail
# lib.sh: KIT_CACHE and the test image helper shared with test.sh.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
CACHE=${KIT_CACHE:-${DEVSTACK_KIT_CACHE:-$HOME/.cache/devstack/kit}}
BUNDLE=${KIT_BUNDLE:-${DEVSTACK_KIT_BUNDLE:-$CACHE/bundle}}
TIMEOUT=${KIT_TEST_TIMEOUT:-300}; TIMEOUT=${TIMEOUT%s}
CLUSTER=${KIT_KIND_CLUSTER:-devstack-kitprobe-$((RANDOM % 10000))}
TESTBOX_IMAGE=$KIT_TESTBOX_IMAGE
log() { printf '[kind-test %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fail() { echo "FAIL $*"; exit 1; }

index="$BUNDLE/index.json"
[ -f "$index" ] || { log "no bundle at $BUNDLE"; exit 77; }
kind_file=$(jq -r '.artifacts[] | select(.kind=="binary" and .name=="kind") | .file' "$index")
node_ref=$(jq -r '.artifacts[] | select(.role=="kind-node") | "\(.name):\(.tag)"' "$index" | head -1)
node_file=$(jq -r '.artifacts[] | select(.role=="kind-node") | .file' "$index" | head -1)
if [ -z "$kind_file" ] || [ -z "$node_ref" ]; then
  log "the bundle has no kind binary / kind-node image (components/kind.sh): skip"; exit 77
fi
KIND="$BUNDLE/$kind_file"
version=${node_ref##*:}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/devstack-kind-test.XXXXXX")
export KUBECONFIG="$WORK/kubeconfig"
created=""
cleanup() {
  local rc=$? id d
  if [ -n "$created" ]; then
    if [ $rc -ne 0 ]; then
      kubectl get nodes -o wide >&2 2>/dev/null || true
      kubectl get pods -A -o wide >&2 2>/dev/null || true
      "$KIND" export logs "$WORK/logs" --name "$CLUSTER" >/dev/null 2>&1 \
        && log "kind logs kept in $CACHE/test/kind-logs-$CLUSTER" \
        && rm -rf "$CACHE/test/kind-logs-$CLUSTER" && mkdir -p "$CACHE/test" \
        && mv "$WORK/logs" "$CACHE/test/kind-logs-$CLUSTER" || true
    fi
    if [ $rc -ne 0 ] && [ "${KIT_TEST_KEEP:-}" = 1 ]; then
      log "KIT_TEST_KEEP=1: keeping cluster $CLUSTER (kind delete cluster --name $CLUSTER)"
      exit $rc
    fi
    ids=$(docker ps -aq --no-trunc --filter "label=io.x-k8s.kind.cluster=$CLUSTER" || true)
    log "kind delete cluster --name $CLUSTER"
    "$KIND" delete cluster --name "$CLUSTER" >/dev/null 2>&1 || log "kind delete cluster failed"
    # cgroup v1: pod cgroups below the node containers' own can outlive them.
    for id in $ids; do
      for d in /sys/fs/cgroup/*/docker/"$id" /sys/fs/cgroup/*/*/docker/"$id"; do
        [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
      done
    done
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- images ----------------------------------------------------------------------
if ! docker image inspect "$node_ref" >/dev/null 2>&1; then
  log "docker load $node_file"
  docker load -i "$BUNDLE/$node_file" >/dev/null
fi
testbox_tar=$(kit_testbox_tar "$WORK")

# --- cluster -----------------------------------------------------------------------
log "kind create cluster --name $CLUSTER --image $node_ref (control-plane + worker)"
t0=$SECONDS
created=1
"$KIND" create cluster --name "$CLUSTER" --image "$node_ref" --config "$KIT_ROOT/kind/cluster.yaml" \
  --kubeconfig "$KUBECONFIG" --retain >"$WORK/create.log" 2>&1 \
  || { sed 's/^/  | /' "$WORK/create.log" >&2; fail "kind create cluster"; }
t_created=$((SECONDS - t0))
# kubectl of the same version as the cluster, from the node
docker cp "$CLUSTER-control-plane:/usr/bin/kubectl" "$WORK/kubectl" >/dev/null
export PATH="$WORK:$PATH"
# A joined worker's kubelet registers its Node a moment after `kind create`
# returns: wait for both Nodes to exist before waiting for them to be Ready.
until [ "$(kubectl get nodes --no-headers 2>/dev/null | wc -l)" = 2 ]; do
  [ $((SECONDS - t0)) -lt "$TIMEOUT" ] || fail "expected 2 nodes after ${TIMEOUT}s"
  sleep 1
done
kubectl wait nodes --all --for=condition=Ready --timeout="${TIMEOUT}s" >/dev/null \
  || fail "nodes not Ready after ${TIMEOUT}s"
t_ready=$((SECONDS - t0))
for v in $(kubectl get nodes -o jsonpath='{.items[*].status.nodeInfo.kubeletVersion}'); do
  [ "$v" = "$version" ] || fail "node kubelet $v, image is $version"
done
log "PASS nodes Ready after ${t_ready}s (kind create returned after ${t_created}s): $(kubectl get nodes --no-headers | awk '{print $1"="$2}' | tr '\n' ' ')"

kubectl -n kube-system rollout status deploy/coredns --timeout="${TIMEOUT}s" >/dev/null \
  || fail "CoreDNS not available"
log "PASS CoreDNS available after $((SECONDS - t0))s"

# --- pod-to-pod across nodes ---------------------------------------------------------
"$KIND" load image-archive "$testbox_tar" --name "$CLUSTER" >/dev/null 2>&1 || fail "kind load image-archive"
read -r -a nodes <<<"$(kubectl get nodes -o jsonpath='{.items[*].metadata.name}')"
for i in 0 1; do
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: web-$i, namespace: default, labels: {app: kit-web}}
spec:
  nodeName: ${nodes[$i]}
  tolerations: [{operator: Exists}]
  containers:
  - name: web
    image: $TESTBOX_IMAGE
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "mkdir -p /www && echo kit-from-${nodes[$i]} > /www/index.html && exec httpd -f -p 8080 -h /www"]
    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
EOF
done
kubectl wait pod/web-0 pod/web-1 --for=condition=Ready --timeout="${TIMEOUT}s" >/dev/null \
  || { kubectl describe pod web-0 web-1 | tail -40 >&2; fail "test pods not Ready"; }
ip0=$(kubectl get pod web-0 -o jsonpath='{.status.podIP}')
ip1=$(kubectl get pod web-1 -o jsonpath='{.status.podIP}')
get() { kubectl exec "$1" -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 $2 8080" 2>&1 | tail -1; }
out=$(get web-0 "$ip1"); [ "$out" = "kit-from-${nodes[1]}" ] || fail "web-0 (${nodes[0]}) -> $ip1 (${nodes[1]}): '$out'"
out=$(get web-1 "$ip0"); [ "$out" = "kit-from-${nodes[0]}" ] || fail "web-1 (${nodes[1]}) -> $ip0 (${nodes[0]}): '$out'"
log "PASS pod-to-pod across nodes: $ip0 (${nodes[0]}) <-> $ip1 (${nodes[1]})"

# --- default storage -------------------------------------------------------------------
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: kit-pvc, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 16Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: kit-pvc-user, namespace: default}
spec:
  restartPolicy: Never
  containers:
  - name: w
    image: $TESTBOX_IMAGE
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "echo kit-pvc-ok > /data/f && cat /data/f"]
    volumeMounts: [{name: d, mountPath: /data}]
  volumes: [{name: d, persistentVolumeClaim: {claimName: kit-pvc}}]
EOF
ok=""
for _ in $(seq 1 "$TIMEOUT"); do
  [ "$(kubectl get pvc kit-pvc -o jsonpath='{.status.phase}')" = Bound ] \
    && [ "$(kubectl get pod kit-pvc-user -o jsonpath='{.status.phase}')" = Succeeded ] && { ok=1; break; }
  sleep 1
done
[ -n "$ok" ] || { kubectl describe pvc kit-pvc | tail -15 >&2; kubectl -n local-path-storage get pods -o wide >&2
                  fail "PVC of the default StorageClass did not bind / pod did not write"; }
[ "$(kubectl logs kit-pvc-user)" = kit-pvc-ok ] || fail "PVC pod output"
log "PASS PVC bound ($(kubectl get pvc kit-pvc -o jsonpath='{.spec.storageClassName}')), written from a pod"

echo "kind: $version, 2 nodes Ready in ${t_ready}s, CoreDNS, pod-to-pod across nodes, default storage ok"
