#!/usr/bin/env bash
# kit-test: External Secrets Operator from the bundle, in the kit's K3s node
# (bundle images preloaded), against LocalStack from the bundle.
#  1. runs LocalStack (KIT_LOCALSTACK_VERSION, default the newest in the bundle)
#     as a pod and seeds a secret in its Secrets Manager;
#  2. for each ESO version in KIT_ESO_VERSIONS (default every version in the
#     bundle, oldest first, so with two versions the second run is an upgrade of
#     a release made with the old defaults):
#     - applies that version's CRD bundle server-side;
#     - `helm upgrade --install` of that version's chart .tgz with
#       installCRDs=false and the LocalStack endpoints in extraEnv (as devstack);
#     - waits until controller, webhook and cert-controller are rolled out and
#       Available and checks they run the bundle's image of that version;
#     - reads the health endpoints through the API server's pod proxy
#       (cert-controller and webhook :8081/readyz, controller :8080/metrics);
#     - a ClusterSecretStore (external-secrets.io/v1, AWS SecretsManager) must
#       become Ready and an ExternalSecret sync the seeded value; after an
#       upgrade the ExternalSecret made under the previous version must pick up
#       a value changed in LocalStack.
# Secret values are compared, never printed.
# Env: KUBECONFIG (exported by test.sh); DEVSTACK_KIT_BUNDLE optional.
set -euo pipefail
BUNDLE=${KIT_BUNDLE:-${DEVSTACK_KIT_BUNDLE:-$HOME/.cache/devstack/kit/bundle}}
CACHE=${KIT_CACHE:-${DEVSTACK_KIT_CACHE:-$HOME/.cache/devstack/kit}}
HELM=${KIT_HELM:-$CACHE/bin/helm}
TIMEOUT=${KIT_TEST_TIMEOUT:-300}; TIMEOUT=${TIMEOUT%s}s   # test.sh gives seconds
NS=external-secrets
TNS=eso-kit-test
INDEX="$BUNDLE/index.json"
log() { printf '[eso-test %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# art KIND VERSION: file of that artifact (versions compared without a leading v)
art() { jq -r --arg k "$1" --arg v "${2#v}" \
  '.artifacts[] | select(.kind==$k and ((.version // "") | ltrimstr("v")) == $v) | .file' "$INDEX"; }
# versions of image artifacts with ROLE, oldest first
versions() { jq -r --arg r "$1" '[.artifacts[] | select(.kind=="image" and .role==$r) | .version]
  | sort_by(ltrimstr("v") | [splits("[.+-]") | (tonumber? // .)]) | .[]' "$INDEX"; }
dump() { kubectl -n "$1" get pods -o wide || true; kubectl -n "$1" describe pods | tail -80 || true
         for p in $(kubectl -n "$1" get pods -o name); do kubectl -n "$1" logs "$p" --all-containers --tail=30 || true; done; }
fail() { echo "FAIL $*"; exit 1; }
source "${KIT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/..}/kubectl-wait.sh"

[ -f "$INDEX" ] || fail "no bundle index $INDEX"
[ -x "$HELM" ] || fail "no helm at $HELM (components/eso.sh builds it)"
read -r -a eso_versions <<<"${KIT_ESO_VERSIONS:-$(versions eso | tr '\n' ' ')}"
[ ${#eso_versions[@]} -gt 0 ] || fail "no ESO image in $INDEX"
ls_version=${KIT_LOCALSTACK_VERSION:-$(versions localstack | tail -1)}
[ -n "$ls_version" ] || fail "no LocalStack image in $INDEX"
ls_image=$(jq -r --arg v "$ls_version" '.artifacts[] | select(.role=="localstack" and .version==$v) | "\(.name):\(.tag)"' "$INDEX")
ls_file=$(jq -r --arg v "$ls_version" '.artifacts[] | select(.role=="localstack" and .version==$v) | .file' "$INDEX")
[ -n "$ls_image" ] || fail "LocalStack $ls_version is not in $INDEX"
log "ESO ${eso_versions[*]} against LocalStack $ls_version"
t0=$SECONDS

# --- LocalStack pod ------------------------------------------------------------------
# Asks the node's containerd when the node container is known (the node status
# image list lags behind an import), else the node status. The list is read
# whole first: `ctr ... | grep -q` under pipefail fails when grep stops at the
# match while ctr still writes (SIGPIPE), which failed a CI run.
on_node() {
  if [ -n "${KIT_NODE_CONTAINER:-}" ]; then
    local listed
    listed=$(docker exec "$KIT_NODE_CONTAINER" ctr --address /run/k3s/containerd/containerd.sock \
      --namespace k8s.io images ls -q 2>/dev/null) || return 1
    grep -qxF "docker.io/$ls_image" <<<"$listed"
  else
    grep -qxF "docker.io/$ls_image" <<<"$(kubectl get nodes -o jsonpath='{.items[*].status.images[*].names}' | tr ' ' '\n')"
  fi
}
if ! on_node; then
  [ -n "${KIT_NODE_CONTAINER:-}" ] && [ -f "$BUNDLE/$ls_file" ] || fail "$ls_image is not on the node and cannot be imported"
  log "import $ls_file into $KIT_NODE_CONTAINER"
  # (this k3s build's `k3s ctr` multicall is missing; the node's /bin/ctr works)
  docker exec -i "$KIT_NODE_CONTAINER" ctr --address /run/k3s/containerd/containerd.sock \
    --namespace k8s.io images import - <"$BUNDLE/$ls_file" >"$CACHE/test/eso-ls-import.log" 2>&1 \
    || { cat "$CACHE/test/eso-ls-import.log"; fail "ctr images import $ls_file"; }
  for _ in $(seq 1 30); do on_node && break; sleep 2; done
  on_node || { cat "$CACHE/test/eso-ls-import.log"; fail "$ls_image not listed on the node after import"; }
fi
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl create namespace "$TNS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
LS_SVC=http://localstack.$TNS.svc.cluster.local:4566
kubectl apply -n "$TNS" -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: localstack, labels: {app: localstack}}
spec:
  containers:
  - name: localstack
    image: $ls_image
    env: [{name: SERVICES, value: "secretsmanager,sts,s3"}]
    ports: [{containerPort: 4566}]
    readinessProbe: {httpGet: {path: /_localstack/health, port: 4566}, periodSeconds: 2}
---
apiVersion: v1
kind: Service
metadata: {name: localstack}
spec: {selector: {app: localstack}, ports: [{port: 4566, targetPort: 4566}]}
---
apiVersion: v1
kind: Secret
metadata: {name: aws-creds}
stringData: {id: test, secret: test}
YAML
kubectl -n "$TNS" wait pod/localstack --for=condition=Ready --timeout="$TIMEOUT" >/dev/null || { dump "$TNS"; fail "LocalStack not Ready"; }
log "LocalStack $ls_version Ready after $((SECONDS - t0))s"
# sm_put NAME VALUE: create or overwrite a Secrets Manager secret in LocalStack
sm_put() {
  kubectl -n "$TNS" exec localstack -- /opt/code/localstack/.venv/bin/python -c '
import sys, json, boto3
sm = boto3.client("secretsmanager", endpoint_url="http://127.0.0.1:4566", region_name="us-east-1",
                  aws_access_key_id="test", aws_secret_access_key="test")
name, value = sys.argv[1], json.dumps({"password": sys.argv[2]})
try:
    sm.create_secret(Name=name, SecretString=value)
except sm.exceptions.ResourceExistsException:
    sm.put_secret_value(SecretId=name, SecretString=value)' "$1" "$2" >/dev/null
}
# synced SECRET EXPECTED: waits until the Kubernetes Secret holds EXPECTED
synced() {
  local got=
  for _ in $(seq 1 60); do
    got=$(kubectl -n "$TNS" get secret "$1" -o jsonpath='{.data.password}' 2>/dev/null | base64 -d 2>/dev/null || true)
    [ "$got" = "$2" ] && return 0
    sleep 2
  done
  kubectl -n "$TNS" get externalsecret -o yaml | grep -A8 'conditions:' || true
  return 1
}

# --- ESO, each version in turn -------------------------------------------------------
prev=
for v in "${eso_versions[@]}"; do
  tv=$SECONDS
  crds=$(art eso-crds "$v"); chart=$(art eso-chart "$v")
  image=$(jq -r --arg v "$v" '.artifacts[] | select(.role=="eso" and .version==$v) | "\(.name):\(.tag)"' "$INDEX")
  alias=$(jq -r --arg v "$v" '.artifacts[] | select(.role=="eso" and .version==$v) | .aliases[0] // empty' "$INDEX")
  [ -n "$crds" ] && [ -n "$chart" ] && [ -n "$image" ] || fail "ESO $v artifacts missing in $INDEX"

  log "ESO $v: apply CRDs $crds (server-side)"
  kubectl apply --server-side --force-conflicts -f "$BUNDLE/$crds" >/dev/null
  kubectl_wait --for=condition=Established --timeout=60s crd/externalsecrets.external-secrets.io \
    crd/clustersecretstores.external-secrets.io crd/pushsecrets.external-secrets.io \
    || fail "ESO $v: CRDs not Established"
  if [ -n "$prev" ]; then what="upgrade from $prev"; else what=install; fi
  log "ESO $v: helm $what $chart"
  HELM_CACHE_HOME=$(mktemp -d) HELM_CONFIG_HOME=$(mktemp -d) \
  "$HELM" upgrade --install external-secrets "$BUNDLE/$chart" -n "$NS" --set installCRDs=false \
    --set "extraEnv[0].name=AWS_SECRETSMANAGER_ENDPOINT" --set "extraEnv[0].value=$LS_SVC" \
    --set "extraEnv[1].name=AWS_STS_ENDPOINT" --set "extraEnv[1].value=$LS_SVC" >/dev/null \
    || fail "helm upgrade --install ESO $v"
  for d in external-secrets external-secrets-webhook external-secrets-cert-controller; do
    kubectl -n "$NS" rollout status "deploy/$d" --timeout="$TIMEOUT" >/dev/null || { dump "$NS"; fail "ESO $v: $d not rolled out"; }
    kubectl -n "$NS" wait "deploy/$d" --for=condition=Available --timeout="$TIMEOUT" >/dev/null || { dump "$NS"; fail "ESO $v: $d not Available"; }
    img=$(kubectl -n "$NS" get "deploy/$d" -o jsonpath='{.spec.template.spec.containers[*].image}')
    [ "$img" = "$image" ] || [ "$img" = "$alias" ] || fail "ESO $v: $d runs $img, not the bundle's $image"
  done
  # pods still terminating after an upgrade run the old image: look at live ones
  for img in $(kubectl -n "$NS" get pods -o json | jq -r '.items[] | select(.metadata.deletionTimestamp == null) | .spec.containers[].image'); do
    [ "$img" = "$image" ] || [ "$img" = "$alias" ] || fail "ESO $v: a pod runs $img, not the bundle's $image"
  done
  log "ESO $v rolled out and Available after $((SECONDS - tv))s"
  probe() { # COMPONENT-LABEL PORT PATH EXPECT
    local pod out
    pod=$(kubectl -n "$NS" get pods -l "app.kubernetes.io/name=$1" -o json \
      | jq -r '[.items[] | select(.metadata.deletionTimestamp == null)][0].metadata.name')
    out=$(kubectl get --raw "/api/v1/namespaces/$NS/pods/$pod:$2/proxy$3" 2>&1 || true)
    grep -q -- "$4" <<<"$out" || fail "ESO $v: $1 :$2$3: ${out:0:200}"
    log "$1 :$2$3 ok"
  }
  probe external-secrets-cert-controller 8081 /readyz '^ok$'
  probe external-secrets-webhook 8081 /readyz '^ok$'
  probe external-secrets 8080 /metrics 'controller_runtime_reconcile_total'

  # ClusterSecretStore (auth from a Secret in another namespace: ClusterSecretStores
  # need secretRef.namespace) and one ExternalSecret per version. Applying them goes
  # through the webhook, which proves it serves.
  kubectl apply -f - >/dev/null <<YAML
apiVersion: external-secrets.io/v1
kind: ClusterSecretStore
metadata: {name: localstack}
spec:
  provider:
    aws:
      service: SecretsManager
      region: us-east-1
      auth:
        secretRef:
          accessKeyIDSecretRef: {name: aws-creds, key: id, namespace: $TNS}
          secretAccessKeySecretRef: {name: aws-creds, key: secret, namespace: $TNS}
YAML
  kubectl_wait clustersecretstore/localstack --for=condition=Ready --timeout=120s \
    || { kubectl get clustersecretstore localstack -o yaml | grep -A8 'conditions:' || true; fail "ESO $v: ClusterSecretStore not Ready"; }
  log "ESO $v: ClusterSecretStore Ready"
  es=sync-${v//./-}
  value="from-localstack-$v-$RANDOM"
  sm_put "devstack/kit-test" "$value"
  kubectl apply -n "$TNS" -f - >/dev/null <<YAML
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: $es}
spec:
  refreshInterval: 5s
  secretStoreRef: {name: localstack, kind: ClusterSecretStore}
  target: {name: $es}
  data:
  - secretKey: password
    remoteRef: {key: devstack/kit-test, property: password}
YAML
  synced "$es" "$value" || fail "ESO $v: ExternalSecret $es did not sync the value seeded in LocalStack"
  kubectl -n "$TNS" wait "externalsecret/$es" --for=condition=Ready --timeout=30s >/dev/null \
    || fail "ESO $v: ExternalSecret $es synced but not Ready"
  log "ESO $v: ExternalSecret $es synced from LocalStack"
  if [ -n "$prev" ]; then
    # made under the previous version: the upgraded controller must keep it in sync
    synced "sync-${prev//./-}" "$value" || fail "ESO $v: ExternalSecret of $prev not kept in sync after the upgrade"
    log "ESO $v: ExternalSecret made under $prev follows the new value"
  fi
  prev=$v
done
log "done after $((SECONDS - t0))s"
kubectl delete namespace "$TNS" --wait=false >/dev/null 2>&1 || true
echo "eso: ${eso_versions[*]} Available, health endpoints ok, ClusterSecretStore Ready, ExternalSecrets synced from LocalStack $ls_version"
