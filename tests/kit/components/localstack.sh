#!/usr/bin/env bash
# LocalStack image for the offline kit: localstack/localstack:4.3.0 rebuilt from
# a debootstrapped Debian bookworm rootfs (python3.11 + venv) and the PyPI
# wheels pinned in tests/kit/localstack/requirements.txt (downloaded on the
# host, installed in the image with --no-index). The pins are
# /work/shared/kit/localstack-4.3.0-requirements.txt except psutil 7.0.0
# (7.2 dropped psutil._common.snicaddr, which LocalStack's DNS server imports).
# Standalone and idempotent.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

LOCALSTACK_VERSION=4.3.0
LOCALSTACK_IMAGE=localstack/localstack:$LOCALSTACK_VERSION
LOCALSTACK_BASE=devstack-kit/python:$KIT_DEBIAN_SUITE
CTX_SRC="$KIT_ROOT/localstack"
WHEELS="$KIT_CACHE/src/wheels/localstack-$LOCALSTACK_VERSION"

# 1. rootfs with python3 + venv (curl/procps for init scripts and debugging,
#    as in the official image)
kit_rootfs_image "$LOCALSTACK_BASE" "ca-certificates,python3,python3-venv,curl,procps"

stamp=$(stamp_of "$LOCALSTACK_VERSION" "$(docker image inspect -f '{{.Id}}' "$LOCALSTACK_BASE")" \
  "$(cat "$CTX_SRC/Dockerfile" "$CTX_SRC/docker-entrypoint.sh" "$CTX_SRC/requirements.txt" "${BASH_SOURCE[0]}" | sha256sum)")
if image_exists "$LOCALSTACK_IMAGE" && [ "$(image_label "$LOCALSTACK_IMAGE" dev.devstack.kit.stamp)" = "$stamp" ]; then
  log "reuse $LOCALSTACK_IMAGE"
else
  # 2. wheels on the host (the pins are a full closure; pip wheel also builds
  #    the one sdist, tailer). PIP_FIND_LINKS from the environment is ignored.
  req_sum=$(sha256sum "$CTX_SRC/requirements.txt" | cut -c1-16)
  if [ "$(cat "$WHEELS/.stamp" 2>/dev/null)" != "$req_sum" ]; then
    log "pip wheel -> $WHEELS"
    mkdir -p "$WHEELS"
    PIP_FIND_LINKS= PIP_NO_INDEX= python3 -m pip wheel --no-cache-dir --disable-pip-version-check \
      --find-links "$WHEELS" -r "$CTX_SRC/requirements.txt" -w "$WHEELS" >"$WHEELS.log" 2>&1 \
      || { tail -20 "$WHEELS.log" >&2; die "pip wheel failed (log: $WHEELS.log)"; }
    echo "$req_sum" >"$WHEELS/.stamp"
  fi
  # 3. build context: sources + hard links to the wheels
  ctx="$KIT_CACHE/build/localstack"
  rm -rf "$ctx"; mkdir -p "$ctx/wheels"
  cp "$CTX_SRC/Dockerfile" "$CTX_SRC/docker-entrypoint.sh" "$CTX_SRC/requirements.txt" "$ctx/"
  cp -l "$WHEELS"/*.whl "$ctx/wheels/" 2>/dev/null || cp "$WHEELS"/*.whl "$ctx/wheels/"
  log "docker build $LOCALSTACK_IMAGE"
  DOCKER_BUILDKIT=0 docker build --build-arg "BASE=$LOCALSTACK_BASE" \
    --label "dev.devstack.kit.stamp=$stamp" -t "$LOCALSTACK_IMAGE" "$ctx" >"$ctx.log" 2>&1 \
    || { tail -30 "$ctx.log" >&2; die "docker build failed (log: $ctx.log)"; }
  rm -rf "$ctx"
fi

bundle_add_image "$LOCALSTACK_IMAGE" localstack-$LOCALSTACK_VERSION "$LOCALSTACK_VERSION" localstack
log "localstack: $LOCALSTACK_IMAGE ($(docker image inspect -f '{{.Size}}' "$LOCALSTACK_IMAGE" | numfmt --to=iec))"
