#!/usr/bin/env bash
# The stack registry's figures (docs/performance.md, "The stack's registry"):
#   - the dev profile's cold `up` (Kind, two nodes, from the kit's bundle)
#     with `registry.enabled` and without, interleaved, BENCH_RUNS each (3);
#   - on the last stack with the registry: a small image (the tests' busybox
#     with a CMD) built, pushed to localhost:<port> and run as a pod, push ->
#     Running, BENCH_PUSHES times (3), each a new tag; then `devstack load`
#     of each under a local name;
#   - the registry container's memory (`docker stats`) after the pushes.
#
#   bash bench/registry.sh          (BENCH_BIN, BENCH_RUNS, BENCH_PUSHES, BENCH_KEEP)
#
# Run it alone on the machine (no cluster test beside it).
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
require_bundle
bench_binary
work=$(mktemp -d)
out=${BENCH_KEEP:-$HOME/.cache/devstack/bench/registry-$(date +%Y%m%dT%H%M%S)}
mkdir -p "$out"
name=bench-registry
made=
ds() { DEVSTACK_HOME=$work/state CI=1 "$bin" --profile "$work/profile.yaml" "$@"; }
cleanup() {
  ds -q down >/dev/null 2>&1
  [ -z "${made:-}" ] || docker rmi -f $made >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
# The shipped dev profile under another name, its fixed host port moved and
# the user's kubeconfig left alone; `registry.enabled` as the argument says
# (the shipped profile's own `registry:` block, if any, replaced).
profile() {
  sed -e "s/^name: dev\$/name: $name/" -e 's/hostPort: 8080/hostPort: 45663/' \
    -e 's/    merge: true/    merge: false/' profiles/dev.yaml |
    awk '/^registry:/ {skip = 1; next} skip && /^[^ #]/ {skip = 0} !skip' >"$work/profile.yaml"
  printf 'registry:\n  enabled: %s\nimages:\n  bundle: %s\n' "$1" "$bundle" >>"$work/profile.yaml"
}

for r in $(seq 1 "${BENCH_RUNS:-3}"); do
  bench_run=$r
  for registry in false true; do
    profile "$registry"
    if measure "up-registry-$registry" ds --json up --timings "$out/up-$registry-$r.html"; then
      cp "$work/out.json" "$out/up-$registry-$r.json"
      printf 'cold up, registry %s, run %s: %s ms\n' "$registry" "$r" \
        "$(printf '%s' "${bench_values[up-registry-$registry]}" | awk '{print $NF}')"
    else
      printf 'cold up, registry %s, run %s: FAILED (%s)\n' "$registry" "$r" "$(tail -1 "$work/out.err")"
    fi
    [ "$registry" = true ] && [ "$r" = "${BENCH_RUNS:-3}" ] && break
    ds -q down >/dev/null 2>&1
  done
done

# The last stack runs with its registry.
host=$(ds env --json | jq -r .DEVSTACK_REGISTRY)
[ -n "$host" ] && [ "$host" != null ] || die "the stack has no registry (devstack env)"
export KUBECONFIG=$work/state/stacks/$name/kubeconfig
ctx=$work/app
mkdir -p "$ctx"
# The tests' tiny image, made from the host's busybox as they make it.
if ! docker image inspect devstack-test/busybox:1 >/dev/null 2>&1; then
  mkdir -p "$work/bb/bin" && cp /bin/busybox "$work/bb/bin/" && ln -s busybox "$work/bb/bin/sleep"
  tar -C "$work/bb" -c . | docker import - devstack-test/busybox:1 >/dev/null
fi
for p in $(seq 1 "${BENCH_PUSHES:-3}"); do
  bench_run=$p
  printf 'FROM devstack-test/busybox:1\nLABEL bench.run=%s-%s\nCMD ["sleep", "3600"]\n' "$p" "$(now_ms)" >"$ctx/Dockerfile"
  image=$host/bench-app:$p
  made+=" $image"
  DOCKER_BUILDKIT=0 docker build -q -t "$image" "$ctx" >/dev/null || die "docker build failed"
  push_and_run() {
    docker push -q "$image" >/dev/null &&
      kubectl run "bench-app-$p" --image="$image" --restart=Never >/dev/null &&
      kubectl wait --for=jsonpath='{.status.phase}'=Running "pod/bench-app-$p" --timeout=120s >/dev/null
  }
  if measure push-running push_and_run; then
    printf 'push -> Running, run %s: %s ms\n' "$p" "$(printf '%s' "${bench_values[push-running]}" | awk '{print $NF}')"
  else
    printf 'push -> Running, run %s: FAILED\n' "$p"
  fi
done
# `devstack load` of the same small image into both nodes, under a local name.
for p in $(seq 1 "${BENCH_PUSHES:-3}"); do
  bench_run=$p
  docker tag "$host/bench-app:$p" "bench-app-load:$p" || die "docker tag failed"
  measure load ds load "bench-app-load:$p"
  docker rmi "bench-app-load:$p" >/dev/null
done
mem=$(docker stats --no-stream --format '{{.MemUsage}}' "devstack-$name-registry")
echo "registry container memory: $mem"

echo "--- $(date -u +%Y-%m-%d) $("$bin" --version)"
row "dev cold up, registry off" up-registry-false s 1000
row "dev cold up, registry on" up-registry-true s 1000
compare "registry on vs off" up-registry-true up-registry-false
row "push -> Running (small image)" push-running s 1000
row "devstack load (small image, both nodes)" load s 1000
echo "registry memory after the pushes: $mem"
echo "runs kept in $out"
