# Sourced by kit-test hooks.
# kubectl_wait ARGS...: `kubectl wait ARGS`, tried again every second (up to
# 30 times) while it fails at once: kubectl wait errors out (".status.conditions
# accessor error") on an object that has no conditions yet, a CRD or a
# ClusterSecretStore just created, instead of waiting for them. A try that
# waited its own --timeout out is final.
kubectl_wait() {
  local started
  for _ in $(seq 1 30); do
    started=$SECONDS
    kubectl wait "$@" >/dev/null 2>&1 && return 0
    [ $((SECONDS - started)) -lt 5 ] || break
    sleep 1
  done
  kubectl wait "$@" >/dev/null
}
