# Shared by the bench scripts: the binary they time, timing from the shell,
# and rows that report only what was measured (`n of N runs`, failures
# listed beside the figure). Source it from the repository root.

now_ms() { date +%s%3N; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
die() {
  echo "bench: $*" >&2
  exit 1
}

# bench_binary: the devstack binary to time, in $bin. BENCH_BIN names one
# (checked to run); otherwise the release build of this checkout, built now,
# so a figure never comes from a stale binary.
# require_bundle: the kit's offline bundle in $bundle, or stop the bench.
require_bundle() {
  bundle=${DEVSTACK_KIT_BUNDLE:-$HOME/.cache/devstack/kit/bundle}
  [ -f "$bundle/index.json" ] || die "no kit bundle at $bundle (run make kit)"
}
bench_binary() {
  if [ -n "${BENCH_BIN:-}" ]; then
    bin=$BENCH_BIN
  else
    cargo build --release --quiet || die "the release build failed"
    bin=${CARGO_TARGET_DIR:-$PWD/target}/release/devstack
  fi
  "$bin" --version >/dev/null 2>&1 || die "no working devstack binary at $bin"
  echo "binary: $bin ($("$bin" --version))"
}

declare -A bench_values bench_attempts bench_failures
bench_run=0 # the run being measured, named beside a failure

# measure FIGURE CMD...: time CMD from the shell (stdout to $work/out.json,
# stderr kept for the failure note). Success adds its milliseconds to
# FIGURE; failure lists the run, exit code and last stderr line beside it.
measure() {
  local figure=$1 t0 t1 rc
  shift
  bench_attempts[$figure]=$((${bench_attempts[$figure]:-0} + 1))
  t0=$(now_ms)
  "$@" >"$work/out.json" 2>"$work/out.err"
  rc=$?
  t1=$(now_ms)
  if [ $rc -eq 0 ]; then
    bench_values[$figure]+="$((t1 - t0)) "
  else
    bench_failures[$figure]+="run $bench_run: exit $rc ($(tail -n 1 "$work/out.err")); "
  fi
  return $rc
}

# missed REASON FIGURE...: these figures had an attempt in this run that
# could not be made (a step before them failed); it counts against them.
missed() {
  local reason=$1 figure
  shift
  for figure in "$@"; do
    bench_attempts[$figure]=$((${bench_attempts[$figure]:-0} + 1))
    bench_failures[$figure]+="run $bench_run: not measured, $reason; "
  done
}

# record FIGURE VALUE: a value read off a measured run (a span of its
# timeline), counted as that run's.
record() {
  bench_attempts[$1]=$((${bench_attempts[$1]:-0} + 1))
  bench_values[$1]+="$2 "
}

# span FILTER [FILE]: a number from a run's `--json` ($work/out.json by
# default). A missing or non-numeric value stops the bench, naming the span:
# a figure never reads an absent value as 0.
span() {
  local value
  value=$(jq -e "$1 | numbers" "${2:-$work/out.json}") ||
    die "no value for \`$1\` in ${2:-$work/out.json} (the report's shape changed?)"
  [ "$(printf '%s\n' "$value" | wc -l)" -eq 1 ] || die "\`$1\` matched more than one value in ${2:-$work/out.json}"
  printf '%s' "$value"
}

# figure_median FIGURE: the median of its values, empty when none.
figure_median() { printf '%s' "${bench_values[$1]:-}" | tr ' ' '\n' | sed '/^$/d' | median; }
figure_count() { printf '%s' "${bench_values[$1]:-}" | wc -w; }

# row LABEL FIGURE [UNIT [SCALE]]: the median (divided by SCALE: 1000 for
# seconds), `n of N runs`, and the failures beside it. UNIT `/s:COUNT`
# prints COUNT divided by the median time in seconds (a rate).
row() {
  local label=$1 figure=$2 unit=${3:-ms} scale=${4:-1} n total m shown
  n=$(figure_count "$figure")
  total=${bench_attempts[$figure]:-0}
  if [ "$n" -eq 0 ]; then
    printf '%-56s %12s  (0 of %s runs)\n' "$label" "-" "$total"
  else
    m=$(figure_median "$figure")
    case $unit in
      /s:*) shown=$(awk -v c="${unit#/s:}" -v m="$m" 'BEGIN {printf "%.1f /s", c * 1000 / m}') ;;
      *) shown=$(awk -v m="$m" -v s="$scale" -v u="$unit" 'BEGIN {printf (s == 1 ? "%.0f %s" : "%.1f %s"), m / s, u}') ;;
    esac
    printf '%-56s %12s  (%s of %s runs)\n' "$label" "$shown" "$n" "$total"
  fi
  [ -z "${bench_failures[$figure]:-}" ] || printf '    failed: %s\n' "${bench_failures[$figure]}"
  return 0
}

# compare LABEL FIGURE BASELINE: FIGURE's median against BASELINE's, when
# both were measured.
compare() {
  local a b
  a=$(figure_median "$2")
  b=$(figure_median "$3")
  if [ -n "$a" ] && [ -n "$b" ]; then
    awk -v a="$a" -v b="$b" -v l="$1" 'BEGIN {printf "%-56s %+11.0f %%\n", l, (a - b) * 100 / b}'
  else
    printf '%-56s %12s  (one side has no run)\n' "$1" "-"
  fi
}

# stack_mem_mib STACK [KIND_CLUSTER]: memory of the stack's own containers
# (devstack's labelled ones and its Kind nodes), in MiB, as `docker stats`
# reports it. No container found stops the bench: `docker stats` without
# names would read every container on the host.
stack_mem_mib() {
  local ids
  ids=$(
    docker ps -q --filter "label=dev.devstack.stack=$1"
    [ -z "${2:-}" ] || docker ps -q --filter "label=io.x-k8s.kind.cluster=$2"
  )
  [ -n "$ids" ] || die "no running container of stack $1 to read memory from"
  # shellcheck disable=SC2086 # one id per word
  docker stats --no-stream --format '{{.MemUsage}}' $(printf '%s\n' $ids | sort -u) | awk '{
    v=$1; u=v; sub(/[0-9.]+/, "", u); sub(/[A-Za-z]+$/, "", v)
    f = (u=="GiB") ? 1024 : (u=="MiB") ? 1 : (u=="KiB") ? 1/1024 : 1/1048576
    t += v*f } END {printf "%.0f", t}'
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
