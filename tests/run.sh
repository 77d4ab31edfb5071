#!/usr/bin/env bash
# The test command (`make test`). Runs every test group this machine can
# run and says loudly which ran and which were skipped, and why. Nothing
# counts as run unless it ran: a test that prints `SKIPPED: <test>: <why>`
# (or a kit hook that exits 77) is a skipped test, not a passed one; a
# group none of whose tests ran is a skipped group; a run in which nothing
# ran fails.
#
#   DEVSTACK_TEST_TIERS       groups to run, comma-separated, from lint,
#                             unit, docker, cluster, online, engines
#                             (default: all of them); any other name is
#                             an error
#   DEVSTACK_KIT_BUDGET       seconds the cluster group may spend building the
#                             kit's K3s/Flux/ESO images when they are not cached
#                             (default 1800; 0 = skip the cluster group). A
#                             kit not built within the budget skips the
#                             cluster group, and that skip fails the run
#                             unless DEVSTACK_TEST_ALLOW_SKIP allows it
#   DEVSTACK_TEST_ALLOW_SKIP  skips that may not fail the run, one per line,
#                             each `PATTERN=WHY`: PATTERN is a shell glob
#                             matched against the skip as the summary prints
#                             it (`<name>: <reason>`; a test's name is
#                             `<group>/<test>`), WHY says why that skip is
#                             acceptable and is printed last in the summary.
#                             Under CI (`CI` set, not empty, 0 or false) every
#                             skip fails the run unless allowed; elsewhere
#                             only the kit budget's does
#   DEVSTACK_TEST_SKIP_DOCKER the Docker tier's tests skip (each counted as
#                             skipped); refused under CI and with the cluster
#                             group, which requires Docker
#   KIT_TEST_HOOKS            (kit/test.sh) the kit hooks to run; the
#                             others are counted as skipped, and a name that
#                             is no hook is an error
#
# Exit codes: 0 all asked for ran and passed (skips only where allowed),
# 1 a failure or a skip not allowed, 2 a refused setting.
set -uo pipefail
cd "$(dirname "$0")/.."

refuse() {
  echo "error: $*" >&2
  exit 2
}
in_ci() { case "${CI:-}" in "" | 0 | false) return 1 ;; *) return 0 ;; esac; }

