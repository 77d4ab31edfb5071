#!/usr/bin/env bash
# `make bench`, existing-cluster rows: a cold `up` (to a verified round trip,
# LocalStack in the cluster) on a Kind cluster made beforehand with the kit's
# `kind create cluster`, beside the same profile on a Kind cluster devstack
# creates itself, a second stack beside the first on that cluster (its own
# LocalStack and ESO controller), and the `down` that leaves the existing
# cluster as it was;
# the same `up` once the cluster runs its own ESO (installed with Helm);
# then the same `up` from a devstack that reaches no Docker engine, on a new
# Kind cluster whose nodes pull every image through a registry mirror (the
# kit's test registry, tests/online/mirror.sh) at the pinned digests.
# Timed from the shell around the whole command; each row says how many of
# N runs produced it.
#
#   BENCH_RUNS   runs per figure (default 3)
#   BENCH_BIN    the devstack binary to time (default: a release build)
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${BENCH_RUNS:-3}
source bench/lib.sh
bash scripts/setup-docker.sh >/dev/null
bench_binary
bundle=${DEVSTACK_KIT_BUNDLE:-$HOME/.cache/devstack/kit/bundle}
kind=$bundle/bin/kind
[ -x "$kind" ] || die "no kind CLI in the kit bundle at $bundle (run make kit)"
work=$(mktemp -d)
cluster=devstack-bench-existing-$$
own=bench-own-$$
cleanup() {
  "$kind" delete cluster --name "$cluster" --kubeconfig "$work/kubeconfig" >/dev/null 2>&1 || true
  "$kind" delete cluster --name "$cluster-nd" --kubeconfig "$work/nd-kubeconfig" >/dev/null 2>&1 || true
  [ -n "${mirror_started:-}" ] && bash tests/online/mirror.sh stop >/dev/null 2>&1
  "$kind" delete cluster --name "devstack-$own" --kubeconfig "$work/own-kubeconfig" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

secrets='secrets:\n  - name: ci/app/token\n    generate: {length: 32, charset: hex}\n    sync: {namespace: default, secretName: app-token}\n'
printf "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: bench-existing\ncluster:\n  provider: existing\n  context: kind-$cluster\nimages:\n  bundle: $bundle\n$secrets" >"$work/existing.yaml"
printf "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: bench-second\ncluster:\n  provider: existing\n  context: kind-$cluster\nimages:\n  bundle: $bundle\n${secrets/app-token/app-token-b}" >"$work/second.yaml"
printf "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: $own\ncluster:\n  provider: kind\n  kubeconfig: {merge: false}\nlocalstack:\n  mode: in-cluster\nimages:\n  bundle: $bundle\n$secrets" >"$work/own.yaml"

ds() { # $1 profile, rest: arguments
  local profile=$1
  shift
  KUBECONFIG="$work/kubeconfig" DEVSTACK_HOME="$work/state" CI=1 "$bin" --profile "$work/$profile.yaml" -q "$@"
}
inventory() { # what `down` must leave as it was; empty without kubectl
  command -v kubectl >/dev/null || return 0
  KUBECONFIG="$work/kubeconfig" kubectl get namespaces,crds,clusterroles,clusterrolebindings -o name 2>/dev/null | sort
}

"$kind" create cluster --name "$cluster" --image kindest/node:v1.36.4 --kubeconfig "$work/kubeconfig" --wait 3m >/dev/null 2>&1 \
  || die "kind create cluster failed"
before=$(inventory)
left=0
for r in $(seq 1 "$runs"); do
  bench_run=$r
  measure existing_up ds existing up --json
  measure second_up ds second up --json
  measure second_down ds second down
  measure existing_down ds existing down
  [ "$(inventory)" = "$before" ] || left=$((left + 1))
  measure own_up ds own up --json
  ds own down >/dev/null 2>&1
done

echo "--- an existing Kind cluster (LocalStack in the cluster), median"
row "up, cold, on an existing Kind cluster (1 node)" existing_up s 1000
row "the same profile on a Kind cluster devstack creates" own_up s 1000
row "a second stack beside it on the existing cluster, cold up" second_up s 1000
row "the second stack's down (the first stays verified)" second_down s 1000
row "down on the existing cluster (the cluster stays)" existing_down s 1000
if command -v kubectl >/dev/null; then
  printf '%-56s %s of %s\n' "downs that left the cluster as it was" "$((runs - left))" "$runs"
fi

# The cluster's own ESO serving the stack (`eso.install: auto`): installed
# as a platform does, with the kit's Helm and chart, its controller pointed
# at the stack's LocalStack in the cluster; the chain is then the custom
# resources alone.
helm=$(dirname "$bundle")/bin/helm
eso_chart=$(jq -r '.artifacts[] | select(.kind=="eso-chart" and .version=="2.9.0") | .file' "$bundle/index.json")
eso_image=$(jq -r '.artifacts[] | select(.role=="eso" and .version=="v2.9.0") | .file' "$bundle/index.json")
if [ -x "$helm" ] && [ -n "$eso_chart" ] && [ -n "$eso_image" ]; then
  for node in $(docker ps --format '{{.Names}}' --filter "label=io.x-k8s.kind.cluster=$cluster"); do
    docker exec -i "$node" ctr --namespace k8s.io images import - <"$bundle/$eso_image" >/dev/null
  done
  HELM_CACHE_HOME="$work/helm-cache" HELM_CONFIG_HOME="$work/helm-config" KUBECONFIG="$work/kubeconfig" \
    "$helm" upgrade --install external-secrets "$bundle/$eso_chart" -n external-secrets --create-namespace \
    --set installCRDs=true --set "extraEnv[0].name=AWS_SECRETSMANAGER_ENDPOINT" \
    --set "extraEnv[0].value=http://localstack.localstack.svc.cluster.local:4566" --wait --timeout 5m >/dev/null \
    || die "helm install of ESO failed"
  for r in $(seq 1 "$runs"); do
    bench_run=$r
    measure cluster_eso_up ds existing up --json
    measure cluster_eso_down ds existing down
  done
  echo "--- the same existing cluster, its own ESO serving the stack, median"
  row "up, cold, with the cluster's ESO (no ESO install)" cluster_eso_up s 1000
  row "down (the cluster's ESO stays)" cluster_eso_down s 1000
else
  echo "skipped: the cluster's own ESO: no helm at $helm or no ESO 2.9.0 chart and image in $bundle (run make kit)"
fi

# Without Docker on this machine: each run on a new cluster, so the nodes
# pull everything. The registry joins the nodes' network, and their
# containerd reaches it over plain HTTP through a hosts.toml.
if ! mirror_env=$(bash tests/online/mirror.sh start 2>"$work/mirror.log"); then
  echo "skipped: up without Docker: the kit's test registry did not start ($(tail -1 "$work/mirror.log"))"
  exit 0
fi
mirror_started=1
eval "$mirror_env"
printf "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: bench-nodocker\ncluster:\n  provider: existing\n  context: kind-$cluster-nd\n$secrets" >"$work/nodocker.yaml"
nodes_reach_registry() { # prints the registry's address on the nodes' network
  local node network ip
  node=$(docker ps --format '{{.Names}}' --filter "label=io.x-k8s.kind.cluster=$cluster-nd" | head -1)
  network=$(docker inspect -f '{{range $n, $_ := .NetworkSettings.Networks}}{{$n}}{{end}}' "$node")
  docker network connect "$network" devstack-test-mirror-registry >/dev/null 2>&1 || true
  ip=$(docker inspect -f "{{(index .NetworkSettings.Networks \"$network\").IPAddress}}" devstack-test-mirror-registry)
  for node in $(docker ps --format '{{.Names}}' --filter "label=io.x-k8s.kind.cluster=$cluster-nd"); do
    printf 'server = "http://%s:5000"\n\n[host."http://%s:5000"]\n  capabilities = ["pull", "resolve"]\n' "$ip" "$ip" |
      docker exec -i "$node" sh -c "mkdir -p /etc/containerd/certs.d/$ip:5000 && cat > /etc/containerd/certs.d/$ip:5000/hosts.toml"
  done
  echo "$ip:5000"
}
nd() {
  KUBECONFIG="$work/nd-kubeconfig" DEVSTACK_HOME="$work/nd-state" CI=1 DOCKER_HOST="unix://$work/no-docker.sock" \
    DEVSTACK_MIRRORS="docker.io=http://$registry/docker.io,ghcr.io=http://$registry/ghcr.io,registry.k8s.io=http://$registry/registry.k8s.io" \
    "$bin" --profile "$work/nodocker.yaml" -q "$@"
}
for r in $(seq 1 "$runs"); do
  bench_run=$r
  "$kind" create cluster --name "$cluster-nd" --image kindest/node:v1.36.4 --kubeconfig "$work/nd-kubeconfig" --wait 3m >/dev/null 2>&1 \
    || die "kind create cluster failed"
  registry=$(nodes_reach_registry)
  measure nodocker_up nd up --json
  nd down >/dev/null 2>&1
  "$kind" delete cluster --name "$cluster-nd" --kubeconfig "$work/nd-kubeconfig" >/dev/null 2>&1
done
echo "--- without Docker on this machine (the nodes pull through a registry mirror), median"
row "up, cold, on a new existing Kind cluster (1 node)" nodocker_up s 1000
