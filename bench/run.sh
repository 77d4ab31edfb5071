#!/usr/bin/env bash
# `make bench`: speed and memory figures, measured with the release binary
# against the real Docker engine, LocalStack and the kit's clusters. Not a
# test: it reports numbers, and only numbers a run produced. Every figure is
# timed from the shell around the whole command (both sides of a comparison
# alike), says how many of its N runs produced it, and lists the failed runs
# beside it; a value missing from a run's `--json` stops the bench.
#
#   BENCH_RUNS         repetitions per figure (default 5); medians are reported
#   BENCH_STACK_RUNS   repetitions of the whole-stack figures (default BENCH_RUNS;
#                      each takes minutes, the naive script over ten)
#   BENCH_NAIVE        0 leaves out the naive sequential script (over ten minutes)
#   BENCH_BIN          the devstack binary to time (default: the release build,
#                      built now)
#   BENCH_KEEP         where each whole-stack run's `--json` (its timeline) is
#                      kept (default ~/.cache/devstack/bench/<start time>)
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
runs=${BENCH_RUNS:-5}
stack_runs=${BENCH_STACK_RUNS:-$runs}
bash scripts/setup-docker.sh >/dev/null || die "no Docker engine"
bash kit/build.sh localstack >/dev/null || die "the kit's LocalStack image did not build"
bench_binary
# Versions from the binary's own matrix (`devstack version --json`).
default_of() { "$bin" version --json | jq -er --arg id "$1" '.components[] | select(.id == $id) | .default'; }
work=$(mktemp -d)
keep=${BENCH_KEEP:-$HOME/.cache/devstack/bench/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$keep"
stack=bench-$$
port=$(free_port)
cleanup() {
  # A Kind cluster carries kind's labels, not devstack's: `down` finds it.
  [ -f "$work/profile.yaml" ] && DEVSTACK_HOME=$work/state "$bin" --profile "$work/profile.yaml" -q down >/dev/null 2>&1
  docker rm -f -v $(docker ps -aq --filter "label=dev.devstack.stack=$stack") >/dev/null 2>&1 || true
  docker network rm $(docker network ls -q --filter "label=dev.devstack.stack=$stack") >/dev/null 2>&1 || true
  if [ -n "${anchor:-}" ] && [ -n "${DEVSTACK_KIND:-}" ]; then
    "$DEVSTACK_KIND" delete cluster --name "$anchor" --kubeconfig "$work/anchor.kubeconfig" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
ds() { DEVSTACK_HOME=$work/state CI=1 "$bin" --profile "$work/profile.yaml" -q "$@"; }
# The commands that read no stack (`snapshot rm`) take no --profile.
ds_store() { DEVSTACK_HOME=$work/state CI=1 "$bin" -q "$@"; }
kept() { cp "$work/out.json" "$keep/$1.json"; }
quietly() { "$@" >/dev/null 2>&1; }

# LocalStack and seeding: 200 generated secrets.
{
  printf 'apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: %s\nlocalstack:\n  port: %s\nsecrets:\n' "$stack" "$port"
  for i in $(seq 1 200); do printf '  - {name: bench/s%03d, generate: {length: 32}}\n' "$i"; done
} >"$work/profile.yaml"
for bench_run in $(seq 1 "$runs"); do
  docker rm -f -v $(docker ps -aq --filter "label=dev.devstack.stack=$stack") >/dev/null 2>&1
  measure ls_cold ds localstack up || { missed "LocalStack did not start" ls_warm seed_seq seed_conc; continue; }
  measure ls_warm ds localstack up
  measure seed_seq ds seed --concurrency 1
  quietly ds localstack down && quietly ds localstack up || { missed "LocalStack did not restart" seed_conc; continue; }
  measure seed_conc ds seed --concurrency 16
done
quietly ds localstack down

# K3s: create-to-Ready with the offline bundle preloaded, and delete.
bundle=${DEVSTACK_KIT_BUNDLE:-$HOME/.cache/devstack/kit/bundle}
have_k3s=false
if docker image inspect "$(default_of k3s)" >/dev/null 2>&1 && [ -f "$bundle/index.json" ]; then
  have_k3s=true
  printf 'apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: %s\nlocalstack:\n  port: %s\ncluster:\n  provider: k3s\n  kubeconfig: {merge: false}\nimages:\n  bundle: %s\n' "$stack" "$port" "$bundle" >"$work/profile.yaml"
  for bench_run in $(seq 1 "$runs"); do
    measure k3s_up ds cluster up || { quietly ds cluster down; missed "the cluster did not come up" k3s_down; continue; }
    measure k3s_down ds cluster down
  done
fi

# Kind: devstack's cluster step against plain `kind create cluster` with the
# same kind CLI, node image and shape (a control plane and a worker), both
# to every node Ready and CoreDNS serving, both timed from the shell (the
# plain side waits with the node's own kubectl). devstack's figure without
# the bundle's images is the like-for-like one; with them it also imports
# Flux and ESO into both nodes.
kind_node=$(default_of kind-node)
kind_cli=$(jq -r '.artifacts[] | select(.kind=="binary" and .name=="kind") | .file' "$bundle/index.json" 2>/dev/null)
have_kind=false
plain_kind() {
  "$DEVSTACK_KIND" create cluster --name "$anchor" --image "$kind_node" --config kit/kind/cluster.yaml \
    --kubeconfig "$work/anchor.kubeconfig" --wait 5m &&
    docker exec "$anchor-control-plane" kubectl --kubeconfig /etc/kubernetes/admin.conf wait --for=condition=Ready nodes --all --timeout=5m &&
    docker exec "$anchor-control-plane" kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system rollout status deployment/coredns --timeout=5m
}
if [ -n "$kind_cli" ] && docker image inspect "$kind_node" >/dev/null 2>&1; then
  have_kind=true
  export DEVSTACK_KIND=$bundle/$kind_cli
  kind_profile() { # $1 = with bundle images (1) or not (0)
    printf 'apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: %s\nlocalstack:\n  port: %s\ncluster:\n  provider: kind\n  agents: 1\n  kubeconfig: {merge: false}\n' "$stack" "$port" >"$work/profile.yaml"
    [ "$1" = 1 ] && printf 'images:\n  bundle: %s\n' "$bundle" >>"$work/profile.yaml"
    return 0
  }
  anchor=bench-anchor-$$
  for bench_run in $(seq 1 "$runs"); do
    kind_profile 0
    measure kind_up ds cluster up
    measure kind_down ds cluster down
    kind_profile 1
    measure kind_up_images ds cluster up
    quietly ds cluster down
    measure kind_plain plain_kind
    quietly "$DEVSTACK_KIND" delete cluster --name "$anchor" --kubeconfig "$work/anchor.kubeconfig"
  done
fi

# GitOps and the main job (needs the whole kit: node image, Flux, ESO).
main_profile() { # $1 = layout
  # The naive layout only recovers at Flux's retry interval (10m here):
  # give it the time to, so the figure is its convergence, not a timeout.
  sed -e "s/^name: ci$/name: $stack/" -e "s/^  port: 4566$/  port: $port/" \
    -e "s/^  layout: chain$/  layout: $1/" -e "s/^  eso: 6m$/  eso: 15m/" profiles/ci.yaml >"$work/profile.yaml"
  printf 'images:\n  bundle: %s\n' "$bundle" >>"$work/profile.yaml"
}
naive_script() { ds localstack up && ds seed && ds cluster up && ds sync --no-nudge && ds verify; }
have_main=false
if $have_k3s && jq -e '.artifacts[] | select(.kind=="eso-chart")' "$bundle/index.json" >/dev/null; then
  have_main=true
  for bench_run in $(seq 1 "$stack_runs"); do
    main_profile chain
    # `sync` (Flux install to ClusterSecretStore Ready), with and without nudges.
    for mode in nudge plain; do
      if quietly ds localstack up && quietly ds cluster up; then
        flag=; [ $mode = plain ] && flag=--no-nudge
        measure "sync_$mode" ds sync $flag --json && kept "sync-$mode-$bench_run"
      else
        missed "the cluster or LocalStack did not come up" "sync_$mode"
      fi
      quietly ds down
    done
    # The main job: cold up to a verified round trip, warm up, verify latencies, down.
    if measure up_cold ds up --json; then
      kept "up-cold-$bench_run"
      record eso_ready "$(span '.timings[] | select(.name == "level external-secrets-operator Ready") | .endMs')"
      record verify_sync "$(span '.verify.checks[] | select(.name=="sync") | .latencyMs')"
      record verify_rotate "$(span '.verify.checks[] | select(.name=="rotate") | .latencyMs')"
      record verify_recreate "$(span '.verify.checks[] | select(.name=="recreate") | .latencyMs')"
      record mem_k3s "$(stack_mem_mib "$stack")"
      measure up_warm ds up
      measure up_warm_noverify ds up --no-verify
      # Every container of the stack restarted (LocalStack comes back empty,
      # the K3s node restarts every pod): up back to a verified round trip.
      # shellcheck disable=SC2046
      quietly docker restart -t 5 $(docker ps -q --filter "label=dev.devstack.stack=$stack")
      measure up_restart ds up --json && kept "up-restart-$bench_run"
      # A snapshot of the verified stack; the stack removed and created from it.
      if measure snap_save ds snapshot save bench; then
        quietly ds down
        measure up_restore ds up --from-snapshot bench --json && kept "up-restore-$bench_run"
        quietly ds_store snapshot rm bench
      else
        missed "snapshot save failed" up_restore
      fi
      measure down ds down
    else
      quietly ds down
      missed "cold up failed" eso_ready verify_sync verify_rotate verify_recreate mem_k3s up_warm up_warm_noverify up_restart snap_save up_restore down
    fi
    # The previous release's defaults (ESO chart 0.19.2, LocalStack 4.3.0),
    # pinned in the same profile: the before of the version upgrade.
    sed -i -e "s|^localstack:$|localstack:\n  image: localstack/localstack:4.3.0|" "$work/profile.yaml"
    printf 'eso:\n  chartVersion: 0.19.2\n' >>"$work/profile.yaml"
    if measure prev_cold ds up --json; then
      kept "previous-cold-$bench_run"
      record prev_eso "$(span '.timings[] | select(.name == "level external-secrets-operator Ready") | .endMs')"
      record prev_mem "$(stack_mem_mib "$stack")"
    else
      missed "cold up failed" prev_eso prev_mem
    fi
    quietly ds down
    # The same stack by a plain sequential script with the naive layout: one
    # command after another, no concurrency, no nudges, same images and preload.
    if [ "${BENCH_NAIVE:-1}" != 0 ]; then
      main_profile naive
      measure naive naive_script
      quietly ds down
    fi
  done
fi

# The dev profile (Kind, a control plane and a worker) and the ci profile on
# Kind (one node, the shape of the K3s figures).
if $have_kind && $have_main; then
  for bench_run in $(seq 1 "$stack_runs"); do
    sed -e "s/^name: dev$/name: $stack/" -e "s/hostPort: 8080/hostPort: $((port + 1))/" -e "s/    merge: true/    merge: false/" \
      -e "s|^secrets:|images:\n  bundle: $bundle\nsecrets:|" profiles/dev.yaml >"$work/profile.yaml"
    if measure kind_cold ds up --json; then
      kept "kind-cold-$bench_run"
      record mem_kind "$(stack_mem_mib "$stack" "devstack-$stack")"
      measure kind_warm ds up
      measure kind_warm_noverify ds up --no-verify
    else
      missed "cold up failed" mem_kind kind_warm kind_warm_noverify
    fi
    quietly ds down
    main_profile chain
    sed -i -e "s/^  provider: k3s$/  provider: kind/" "$work/profile.yaml"
    measure kind_ci_cold ds up --json && kept "kind-ci-cold-$bench_run"
    quietly ds down
  done
fi

echo
echo "devstack bench (medians of up to $runs runs, whole stacks $stack_runs; $(nproc) cores; Docker $(docker version -f '{{.Server.Version}}'))"
row "localstack cold start-to-healthy" ls_cold
row "localstack warm reuse (up again)" ls_warm
row "seed 200 secrets, sequential" seed_seq /s:200
row "seed 200 secrets, 16 concurrent" seed_conc /s:200
if $have_k3s; then
  row "k3s cluster up to Ready (bundle, CoreDNS serving)" k3s_up s 1000
  row "k3s cluster down" k3s_down s 1000
else
  echo "k3s cluster: not measured (no kit node image or bundle; run make kit)"
fi
if $have_kind; then
  row "kind cluster up to Ready (2 nodes, CoreDNS serving)" kind_up s 1000
  row "plain kind create + nodes Ready + CoreDNS" kind_plain s 1000
  compare "  devstack against plain kind" kind_up kind_plain
  row "kind cluster up, bundle images loaded" kind_up_images s 1000
  row "kind cluster down" kind_down s 1000
else
  echo "kind cluster: not measured (no kind CLI or $kind_node in the kit; run make kit)"
fi
if $have_main; then
  row "sync: Flux install to ClusterSecretStore Ready, nudged" sync_nudge s 1000
  row "sync: the same, Flux's own timing (--no-nudge)" sync_plain s 1000
  row "up, cold, to a verified round trip (K3s, ci)" up_cold s 1000
  row "up, warm (healthy stack, with the round trip)" up_warm s 1000
  row "up --no-verify, warm (healthy stack)" up_warm_noverify s 1000
  row "up after every container restarted (verified)" up_restart s 1000
  row "snapshot save (verify, pause, read)" snap_save s 1000
  row "up --from-snapshot (verified)" up_restore s 1000
  row "down" down s 1000
  row "  ESO Ready (operator level), from the start of up" eso_ready s 1000
  row "  verify: sync latency" verify_sync
  row "  verify: rotate latency" verify_rotate
  row "  verify: recreate latency" verify_recreate
  row "memory per stack, K3s (ci), its containers after up" mem_k3s MiB
  row "previous release (ESO 0.19.2, LocalStack 4.3.0): up, cold" prev_cold s 1000
  row "  its ESO Ready" prev_eso s 1000
  row "  its memory" prev_mem MiB
  if [ "${BENCH_NAIVE:-1}" != 0 ]; then
    row "sequential script, naive layout" naive s 1000
    compare "  against devstack up, cold" naive up_cold
  else
    echo "sequential script, naive layout: not run (BENCH_NAIVE=0)"
  fi
else
  echo "gitops and up: not measured (the kit lacks the K3s image, Flux or ESO; run make kit)"
fi
if $have_kind && $have_main; then
  row "kind: up, cold, to a verified round trip (dev, 2 nodes)" kind_cold s 1000
  row "kind: up, cold (ci, one node)" kind_ci_cold s 1000
  row "kind: up, warm (with the round trip)" kind_warm s 1000
  row "kind: up --no-verify, warm" kind_warm_noverify s 1000
  row "memory per stack, Kind (dev), its containers after up" mem_kind MiB
fi
echo "each whole-stack run's --json (its timeline): $keep"
