#!/bin/bash
# Same steps as the official LocalStack 4.x bin/docker-entrypoint.sh.
set -eo pipefail
shopt -s nullglob

if [[ -n $LOCALSTACK_API_KEY || -n $LOCALSTACK_AUTH_TOKEN ]]; then
  echo "NOTE: LOCALSTACK_AUTH_TOKEN/LOCALSTACK_API_KEY is set; this community image ignores it."
fi

# Strip the LOCALSTACK_ prefix from env vars (LOCALSTACK_DEBUG=1 -> DEBUG=1),
# except LOCALSTACK_HOST and LOCALSTACK_HOSTNAME.
source <(
  env |
  grep -v -e '^LOCALSTACK_HOSTNAME' |
  grep -v -e '^LOCALSTACK_HOST' |
  grep -v -e '^LOCALSTACK_[[:digit:]]' |
  sed -ne 's/^LOCALSTACK_\([^=]\+\)=.*/export \1=${LOCALSTACK_\1}/p'
)

LOG_DIR=/var/lib/localstack/logs
test -d ${LOG_DIR} || mkdir -p ${LOG_DIR}

source /opt/code/localstack/.venv/bin/activate

# runtime init hooks, BOOT stage
test -d /etc/localstack/init/boot.d && python3 -m localstack.runtime.init BOOT

# exec (no pipes) so the supervisor gets the signals
exec localstack-supervisor
