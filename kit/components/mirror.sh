#!/usr/bin/env bash
# Test infrastructure for devstack's "online" tests (tests/online/mirror.sh):
# two images standing in for the upstream hosts devstack downloads from.
#   - devstack-kit/registry:v3.0.0: the reference OCI registry,
#     github.com/distribution/distribution/v3 v3.0.0 cmd/registry (its own
#     go.mod as main module, CGO off, static), config tests/kit/mirror/registry/
#     config.yml (filesystem storage in /var/lib/registry, :5000, deletes on,
#     access log on stdout);
#   - devstack-kit/fileserver:1: tests/kit/mirror/fileserver (stdlib Go), a
#     static file server for /srv on :8080 logging `METHOD PATH STATUS BYTES`.
# Both on the kit's distroless-like static base. Not recorded in the bundle
# index: devstack never consumes them. Standalone and idempotent (stamped).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$KIT_ROOT/k3s/common.sh"
source "$KIT_ROOT/flux/common.sh"   # kit_static_image

MIRROR_REGISTRY_VERSION=${MIRROR_REGISTRY_VERSION:-v3.0.0}
MIRROR_REGISTRY_IMAGE=devstack-kit/registry:$MIRROR_REGISTRY_VERSION
MIRROR_FILESERVER_IMAGE=devstack-kit/fileserver:1
DISTRIBUTION_MODULE=github.com/distribution/distribution/v3

src="$KIT_ROOT/mirror"
kit_static_image
base_id=$(docker image inspect -f '{{.Id}}' "$KIT_STATIC_IMAGE")
gover=$(go env GOVERSION)

# --- registry --------------------------------------------------------------------
stamp=$(stamp_of "$MIRROR_REGISTRY_VERSION" "$base_id" "$gover" \
  "$(cat "$src/registry/Dockerfile" "$src/registry/config.yml" "${BASH_SOURCE[0]}" | sha256sum)")
if image_stamp_ok "$MIRROR_REGISTRY_IMAGE" "$stamp"; then
  log "reuse $MIRROR_REGISTRY_IMAGE"
else
  out="$KIT_CACHE/out/registry-$(stamp_of "$MIRROR_REGISTRY_VERSION" "$gover")"
  if [ ! -x "$out/registry" ]; then
    tree="$KIT_CACHE/src/distribution-$MIRROR_REGISTRY_VERSION"
    go_module_src "$DISTRIBUTION_MODULE" "$MIRROR_REGISTRY_VERSION" "$tree"
    mkdir -p "$out"
    log "go build registry $MIRROR_REGISTRY_VERSION (log $out.log)"
    # The ldflags of upstream's Dockerfile (version without the v).
    (cd "$tree" && CGO_ENABLED=0 nice -n 5 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X $DISTRIBUTION_MODULE/version.version=${MIRROR_REGISTRY_VERSION#v} -X $DISTRIBUTION_MODULE/version.mainpkg=$DISTRIBUTION_MODULE" \
      -o "$out/registry.tmp" ./cmd/registry) >"$out.log" 2>&1 \
      || { tail -30 "$out.log" >&2; die "go build registry failed (log: $out.log)"; }
    mv "$out/registry.tmp" "$out/registry"
  fi
  "$out/registry" --version | grep -q "${MIRROR_REGISTRY_VERSION#v}" || die "registry binary does not say ${MIRROR_REGISTRY_VERSION#v}"
  ctx="$KIT_CACHE/build/mirror-registry"
  rm -rf "$ctx"; mkdir -p "$ctx"
  cp "$out/registry" "$src/registry/Dockerfile" "$src/registry/config.yml" "$ctx/"
  docker_build "$MIRROR_REGISTRY_IMAGE" "$stamp" "$ctx" --build-arg "BASE=$KIT_STATIC_IMAGE"
  rm -rf "$ctx"
fi
log "registry: $MIRROR_REGISTRY_IMAGE ($(image_size "$MIRROR_REGISTRY_IMAGE"))"

# --- file server -----------------------------------------------------------------
stamp=$(stamp_of fileserver "$base_id" "$gover" \
  "$(cat "$src/fileserver/main.go" "$src/fileserver/go.mod" "$src/fileserver/Dockerfile" "${BASH_SOURCE[0]}" | sha256sum)")
if image_stamp_ok "$MIRROR_FILESERVER_IMAGE" "$stamp"; then
  log "reuse $MIRROR_FILESERVER_IMAGE"
else
  ctx="$KIT_CACHE/build/mirror-fileserver"
  rm -rf "$ctx"; mkdir -p "$ctx"
  log "go build fileserver"
  (cd "$src/fileserver" && CGO_ENABLED=0 GOFLAGS= go build -trimpath -buildvcs=false -ldflags "-s -w" \
    -o "$ctx/fileserver" .) >"$ctx.go.log" 2>&1 || { cat "$ctx.go.log" >&2; die "go build fileserver failed"; }
  cp "$src/fileserver/Dockerfile" "$ctx/"
  docker_build "$MIRROR_FILESERVER_IMAGE" "$stamp" "$ctx" --build-arg "BASE=$KIT_STATIC_IMAGE"
  rm -rf "$ctx"
fi
log "fileserver: $MIRROR_FILESERVER_IMAGE ($(image_size "$MIRROR_FILESERVER_IMAGE"))"
