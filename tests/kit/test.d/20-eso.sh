#!/usr/bin/env bash
# kit-test: External Secrets Operator from the bundle, in the kit's K3s node
# (bundle images preloaded).
#  1. applies the bundle's ESO CRDs;
#  2. renders the bundle's chart .tgz with helm (built by components/eso.sh)
#     and applies it; waits until controller, webhook and cert-controller are
#     Available and checks the pods run the bundle's image;
#  3. reads the health endpoints through the API server's pod proxy
#     (cert-controller and webhook :8081/readyz, controller :8080/metrics);
#  4. if the LocalStack image is on the node: runs LocalStack as a pod, stores a
#     secret in its Secrets Manager and has ESO sync it into a Kubernetes Secret.
# Env: KUBECONFIG (exported by test.sh); DEVSTACK_KIT_BUNDLE optional.
set -euo pipefail
BUNDLE=${KIT_BUNDLE:-${DEVSTACK_KIT_BUNDLE:-$HOME/.cache/devstack/kit/bundle}}
CACHE=${KIT_CACHE:-${DEVSTACK_KIT_CACHE:-$HOME/.cache/devstack/kit}}
HELM=${KIT_HELM:-$CACHE/bin/helm}
TIMEOUT=${KIT_TEST_TIMEOUT:-300}; TIMEOUT=${TIMEOUT%s}s   # test.sh gives seconds
NS=external-secrets
TNS=eso-kit-test
log() { printf '[eso-test %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
art() { jq -r --arg k "$1" '.artifacts[] | select(.kind==$k) | .file' "$BUNDLE/index.json"; }
dump() { kubectl -n "$1" get pods -o wide || true; kubectl -n "$1" describe pods | tail -80 || true
         for p in $(kubectl -n "$1" get pods -o name); do kubectl -n "$1" logs "$p" --all-containers --tail=30 || true; done; }

crds=$(art eso-crds); chart=$(art eso-chart)
image=$(jq -r '.artifacts[] | select(.role=="eso") | "\(.name):\(.tag)"' "$BUNDLE/index.json")
alias=$(jq -r '.artifacts[] | select(.role=="eso") | .aliases[0] // empty' "$BUNDLE/index.json")
[ -n "$crds" ] && [ -n "$chart" ] && [ -n "$image" ] || { echo "ESO artifacts missing in $BUNDLE/index.json"; exit 1; }
t0=$SECONDS

log "apply CRDs $crds"
kubectl apply --server-side --force-conflicts -f "$BUNDLE/$crds" >/dev/null
kubectl wait --for=condition=Established --timeout=60s crd/externalsecrets.external-secrets.io crd/secretstores.external-secrets.io >/dev/null
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl create namespace "$TNS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null

LS_SVC=http://localstack.$TNS.svc.cluster.local:4566
[ -x "$HELM" ] || { echo "no helm at $HELM (components/eso.sh builds it)"; exit 1; }
log "helm template $chart"
"$HELM" template external-secrets "$BUNDLE/$chart" -n "$NS" --set installCRDs=false \
  --set "extraEnv[0].name=AWS_SECRETSMANAGER_ENDPOINT" --set "extraEnv[0].value=$LS_SVC" \
  --set "extraEnv[1].name=AWS_STS_ENDPOINT" --set "extraEnv[1].value=$LS_SVC" \
  | kubectl apply -n "$NS" -f - >/dev/null
deploys="deploy/external-secrets deploy/external-secrets-webhook deploy/external-secrets-cert-controller"
# shellcheck disable=SC2086
if ! kubectl -n "$NS" wait $deploys --for=condition=Available --timeout="$TIMEOUT"; then
  dump "$NS"; echo "eso: deployments not Available"; exit 1
fi
log "ESO Available after $((SECONDS - t0))s"

fail=0
for img in $(kubectl -n "$NS" get pods -o jsonpath='{.items[*].spec.containers[*].image}'); do
  [ "$img" = "$image" ] || [ "$img" = "$alias" ] || { echo "FAIL pod image $img is not the bundle's $image"; fail=1; }
done
# health endpoints (ESO 0.19 serves /readyz on the webhook and cert-controller
# probe ports, which the chart's readiness probes use; the controller itself
# only has its metrics endpoint)
probe() { # COMPONENT-LABEL PORT PATH EXPECT
  local pod out
  pod=$(kubectl -n "$NS" get pods -l "app.kubernetes.io/name=$1" -o jsonpath='{.items[0].metadata.name}')
  out=$(kubectl get --raw "/api/v1/namespaces/$NS/pods/$pod:$2/proxy$3" 2>&1 || true)
  if grep -q -- "$4" <<<"$out"; then log "$1 :$2$3 ok"; else echo "FAIL $1 :$2$3: ${out:0:200}"; fail=1; fi
}
probe external-secrets-cert-controller 8081 /readyz '^ok$'
probe external-secrets-webhook 8081 /readyz '^ok$'
probe external-secrets 8080 /metrics 'controller_runtime_reconcile_total'
[ $fail = 0 ] || exit 1

# --- end to end with LocalStack Secrets Manager -----------------------------------
ls_image=$(jq -r '.artifacts[] | select(.role=="localstack") | "\(.name):\(.tag)"' "$BUNDLE/index.json")
ls_file=$(jq -r '.artifacts[] | select(.role=="localstack") | .file' "$BUNDLE/index.json")
on_node() { grep -qxF "docker.io/$ls_image" <<<"$(kubectl get nodes -o jsonpath='{.items[*].status.images[*].names}' | tr ' ' '\n')"; }
if [ "${KIT_TEST_ESO_LOCALSTACK:-1}" != 0 ] && [ -n "$ls_image" ] && ! on_node \
   && [ -n "${KIT_NODE_CONTAINER:-}" ] && [ -f "$BUNDLE/$ls_file" ]; then
  log "import $ls_file into $KIT_NODE_CONTAINER"
  # (this k3s build's `k3s ctr` multicall is missing; the node's /bin/ctr works)
  docker exec -i "$KIT_NODE_CONTAINER" ctr --address /run/k3s/containerd/containerd.sock \
    --namespace k8s.io images import - <"$BUNDLE/$ls_file" >/dev/null
  for _ in $(seq 1 30); do on_node && break; sleep 2; done
fi
if [ "${KIT_TEST_ESO_LOCALSTACK:-1}" = 0 ] || [ -z "$ls_image" ] || ! on_node; then
  log "skip the LocalStack round trip (needs $ls_image on the node)"
  echo "eso: Available, health endpoints ok"; exit 0
fi
log "LocalStack round trip"
kubectl apply -n "$TNS" -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: localstack, labels: {app: localstack}}
spec:
  containers:
  - name: localstack
    image: $ls_image
    env: [{name: SERVICES, value: "secretsmanager,sts"}]
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
kubectl -n "$TNS" wait pod/localstack --for=condition=Ready --timeout="$TIMEOUT" >/dev/null || { dump "$TNS"; exit 1; }
kubectl -n "$TNS" exec localstack -- /opt/code/localstack/.venv/bin/python -c '
import boto3
sm = boto3.client("secretsmanager", endpoint_url="http://127.0.0.1:4566", region_name="us-east-1",
                  aws_access_key_id="test", aws_secret_access_key="test")
