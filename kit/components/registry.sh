#!/usr/bin/env bash
# The stack registry's image (`registry.enabled` in a profile): `registry:3.0.0`,
# the upstream reference devstack pins (src/versions.rs), rebuilt from
# github.com/distribution/distribution/v3 v3.0.0 cmd/registry as mirror.sh
# builds it (same binary, same cache directory under out/), in the layout of
# upstream's image (kit/registry/). Recorded in the bundle (role `registry`),
# so an offline `up` loads it from there. Standalone and idempotent (stamped).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$KIT_ROOT/k3s/common.sh"
source "$KIT_ROOT/flux/common.sh"   # kit_static_image

REGISTRY_VERSION=3.0.0
REGISTRY_IMAGE=registry:$REGISTRY_VERSION
DISTRIBUTION_MODULE=github.com/distribution/distribution/v3

src="$KIT_ROOT/registry"
kit_static_image
base_id=$(docker image inspect -f '{{.Id}}' "$KIT_STATIC_IMAGE")
gover=$(go env GOVERSION)

stamp=$(stamp_of "$REGISTRY_VERSION" "$base_id" "$gover" \
  "$(cat "$src/Dockerfile" "$src/config.yml" "${BASH_SOURCE[0]}" | sha256sum)")
if image_stamp_ok "$REGISTRY_IMAGE" "$stamp"; then
  log "reuse $REGISTRY_IMAGE"
else
  # mirror.sh's output directory for the same version and Go: one build serves both.
  out="$KIT_CACHE/out/registry-$(stamp_of "v$REGISTRY_VERSION" "$gover")"
  if [ ! -x "$out/registry" ]; then
    tree="$KIT_CACHE/src/distribution-v$REGISTRY_VERSION"
    go_module_src "$DISTRIBUTION_MODULE" "v$REGISTRY_VERSION" "$tree"
    mkdir -p "$out"
    log "go build registry v$REGISTRY_VERSION (log $out.log)"
    (cd "$tree" && CGO_ENABLED=0 nice -n 5 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X $DISTRIBUTION_MODULE/version.version=$REGISTRY_VERSION -X $DISTRIBUTION_MODULE/version.mainpkg=$DISTRIBUTION_MODULE" \
      -o "$out/registry.tmp" ./cmd/registry) >"$out.log" 2>&1 \
      || { tail -30 "$out.log" >&2; die "go build registry failed (log: $out.log)"; }
    mv "$out/registry.tmp" "$out/registry"
  fi
  "$out/registry" --version | grep -q "$REGISTRY_VERSION" || die "registry binary does not say $REGISTRY_VERSION"
  ctx="$KIT_CACHE/build/registry"
  rm -rf "$ctx"; mkdir -p "$ctx"
  cp "$out/registry" "$src/Dockerfile" "$src/config.yml" "$ctx/"
  docker_build "$REGISTRY_IMAGE" "$stamp" "$ctx" --build-arg "BASE=$KIT_STATIC_IMAGE"
  rm -rf "$ctx"
fi
bundle_add_image "$REGISTRY_IMAGE" "registry-$REGISTRY_VERSION" "$REGISTRY_VERSION" registry
log "registry: $REGISTRY_IMAGE ($(image_size "$REGISTRY_IMAGE"))"
