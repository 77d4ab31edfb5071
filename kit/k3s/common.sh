# Helpers shared by components/{k3s,pause,coredns}.sh. Source after lib.sh.
# shellcheck shell=bash
source "$KIT_ROOT/k3s/versions.sh"

export PATH=$PATH:/usr/local/go/bin
export GOTOOLCHAIN=local
# Tags of k3s-io modules are not in the checksum database the proxy serves;
# k3s's own go.sum still pins everything it builds.
export GONOSUMDB=${GONOSUMDB:-github.com/k3s-io}
command -v go >/dev/null || die "go not found (expected /usr/local/go/bin)"

# host_packages PKG...: Debian build dependencies on the host (apt-get
# install when missing; the machine is root with Debian's mirror reachable).
host_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" \
    || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"; }; } >/dev/null 2>&1 \
    || die "cannot install ${missing[*]} (needs root and Debian's mirror)"
}

# image_stamp_ok IMAGE STAMP: the image exists and was built from STAMP
# (KIT_FORCE=1: never, so the image is rebuilt; build outputs cached in
# KIT_CACHE are still reused: point DEVSTACK_KIT_CACHE elsewhere for a cold build).
image_stamp_ok() {
  [ "${KIT_FORCE:-}" != 1 ] && kit_image_current "$1" "$2"
}

# go_module_src MODULE VERSION DEST: the module's source (from the Go module
# proxy, via GOMODCACHE) as a writable main-module tree in DEST, so its own
# go.mod with its replace directives drives the build. Reused while present.
go_module_src() {
  local mod=$1 ver=$2 dest=$3 dir
  if [ -f "$dest/.kit-src" ] && [ "$(cat "$dest/.kit-src")" = "$mod@$ver" ]; then
    return 0
  fi
  log "go mod download $mod@$ver"
  dir=$(cd /tmp && go mod download -json "$mod@$ver" | jq -r '.Dir // empty') || true
  [ -n "$dir" ] && [ -d "$dir" ] || die "cannot download $mod@$ver from the Go module proxy"
  rm -rf "$dest"; mkdir -p "$(dirname "$dest")"
  cp -r "$dir" "$dest"; chmod -R u+w "$dest"
  echo "$mod@$ver" >"$dest/.kit-src"
}

# docker_build IMAGE STAMP CONTEXT [docker build args...]
docker_build() {
  local image=$1 stamp=$2 ctx=$3; shift 3
  log "docker build $image"
  DOCKER_BUILDKIT=0 docker build --label "dev.devstack.kit.stamp=$stamp" "$@" \
    -t "$image" "$ctx" >"$ctx.log" 2>&1 \
    || { tail -30 "$ctx.log" >&2; die "docker build $image failed (log: $ctx.log)"; }
}

image_size() { docker image inspect -f '{{.Size}}' "$1" | numfmt --to=iec; }
