#!/usr/bin/env bash
# Smoke test for the kit's LocalStack image: start it like devstack does
# (published 4566, SERVICES=secretsmanager,sts,s3, a dummy LOCALSTACK_AUTH_TOKEN),
# time start-to-healthy, then exercise Secrets Manager, STS and S3 with boto3
# from the host. Needs python3 with boto3 on the host (the script installs it
# into a throwaway venv from the kit's own wheels if missing). Prints the
# container's warnings and its memory use once the checks ran.
# Usage: smoke-localstack.sh [IMAGE]   (default localstack/localstack:4.14.0)
set -euo pipefail
KIT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KIT_CACHE=${DEVSTACK_KIT_CACHE:-$HOME/.cache/devstack/kit}
IMAGE=${1:-localstack/localstack:4.14.0}
NAME=devstack-kit-smoke-localstack-$$
PORT=${SMOKE_LOCALSTACK_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}

cleanup() { docker rm -f -v "$NAME" >/dev/null 2>&1 || true; }
trap cleanup EXIT

PY=python3
if ! $PY -c 'import boto3' 2>/dev/null; then
  venv="$KIT_CACHE/smoke-venv"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import boto3' 2>/dev/null; then
    python3 -m venv "$venv"
    links=(); for d in "$KIT_CACHE"/src/wheels/localstack-*; do [ -d "$d" ] && links+=(--find-links "$d"); done
    PIP_FIND_LINKS= "$venv/bin/pip" install -q --no-index "${links[@]}" boto3
  fi
  PY="$venv/bin/python"
fi

t0=$(date +%s.%N)
docker run -d --name "$NAME" -p "127.0.0.1:$PORT:4566" \
  -e SERVICES=secretsmanager,sts,s3 -e LOCALSTACK_AUTH_TOKEN=dummy-token \
  "$IMAGE" >/dev/null
healthy=
for _ in $(seq 1 240); do
  if out=$(curl -fsS "http://127.0.0.1:$PORT/_localstack/health" 2>/dev/null) \
     && echo "$out" | jq -e '.services.secretsmanager and .services.sts and .services.s3' >/dev/null; then
    healthy=$(date +%s.%N); break
  fi
  sleep 0.25
done
if [ -z "$healthy" ]; then docker logs "$NAME" | tail -40; echo "FAIL: not healthy"; exit 1; fi
printf 'healthy after %.1fs: %s\n' "$(echo "$healthy - $t0" | bc)" "$(echo "$out" | jq -c '{edition,version,services:(.services|with_entries(select(.value!="disabled")))}')"

ENDPOINT="http://127.0.0.1:$PORT" "$PY" - <<'PY'
import os, boto3
kw = dict(endpoint_url=os.environ["ENDPOINT"], region_name="us-east-1",
          aws_access_key_id="test", aws_secret_access_key="test")
sm = boto3.client("secretsmanager", **kw)
sm.create_secret(Name="devstack/smoke", SecretString='{"a":"1"}')
assert sm.get_secret_value(SecretId="devstack/smoke")["SecretString"] == '{"a":"1"}'
sm.put_secret_value(SecretId="devstack/smoke", SecretString='{"a":"2"}')
assert sm.get_secret_value(SecretId="devstack/smoke")["SecretString"] == '{"a":"2"}'
sm.delete_secret(SecretId="devstack/smoke", ForceDeleteWithoutRecovery=True)
try:
    sm.get_secret_value(SecretId="devstack/smoke")
    raise SystemExit("secret still readable after delete")
except sm.exceptions.ResourceNotFoundException:
    pass
print("secretsmanager ok (create, get, put, delete)")
ident = boto3.client("sts", **kw).get_caller_identity()
assert ident["Account"] == "000000000000", ident
print("sts ok:", ident["Arn"])
s3 = boto3.client("s3", **kw)
s3.create_bucket(Bucket="devstack-smoke")
s3.put_object(Bucket="devstack-smoke", Key="k.txt", Body=b"hello")
assert s3.get_object(Bucket="devstack-smoke", Key="k.txt")["Body"].read() == b"hello"
# what Flux's Bucket source (minio-go, generic provider) does: list, stat, get
assert [o["Key"] for o in s3.list_objects_v2(Bucket="devstack-smoke")["Contents"]] == ["k.txt"]
assert s3.head_object(Bucket="devstack-smoke", Key="k.txt")["ContentLength"] == 5
print("s3 ok (create bucket, put, get, list v2, head)")
PY
state=$(docker inspect -f '{{.State.Health.Status}}' "$NAME" 2>/dev/null || true)
echo "memory: $(docker stats --no-stream --format '{{.MemUsage}}' "$NAME" 2>/dev/null || echo n/a)"
echo "--- container log lines with WARN/ERROR/deprecat/auth token:"
docker logs "$NAME" 2>&1 | grep -iE 'warn|error|deprecat|auth.?token' | head -20 || true
echo "docker health: ${state:-n/a}"
echo "smoke-localstack: 3 passed, 0 failed"
