#!/usr/bin/env bash
# Test infrastructure for the "engines" test group (tests/engines/engine.sh):
# a current Docker engine, built from the Go module proxy only, that the
# harness runs as a second dockerd beside the machine's engine.
#   - dockerd, docker-proxy: ENGINE_DOCKER_VERSION, one of
#       v28.5.2 (default): github.com/docker/docker v28.5.2+incompatible. That
#         module has no go.mod (moby builds it in GOPATH mode from vendor/, and
#         the module zip holds only vendor/modules.txt); its vendor.mod and
#         vendor.sum become go.mod and go.sum in a copy of the tree, which then
#         builds in module mode;
#       v29.8.0: github.com/moby/moby/v2 v2.0.0-beta.24, Docker 29's engine
#         module (its own go.mod; its releases/versions.yaml says last 29.8.0,
#         its Dockerfile pins CLI v29.8.0, containerd v2.3.5, runc v1.5.1).
#     Static, CGO off, the tags of moby's hack/make.sh (netgo osusergo
#     static_build; nri_no_wasm for 29) plus exclude_graphdriver_btrfs (the
#     btrfs driver is cgo); version through dockerversion's -X flags.
#   - containerd, containerd-shim-runc-v2, ctr: github.com/containerd/containerd/v2
#     (its own go.mod), static, CGO off, upstream Makefile's tags (no_btrfs:
#     the btrfs snapshotter is cgo; no_grpc for the shim).
#   - runc: github.com/opencontainers/runc, cgo (nsenter), static-pie, with
#     seccomp (Debian's libseccomp-dev) and without libpathrs (a Rust library
#     no Debian bookworm package provides; optional since runc 1.5).
# Binaries in $KIT_CACHE/out/engine-<stamp>/ (a warm run only checks them);
# the directory is the script's only line on stdout. Not recorded in the
# bundle index: devstack never consumes it. Standalone and idempotent.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$KIT_ROOT/k3s/common.sh"   # go_module_src, host_packages, Go on PATH

# Newest versions the proxy serves (2026-12): github.com/docker/docker stops
# at v28.5.2+incompatible (v29.0.0+incompatible: 403; Docker 29 moved to
# github.com/moby/moby/v2, served up to v2.0.0-beta.24, beta.25+ 403);
# containerd v2.4.2 and runc v1.5.3 (v1.6.0-rc.1 is a release candidate).
ENGINE_DOCKER_VERSION=${ENGINE_DOCKER_VERSION:-v28.5.2}
ENGINE_CONTAINERD_VERSION=${ENGINE_CONTAINERD_VERSION:-v2.4.2}
ENGINE_RUNC_VERSION=${ENGINE_RUNC_VERSION:-v1.5.3}
case $ENGINE_DOCKER_VERSION in
  v28.5.2)
    DOCKER_MODULE=github.com/docker/docker DOCKER_MODULE_VERSION=$ENGINE_DOCKER_VERSION+incompatible
    DOCKER_TAGS="netgo osusergo static_build exclude_graphdriver_btrfs" ;;
  v29.8.0)
    DOCKER_MODULE=github.com/moby/moby/v2 DOCKER_MODULE_VERSION=v2.0.0-beta.24
    DOCKER_TAGS="netgo osusergo static_build nri_no_wasm exclude_graphdriver_btrfs" ;;
  *) die "ENGINE_DOCKER_VERSION: v28.5.2 or v29.8.0, not $ENGINE_DOCKER_VERSION" ;;
esac
CONTAINERD_MODULE=github.com/containerd/containerd/v2
RUNC_MODULE=github.com/opencontainers/runc
BINARIES="dockerd docker-proxy containerd containerd-shim-runc-v2 ctr runc"

gover=$(go env GOVERSION)
stamp=$(stamp_of engine "$ENGINE_DOCKER_VERSION" "$ENGINE_CONTAINERD_VERSION" "$ENGINE_RUNC_VERSION" \
  "$gover" "$(sha256sum <"${BASH_SOURCE[0]}")")
out="$KIT_CACHE/out/engine-$stamp"

# build NAME LOG COMMAND...: runs COMMAND (in the current directory) at low
# priority, its output in LOG; dies with LOG's tail.
build() {
  local name=$1 blog=$2; shift 2
  log "go build $name (log $blog)"
  nice -n 10 "$@" >>"$blog" 2>&1 || { tail -30 "$blog" >&2; die "go build $name failed (log: $blog)"; }
}

if [ -f "$out/.done" ]; then
  log "reuse $out"
