#!/usr/bin/env bash
# K3s node image: rancher/k3s:<k3s version, + -> ->, built offline.
#   - k3s multicall binary: `go build ./cmd/server` in the github.com/k3s-io/k3s
#     module tree (main module, so its replace directives apply; the generated
#     bindata for manifests/charts ships in the module), CGO on for sqlite
#     (kine) and seccomp, upstream's tags and version ldflags;
#   - containerd-shim-runc-v2 and runc from the containerd/runc versions k3s's
#     go.mod replaces them with;
#   - CNI plugins: tests/kit/k3s/cni (flannel meta-plugin + standard plugins);
#   - Debian userland debootstrapped (K3S_NODE_PACKAGES).
# Each stage is cached by a stamp of its inputs; a warm run only inspects.
# Standalone and idempotent.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$KIT_ROOT/k3s/common.sh"

K3S_MOD=github.com/k3s-io/k3s
K3S_TAGS="ctrd apparmor seccomp netcgo osusergo providerless urfave_cli_no_docs libsqlite3"
NODE_BASE=devstack-kit/k3s-node-base:$KIT_DEBIAN_SUITE
# Bump when the build commands below change (editing other parts of this
# script must not throw away a 30-minute k3s build).
K3S_BUILD_REV=3
go_version=$(go env GOVERSION)

# --- 1. Debian userland ------------------------------------------------------
kit_rootfs_image "$NODE_BASE" "$K3S_NODE_PACKAGES"
base_id=$(docker image inspect -f '{{.Id}}' "$NODE_BASE")

# --- stamps: binaries, CNI plugins, image -----------------------------------
bin_stamp=$(stamp_of "$K3S_VERSION" "$K3S_MODULE_VERSION" "$K3S_COMMIT" "$K3S_COMMIT_DATE" "$K3S_TAGS" "$go_version" "$K3S_BUILD_REV")
cni_src="$KIT_ROOT/k3s/cni"
cni_stamp=$(stamp_of "$go_version" "$(cat "$cni_src/go.mod" "$cni_src/go.sum" "$cni_src"/flannel/*.go | sha256sum)")
img_stamp=$(stamp_of "$bin_stamp" "$cni_stamp" "$base_id" "$(cat "$KIT_ROOT/k3s/Dockerfile" "$KIT_ROOT/k3s/"*-wrapper.sh "${BASH_SOURCE[0]}" | sha256sum)")

if image_stamp_ok "$K3S_IMAGE" "$img_stamp"; then
  log "reuse $K3S_IMAGE"
