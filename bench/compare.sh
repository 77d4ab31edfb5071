#!/usr/bin/env bash
# Two devstack binaries side by side: cold `up` to a verified round trip
# from the kit's bundle, before and after interleaved so that what else runs
# on the machine weighs on both alike. Prints one line per run and the
# medians; keeps each run's `--json` and `--timings` waterfall.
#
#   bash bench/compare.sh BEFORE_BIN AFTER_BIN [SHAPE...]
#   SHAPE: k3s-ci (default), kind-ci, kind-dev; BENCH_RUNS runs each (3)
#
# Run it alone on the machine (no cluster test beside it).
set -u
cd "$(dirname "$0")/.."
. bench/lib.sh
[ $# -ge 2 ] || die "usage: bash bench/compare.sh BEFORE_BIN AFTER_BIN [k3s-ci|kind-ci|kind-dev...]"
before=$1 after=$2
shift 2
shapes=("${@:-k3s-ci}")
require_bundle
for b in "$before" "$after"; do
  "$b" --version >/dev/null 2>&1 || die "no working devstack binary at $b"
done
work=$(mktemp -d)
out=${BENCH_KEEP:-$HOME/.cache/devstack/bench/compare-$(date +%Y%m%dT%H%M%S)}
mkdir -p "$out"
trap 'rm -rf "$work"' EXIT
profile() {
  case $1 in
  k3s-ci) sed -e 's/^name: ci$/name: compare/' profiles/ci.yaml ;;
  kind-ci) sed -e 's/^name: ci$/name: compare/' -e 's/^  provider: k3s$/  provider: kind/' profiles/ci.yaml ;;
  kind-dev) sed -e 's/^name: dev$/name: compare/' -e 's/hostPort: 8080/hostPort: 45662/' -e 's/    merge: true/    merge: false/' profiles/dev.yaml ;;
  *) die "unknown shape \`$1\`: k3s-ci, kind-ci or kind-dev" ;;
  esac >"$work/profile.yaml"
  printf 'images:\n  bundle: %s\n' "$bundle" >>"$work/profile.yaml"
}
declare -A times
for r in $(seq 1 "${BENCH_RUNS:-3}"); do
  for which in before after; do
    bin=$before
    [ "$which" = after ] && bin=$after
    for shape in "${shapes[@]}"; do
      profile "$shape"
      tag=$which-$shape-run$r
      ds() { DEVSTACK_HOME=$work/state CI=1 "$bin" --profile "$work/profile.yaml" "$@"; }
      t0=$(now_ms)
      if ds --json up --timings "$out/$tag.html" >"$out/$tag.json" 2>"$out/$tag.err"; then
        t1=$(now_ms)
        times[$which-$shape]+="$((t1 - t0)) "
        printf '%s %s run %s: %.1f s\n' "$which" "$shape" "$r" "$(((t1 - t0) / 100))e-1"
      else
        printf '%s %s run %s: FAILED: %s\n' "$which" "$shape" "$r" "$(tail -1 "$out/$tag.err")"
      fi
      ds -q down >/dev/null 2>&1
    done
  done
done
for shape in "${shapes[@]}"; do
  for which in before after; do
    m=$(printf '%s\n' ${times[$which-$shape]:-} | median)
    printf 'median %s %s: %s ms\n' "$shape" "$which" "${m:-none}"
  done
done
echo "runs kept in $out"
