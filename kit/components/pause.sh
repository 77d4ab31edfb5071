#!/usr/bin/env bash
# Pause (pod sandbox) image: rancher/mirrored-pause:<k3s default>, a static C
# binary compiled here (tests/kit/pause/pause.c) in a scratch image.
# Standalone and idempotent.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$KIT_ROOT/k3s/common.sh"

src="$KIT_ROOT/pause"
stamp=$(stamp_of "$PAUSE_VERSION" "$(cat "$src/pause.c" "$src/Dockerfile" "${BASH_SOURCE[0]}" | sha256sum)" \
  "$(gcc -dumpfullversion)")
if image_stamp_ok "$PAUSE_IMAGE" "$stamp"; then
  log "reuse $PAUSE_IMAGE"
else
  host_packages gcc libc6-dev   # static glibc
  ctx="$KIT_CACHE/build/pause"
  rm -rf "$ctx"; mkdir -p "$ctx"
  log "gcc -static pause.c"
  gcc -Os -static -s -Wall -DVERSION="\"$PAUSE_VERSION\"" -o "$ctx/pause" "$src/pause.c" \
    || die "compiling pause.c failed (static glibc: libc6-dev)"
  cp "$src/Dockerfile" "$ctx/"
  docker_build "$PAUSE_IMAGE" "$stamp" "$ctx"
  rm -rf "$ctx"
fi
bundle_add_image "$PAUSE_IMAGE" "pause-$PAUSE_VERSION" "$PAUSE_VERSION" pause
log "pause: $PAUSE_IMAGE ($(image_size "$PAUSE_IMAGE"))"