else
  host_packages gcc libc6-dev pkg-config libseccomp-dev
  tmp="$out.tmp"
  rm -rf "$tmp"; mkdir -p "$tmp"
  blog="$out.log"; : >"$blog"
  start=$(date +%s)

  # --- dockerd, docker-proxy -----------------------------------------------------
  tree="$KIT_CACHE/src/docker-$ENGINE_DOCKER_VERSION"
  go_module_src "$DOCKER_MODULE" "$DOCKER_MODULE_VERSION" "$tree"
  if [ ! -f "$tree/go.mod" ]; then
    # vendor/ holds only modules.txt (a module zip leaves vendored code out).
    rm -rf "$tree/vendor"
    cp "$tree/vendor.mod" "$tree/go.mod"
    cp "$tree/vendor.sum" "$tree/go.sum"
  fi
  info="$GOMODCACHE/cache/download/$DOCKER_MODULE/@v/$DOCKER_MODULE_VERSION.info"
  built=$(jq -r '.Time // empty' "$info" 2>/dev/null || true)
  dv=$DOCKER_MODULE/dockerversion
  (
    cd "$tree" || exit 1
    log "go mod download ($DOCKER_MODULE $DOCKER_MODULE_VERSION)"
    nice -n 10 go mod download >>"$blog" 2>&1 || { tail -30 "$blog" >&2; die "go mod download failed for docker"; }
    for cmd in dockerd docker-proxy; do
      build "$cmd" "$blog" env CGO_ENABLED=0 go build -mod=mod -trimpath -buildvcs=false -tags "$DOCKER_TAGS" \
        -ldflags "-w -s -X $dv.Version=${ENGINE_DOCKER_VERSION#v} -X $dv.GitCommit=$DOCKER_MODULE_VERSION -X $dv.BuildTime=$built" \
        -o "$tmp/$cmd" "./cmd/$cmd"
    done
  )

  # --- containerd, containerd-shim-runc-v2, ctr --------------------------------------
  tree="$KIT_CACHE/src/containerd-$ENGINE_CONTAINERD_VERSION"
  go_module_src "$CONTAINERD_MODULE" "$ENGINE_CONTAINERD_VERSION" "$tree"
  cv=$CONTAINERD_MODULE/version
  # Revision is a git commit upstream; docker info shows it as "containerd version".
  ldf="-s -w -X $cv.Version=$ENGINE_CONTAINERD_VERSION -X $cv.Revision=$ENGINE_CONTAINERD_VERSION -X $cv.Package=github.com/containerd/containerd"
  (
    cd "$tree" || exit 1
    build "containerd, ctr" "$blog" env CGO_ENABLED=0 go build -mod=mod -trimpath -buildvcs=false \
      -tags "urfave_cli_no_docs osusergo netgo static_build no_btrfs" -ldflags "$ldf" \
      -o "$tmp/" ./cmd/containerd ./cmd/ctr
    build containerd-shim-runc-v2 "$blog" env CGO_ENABLED=0 go build -mod=mod -trimpath -buildvcs=false \
      -tags "urfave_cli_no_docs osusergo netgo static_build no_grpc" -ldflags "$ldf" \
      -o "$tmp/containerd-shim-runc-v2" ./cmd/containerd-shim-runc-v2
  )

  # --- runc ---------------------------------------------------------------------------
  tree="$KIT_CACHE/src/runc-$ENGINE_RUNC_VERSION"
  go_module_src "$RUNC_MODULE" "$ENGINE_RUNC_VERSION" "$tree"
  (
    cd "$tree" || exit 1
    # Upstream Makefile's `static` target, minus the libpathrs tag.
    build runc "$blog" env CGO_ENABLED=1 go build -mod=mod -trimpath -buildvcs=false -buildmode=pie \
      -tags "seccomp urfave_cli_no_docs netgo osusergo" \
      -ldflags "-X main.gitCommit=$ENGINE_RUNC_VERSION -linkmode external -extldflags -static-pie" \
      -o "$tmp/runc" .
  )

  for b in $BINARIES; do [ -x "$tmp/$b" ] || die "missing $b after the build"; done
  touch "$tmp/.done"
  rm -rf "$out"; mv "$tmp" "$out"
  log "engine built in $(( $(date +%s) - start ))s -> $out"
fi

"$out/dockerd" --version | grep -q "version ${ENGINE_DOCKER_VERSION#v}," \
  || die "dockerd does not say ${ENGINE_DOCKER_VERSION#v}: $("$out/dockerd" --version)"
log "dockerd: $("$out/dockerd" --version)"
log "docker-proxy: $("$out/docker-proxy" --version)"
log "containerd: $("$out/containerd" --version)"
log "containerd-shim-runc-v2: $("$out/containerd-shim-runc-v2" -v | tr '\n' ' ')"
log "ctr: $("$out/ctr" --version)"
log "runc: $("$out/runc" --version | tr '\n' ' ')"
echo "$out"
