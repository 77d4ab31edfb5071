#!/usr/bin/env bash
# kit-test: Flux from the bundle. Applies the bundle's flux-install manifest
# (source-, kustomize- and helm-controller) in the kit's K3s node, whose
# containerd has the bundle images preloaded, and waits until the three
# controllers are Available; then checks that they run the bundle's images,
# hold their leader leases and reconcile (a Kustomization with a missing source
# goes Ready=False).
# Env: KUBECONFIG (exported by test.sh); DEVSTACK_KIT_BUNDLE optional.
set -euo pipefail
BUNDLE=${KIT_BUNDLE:-${DEVSTACK_KIT_BUNDLE:-$HOME/.cache/devstack/kit/bundle}}
TIMEOUT=${KIT_TEST_TIMEOUT:-300}; TIMEOUT=${TIMEOUT%s}s   # test.sh gives seconds
log() { printf '[flux-test %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
source "${KIT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/..}/kubectl-wait.sh"

file=$(jq -r '.artifacts[] | select(.kind=="flux-install") | .file' "$BUNDLE/index.json")
[ -n "$file" ] && [ -f "$BUNDLE/$file" ] || { echo "no flux-install artifact in $BUNDLE/index.json"; exit 1; }
log "apply $file"
t0=$SECONDS
kubectl apply --server-side --force-conflicts -f "$BUNDLE/$file" >/dev/null
kubectl_wait --for=condition=Established --timeout=60s \
  crd/gitrepositories.source.toolkit.fluxcd.io crd/kustomizations.kustomize.toolkit.fluxcd.io \
  crd/helmreleases.helm.toolkit.fluxcd.io
if ! kubectl -n flux-system wait deploy/source-controller deploy/kustomize-controller deploy/helm-controller \
     --for=condition=Available --timeout="$TIMEOUT"; then
  kubectl -n flux-system get pods -o wide || true
  kubectl -n flux-system describe pods | tail -60 || true
  echo "flux: controllers not Available"; exit 1
fi
log "flux controllers Available after $((SECONDS - t0))s"

fail=0
# every controller runs the image the bundle holds
for c in source-controller kustomize-controller helm-controller; do
  want=$(jq -r --arg r "flux-$c" '.artifacts[] | select(.role==$r) | "\(.name):\(.tag)"' "$BUNDLE/index.json")
  got=$(kubectl -n flux-system get deploy "$c" -o jsonpath='{.spec.template.spec.containers[0].image}')
  if [ "$want" != "$got" ]; then echo "FAIL $c image $got, bundle has $want"; fail=1; fi
done
# leader election done = the managers started and talk to the API server
for l in source-controller-leader-election kustomize-controller-leader-election helm-controller-leader-election; do
  ok=
  for _ in $(seq 1 60); do
    kubectl -n flux-system get lease "$l" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null | grep -q . && { ok=1; break; }
    sleep 2
  done
  [ -n "$ok" ] || { echo "FAIL lease $l not acquired"; fail=1; }
done
# the kit's kustomize-controller image is built from a program list, not a
# whole system: what upstream's image offers SOPS (gpg and its agent) and
# kustomize's remote bases (git, its https helper, ssh) must run in the pod
kx() { kubectl -n flux-system exec deploy/kustomize-controller -c manager -- "$@"; }
for cmd in "git --version" "ssh -V" "tini --version" \
    "gpg --batch --passphrase= --quick-gen-key kit@example.invalid ed25519 default never" \
    "git ls-remote https://kit-test.invalid/repo.git"; do
  out=$(kx $cmd 2>&1) && rc=0 || rc=$?
  # git's https helper must load and fail on name resolution, not on a library
  if [[ $cmd == "git ls-remote"* ]]; then
    [[ $out == *"Could not resolve host"* ]] || { echo "FAIL kustomize-controller image: $cmd: $out"; fail=1; }
  elif [ $rc != 0 ]; then
    echo "FAIL kustomize-controller image: $cmd: $out"; fail=1
  fi
done
# reconcile round trip: a Kustomization whose source does not exist goes Ready=False
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: kit-test, namespace: flux-system}
spec:
  interval: 1m
  path: ./
  prune: false
  sourceRef: {kind: GitRepository, name: kit-test-missing}
YAML
ok=
for _ in $(seq 1 60); do
  st=$(kubectl -n flux-system get kustomization kit-test -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
  [ "$st" = "False" ] && { ok=1; break; }
  sleep 2
done
kubectl -n flux-system delete kustomization kit-test --wait=false >/dev/null 2>&1 || true
[ -n "$ok" ] || { echo "FAIL kustomize-controller did not reconcile the test Kustomization"; fail=1; }
[ $fail = 0 ] || exit 1
echo "flux: source-controller, kustomize-controller, helm-controller Available and reconciling"
