#!/usr/bin/env bash
# LocalStack images for the offline kit: localstack/localstack:<version> rebuilt
# from a debootstrapped Debian rootfs (python3 + venv: bookworm 3.11 or trixie 3.13) and the PyPI
# wheels pinned in tests/kit/localstack/requirements-<version>.txt (downloaded
# on the host, installed in the image with --no-index). Standalone and idempotent.
#
# Several versions side by side (LOCALSTACK_VERSIONS): the current default and
# the previous one, for upgrade-path tests.
#   4.3.0   pins = /work/shared/kit/localstack-4.3.0-requirements.txt except psutil
#           7.0.0 (7.2 dropped psutil._common.snicaddr, which 4.3.0's DNS server imports).
#   4.14.0  the last release usable without an auth token (later `latest` images and
#           the 2026.x calendar versions require LOCALSTACK_AUTH_TOKEN). Needs Python
#           >= 3.12 although its metadata says >= 3.10 (localstack/services/stores.py
#           uses PEP 695 generics: `class RegionBundle[BaseStoreType](dict)`), so it sits
#           on Debian trixie's python3.13 (the official image runs 3.13 too); its wheels
#           are fetched for CPython 3.13 manylinux x86_64 (`pip download --only-binary`),
#           the host's python being older. Pins: PyPI as of its release day (see the
#           header of requirements-4.14.0.txt; the newest versions break it), the same
#           subset as the 4.3.0 pins: base-runtime plus moto, without the runtime
#           extra's Java/ANTLR/OpenSearch/... services devstack does not use.
# LOCALSTACK_VERSION=X builds just that one.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

LOCALSTACK_VERSIONS=${LOCALSTACK_VERSIONS:-4.3.0 4.14.0}
CTX_SRC="$KIT_ROOT/localstack"
# Several versions share the bundle: index entries are per version.
# shellcheck disable=SC2034  # read by bundle_record (lib.sh)
BUNDLE_BY_VERSION=1

if [ -z "${LOCALSTACK_VERSION:-}" ]; then
  for v in $LOCALSTACK_VERSIONS; do
    log "localstack $v"
    LOCALSTACK_VERSION=$v bash "${BASH_SOURCE[0]}" || die "localstack $v failed"
  done
  # shellcheck disable=SC2086
  bundle_prune_versions image localstack/localstack $LOCALSTACK_VERSIONS
  exit 0
fi

LOCALSTACK_IMAGE=localstack/localstack:$LOCALSTACK_VERSION
# Debian suite of the image's rootfs and its python3 (for wheels built elsewhere)
case $LOCALSTACK_VERSION in
  4.3.0) LS_SUITE=bookworm; LS_PYTHON=3.11 ;;
  *)     LS_SUITE=trixie;   LS_PYTHON=3.13 ;;
esac
LOCALSTACK_BASE=devstack-kit/python:$LS_SUITE
REQS="$CTX_SRC/requirements-$LOCALSTACK_VERSION.txt"
[ -f "$REQS" ] || die "no pins for LocalStack $LOCALSTACK_VERSION ($REQS)"
WHEELS="$KIT_CACHE/src/wheels/localstack-$LOCALSTACK_VERSION"

# 1. rootfs with python3 + venv (curl/procps for init scripts and debugging,
#    as in the official image)
KIT_DEBIAN_SUITE=$LS_SUITE kit_rootfs_image "$LOCALSTACK_BASE" "ca-certificates,python3,python3-venv,curl,procps"
docker run --rm "$LOCALSTACK_BASE" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' \
  | grep -qxF "$LS_PYTHON" || die "$LOCALSTACK_BASE does not have python $LS_PYTHON"

stamp=$(stamp_of "$LOCALSTACK_VERSION" "$(docker image inspect -f '{{.Id}}' "$LOCALSTACK_BASE")" \
  "$(cat "$CTX_SRC/Dockerfile" "$CTX_SRC/docker-entrypoint.sh" "$REQS" "${BASH_SOURCE[0]}" | sha256sum)")
if kit_image_current "$LOCALSTACK_IMAGE" "$stamp"; then
  log "reuse $LOCALSTACK_IMAGE"
else
  # 2. wheels on the host (the pins are a full closure; pip wheel also builds
  #    any sdist among them). PIP_FIND_LINKS from the environment is ignored.
  req_sum=$(sha256sum "$REQS" | cut -c1-16)
  if [ "$(cat "$WHEELS/.stamp" 2>/dev/null)" != "$req_sum" ]; then
    log "pip wheel -> $WHEELS"
    mkdir -p "$WHEELS"
    t0=$SECONDS
    host_py=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if [ "$host_py" = "$LS_PYTHON" ]; then
      PIP_FIND_LINKS= PIP_NO_INDEX= python3 -m pip wheel --no-cache-dir --disable-pip-version-check \
        --find-links "$WHEELS" -r "$REQS" -w "$WHEELS" >"$WHEELS.log" 2>&1 \
        || { tail -20 "$WHEELS.log" >&2; die "pip wheel failed (log: $WHEELS.log)"; }
    else
      # another interpreter than the host's: binary wheels for it only (the pins
      # are a full closure, so --no-deps)
      plat=(); for p in manylinux_2_39 manylinux_2_28 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1; do
        plat+=(--platform "${p}_x86_64"); done
      PIP_FIND_LINKS= PIP_NO_INDEX= python3 -m pip download --no-cache-dir --disable-pip-version-check \
        --no-deps --only-binary=:all: --python-version "$LS_PYTHON" --implementation cp \
        --abi "cp${LS_PYTHON/./}" --abi abi3 --abi none "${plat[@]}" \
        --find-links "$WHEELS" -r "$REQS" -d "$WHEELS" >"$WHEELS.log" 2>&1 \
        || { tail -20 "$WHEELS.log" >&2; die "pip download failed (log: $WHEELS.log)"; }
    fi
    echo "$req_sum" >"$WHEELS/.stamp"
    log "pip wheel: $((SECONDS - t0))s"
  fi
  # 3. build context: sources + hard links to the wheels the pins name (the
  #    wheel dir may also hold wheels of earlier pins)
  ctx="$KIT_CACHE/build/localstack-$LOCALSTACK_VERSION"
  rm -rf "$ctx"; mkdir -p "$ctx/wheels"
  cp "$CTX_SRC/Dockerfile" "$CTX_SRC/docker-entrypoint.sh" "$ctx/"
  cp "$REQS" "$ctx/requirements.txt"
  cp -l "$WHEELS"/*.whl "$ctx/wheels/" 2>/dev/null || cp "$WHEELS"/*.whl "$ctx/wheels/"
  log "docker build $LOCALSTACK_IMAGE"
  t0=$SECONDS
  DOCKER_BUILDKIT=0 docker build --build-arg "BASE=$LOCALSTACK_BASE" \
    --build-arg "LOCALSTACK_VERSION=$LOCALSTACK_VERSION" \
    --label "dev.devstack.kit.stamp=$stamp" -t "$LOCALSTACK_IMAGE" "$ctx" >"$ctx.log" 2>&1 \
    || { tail -30 "$ctx.log" >&2; die "docker build failed (log: $ctx.log)"; }
  log "docker build: $((SECONDS - t0))s"
  rm -rf "$ctx"
fi

bundle_add_image "$LOCALSTACK_IMAGE" "localstack-$LOCALSTACK_VERSION" "$LOCALSTACK_VERSION" localstack
log "localstack: $LOCALSTACK_IMAGE ($(docker image inspect -f '{{.Size}}' "$LOCALSTACK_IMAGE" | numfmt --to=iec))"
