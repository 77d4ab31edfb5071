#!/usr/bin/env bash
# Test infrastructure for devstack's cluster tests of `gitops.source: git`
# (tests/cluster/gitops_git.rs): devstack-kit/gitserver:1, a git server
# speaking git's smart HTTP protocol. gitserver/main.go (stdlib Go, own
# go.mod) runs `git http-backend` through net/http/cgi for the bare
# repositories in /srv/git on :8080, pushes allowed, a first push creating
# its repository; on a debootstrapped Debian rootfs with git. Not recorded
# in the bundle index: devstack never consumes it. Standalone and
# idempotent (stamped).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$KIT_ROOT/k3s/common.sh"   # image_stamp_ok, docker_build, image_size

GITSERVER_IMAGE=devstack-kit/gitserver:1
GITSERVER_BASE=devstack-kit/git:$KIT_DEBIAN_SUITE

src="$KIT_ROOT/gitserver"
kit_rootfs_image "$GITSERVER_BASE" "ca-certificates,git"
base_id=$(docker image inspect -f '{{.Id}}' "$GITSERVER_BASE")
gover=$(go env GOVERSION)

stamp=$(stamp_of gitserver "$base_id" "$gover" \
  "$(cat "$src/main.go" "$src/go.mod" "$src/Dockerfile" "${BASH_SOURCE[0]}" | sha256sum)")
if image_stamp_ok "$GITSERVER_IMAGE" "$stamp"; then
  log "reuse $GITSERVER_IMAGE"
else
  ctx="$KIT_CACHE/build/gitserver"
  rm -rf "$ctx"; mkdir -p "$ctx"
  log "go build gitserver"
  (cd "$src" && CGO_ENABLED=0 GOFLAGS= go build -trimpath -buildvcs=false -ldflags "-s -w" \
    -o "$ctx/gitserver" .) >"$ctx.go.log" 2>&1 || { cat "$ctx.go.log" >&2; die "go build gitserver failed"; }
  cp "$src/Dockerfile" "$ctx/"
  docker_build "$GITSERVER_IMAGE" "$stamp" "$ctx" --build-arg "BASE=$GITSERVER_BASE"
  rm -rf "$ctx"
fi
docker run --rm --entrypoint git "$GITSERVER_IMAGE" --version >/dev/null \
  || die "$GITSERVER_IMAGE has no working git"
log "gitserver: $GITSERVER_IMAGE ($(image_size "$GITSERVER_IMAGE"))"
