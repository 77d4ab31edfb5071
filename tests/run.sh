#!/usr/bin/env bash
# The test command (`make test`). Runs every test group this machine can
# run and says loudly which ran and which were skipped, and why.
#
#   DEVSTACK_TEST_TIERS   groups to run (default: lint,unit,docker,cluster)
#   DEVSTACK_KIT_BUDGET   seconds the cluster group may spend building the
#                         kit's K3s/Flux/ESO images when they are not cached
#                         (default 1800; 0 = skip the cluster group)
set -uo pipefail
cd "$(dirname "$0")/.."
tiers=",${DEVSTACK_TEST_TIERS:-lint,unit,docker,cluster},"
want() { [[ "$tiers" == *",$1,"* ]]; }
ran=(); skipped=(); failed=()
banner() { printf '\n==== %s ====\n' "$*"; }
group() {
  local name=$1; shift
  banner "test group: $name"
  local t0=$SECONDS
  if "$@"; then ran+=("$name ($((SECONDS - t0))s)"); else failed+=("$name"); fi
}
skip() { skipped+=("$1: $2"); banner "SKIPPED test group $1: $2"; }
# group_counting_skips NAME CMD...: `group`, with the command's output also
# scanned for the `SKIPPED: <test>: <reason>` lines tests print when they
# cannot run here (the Kind tests without the kit's kind pieces): each
# counts as skipped, never as passed.
group_counting_skips() {
  local name=$1 log passed_before=${#ran[@]} line n=0; shift
  log=$(mktemp "${TMPDIR:-/tmp}/devstack-test-$name.XXXXXX")
  group "$name" bash -c 'set -o pipefail; "$@" 2>&1 | tee "$0"' "$log" "$@"
  while IFS= read -r line; do
    skipped+=("$name/$line"); n=$((n + 1))
  done < <(grep -o 'SKIPPED: .*' "$log" | sed 's/^SKIPPED: //')
  if [ $n -gt 0 ] && [ ${#ran[@]} -gt "$passed_before" ]; then
    ran[-1]="${ran[-1]}, $n test(s) of it skipped (counted below)"
  fi
  rm -f "$log"
}

if want docker || want cluster; then
  banner "host: Docker engine"
  bash tests/host/setup-docker.sh || { echo "error: no Docker engine; the docker and cluster groups cannot run" >&2; exit 1; }
fi

if want lint; then
  group lint bash -c 'cargo fmt --check && cargo clippy --all-targets --quiet -- -D warnings'
fi

if want unit; then
  group unit cargo test --lib --bins --test cli --test layers
  # Chromium renders the --timings page headless; without it the test says
  # SKIPPED (`.ci/run` installs it: tests/host/setup-browser.sh).
  group_counting_skips browser cargo test --test timings_browser -- --nocapture
fi

if want docker; then
  banner "kit: LocalStack image (cached after the first build)"
  if bash tests/kit/build.sh localstack; then
    group docker env DEVSTACK_TEST_DOWN_ALL=1 cargo test --no-fail-fast --test localstack_docker --test seed_docker --test gitops_docker --test down_all_docker --test exit_codes
  else
    failed+=("docker (LocalStack image build failed)")
  fi
fi

if want cluster; then
  budget=${DEVSTACK_KIT_BUDGET:-1800}
  if [ "$budget" -eq 0 ]; then
    skip cluster "DEVSTACK_KIT_BUDGET=0 (no kit build allowed)"
  else
    banner "kit: K3s, Flux, ESO and LocalStack images (seconds when cached; cold builds get ${budget}s)"
    timeout "$budget" bash tests/kit/build.sh
    rc=$?
    if [ $rc -eq 0 ]; then
      group kit-test bash tests/kit/test.sh
      # --nocapture: a test that skips says so (`SKIPPED: <test>: <reason>`),
      # and each such line is counted as skipped.
      # One test at a time: each brings up whole clusters on a 2-core machine.
      group_counting_skips cluster env DEVSTACK_TEST_REQUIRE_CLUSTER=1 cargo test --no-fail-fast --test cluster_k3s --test cluster_kind --test providers --test upgrade_k3s \
        --test gitops_k3s --test stack_k3s --test contract_k3s --test restart_k3s --test snapshot_k3s -- --nocapture --test-threads=1
      group example bash tests/example.sh
    elif [ $rc -eq 124 ]; then
      skip cluster "the offline kit did not finish building within ${budget}s (a cold build on a new machine); run \`make kit\` once and later runs use the cache"
    else
      failed+=("cluster (kit build failed, exit $rc)")
    fi
  fi
fi

banner "summary"
for r in "${ran[@]}"; do echo "ran:     $r"; done
for s in "${skipped[@]}"; do echo "SKIPPED: $s"; done
for f in "${failed[@]}"; do echo "FAILED:  $f"; done
echo "${#ran[@]} passed, ${#failed[@]} failed, ${#skipped[@]} skipped (groups, and tests that printed SKIPPED)"
[ ${#failed[@]} -eq 0 ]
