#!/usr/bin/env bash
# Offline kit smoke test (`make kit-test`), no network needed.
#
#  1. starts the K3s node image (privileged, uniquely named, labelled
#     dev.devstack.managed-by=devstack-kit-test) with the bundle's images
#     bind-mounted into /var/lib/rancher/k3s/agent/images/ (k3s imports them
#     at start), like devstack's preload;
#  2. waits (bounded) for the node to be Ready and CoreDNS to be available;
#  3. from a pod: resolves kubernetes.default.svc.cluster.local through
#     CoreDNS and fetches a page from a Service by name;
#  4. runs every kit/test.d/*.sh hook (see below);
#  5. always removes the container, its volumes and leftovers (trap).
#
# Hooks: each test.d/*.sh runs in its own bash with these exported:
#   KUBECONFIG           kubeconfig for the node's API (published on 127.0.0.1)
#   KIT_NODE_CONTAINER   the node container's name (docker exec works)
#   KIT_BUNDLE, KIT_CACHE, KIT_ROOT
#   PATH                 starts with a directory holding kubectl (the node's k3s)
# A hook exits 0 on success, 77 to skip (its last line says why: printed as
# `SKIPPED: <hook>: <why>`, which tests/run.sh counts), anything else fails. Hooks
# needing images the test did not preload can `docker exec -i
# "$KIT_NODE_CONTAINER" k3s ctr images import - < tarball`.
#
# Environment:
#   KIT_TEST_TIMEOUT      seconds to wait for node Ready / CoreDNS / pods (300)
#   KIT_TEST_SKIP_ROLES   bundle image roles not preloaded (k3s-node,kind-node,localstack:
#                         as devstack's preload)
#   KIT_TEST_KEEP=1       keep the cluster on failure for debugging
#   KIT_TEST_HOOKS        space-separated hook names to run (default: all); the
#                         others print `SKIPPED:`, and a name that is no hook is an error
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$KIT_ROOT/k3s/versions.sh"

# A name that is no hook would drop hooks silently: refused before any work.
for name in ${KIT_TEST_HOOKS:-}; do
  [ -f "$KIT_ROOT/test.d/$name.sh" ] || die "KIT_TEST_HOOKS names \`$name\`, which is no hook in $KIT_ROOT/test.d"
done

TIMEOUT=${KIT_TEST_TIMEOUT:-300}
SKIP_ROLES=${KIT_TEST_SKIP_ROLES:-k3s-node,kind-node,localstack}
LABEL=dev.devstack.managed-by=devstack-kit-test
RUN_ID=$(date +%s)-$$-$RANDOM
NODE=devstack-kit-test-$RUN_ID
WORK=$(mktemp -d "${TMPDIR:-/tmp}/devstack-kit-test.XXXXXX")
TESTBOX_IMAGE=$KIT_TESTBOX_IMAGE
passed=0 failed=0 skipped=0
node_id=""