sm.create_secret(Name="devstack/kit-test", SecretString="{\"password\":\"s3cr3t-from-localstack\"}")' >/dev/null
kubectl apply -n "$TNS" -f - >/dev/null <<'YAML'
apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: localstack}
spec:
  provider:
    aws:
      service: SecretsManager
      region: us-east-1
      auth:
        secretRef:
          accessKeyIDSecretRef: {name: aws-creds, key: id}
          secretAccessKeySecretRef: {name: aws-creds, key: secret}
---
apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: kit-test}
spec:
  refreshInterval: 10s
  secretStoreRef: {name: localstack, kind: SecretStore}
  target: {name: kit-test-synced}
  data:
  - secretKey: password
    remoteRef: {key: devstack/kit-test, property: password}
YAML
got=
for _ in $(seq 1 90); do
  got=$(kubectl -n "$TNS" get secret kit-test-synced -o jsonpath='{.data.password}' 2>/dev/null | base64 -d 2>/dev/null || true)
  [ -n "$got" ] && break; sleep 2
done
if [ "$got" != "s3cr3t-from-localstack" ]; then
  kubectl -n "$TNS" get secretstore,externalsecret -o yaml | grep -A6 'conditions:' || true
  echo "FAIL ExternalSecret did not sync from LocalStack (got '$got')"; exit 1
fi
log "ExternalSecret synced from LocalStack after $((SECONDS - t0))s total"
kubectl delete namespace "$TNS" --wait=false >/dev/null 2>&1 || true
echo "eso: Available, health endpoints ok, ExternalSecret synced from LocalStack"
