#!/usr/bin/env bash
# `make bench`: speed figures, measured with the release binary against the
# real Docker engine and LocalStack image. Not a test: it reports numbers.
#
#   BENCH_RUNS         repetitions per figure (default 5); medians are reported
#   BENCH_STACK_RUNS   repetitions of the whole-stack figures (default BENCH_RUNS;
#                      each takes minutes, the naive script over ten)
#   BENCH_NAIVE        0 leaves out the naive sequential script (over ten minutes)
#   BENCH_KEEP         where each whole-stack run's `--json` (its timeline) is
#                      kept (default ~/.cache/devstack/bench/<start time>), so a
#                      figure far from the others can be read step by step
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${BENCH_RUNS:-5}
bash tests/host/setup-docker.sh >/dev/null
bash tests/kit/build.sh localstack >/dev/null
cargo build --release --quiet
bin=${CARGO_TARGET_DIR:-$PWD/target}/release/devstack
# Versions from the binary's own matrix (`devstack version --json`).
default_of() { "$bin" version --json | jq -r --arg id "$1" '.components[] | select(.id == $id) | .default'; }
work=$(mktemp -d)
keep=${BENCH_KEEP:-$HOME/.cache/devstack/bench/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$keep"
stack=bench-$$
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
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

profile() { # $1 = number of secrets
  {
    printf 'apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: %s\nlocalstack:\n  port: %s\n' "$stack" "$port"
    if [ "$1" -gt 0 ]; then
      echo "secrets:"
      for i in $(seq 1 "$1"); do printf '  - {name: bench/s%03d, generate: {length: 32}}\n' "$i"; done
    fi
  } >"$work/profile.yaml"
}
now_ms() { date +%s%3N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# Memory of every container of the stack (devstack's labelled ones and the
# kind nodes), in MiB, as `docker stats` reports it.
stack_mem_mib() {
  local ids
  ids=$(docker ps -q --filter "label=dev.devstack.stack=$stack"; docker ps -q --filter "label=io.x-k8s.kind.cluster=devstack-$stack")
  # shellcheck disable=SC2086
  docker stats --no-stream --format '{{.MemUsage}}' $ids | awk '{
    v=$1; u=v; sub(/[0-9.]+/, "", u); sub(/[A-Za-z]+$/, "", v)
    f = (u=="GiB") ? 1024 : (u=="MiB") ? 1 : (u=="KiB") ? 1/1024 : 1/1048576
    t += v*f } END {printf "%.0f", t}'
}
ds() { DEVSTACK_HOME=$work/state CI=1 "$bin" --profile "$work/profile.yaml" -q "$@"; }

profile 200
cold=(); warm=(); seq_rate=(); conc_rate=()
for r in $(seq 1 "$runs"); do
  cleanup_containers() { docker rm -f -v $(docker ps -aq --filter "label=dev.devstack.stack=$stack") >/dev/null 2>&1 || true; }
  cleanup_containers
  t0=$(now_ms); ds localstack up; t1=$(now_ms); cold+=($((t1 - t0)))
  t0=$(now_ms); ds localstack up; t1=$(now_ms); warm+=($((t1 - t0)))
  t0=$(now_ms); ds seed --concurrency 1; t1=$(now_ms)
  seq_rate+=("$(awk -v ms=$((t1 - t0)) 'BEGIN {printf "%.1f", 200000/ms}')")
  ds localstack down; ds localstack up
  t0=$(now_ms); ds seed --concurrency 16; t1=$(now_ms)
  conc_rate+=("$(awk -v ms=$((t1 - t0)) 'BEGIN {printf "%.1f", 200000/ms}')")
done
# K3s: create-to-Ready with the offline bundle preloaded, and delete.
bundle=${DEVSTACK_KIT_BUNDLE:-$HOME/.cache/devstack/kit/bundle}
k3s_up=(); k3s_down=()
if docker image inspect "$(default_of k3s)" >/dev/null 2>&1 && [ -f "$bundle/index.json" ]; then
  printf 'apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: %s\nlocalstack:\n  port: %s\ncluster:\n  provider: k3s\n  kubeconfig: {merge: false}\nimages:\n  bundle: %s\n' "$stack" "$port" "$bundle" >"$work/profile.yaml"
  for r in $(seq 1 "$runs"); do
    t0=$(now_ms); ds cluster up; t1=$(now_ms); k3s_up+=($((t1 - t0)))
    t0=$(now_ms); ds cluster down; t1=$(now_ms); k3s_down+=($((t1 - t0)))
  done
fi

# Kind: devstack's cluster step against plain `kind create cluster` with the
# same kind CLI, node image and shape (a control plane and a worker), both to
# the same point: every node Ready and CoreDNS serving (what the stack needs;
# the anchor waits with the node's own kubectl). devstack's figure without the
# bundle's images is the like-for-like one; with them it also imports Flux and
# ESO into both nodes.
kind_node=$(default_of kind-node)
kind_cli=$(jq -r '.artifacts[] | select(.kind=="binary" and .name=="kind") | .file' "$bundle/index.json" 2>/dev/null || true)
kind_up=(); kind_up_images=(); kind_down=(); kind_anchor=(); kind_anchor_create=(); kind_anchor_flux=()
if [ -n "$kind_cli" ] && docker image inspect "$kind_node" >/dev/null 2>&1; then
  export DEVSTACK_KIND=$bundle/$kind_cli
  kind_profile() { # $1 = with bundle images (1) or not (0)
    printf 'apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: %s\nlocalstack:\n  port: %s\ncluster:\n  provider: kind\n  agents: 1\n  kubeconfig: {merge: false}\n' "$stack" "$port" >"$work/profile.yaml"
    [ "$1" = 1 ] && printf 'images:\n  bundle: %s\n' "$bundle" >>"$work/profile.yaml"
    return 0
  }
  anchor=bench-anchor-$$
  flux_install=$(jq -r '[.artifacts[] | select(.kind=="flux-install")][0].file // empty' "$bundle/index.json")
  flux_images=$(jq -r '.artifacts[] | select(.kind=="image" and (.role | startswith("flux-"))) | .file' "$bundle/index.json")
  for r in $(seq 1 "$runs"); do
    kind_profile 0
    t0=$(now_ms); ds cluster up; t1=$(now_ms); kind_up+=($((t1 - t0)))
    t0=$(now_ms); ds cluster down; t1=$(now_ms); kind_down+=($((t1 - t0)))
    kind_profile 1
    t0=$(now_ms); ds cluster up; t1=$(now_ms); kind_up_images+=($((t1 - t0)))
    ds cluster down
    t0=$(now_ms)
    "$DEVSTACK_KIND" create cluster --name "$anchor" --image "$kind_node" --config tests/kit/kind/cluster.yaml \
      --kubeconfig "$work/anchor.kubeconfig" --wait 5m >/dev/null 2>&1
    t1=$(now_ms)
    docker exec "$anchor-control-plane" kubectl --kubeconfig /etc/kubernetes/admin.conf wait --for=condition=Ready nodes --all --timeout=5m >/dev/null
    docker exec "$anchor-control-plane" kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system rollout status deployment/coredns --timeout=5m >/dev/null
    t2=$(now_ms); kind_anchor_create+=($((t1 - t0))); kind_anchor+=($((t2 - t0)))
    # ... then Flux by hand, as its docs say, with the same images and manifest
    # devstack installs: what the dev profile's cold `up` has done when its
    # Flux step ends.
    if [ -n "$flux_install" ]; then
      for f in $flux_images; do "$DEVSTACK_KIND" load image-archive "$bundle/$f" --name "$anchor" >/dev/null 2>&1; done
      docker exec -i "$anchor-control-plane" kubectl --kubeconfig /etc/kubernetes/admin.conf apply --server-side -f - <"$bundle/$flux_install" >/dev/null
      docker exec "$anchor-control-plane" kubectl --kubeconfig /etc/kubernetes/admin.conf -n flux-system wait --for=condition=Available deployment --all --timeout=5m >/dev/null
      t3=$(now_ms); kind_anchor_flux+=($((t3 - t0)))
    fi
    "$DEVSTACK_KIND" delete cluster --name "$anchor" --kubeconfig "$work/anchor.kubeconfig" >/dev/null 2>&1
  done
fi

# GitOps and the main job (needs the whole kit: node image, Flux, ESO).
k3s_mem=(); eso_ready=(); prev_cold=(); prev_eso=(); prev_mem=(); kind_cold=(); kind_ci_cold=(); kind_warm=(); kind_mem=(); kind_flux=(); flux_nudge=(); flux_plain=(); up_cold=(); up_warm=(); verify_sync=(); verify_rotate=(); verify_recreate=(); down_ms=(); naive_script=(); up_restart=(); snap_save=(); up_restore=()
ms_of() { jq -r "$1" "$work/out.json"; }
kept() { cp "$work/out.json" "$keep/$1.json"; }
if [ ${#k3s_up[@]} -gt 0 ] && jq -e '.artifacts[] | select(.kind=="eso-chart")' "$bundle/index.json" >/dev/null; then
  main_profile() { # $1 = layout
    # The naive layout only recovers at Flux's retry interval (10m here):
    # give it the time to, so the figure is its convergence, not a timeout.
    sed -e "s/^name: ci$/name: $stack/" -e "s/^  port: 4566$/  port: $port/" \
        -e "s/^  layout: chain$/  layout: $1/" -e "s/^  eso: 6m$/  eso: 15m/" profiles/ci.yaml >"$work/profile.yaml"
    printf 'images:\n  bundle: %s\n' "$bundle" >>"$work/profile.yaml"
  }
  main_profile chain
  for r in $(seq 1 "${BENCH_STACK_RUNS:-$runs}"); do
    # Flux install start to ClusterSecretStore Ready, with and without nudges.
    for mode in nudge plain; do
      ds localstack up; ds cluster up
      flag=; [ $mode = plain ] && flag=--no-nudge
      ds sync $flag --json >"$work/out.json"; kept "flux-$mode-$r"
      v=$(ms_of .elapsedMs)
      if [ $mode = nudge ]; then flux_nudge+=("$v"); else flux_plain+=("$v"); fi
      ds down
    done
    # The main job: cold up to a verified round trip, warm up, verify latencies, down.
    t0=$(now_ms); ds up --json >"$work/out.json"; t1=$(now_ms); up_cold+=($((t1 - t0))); kept up-cold-$r
    k3s_mem+=("$(stack_mem_mib)")
    eso_ready+=("$(ms_of '.timings[] | select(.name == "level external-secrets-operator Ready") | .endMs')")
    verify_sync+=("$(ms_of '.verify.checks[] | select(.name=="sync") | .latencyMs')")
    verify_rotate+=("$(ms_of '.verify.checks[] | select(.name=="rotate") | .latencyMs')")
    verify_recreate+=("$(ms_of '.verify.checks[] | select(.name=="recreate") | .latencyMs')")
    t0=$(now_ms); ds up --no-verify; t1=$(now_ms); up_warm+=($((t1 - t0)))
    # Every container of the stack restarted (LocalStack comes back empty,
    # the K3s node restarts every pod): up back to a verified round trip.
    # shellcheck disable=SC2046
    docker restart -t 5 $(docker ps -q --filter "label=dev.devstack.stack=$stack") >/dev/null
    t0=$(now_ms); ds up --json >"$work/out.json"; t1=$(now_ms); up_restart+=($((t1 - t0))); kept up-restart-$r
    # A snapshot of the verified stack; the stack removed and created from it.
    t0=$(now_ms); ds snapshot save bench; t1=$(now_ms); snap_save+=($((t1 - t0)))
    ds down
    t0=$(now_ms); ds up --from-snapshot bench --json >"$work/out.json"; t1=$(now_ms); up_restore+=($((t1 - t0))); kept up-restore-$r
    ds snapshot rm bench
    t0=$(now_ms); ds down; t1=$(now_ms); down_ms+=($((t1 - t0)))
    # The same stack by a plain sequential script with the naive layout: one
    # command after another, no concurrency, no nudges, same images and preload.
    # The previous release's defaults (ESO chart 0.19.2, LocalStack 4.3.0),
    # pinned in the same profile: the before of the version upgrade.
    sed -i -e "s|^localstack:$|localstack:\n  image: localstack/localstack:4.3.0|" "$work/profile.yaml"
    printf 'eso:\n  chartVersion: 0.19.2\n' >>"$work/profile.yaml"
    t0=$(now_ms); ds up --json >"$work/out.json"; t1=$(now_ms); prev_cold+=($((t1 - t0))); kept previous-cold-$r
    prev_mem+=("$(stack_mem_mib)")
    prev_eso+=("$(ms_of '.timings[] | select(.name == "level external-secrets-operator Ready") | .endMs')")
    ds down
    main_profile chain
    if [ "${BENCH_NAIVE:-1}" != 0 ]; then
      main_profile naive
      t0=$(now_ms)
      if ds localstack up && ds seed && ds cluster up && ds sync --no-nudge && ds verify; then
        t1=$(now_ms); naive_script+=($((t1 - t0)))
      else
        echo "the sequential naive script failed (see above); its run is left out" >&2
      fi
      ds down
      main_profile chain
    fi
  done
fi

# The dev profile (Kind, a control plane and a worker): cold up to a verified
# round trip, warm up, memory.
if [ ${#kind_up[@]} -gt 0 ] && [ ${#up_cold[@]} -gt 0 ]; then
  for r in $(seq 1 "${BENCH_STACK_RUNS:-$runs}"); do
    sed -e "s/^name: dev$/name: $stack/" -e "s/hostPort: 8080/hostPort: $((port + 1))/" -e "s/    merge: true/    merge: false/" \
        -e "s|^secrets:|images:\n  bundle: $bundle\nsecrets:|" profiles/dev.yaml >"$work/profile.yaml"
    t0=$(now_ms); ds up --json >"$work/out.json"; t1=$(now_ms); kind_cold+=($((t1 - t0))); kept kind-cold-$r
    kind_mem+=("$(stack_mem_mib)")
    kind_flux+=("$(ms_of '.timings[] | select(.name | startswith("Flux ")) | .endMs')")
    t0=$(now_ms); ds up --no-verify; t1=$(now_ms); kind_warm+=($((t1 - t0)))
    ds down
    # The ci profile on Kind (one node, the shape of the K3s figures): the
    # same stack as `up, cold` above, with Kind's kubeadm instead of K3s.
    main_profile chain
    sed -i -e "s/^  provider: k3s$/  provider: kind/" "$work/profile.yaml"
    t0=$(now_ms); ds up --json >"$work/out.json"; t1=$(now_ms); kind_ci_cold+=($((t1 - t0))); kept kind-ci-cold-$r
    ds down
  done
fi

echo "devstack bench ($runs runs, medians; $(nproc) cores; $(docker version -f '{{.Server.Version}}') engine)"
printf 'localstack cold start-to-healthy   %6s ms\n' "$(printf '%s\n' "${cold[@]}" | median)"
printf 'localstack warm reuse (up again)   %6s ms\n' "$(printf '%s\n' "${warm[@]}" | median)"
printf 'seed 200 secrets, sequential       %6s secrets/s\n' "$(printf '%s\n' "${seq_rate[@]}" | median)"
printf 'seed 200 secrets, 16 concurrent    %6s secrets/s\n' "$(printf '%s\n' "${conc_rate[@]}" | median)"
if [ ${#k3s_up[@]} -gt 0 ]; then
  printf 'k3s cluster create-to-Ready       %6s ms (bundle preloaded, CoreDNS serving)\n' "$(printf '%s\n' "${k3s_up[@]}" | median)"
  printf 'k3s cluster delete                %6s ms\n' "$(printf '%s\n' "${k3s_down[@]}" | median)"
else
  echo "k3s cluster: SKIPPED (no kit node image or bundle; run make kit)"
fi
if [ ${#kind_up[@]} -gt 0 ]; then
  med() { printf '%s\n' "$@" | median; }
  a=$(med "${kind_anchor[@]}"); d=$(med "${kind_up[@]}")
  printf 'kind cluster create-to-Ready      %6s ms (2 nodes Ready, CoreDNS serving; %+.0f%% vs plain kind)\n' "$d" "$(awk -v d="$d" -v a="$a" 'BEGIN {print (d-a)*100/a}')"
  printf 'kind cluster, bundle images loaded %6s ms\n' "$(med "${kind_up_images[@]}")"
  printf 'plain kind create + Ready + CoreDNS %5s ms (kind create --wait 5m alone: %s ms)\n' "$a" "$(med "${kind_anchor_create[@]}")"
  printf 'kind cluster delete                %6s ms\n' "$(med "${kind_down[@]}")"
else
  echo "kind cluster: SKIPPED (no kind CLI or $kind_node in the kit; run make kit)"
fi
if [ ${#up_cold[@]} -gt 0 ]; then
  med() { printf '%s\n' "$@" | median; }
  printf 'flux install to ClusterSecretStore Ready, nudged   %6s ms\n' "$(med "${flux_nudge[@]}")"
  printf 'flux install to ClusterSecretStore Ready, Flux alone %4s ms\n' "$(med "${flux_plain[@]}")"
  printf 'up, cold, to verified round trip   %6s ms\n' "$(med "${up_cold[@]}")"
  printf 'up, warm (healthy stack)           %6s ms\n' "$(med "${up_warm[@]}")"
  printf 'up after every container restarted %5s ms (verified round trip)\n' "$(med "${up_restart[@]}")"
  printf 'snapshot save (verify, pause, read) %5s ms\n' "$(med "${snap_save[@]}")"
  printf 'up --from-snapshot                 %6s ms (verified round trip)\n' "$(med "${up_restore[@]}")"
  printf 'verify: sync %s ms, rotate %s ms, recreate %s ms\n' "$(med "${verify_sync[@]}")" "$(med "${verify_rotate[@]}")" "$(med "${verify_recreate[@]}")"
  printf 'down                               %6s ms\n' "$(med "${down_ms[@]}")"
  printf 'time to ESO Ready (operator level) %6s ms (from the start of up)\n' "$(med "${eso_ready[@]}")"
  printf 'previous release (ESO 0.19.2, LocalStack 4.3.0): up cold %s ms, ESO Ready %s ms, memory %s MiB\n' \
    "$(med "${prev_cold[@]}")" "$(med "${prev_eso[@]}")" "$(med "${prev_mem[@]}")"
  mem=$(med "${k3s_mem[@]}"); total=$(awk '/MemTotal/ {printf "%.0f", $2/1024}' /proc/meminfo)
  printf 'memory per stack, k3s (ci profile) %6s MiB (docker stats after up; %d fit in %d MiB)\n' "$mem" "$((total / mem))" "$total"
  if [ ${#kind_cold[@]} -gt 0 ]; then
    printf 'kind: up, cold, to verified round trip %6s ms (dev profile)\n' "$(med "${kind_cold[@]}")"
    printf 'kind: up, cold, one node (ci profile) %6s ms\n' "$(med "${kind_ci_cold[@]}")"
    printf 'kind: up, warm (healthy stack)     %6s ms\n' "$(med "${kind_warm[@]}")"
    if [ ${#kind_anchor_flux[@]} -gt 0 ]; then
      d=$(med "${kind_flux[@]}"); a=$(med "${kind_anchor_flux[@]}")
      printf 'kind: cluster + Flux ready, devstack up %6s ms vs by hand (kind create, kind load, kubectl apply, wait) %s ms (%+.0f%%)\n' \
        "$d" "$a" "$(awk -v d="$d" -v a="$a" 'BEGIN {print (d-a)*100/a}')"
    fi
    mem=$(med "${kind_mem[@]}")
    printf 'memory per stack, kind (dev profile) %4s MiB (%d fit in %d MiB)\n' "$mem" "$((total / mem))" "$total"
  fi
  if [ ${#naive_script[@]} -gt 0 ]; then
    printf 'sequential script, naive layout    %6s ms (%.2fx devstack up)\n' "$(med "${naive_script[@]}")" \
      "$(awk -v a="$(med "${naive_script[@]}")" -v b="$(med "${up_cold[@]}")" 'BEGIN {print a/b}')"
  elif [ "${BENCH_NAIVE:-1}" = 0 ]; then
    echo "sequential script, naive layout: not run (BENCH_NAIVE=0)"
  else
    echo "sequential script, naive layout: no run converged"
  fi
else
  echo "gitops and up: SKIPPED (the bundle lacks Flux or ESO; run make kit)"
fi
echo "each whole-stack run's --json (its timeline): $keep"