cleanup() {
  local rc=$?
  if [ $rc -ne 0 ] && [ -n "$node_id" ]; then
    log "node logs (last 40 lines):"
    docker logs --tail 40 "$NODE" 2>&1 | sed 's/^/  | /' >&2 || true
  fi
  if [ $rc -ne 0 ] && [ "${KIT_TEST_KEEP:-}" = 1 ] && [ -n "$node_id" ]; then
    log "KIT_TEST_KEEP=1: leaving $NODE and $WORK for debugging (docker rm -f -v $NODE)"
    exit $rc
  fi
  if [ -n "$node_id" ]; then
    log "cleanup: removing $NODE and its volumes"
    # Stop k3s first so it tears its pods down, then remove with volumes.
    docker stop -t 20 "$NODE" >/dev/null 2>&1 || true
    docker rm -f -v "$NODE" >/dev/null 2>&1 || true
    # On cgroup v1 the kubelet's pod cgroups live below the container's own
    # and can outlive it; remove what is left of this container's cgroups.
    local d
    for d in /sys/fs/cgroup/*/docker/"$node_id" /sys/fs/cgroup/*/*/docker/"$node_id"; do
      [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
  fi
  # Anything else this run created (containers/volumes carrying its run id).
  docker ps -aq --filter "label=dev.devstack.kit-test.run=$RUN_ID" | xargs -r docker rm -f -v >/dev/null 2>&1 || true
  docker volume ls -q --filter "label=dev.devstack.kit-test.run=$RUN_ID" | xargs -r docker volume rm -f >/dev/null 2>&1 || true
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ok() { passed=$((passed + 1)); log "PASS $*"; }
bad() { failed=$((failed + 1)); log "FAIL $*"; }

# until_ok SECONDS DESCRIPTION CMD...: retry CMD every 2s until it succeeds.
until_ok() {
  local deadline=$(( $(date +%s) + $1 )) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(docker inspect -f '{{.State.Running}}' "$NODE" 2>/dev/null)" = true ] || { log "node container is not running"; return 1; }
    [ "$(date +%s)" -lt "$deadline" ] || { log "timed out after $TIMEOUT s waiting for $what"; return 1; }
    sleep 2
  done
}

# --- images -------------------------------------------------------------------
[ -f "$KIT_BUNDLE/index.json" ] || die "no bundle at $KIT_BUNDLE: run make kit"
if ! image_exists "$K3S_IMAGE"; then
  f=$(jq -r --arg n "${K3S_IMAGE%:*}" --arg t "${K3S_IMAGE##*:}" \
    '.artifacts[] | select(.kind=="image" and .name==$n and .tag==$t) | .file' "$KIT_BUNDLE/index.json")
  [ -n "$f" ] || die "$K3S_IMAGE is neither in docker nor in the bundle: run make kit"
  log "docker load $f"
  docker load -i "$KIT_BUNDLE/$f" >/dev/null
fi

# A tiny test image (static busybox from Debian: nslookup, nc, httpd),
# imported into the node with the bundle's images; not part of the bundle.
testbox_tar=$(kit_testbox_tar "$WORK")

mounts=(-v "$testbox_tar:/var/lib/rancher/k3s/agent/images/devstack-kit-testbox.tar:ro")
while IFS=$'\t' read -r role file; do
  [[ ",$SKIP_ROLES," == *",$role,"* ]] && continue
  [ -f "$KIT_BUNDLE/$file" ] || die "bundle file missing: $file"
  mounts+=(-v "$KIT_BUNDLE/$file:/var/lib/rancher/k3s/agent/images/$(basename "$file"):ro")
  log "preload $file ($role)"
done < <(jq -r '.artifacts[] | select(.kind=="image") | [.role, .file] | @tsv' "$KIT_BUNDLE/index.json")

# --- node ---------------------------------------------------------------------
log "start $NODE ($K3S_IMAGE)"
# As devstack's nodes: the host's disk is not the kubelet's to evict for or collect.
t_start=$(date +%s)
node_id=$(docker run -d --privileged --name "$NODE" --hostname "$NODE" \
  --label "$LABEL" --label "dev.devstack.kit-test.run=$RUN_ID" \
  --tmpfs /run --tmpfs /var/run \
  -p 127.0.0.1::6443 "${mounts[@]}" \
  "$K3S_IMAGE" server \
  --disable=traefik,servicelb,metrics-server,local-storage \
  --write-kubeconfig-mode=644 --tls-san=127.0.0.1 \
  '--kubelet-arg=eviction-hard=imagefs.available<0%,nodefs.available<0%,nodefs.inodesFree<0%' \
  --kubelet-arg=image-gc-high-threshold=100)

# kubectl for the host and the hooks: the node's multicall k3s binary.
mkdir -p "$WORK/bin"
# (the kit image's multicall binary is k3s-server, /bin/k3s being a front end;
# upstream's /bin/k3s is the binary itself)
copy_k3s() {
  docker cp -L "$NODE:/usr/bin/k3s-server" "$WORK/bin/k3s" 2>/dev/null || docker cp -L "$NODE:/bin/k3s" "$WORK/bin/k3s"
}
until_ok 60 "k3s binary" copy_k3s
ln -sf k3s "$WORK/bin/kubectl"
export PATH="$WORK/bin:$PATH"
# docker cp, not docker exec: exec into a privileged container fails on hosts
# whose bounding set lacks capabilities unless the engine's runc copes.
kubeconfig_written() {
  docker cp "$NODE:/etc/rancher/k3s/k3s.yaml" "$WORK/k3s.yaml" && [ -s "$WORK/k3s.yaml" ]
}
until_ok "$TIMEOUT" "kubeconfig" kubeconfig_written
port=$(docker port "$NODE" 6443/tcp | head -1 | sed 's/.*://')
sed "s#https://127.0.0.1:6443#https://127.0.0.1:$port#" "$WORK/k3s.yaml" >"$WORK/kubeconfig"
export KUBECONFIG="$WORK/kubeconfig" KIT_NODE_CONTAINER=$NODE KIT_BUNDLE KIT_CACHE KIT_ROOT

node_ready() {
  kubectl get nodes -o jsonpath='{.items[*].status.conditions[?(@.type=="Ready")].status}' | grep -q True
}
if until_ok "$TIMEOUT" "node Ready" node_ready; then
  ok "node Ready after $(( $(date +%s) - t_start ))s ($(kubectl get nodes -o jsonpath='{.items[0].status.nodeInfo.kubeletVersion}'))"
else
  bad "node Ready"; exit 1
fi

coredns_ready() {
  [ "$(kubectl -n kube-system get deploy coredns -o jsonpath='{.status.availableReplicas}')" = 1 ]
}
if until_ok "$TIMEOUT" "CoreDNS available" coredns_ready; then
  ok "CoreDNS available after $(( $(date +%s) - t_start ))s"
else
  kubectl -n kube-system get pods -o wide >&2 || true
  kubectl -n kube-system describe pods -l k8s-app=kube-dns 2>&1 | tail -25 >&2 || true
  bad "CoreDNS available"; exit 1
fi

# --- DNS and a Service by name -------------------------------------------------
NS=kit-test-$RANDOM
kubectl create namespace "$NS" >/dev/null
kubectl apply -n "$NS" -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  containers:
  - name: web
    image: $TESTBOX_IMAGE
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "mkdir -p /www && echo kit-ok-$RUN_ID > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: [{containerPort: 8080}]
    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
EOF
web_ready() { [ "$(kubectl -n "$NS" get pod web -o jsonpath='{.status.containerStatuses[0].ready}')" = true ]; }
until_ok "$TIMEOUT" "web pod ready" web_ready || { kubectl -n "$NS" describe pod web | tail -20 >&2; bad "web pod ready"; exit 1; }

kubectl apply -n "$NS" -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  restartPolicy: Never
  containers:
  - name: client
    image: $TESTBOX_IMAGE
    imagePullPolicy: Never
    command:
    - /bin/sh
    - -c
    - |
      set -e
      echo "--- nslookup kubernetes.default.svc.cluster.local"
      nslookup kubernetes.default.svc.cluster.local
      # (busybox-static's wget segfaults; nc resolves names through the
      # pod's resolv.conf as well)
      echo "--- GET http://web/ (Service by short name, via search domains)"
      printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 10 web 80
      echo "--- GET http://web.$NS.svc.cluster.local/"
      printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 10 web.$NS.svc.cluster.local 80
EOF
client_done() { kubectl -n "$NS" get pod client -o jsonpath='{.status.phase}' | grep -Eq 'Succeeded|Failed'; }
until_ok "$TIMEOUT" "client pod" client_done || true
out=$(kubectl -n "$NS" logs client 2>&1 || true)
phase=$(kubectl -n "$NS" get pod client -o jsonpath='{.status.phase}' 2>/dev/null || true)
svc_ip=$(kubectl -n default get svc kubernetes -o jsonpath='{.spec.clusterIP}')
echo "$out" | sed 's/^/  | /' >&2
if sed -n '/nslookup/,/GET/p' <<<"$out" | grep "Address.*$svc_ip" >/dev/null; then
  ok "kubernetes.default.svc.cluster.local resolves to $svc_ip through CoreDNS"
else
  bad "kubernetes.default.svc.cluster.local did not resolve to $svc_ip"
fi
if [ "$phase" = Succeeded ] && [ "$(echo "$out" | grep -c "kit-ok-$RUN_ID")" = 2 ]; then
  ok "Service reached by name (web, web.$NS.svc.cluster.local)"
else
  bad "Service by name (client pod phase: ${phase:-unknown})"
fi
kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1 || true

# --- hooks --------------------------------------------------------------------
for hook in "$KIT_ROOT"/test.d/*.sh; do
  [ -f "$hook" ] || continue
  name=$(basename "$hook" .sh)
  # A hook that does not run is a skipped test, said as tests/run.sh counts
  # it: `SKIPPED: <hook>: <why>` (the why: the hook's last line before 77).
  if [ -n "${KIT_TEST_HOOKS:-}" ] && [[ " $KIT_TEST_HOOKS " != *" $name "* ]]; then
    skipped=$((skipped + 1)); echo "SKIPPED: $name: not named in KIT_TEST_HOOKS"; continue
  fi
  log "=== hook $name"
  t0=$(date +%s)
  set +e; bash "$hook" 2>&1 | tee "$WORK/hook-$name.log"; rc=${PIPESTATUS[0]}; set -e
  case $rc in
    0) ok "hook $name ($(( $(date +%s) - t0 ))s)" ;;
    77) skipped=$((skipped + 1)); log "SKIP hook $name"
        why=$(grep -v '^[[:space:]]*$' "$WORK/hook-$name.log" | tail -n 1 | sed 's/^\[[a-z-]* [0-9:]*\] //')
        echo "SKIPPED: $name: ${why:-the hook exited 77 without saying why}" ;;
    *) bad "hook $name (exit $rc)" ;;
  esac
done

echo "kit-test: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