valid_tiers=(lint unit docker cluster online engines)
tiers=","
IFS=, read -ra asked <<<"${DEVSTACK_TEST_TIERS:-lint,unit,docker,cluster,online,engines}"
for tier in "${asked[@]}"; do
  tier=${tier//[[:space:]]/}
  [ -n "$tier" ] || continue
  [[ " ${valid_tiers[*]} " == *" $tier "* ]] ||
    refuse "unknown test group \`$tier\` in DEVSTACK_TEST_TIERS=${DEVSTACK_TEST_TIERS:-}; the groups are: $(IFS=,; echo "${valid_tiers[*]}" | sed 's/,/, /g')"
  tiers+="$tier,"
done
want() { [[ "$tiers" == *",$1,"* ]]; }

# The allowances, checked before anything runs so that a malformed one
# cannot surface only after an hour of cluster tests.
allow_patterns=() allow_whys=()
while IFS= read -r entry; do
  [[ "$entry" =~ ^[[:space:]]*(#|$) ]] && continue
  [[ "$entry" == *=* ]] || refuse "DEVSTACK_TEST_ALLOW_SKIP: \`$entry\` is not PATTERN=WHY"
  pattern=${entry%%=*} why=${entry#*=}
  pattern=${pattern#"${pattern%%[![:space:]]*}"} pattern=${pattern%"${pattern##*[![:space:]]}"}
  why=${why#"${why%%[![:space:]]*}"}
  [ -n "$pattern" ] && [ -n "$why" ] ||
    refuse "DEVSTACK_TEST_ALLOW_SKIP: \`$entry\` needs both the skip it allows and why that skip is acceptable"
  allow_patterns+=("$pattern")
  allow_whys+=("$why")
done <<<"${DEVSTACK_TEST_ALLOW_SKIP:-}"

skip_docker=false
if [ -n "${DEVSTACK_TEST_SKIP_DOCKER+set}" ]; then
  in_ci && refuse "DEVSTACK_TEST_SKIP_DOCKER is refused when CI is set: CI runs the Docker tier"
  want cluster && refuse "DEVSTACK_TEST_SKIP_DOCKER cannot skip the cluster group, which requires Docker; leave it out: DEVSTACK_TEST_TIERS=lint,unit,docker"
  skip_docker=true
fi

if want cluster && [ -n "${KIT_TEST_HOOKS:-}" ]; then
  for hook in $KIT_TEST_HOOKS; do
    [ -f "kit/test.d/$hook.sh" ] ||
      refuse "KIT_TEST_HOOKS names \`$hook\`, which is no hook; the hooks are: $(cd kit/test.d && ls -- *.sh | sed 's/\.sh$//' | paste -sd, | sed 's/,/, /g')"
  done
fi

ran=() skipped=() skip_strict=() failed=()
banner() { printf '\n==== %s ====\n' "$*"; }
# note_skip TEXT [STRICT]: STRICT=1 fails the run unless allowed, in CI or not.
note_skip() {
  skipped+=("$1")
  skip_strict+=("${2:-0}")
}
skip() {
  note_skip "$1: $2" "${3:-0}"
  banner "SKIPPED test group $1: $2"
}
group() {
  local name=$1
  shift
  banner "test group: $name"
  local t0=$SECONDS
  if "$@"; then ran+=("$name ($((SECONDS - t0))s)"); else failed+=("$name"); fi
}
# group_counting_skips NAME CMD...: `group`, with the command's output also
# scanned for the `SKIPPED: <test>: <reason>` lines tests print when they
# cannot run here: each counts as a skipped test, never as a passed one.
# Under libtest a test that skips returns early and is reported `ok`, so
# the tests that ran are the `passed` ones less the skips; a group in which
# none ran is a skipped group, not a group that ran.
group_counting_skips() {
  local name=$1 log before=${#ran[@]} line n=0 libtest passed ignored
  shift
  log=$(mktemp "${TMPDIR:-/tmp}/devstack-test-$name.XXXXXX")
  group "$name" bash -c 'set -o pipefail; "$@" 2>&1 | tee "$0"' "$log" "$@"
  while IFS= read -r line; do
    note_skip "$name/$line"
    n=$((n + 1))
  done < <(grep -o 'SKIPPED: .*' "$log" | sed 's/^SKIPPED: //')
  libtest=$(grep -c '^test result: ' "$log")
  read -r passed ignored < <(grep -o '^test result: [A-Za-z]*\. [0-9]* passed; [0-9]* failed; [0-9]* ignored' "$log" |
    awk '{p += $4; i += $8} END {print p + 0, i + 0}')
  rm -f "$log"
  if [ "$ignored" -gt 0 ]; then
    note_skip "$name: $ignored test(s) marked #[ignore] did not run"
  fi
  [ ${#ran[@]} -gt "$before" ] || return 0
  if [ "$libtest" -gt 0 ] && [ $((passed - n)) -le 0 ]; then
    unset 'ran[-1]'
    note_skip "$name: none of its $passed test(s) ran (each skip is listed)"
  elif [ "$libtest" -gt 0 ]; then
    ran[-1]+=": $((passed - n)) test(s) ran"
    [ $n -eq 0 ] || ran[-1]+=", $n skipped (listed below)"
  elif [ $n -gt 0 ]; then
    ran[-1]+=", $n of its tests skipped (listed below)"
  fi
}

# The unit group: the library's and binaries' tests, the CLI and layering
# tests, and the doc examples (src/stack/mod.rs's are the library's usage).
# They need no Docker engine (README: plain `cargo test` passes without
# one), so they run where none answers, even on a machine that has one: a
# check that reaches for the engine before it judges its input fails here.
unit_tests() {
  local rc=0
  DOCKER_HOST=unix:///nonexistent/docker.sock cargo test --lib --bins --test unit -- --nocapture || rc=1
  DOCKER_HOST=unix:///nonexistent/docker.sock cargo test --doc -- --nocapture || rc=1
  return $rc
}
export -f unit_tests

# The host is only checked, never set up: the test command must not change
# the machine it runs on. `make host` sets one up; `.ci/run` runs it first.
if (want docker && ! $skip_docker) || want cluster || want online || want engines; then
  banner "host: Docker engine"
  if docker info >/dev/null 2>&1; then
    echo "[host] docker engine answers: $(docker version -f '{{.Server.Version}}' 2>/dev/null)"
  else
    for g in docker cluster online engines; do
      want "$g" || continue
      [ "$g" = docker ] && $skip_docker && continue
      skip "$g" "no Docker engine answers${DOCKER_HOST:+ at $DOCKER_HOST}; start yours, or \`make host\` installs and starts one (with apt; it may write /etc/docker/daemon.json)"
      tiers=${tiers//,$g,/,}
    done
  fi
fi

if want lint; then
  group lint bash -c 'cargo fmt --check && cargo clippy --all-targets --quiet -- -D warnings'
fi

if want unit; then
  group_counting_skips unit unit_tests
  # Chromium renders the --timings page headless; without it the test says
  # SKIPPED (`.ci/run` installs it: scripts/setup-browser.sh).
  group_counting_skips browser cargo test --test browser -- --nocapture
fi

if want docker; then
  # `down --all` removes every devstack stack here, the other tests' stacks
  # included: it runs alone, after them.
  docker_tests() {
    local rc=0
    cargo test --no-fail-fast --test docker -- --nocapture --include-ignored --skip down_all:: || rc=1
    DEVSTACK_TEST_DOWN_ALL=1 cargo test --no-fail-fast --test docker -- --nocapture --include-ignored down_all:: || rc=1
    return $rc
  }
  export -f docker_tests
  if $skip_docker; then
    # No image to build: each Docker test says SKIPPED and is counted.
    group_counting_skips docker docker_tests
  else
    banner "kit: LocalStack image (cached after the first build)"
    if bash kit/build.sh localstack; then
      group_counting_skips docker docker_tests
    else
      failed+=("docker (LocalStack image build failed)")
    fi
  fi
fi

if want cluster; then
  budget=${DEVSTACK_KIT_BUDGET:-1800}
  if [ "$budget" -eq 0 ]; then
    skip cluster "DEVSTACK_KIT_BUDGET=0 (no kit build allowed)"
  else
    banner "kit: K3s, Flux, ESO and LocalStack images (seconds when cached; cold builds get ${budget}s)"
    timeout "$budget" bash kit/build.sh
    rc=$?
    kit_rc=$rc
    if [ $rc -eq 0 ]; then
      # A hook that cannot run exits 77 and test.sh prints `SKIPPED: <hook>: <why>`.
      group_counting_skips kit-test bash kit/test.sh
      # One test at a time: each brings up whole clusters on a 2-core machine.
      group_counting_skips cluster env DEVSTACK_TEST_REQUIRE_CLUSTER=1 DEVSTACK_TEST_DOWN_ALL=1 cargo test --no-fail-fast --test cluster -- --nocapture --test-threads=1 --include-ignored
      group_counting_skips example bash tests/example.sh
    elif [ $rc -eq 124 ]; then
      # Not a pass: the run fails unless this very skip is allowed.
      skip cluster "the offline kit did not finish building within ${budget}s (a cold build on a new machine); run \`make kit\` once and later runs use the cache" 1
    else
      failed+=("cluster (kit build failed, exit $rc)")
    fi
  fi
fi

# kit_once: the kit built once per run for the groups that use it after the
# cluster group (its result in kit_rc: 0, budget0 or the build's exit code).
kit_once() {
  [ "${kit_rc:-}" = "" ] || return 0
  budget=${DEVSTACK_KIT_BUDGET:-1800}
  if [ "$budget" -eq 0 ]; then kit_rc=budget0; else timeout "$budget" bash kit/build.sh; kit_rc=$?; fi
}

if want online; then
  # The online path as a user takes it, against a real registry and file
  # server the kit builds (tests/online/mirror.sh): after the kit, like the
  # cluster group, whose build it reuses when that ran.
  kit_once
  case $kit_rc in
    0) group_counting_skips online env DEVSTACK_TEST_REQUIRE_CLUSTER=1 cargo test --no-fail-fast --test online -- --nocapture --test-threads=1 --include-ignored ;;
    budget0) skip online "DEVSTACK_KIT_BUDGET=0 (no kit build allowed)" ;;
    124) skip online "the offline kit did not finish building within ${DEVSTACK_KIT_BUDGET:-1800}s (a cold build on a new machine); run \`make kit\` once and later runs use the cache" 1 ;;
    *) failed+=("online (kit build failed, exit $kit_rc)") ;;
  esac
fi

if want engines; then
  # A current Docker engine (the kit's dockerd 28.5.2: containerd image
  # store, `"init": true`, clients below API 1.44 refused) started beside
  # the machine's own in a network namespace of its own
  # (tests/engines/engine.sh); the tests run inside that namespace so that
  # the ports its containers publish on 127.0.0.1 are theirs. A machine
  # that cannot run it (not root, no network namespaces) skips the group,
  # before the kit is built for it.
  if engines_why=$(bash tests/engines/engine.sh check 2>&1); then
    engines_why=""
    kit_once
  else
    engines_why=${engines_why:-tests/engines/engine.sh check failed and said nothing}
  fi
  engines_tests() {
    local rc=0 engine=tests/engines/engine.sh
    # Built here, where the crate registry is reachable; the namespace has no route out.
    cargo test --no-run --test engines --test online || return 1
    # From an empty image store: images an earlier run pulled through the
    # mirror would be found in the engine, and the online test, which must
    # pull them, would not.
    bash "$engine" stop --purge >/dev/null 2>&1
    bash "$engine" start || return 1
    local k3s
    k3s=$(cargo run --quiet -- version --json | jq -r '.components[].default | select(startswith("rancher/k3s:"))') || return 1
    bash "$engine" load "$k3s" devstack-kit/registry:v3.0.0 devstack-kit/fileserver:1 || rc=1
    if [ $rc -eq 0 ]; then
      bash "$engine" exec env DEVSTACK_TEST_REQUIRE_CLUSTER=1 cargo test --offline --no-fail-fast --test engines -- --nocapture --test-threads=1 --include-ignored || rc=1
      # The default profile on Kind through the mirror, whose images are
      # multi-platform indexes as upstream's are.
      bash "$engine" exec env DEVSTACK_TEST_REQUIRE_CLUSTER=1 MIRROR_DIR="$HOME/.cache/devstack/mirror-engines" \
        cargo test --offline --test online -- --nocapture --include-ignored --exact the_default_profile_comes_up_on_kind_online_with_nothing_but_docker || rc=1
    fi
    bash "$engine" stop --purge || rc=1
    return $rc
  }
  export -f engines_tests
  if [ -n "$engines_why" ]; then
    skip engines "$engines_why"
  else
    case $kit_rc in
      0) group_counting_skips engines engines_tests ;;
      budget0) skip engines "DEVSTACK_KIT_BUDGET=0 (no kit build allowed)" ;;
      124) skip engines "the offline kit did not finish building within ${DEVSTACK_KIT_BUDGET:-1800}s (a cold build on a new machine); run \`make kit\` once and later runs use the cache" 1 ;;
      *) failed+=("engines (kit build failed, exit $kit_rc)") ;;
    esac
  fi
fi

banner "summary"
# A group that ran and failed did run; a run with neither ran nothing.
[ ${#ran[@]} -gt 0 ] || [ ${#failed[@]} -gt 0 ] ||
  failed+=("nothing ran (DEVSTACK_TEST_TIERS=${DEVSTACK_TEST_TIERS:-lint,unit,docker,cluster,online,engines})")
allowed=()
for i in "${!skipped[@]}"; do
  s=${skipped[i]}
  if ! in_ci && [ "${skip_strict[i]}" != 1 ]; then continue; fi
  why=""
  for j in "${!allow_patterns[@]}"; do
    # shellcheck disable=SC2053 # the pattern is a glob on purpose
    if [[ "$s" == ${allow_patterns[j]} ]]; then why=${allow_whys[j]} && break; fi
  done
  if [ -n "$why" ]; then
    allowed+=("$s -- allowed: $why")
  else
    failed+=("skipped, and no DEVSTACK_TEST_ALLOW_SKIP entry allows it$(in_ci && echo ' (CI)'): $s")
  fi
done
for r in "${ran[@]}"; do echo "ran:     $r"; done
for s in "${skipped[@]}"; do echo "SKIPPED: $s"; done
for f in "${failed[@]}"; do echo "FAILED:  $f"; done
echo "${#ran[@]} passed, ${#failed[@]} failed, ${#skipped[@]} skipped (groups, and tests that printed SKIPPED)"
# Last, so that the reason a run passed with a skip is what one reads.
for a in "${allowed[@]}"; do echo "ALLOWED: $a"; done
[ ${#failed[@]} -eq 0 ]