else
  out="$KIT_CACHE/out/k3s-$bin_stamp"
  # --- 2. k3s, shim, runc ----------------------------------------------------
  if [ ! -f "$out/.done" ]; then
    # cgo: kine's sqlite (libsqlite3), runc's seccomp (libseccomp)
    host_packages gcc libc6-dev pkg-config libsqlite3-dev libseccomp-dev
    tree="$KIT_CACHE/src/k3s-$K3S_MODULE_VERSION"
    go_module_src "$K3S_MOD" "$K3S_MODULE_VERSION" "$tree"
    # The images this k3s references by default must be the ones the kit builds.
    grep -q "DefaultPauseImage *= \"$PAUSE_IMAGE\"" "$tree/pkg/cli/cmds/const_linux.go" \
      || die "k3s $K3S_VERSION's default pause image is not $PAUSE_IMAGE: update tests/kit/k3s/versions.sh"
    grep -q "rancher/mirrored-coredns-coredns:$COREDNS_VERSION\"" "$tree/manifests/coredns.yaml" \
      || die "k3s $K3S_VERSION's coredns manifest does not use $COREDNS_IMAGE: update tests/kit/k3s/versions.sh"
    rm -rf "$out"; mkdir -p "$out/bin"
    commit=$K3S_COMMIT build_date=$K3S_COMMIT_DATE
    modver() { (cd "$tree" && go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' "$1"); }
    modpath() { (cd "$tree" && go list -m -f '{{if .Replace}}{{.Replace.Path}}{{else}}{{.Path}}{{end}}' "$1"); }
    v_containerd=$(modver github.com/containerd/containerd)
    p_containerd=$(modpath github.com/containerd/containerd)
    v_crictl=$(modver sigs.k8s.io/cri-tools)
    v_runc=$(modver github.com/opencontainers/runc)
    p_runc=$(modpath github.com/opencontainers/runc)
    v_kuberouter=$(modver github.com/cloudnativelabs/kube-router/v2)
    ldflags="-w -s
      -X $K3S_MOD/pkg/version.Version=$K3S_VERSION
      -X $K3S_MOD/pkg/version.GitCommit=${commit:0:8}
      -X $K3S_MOD/pkg/version.UpstreamGolang=$go_version
      -X k8s.io/client-go/pkg/version.gitVersion=$K3S_VERSION
      -X k8s.io/client-go/pkg/version.gitCommit=$commit
      -X k8s.io/client-go/pkg/version.gitTreeState=clean
      -X k8s.io/client-go/pkg/version.buildDate=$build_date
      -X k8s.io/component-base/version.gitVersion=$K3S_VERSION
      -X k8s.io/component-base/version.gitCommit=$commit
      -X k8s.io/component-base/version.gitTreeState=clean
      -X k8s.io/component-base/version.buildDate=$build_date
      -X sigs.k8s.io/cri-tools/pkg/version.Version=$v_crictl
      -X github.com/containerd/containerd/version.Version=$v_containerd
      -X github.com/containerd/containerd/version.Package=$p_containerd
      -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$v_kuberouter
      -X github.com/cloudnativelabs/kube-router/v2/pkg/version.BuildDate=$build_date
      -X go.etcd.io/etcd/api/v3/version.GitSHA=HEAD"
    log "go build k3s $K3S_VERSION (cold: ~30 min on 2 cores; log $out.log)"
    (cd "$tree" && CGO_ENABLED=1 nice -n 5 go build -tags "$K3S_TAGS" -buildvcs=false \
      -ldflags "$ldflags" -o "$out/bin/k3s" ./cmd/server) >"$out.log" 2>&1 \
      || { tail -30 "$out.log" >&2; die "go build k3s failed (log: $out.log)"; }
    # containerd's shim and runc are built as their own main modules (as
    # upstream does): the sources of the replacements k3s's go.mod names,
    # already in GOMODCACHE from the k3s build.
    own_tree() { # MODPATH VERSION -> prints a writable tree
      local t="$KIT_CACHE/src/$(basename "$1")-$2"
      if [ "$(cat "$t/.kit-src" 2>/dev/null)" != "$1@$2" ]; then
        rm -rf "$t"; cp -r "$GOMODCACHE/$1@$2" "$t"; chmod -R u+w "$t"; echo "$1@$2" >"$t/.kit-src"
      fi
      echo "$t"
    }
    log "go build containerd-shim-runc-v2 ($p_containerd $v_containerd)"
    shim_tree=$(own_tree "$p_containerd" "$v_containerd")
    (cd "$shim_tree" && CGO_ENABLED=0 nice -n 5 go build -trimpath -buildvcs=false -tags "apparmor seccomp osusergo netgo" \
      -ldflags "-w -s -X github.com/containerd/containerd/version.Version=$v_containerd -X github.com/containerd/containerd/version.Package=$p_containerd" \
      -o "$out/bin/containerd-shim-runc-v2" ./cmd/containerd-shim-runc-v2) >>"$out.log" 2>&1 \
      || { tail -30 "$out.log" >&2; die "go build containerd-shim-runc-v2 failed (log: $out.log)"; }
    log "go build runc ($p_runc $v_runc)"
    runc_tree=$(own_tree "$p_runc" "$v_runc")
    (cd "$runc_tree" && CGO_ENABLED=1 nice -n 5 go build -trimpath -buildvcs=false -tags "seccomp apparmor" \
      -ldflags "-w -s -X main.version=${v_runc#v} -X main.gitCommit=$v_runc" -o "$out/bin/runc" .) >>"$out.log" 2>&1 \
      || { tail -30 "$out.log" >&2; die "go build runc failed (log: $out.log)"; }
    touch "$out/.done"
  fi

  # --- 3. CNI plugins ----------------------------------------------------------
  cni_out="$KIT_CACHE/out/cni-$cni_stamp"
  if [ ! -f "$cni_out/.done" ]; then
    rm -rf "$cni_out" "$cni_out.src"; mkdir -p "$cni_out/bin"
    cp -r "$cni_src" "$cni_out.src"
    p=github.com/containernetworking/plugins/plugins
    log "go build CNI plugins ($CNI_PLUGINS_VERSION + flannel)"
    (cd "$cni_out.src" && CGO_ENABLED=0 nice -n 5 go build -trimpath -buildvcs=false -ldflags "-s -w" \
      -o "$cni_out/bin/" ./flannel $p/main/bridge $p/main/loopback $p/ipam/host-local \
      $p/meta/portmap $p/meta/bandwidth $p/meta/firewall) >"$cni_out.log" 2>&1 \
      || { tail -30 "$cni_out.log" >&2; die "go build CNI plugins failed (log: $cni_out.log)"; }
    rm -rf "$cni_out.src"
    touch "$cni_out/.done"
  fi

  # --- 4. image ----------------------------------------------------------------
  # Context laid out as the image's paths (no renames in RUN: a renamed file
  # would be stored twice in the layers).
  ctx="$KIT_CACHE/build/k3s"
  rm -rf "$ctx"; mkdir -p "$ctx/bin" "$ctx/cni" "$ctx/libexec"
  link() { cp -l "$1" "$2" 2>/dev/null || cp "$1" "$2"; }
  link "$out/bin/k3s" "$ctx/bin/k3s-server"
  link "$out/bin/containerd-shim-runc-v2" "$ctx/bin/containerd-shim-runc-v2"
  link "$out/bin/runc" "$ctx/libexec/runc"
  install -m 0755 "$KIT_ROOT/k3s/k3s-wrapper.sh" "$ctx/bin/k3s"
  install -m 0755 "$KIT_ROOT/k3s/runc-wrapper.sh" "$ctx/bin/runc"
  for f in "$cni_out/bin/"*; do link "$f" "$ctx/cni/$(basename "$f")"; done
  cp "$KIT_ROOT/k3s/Dockerfile" "$ctx/"
  docker_build "$K3S_IMAGE" "$img_stamp" "$ctx" --build-arg "BASE=$NODE_BASE" \
    --label "org.opencontainers.image.version=$K3S_VERSION"
  rm -rf "$ctx"
  # Old build outputs of other stamps are dead weight.
  find "$KIT_CACHE/out" -maxdepth 1 -name 'k3s-*' ! -name "k3s-$bin_stamp*" -exec rm -rf {} + 2>/dev/null || true
  find "$KIT_CACHE/out" -maxdepth 1 -name 'cni-*' ! -name "cni-$cni_stamp*" -exec rm -rf {} + 2>/dev/null || true
fi

bundle_add_image "$K3S_IMAGE" "k3s-${K3S_VERSION/+/-}" "$K3S_VERSION" k3s-node
log "k3s: $K3S_IMAGE ($(image_size "$K3S_IMAGE"))"
