#!/usr/bin/env bash
# CoreDNS image: exactly the reference k3s's bundled coredns manifest uses
# (rancher/mirrored-coredns-coredns:<v>), built from the github.com/coredns/coredns
# module at that version (its own go.mod as main module, CGO off, as upstream's
# Makefile) into a scratch image shaped like upstream's (nonroot user, CA
# certificates, cap_net_bind_service on the binary). Standalone and idempotent.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$KIT_ROOT/k3s/common.sh"

src="$KIT_ROOT/coredns"
stamp=$(stamp_of "$COREDNS_VERSION" "$COREDNS_COMMIT" "$(cat "$src/Dockerfile" "${BASH_SOURCE[0]}" | sha256sum)" "$(go env GOVERSION)")
if image_stamp_ok "$COREDNS_IMAGE" "$stamp"; then
  log "reuse $COREDNS_IMAGE"
else
  host_packages libcap2-bin ca-certificates   # setcap, CA bundle
  tree="$KIT_CACHE/src/coredns-v$COREDNS_VERSION"
  go_module_src github.com/coredns/coredns "v$COREDNS_VERSION" "$tree"
  ctx="$KIT_CACHE/build/coredns"
  rm -rf "$ctx"; mkdir -p "$ctx"
  log "go build coredns v$COREDNS_VERSION"
  (cd "$tree" && CGO_ENABLED=0 nice -n 5 go build -trimpath -buildvcs=false \
    -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=${COREDNS_COMMIT:0:7}" \
    -o "$ctx/coredns" .) >"$ctx.go.log" 2>&1 || { tail -30 "$ctx.go.log" >&2; die "go build coredns failed"; }
  setcap cap_net_bind_service=+ep "$ctx/coredns"
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ctx/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/group"
  cp "$src/Dockerfile" "$ctx/"
  docker_build "$COREDNS_IMAGE" "$stamp" "$ctx"
  rm -rf "$ctx"
fi
bundle_add_image "$COREDNS_IMAGE" "coredns-$COREDNS_VERSION" "$COREDNS_VERSION" coredns
log "coredns: $COREDNS_IMAGE ($(image_size "$COREDNS_IMAGE"))"
