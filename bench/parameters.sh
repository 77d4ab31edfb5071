#!/usr/bin/env bash
# SSM parameters and `eso.auth`: cold `up` to a verified round trip of the
# shipped ci profile as it is (one secret, static keys), the same with two
# synced parameters (static keys), and with them in `eso.auth:
# serviceAccount` (IRSA: the role, the web identity token, both stores'
# round trips), interleaved run by run so that the machine's load falls on
# all three alike; each stack's `down` after it. Timed from the shell; each
# row says how many of N runs produced it.
#
#   BENCH_RUNS       runs of each mode (default 3)
#   BENCH_BIN        the devstack binary to time (default: a release build)
#   BENCH_PROVIDERS  which providers, in order (default "k3s"; "k3s kind" for both)
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${BENCH_RUNS:-3}
providers=${BENCH_PROVIDERS:-k3s}
source bench/lib.sh
bench_binary
require_bundle
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# profile MODE PROVIDER NAME: the ci profile for this run, in $work/MODE.yaml.
profile() {
  local mode=$1 provider=$2 name=$3 file=$work/$1.yaml
  sed -e "s/^name: ci$/name: $name/" -e "s/^  provider: k3s$/  provider: $provider/" \
    profiles/ci.yaml >"$file"
  if [ "$mode" != none ]; then
    sed -i 's/^  services: \[secretsmanager, sts, s3\]$/  services: [secretsmanager, sts, s3, ssm, iam]/' "$file"
    cat >>"$file" <<YAML
eso:
  auth: $mode
parameters:
  - {name: /ci/app/db-url, type: SecureString, value: "postgres://db:5432/app", sync: {namespace: default}}
  - {name: /ci/app/hosts, type: StringList, value: [a, b], sync: {namespace: default, secretName: hosts}}
YAML
  fi
  printf '%s' "$file"
}

for provider in $providers; do
  for bench_run in $(seq 1 "$runs"); do
    for mode in none static serviceAccount; do
      name=bench-ssm-$$-$bench_run
      file=$(profile "$mode" "$provider" "$name")
      export DEVSTACK_HOME=$work/state CI=1
      measure "$provider-$mode" "$bin" -p "$file" --bundle "$bundle" -q up --json
      "$bin" -p "$file" -q down >/dev/null 2>&1 || echo "bench: down of $name failed" >&2
    done
  done
  row "$provider: cold up, ci as shipped (no parameters)" "$provider-none" s 1000
  row "$provider: cold up, 2 parameters, eso.auth static" "$provider-static" s 1000
  row "$provider: cold up, 2 parameters, eso.auth serviceAccount" "$provider-serviceAccount" s 1000
  compare "$provider: serviceAccount against static" "$provider-serviceAccount" "$provider-static"
done
