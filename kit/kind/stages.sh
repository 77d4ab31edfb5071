# Build stages of components/kind.sh (sourced after lib.sh, k3s/common.sh and
# kind/versions.sh). Each stage builds binaries into
# $KIT_CACHE/out/kind-<piece>-<stamp>/ and marks it with .done, so a stage
# whose inputs did not change costs a stat. Each prints the output directory.
# shellcheck shell=bash

KIND_DIR="$KIT_ROOT/kind"
KIND_GO_VERSION=$(go env GOVERSION)

# kind_out PIECE STAMP: the output directory of a stage (not created).
kind_out() { echo "$KIT_CACHE/out/kind-$1-$2"; }

# kind_prune PIECE STAMP: drop other stamps' outputs of PIECE.
kind_prune() {
  find "$KIT_CACHE/out" -maxdepth 1 -name "kind-$1-*" ! -name "kind-$1-$2*" -exec rm -rf {} + 2>/dev/null || true
}

# kind_gobuild LOG DIR ARGS...: `go build` in DIR, niced, log to LOG.
kind_gobuild() {
  local logf=$1 dir=$2; shift 2
  (cd "$dir" && nice -n 5 go build -trimpath -buildvcs=false "$@") >>"$logf" 2>&1 \
    || { tail -30 "$logf" >&2; die "go build in $dir failed (log: $logf)"; }
}

# --- kind CLI -----------------------------------------------------------------
kind_stage_cli() {
  local stamp out tree
  stamp=$(stamp_of kind-cli "$KIND_VERSION" "$KIND_GO_VERSION" 1)
  out=$(kind_out cli "$stamp")
  if [ ! -f "$out/.done" ]; then
    tree="$KIT_CACHE/src/kind-$KIND_VERSION"
    go_module_src sigs.k8s.io/kind "$KIND_VERSION" "$tree"
    rm -rf "$out"; mkdir -p "$out"
    log "go build kind $KIND_VERSION"
    # kind's Makefile: -ldflags "-buildid= -w -X=sigs.k8s.io/kind/pkg/cmd/kind/version.gitCommit=..."
    CGO_ENABLED=0 kind_gobuild "$out.log" "$tree" -ldflags "-s -w -buildid=" -o "$out/kind" .
    touch "$out/.done"
    kind_prune cli "$stamp"
  fi
  echo "$out"
}

# --- Kubernetes: the seven commands in one go build ---------------------------
# k8s.io/kubernetes's module zip lacks staging/ (nested modules are never in a
# module zip): its `k8s.io/X => ./staging/src/k8s.io/X` replaces are rewritten
# to the published staging modules of the same release (v0.<minor>.<patch>),
# the two sample modules nothing here imports are dropped, and go.work goes.
KIND_K8S_CMDS="kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy"
kind_k8s_tree() {
  local tree="$KIT_CACHE/src/kubernetes-$KIND_K8S_VERSION" staging info
  staging="v0.${KIND_K8S_VERSION#v1.}"
  if [ "$(cat "$tree/.kit-src" 2>/dev/null)" != "k8s.io/kubernetes@$KIND_K8S_VERSION r2" ]; then
    log "go mod download k8s.io/kubernetes@$KIND_K8S_VERSION"
    # Its checksum-database lookup is missing here: verify against the
    # pinned hashes instead (versions.sh).
    info=$(cd /tmp && GONOSUMDB=k8s.io/kubernetes go mod download -json "k8s.io/kubernetes@$KIND_K8S_VERSION") \
      || die "cannot download k8s.io/kubernetes@$KIND_K8S_VERSION: $(jq -r .Error <<<"$info" 2>/dev/null)"
    [ "$(jq -r .Sum <<<"$info")" = "$KIND_K8S_SUM" ] && [ "$(jq -r .GoModSum <<<"$info")" = "$KIND_K8S_GOMODSUM" ] \
      || die "k8s.io/kubernetes@$KIND_K8S_VERSION hash $(jq -r .Sum <<<"$info") is not the pinned $KIND_K8S_SUM"
    rm -rf "$tree"; mkdir -p "$(dirname "$tree")"
    cp -r "$(jq -r .Dir <<<"$info")" "$tree"; chmod -R u+w "$tree"
    rm -rf "$tree/go.work" "$tree/go.work.sum" "$tree/vendor"
    sed -i -E \
      -e '/k8s\.io\/sample-(cli-plugin|controller) =>/d' \
      -e "s#^(\s*)(k8s\.io/[a-z0-9-]+) => \./staging/src/k8s\.io/[a-z0-9-]+\$#\1\2 => \2 $staging#" \
      "$tree/go.mod"
    grep -q 'staging/src' "$tree/go.mod" && die "k8s go.mod: a staging replace was not rewritten"
    echo "k8s.io/kubernetes@$KIND_K8S_VERSION r2" >"$tree/.kit-src"
  fi
  echo "$tree"
}

kind_stage_kubernetes() {
  local stamp out tree minor ldflags c pkgs=()
  stamp=$(stamp_of k8s "$KIND_K8S_VERSION" "$KIND_K8S_SUM" "$KIND_GO_VERSION" "$KIND_K8S_CMDS" 1)
  out=$(kind_out k8s "$stamp")
  if [ ! -f "$out/.done" ]; then
    tree=$(kind_k8s_tree)
    # The images kubeadm will ask for must be the ones this script builds.
    grep -q "DefaultEtcdVersion = \"$KIND_ETCD_VERSION-0\"" "$tree/cmd/kubeadm/app/constants/constants.go" \
      && grep -q "CoreDNSVersion = \"v$KIND_COREDNS_VERSION\"" "$tree/cmd/kubeadm/app/constants/constants.go" \
      && grep -q "PauseVersion = \"$KIND_PAUSE_VERSION\"" "$tree/cmd/kubeadm/app/constants/constants.go" \
      || die "kubeadm $KIND_K8S_VERSION's etcd/CoreDNS/pause versions differ from tests/kit/kind/versions.sh"
    rm -rf "$out"; mkdir -p "$out/bin"
    minor=${KIND_K8S_VERSION#v1.}; minor=${minor%%.*}
    ldflags="-s -w"
    for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
      ldflags="$ldflags -X $p.gitVersion=$KIND_K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor
        -X $p.gitTreeState=clean -X $p.buildDate=$KIND_K8S_BUILD_DATE"
    done
    for c in $KIND_K8S_CMDS; do pkgs+=("./cmd/$c"); done
    log "go build ${KIND_K8S_CMDS// /, } $KIND_K8S_VERSION (one invocation; cold: ~10-13 min on 2 cores; log $out.log)"
    CGO_ENABLED=0 kind_gobuild "$out.log" "$tree" -tags providerless -ldflags "$ldflags" -o "$out/bin/" "${pkgs[@]}"
    "$out/bin/kubeadm" version -o short | grep -qx "$KIND_K8S_VERSION" || die "kubeadm version is not $KIND_K8S_VERSION"
    touch "$out/.done"
    kind_prune k8s "$stamp"
  fi
  echo "$out"
}

# --- node runtime: containerd, runc, crictl, CNI plugins ----------------------
kind_stage_runtime() {
  local stamp out t p
  stamp=$(stamp_of runtime "$KIND_CONTAINERD_VERSION" "$KIND_RUNC_VERSION" "$KIND_CRICTL_VERSION" \
    "$KIND_CNI_PLUGINS_VERSION" "$KIND_GO_VERSION" \
    "$(cat "$KIT_ROOT/k3s/cni/go.mod" "$KIT_ROOT/k3s/cni/go.sum" "$KIT_ROOT/k3s/cni/flannel/main.go" | sha256sum)" 1)
  out=$(kind_out runtime "$stamp")
  if [ ! -f "$out/.done" ]; then
    host_packages gcc libc6-dev pkg-config libseccomp-dev   # runc: cgo (nsexec) + libseccomp
    rm -rf "$out"; mkdir -p "$out/bin" "$out/cni"
    t="$KIT_CACHE/src/containerd-$KIND_CONTAINERD_VERSION"
    go_module_src github.com/containerd/containerd/v2 "$KIND_CONTAINERD_VERSION" "$t"
    p=github.com/containerd/containerd/v2/version
    log "go build containerd $KIND_CONTAINERD_VERSION (containerd, ctr, containerd-shim-runc-v2)"
    CGO_ENABLED=0 kind_gobuild "$out.log" "$t" -tags "no_aufs no_zfs no_btrfs no_devmapper" \
      -ldflags "-s -w -X $p.Version=$KIND_CONTAINERD_VERSION -X $p.Package=github.com/containerd/containerd/v2" \
      -o "$out/bin/" ./cmd/containerd ./cmd/ctr ./cmd/containerd-shim-runc-v2
    t="$KIT_CACHE/src/runc-$KIND_RUNC_VERSION"
    go_module_src github.com/opencontainers/runc "$KIND_RUNC_VERSION" "$t"
    log "go build runc $KIND_RUNC_VERSION"
    CGO_ENABLED=1 kind_gobuild "$out.log" "$t" -tags "seccomp urfave_cli_no_docs" \
      -ldflags "-s -w -X main.gitCommit=$KIND_RUNC_VERSION" -o "$out/bin/runc" .
    t="$KIT_CACHE/src/cri-tools-$KIND_CRICTL_VERSION"
    go_module_src sigs.k8s.io/cri-tools "$KIND_CRICTL_VERSION" "$t"
    log "go build crictl $KIND_CRICTL_VERSION"
    CGO_ENABLED=0 kind_gobuild "$out.log" "$t" \
      -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$KIND_CRICTL_VERSION" -o "$out/bin/crictl" ./cmd/crictl
    t="$KIT_CACHE/src/cni-plugins-$KIND_CNI_PLUGINS_VERSION"
    go_module_src github.com/containernetworking/plugins "$KIND_CNI_PLUGINS_VERSION" "$t"
    log "go build CNI plugins $KIND_CNI_PLUGINS_VERSION + the kit's flannel plugin"
    CGO_ENABLED=0 kind_gobuild "$out.log" "$t" \
      -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$KIND_CNI_PLUGINS_VERSION" \
      -o "$out/cni/" ./plugins/main/bridge ./plugins/main/ptp ./plugins/main/loopback \
      ./plugins/ipam/host-local ./plugins/meta/portmap
    # The flannel meta-plugin is the kit's own (tests/kit/k3s/cni/flannel):
    # the upstream flannel-io/cni-plugin module is not served here.
    rm -rf "$out.cni-src"; cp -r "$KIT_ROOT/k3s/cni" "$out.cni-src"
    CGO_ENABLED=0 kind_gobuild "$out.log" "$out.cni-src" -ldflags "-s -w" -o "$out/cni/flannel" ./flannel
    rm -rf "$out.cni-src"
    touch "$out/.done"
    kind_prune runtime "$stamp"
  fi
  echo "$out"
}

# --- images' binaries: etcd, CoreDNS, flannel, local-path-provisioner ---------
kind_stage_addons() {
  local stamp out t
  stamp=$(stamp_of addons 2 "$KIND_ETCD_VERSION" "$KIND_COREDNS_VERSION" "$KIND_FLANNEL_VERSION" \
    "$KIND_LOCAL_PATH_VERSION" "$KIND_GO_VERSION" "$(cat "$KIND_DIR/etcd/go.mod" "$KIND_DIR/etcd/go.sum" | sha256sum)" 1)
  out=$(kind_out addons "$stamp")
  if [ ! -f "$out/.done" ]; then
    host_packages gcc libc6-dev libcap2-bin   # flannel: cgo (udp backend); setcap for CoreDNS
    rm -rf "$out"; mkdir -p "$out/bin"
    log "go build etcd $KIND_ETCD_VERSION, etcdctl (tools of tests/kit/kind/etcd)"
    rm -rf "$out.etcd-src"; cp -r "$KIND_DIR/etcd" "$out.etcd-src"
    CGO_ENABLED=0 kind_gobuild "$out.log" "$out.etcd-src" \
      -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=v$KIND_ETCD_VERSION" -o "$out/bin/etcd" go.etcd.io/etcd/server/v3
    CGO_ENABLED=0 kind_gobuild "$out.log" "$out.etcd-src" \
      -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=v$KIND_ETCD_VERSION" -o "$out/bin/etcdctl" go.etcd.io/etcd/etcdctl/v3
    rm -rf "$out.etcd-src"
    t="$KIT_CACHE/src/coredns-v$KIND_COREDNS_VERSION"
    go_module_src github.com/coredns/coredns "v$KIND_COREDNS_VERSION" "$t"
    log "go build coredns v$KIND_COREDNS_VERSION"
    CGO_ENABLED=0 kind_gobuild "$out.log" "$t" -ldflags "-s -w" -o "$out/bin/coredns" .
    t="$KIT_CACHE/src/flannel-$KIND_FLANNEL_VERSION"
    go_module_src github.com/flannel-io/flannel "$KIND_FLANNEL_VERSION" "$t"
    # The Tencent Cloud VPC backend's SDK module is not served by the proxy;
    # the kit uses host-gw, so that backend is left out of the binary.
    sed -i '/"github.com\/flannel-io\/flannel\/pkg\/backend\/tencentvpc"/d' "$t/main.go"
    log "go build flanneld $KIND_FLANNEL_VERSION"
    CGO_ENABLED=1 kind_gobuild "$out.log" "$t" \
      -ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$KIND_FLANNEL_VERSION" -o "$out/bin/flanneld" .
    t="$KIT_CACHE/src/local-path-provisioner-$KIND_LOCAL_PATH_VERSION"
    go_module_src github.com/rancher/local-path-provisioner "$KIND_LOCAL_PATH_VERSION" "$t"
    rm -rf "$t/vendor"   # only modules.txt survives in a module zip: build from the module cache
    log "go build local-path-provisioner $KIND_LOCAL_PATH_VERSION"
    CGO_ENABLED=0 kind_gobuild "$out.log" "$t" \
      -ldflags "-s -w -X main.VERSION=$KIND_LOCAL_PATH_VERSION" -o "$out/bin/local-path-provisioner" .
    touch "$out/.done"
    kind_prune addons "$stamp"
  fi
  echo "$out"
}

# --- pod images ----------------------------------------------------------------
# Names exactly as `kubeadm config images list --kubernetes-version` prints
# them, plus the default CNI and storage images the node's manifests name.
kind_pod_images() {
  local v=$KIND_K8S_VERSION
  echo "registry.k8s.io/kube-apiserver:$v registry.k8s.io/kube-controller-manager:$v" \
    "registry.k8s.io/kube-scheduler:$v registry.k8s.io/kube-proxy:$v" \
    "registry.k8s.io/coredns/coredns:v$KIND_COREDNS_VERSION registry.k8s.io/pause:$KIND_PAUSE_VERSION" \
    "registry.k8s.io/etcd:$KIND_ETCD_VERSION-0" \
    "ghcr.io/flannel-io/flannel:$KIND_FLANNEL_VERSION docker.io/rancher/local-path-provisioner:$KIND_LOCAL_PATH_VERSION"
}
KIND_NET_BASE=devstack-kit/kind-net-base:$KIT_DEBIAN_SUITE
KIND_NODE_BASE=devstack-kit/kind-node-base:$KIT_DEBIAN_SUITE

# kind_image REF KIND STAMP_INPUT FILE...: build REF from images/Dockerfile.KIND
# with FILEs (binaries) in bin/, unless it was built from the same inputs.
kind_image() {
  local ref=$1 kind=$2 input=$3; shift 3
  local stamp ctx base=""
  case $kind in
    net) base=$KIND_NET_BASE ;;
    local-path) base=$KIND_NET_BASE ;;   # shares its Debian layer with kube-proxy and flannel
  esac
  stamp=$(stamp_of "$ref" "$input" "$(cat "$KIND_DIR/images/Dockerfile.$kind" "$KIND_DIR/images/iptables-wrapper.sh" | sha256sum)" \
    "${base:+$(docker image inspect -f '{{.Id}}' "$base")}")
  if image_stamp_ok "$ref" "$stamp"; then return 0; fi
  ctx="$KIT_CACHE/build/kind-image"
  rm -rf "$ctx"; mkdir -p "$ctx/bin"
  for f in "$@"; do cp -l "$f" "$ctx/bin/" 2>/dev/null || cp "$f" "$ctx/bin/"; done
  cp "$KIND_DIR/images/Dockerfile.$kind" "$ctx/Dockerfile"
  cp "$KIND_DIR/images/iptables-wrapper.sh" "$ctx/"
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ctx/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/group"
  docker_build "$ref" "$stamp" "$ctx" ${base:+--build-arg "BASE=$base"}
  rm -rf "$ctx"
}

# kind_stage_images K8S_OUT ADDONS_OUT: every pod image the node preloads.
kind_stage_images() {
  local k8s=$1 add=$2 v=$KIND_K8S_VERSION c ctx stamp ref
  host_packages ca-certificates libcap2-bin gcc libc6-dev
  kit_rootfs_image "$KIND_NET_BASE" "ca-certificates,iptables,nftables,conntrack,ipset,iproute2,kmod"
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    kind_image "registry.k8s.io/$c:$v" static "$(basename "$k8s")" "$k8s/bin/$c"
  done
  kind_image "registry.k8s.io/kube-proxy:$v" net "$(basename "$k8s")" "$k8s/bin/kube-proxy"
  kind_image "registry.k8s.io/etcd:$KIND_ETCD_VERSION-0" static "$(basename "$add")" "$add/bin/etcd" "$add/bin/etcdctl"
  kind_image "ghcr.io/flannel-io/flannel:$KIND_FLANNEL_VERSION" net "$(basename "$add")" "$add/bin/flanneld"
  kind_image "docker.io/rancher/local-path-provisioner:$KIND_LOCAL_PATH_VERSION" local-path "$(basename "$add")" \
    "$add/bin/local-path-provisioner"
  # CoreDNS and pause: the kit's own image recipes (components/coredns.sh,
  # pause.sh) at the versions kubeadm $v asks for.
  ref=registry.k8s.io/coredns/coredns:v$KIND_COREDNS_VERSION
  stamp=$(stamp_of "$ref" "$(basename "$add")" "$(sha256sum <"$KIT_ROOT/coredns/Dockerfile")")
  if ! image_stamp_ok "$ref" "$stamp"; then
    ctx="$KIT_CACHE/build/kind-coredns"; rm -rf "$ctx"; mkdir -p "$ctx"
    cp "$add/bin/coredns" "$ctx/coredns"
    setcap cap_net_bind_service=+ep "$ctx/coredns"
    cp /etc/ssl/certs/ca-certificates.crt "$KIT_ROOT/coredns/Dockerfile" "$ctx/"
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ctx/passwd"
    printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/group"
    docker_build "$ref" "$stamp" "$ctx"; rm -rf "$ctx"
  fi
  ref=registry.k8s.io/pause:$KIND_PAUSE_VERSION
  stamp=$(stamp_of "$ref" "$(cat "$KIT_ROOT/pause/pause.c" "$KIT_ROOT/pause/Dockerfile" | sha256sum)" "$(gcc -dumpfullversion)")
  if ! image_stamp_ok "$ref" "$stamp"; then
    ctx="$KIT_CACHE/build/kind-pause"; rm -rf "$ctx"; mkdir -p "$ctx"
    gcc -Os -static -s -Wall -DVERSION="\"$KIND_PAUSE_VERSION\"" -o "$ctx/pause" "$KIT_ROOT/pause/pause.c" \
      || die "compiling pause.c failed"
    cp "$KIT_ROOT/pause/Dockerfile" "$ctx/"
    docker_build "$ref" "$stamp" "$ctx"; rm -rf "$ctx"
  fi
  # The control-plane names must be exactly what kubeadm will ask for.
  local want have
  want=$("$k8s/bin/kubeadm" config images list --kubernetes-version "$v" 2>/dev/null | sort)
  have=$(kind_pod_images | tr ' ' '\n' | grep '^registry.k8s.io/' | sort)
  [ -n "$want" ] && [ "$want" = "$have" ] \
    || die "kubeadm $v lists images the kit does not build: $(comm -23 <(echo "$want") <(echo "$have") | tr '\n' ' ')"
}

# --- node image ------------------------------------------------------------------
# kind_node_context DIR K8S_OUT RUNTIME_OUT: stage 1's build context.
kind_node_context() {
  local ctx=$1 k8s=$2 rt=$3 kindsrc f
  kindsrc=$(cd /tmp && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r '.Dir // empty')
  [ -d "$kindsrc/images/base/files" ] || die "kind $KIND_VERSION module has no images/base/files"
  rm -rf "$ctx"; mkdir -p "$ctx"/{files,bin,sbin,libexec,cni,kube}
  cp -r "$kindsrc/images/base/files/." "$ctx/files/"
  chmod -R u+w,go-w "$ctx/files"
  find "$ctx/files" -type f -exec chmod 0644 {} +
  find "$ctx/files" -type d -exec chmod 0755 {} +
  chmod 0755 "$ctx/files/usr/local/bin/"* "$ctx/files/kind/bin/"*
  # The kit builds no fuse-overlayfs snapshotter (rootless only); kind does
  # not enable its unit either.
  rm -f "$ctx/files/etc/systemd/system/containerd-fuse-overlayfs.service"
  # Kubernetes >= 1.35 kubelets refuse cgroup v1 unless failCgroupV1 is
  # false. kind writes the kubelet's config from kubeadm, so the image sets
  # the flag (which overrides the config file) where kubelet.service.d/
  # 10-kubeadm.conf reads extra arguments. Harmless on cgroup v2.
  printf 'KUBELET_EXTRA_ARGS=--runtime-cgroups=/system.slice/containerd.service --fail-cgroupv1=false\n' \
    >"$ctx/files/etc/default/kubelet"
  # Sandbox image: the pause image kubeadm lists (kind pins its own tag).
  sed -i -E "s#^(\s*sandbox_image = )\"[^\"]*\"#\1\"registry.k8s.io/pause:$KIND_PAUSE_VERSION\"#" \
    "$ctx/files/etc/containerd/config.toml"
  grep -q "sandbox_image = \"registry.k8s.io/pause:$KIND_PAUSE_VERSION\"" "$ctx/files/etc/containerd/config.toml" \
    || die "kind's containerd config has no sandbox_image line to set"
  mkdir -p "$ctx/files/kind/manifests"
  printf '%s' "$KIND_K8S_VERSION" >"$ctx/files/kind/version"
  sed "s#FLANNEL_VERSION#$KIND_FLANNEL_VERSION#g" "$KIND_DIR/node/default-cni.yaml" >"$ctx/files/kind/manifests/default-cni.yaml"
  sed "s#LOCAL_PATH_IMAGE#docker.io/rancher/local-path-provisioner:$KIND_LOCAL_PATH_VERSION#g" \
    "$KIND_DIR/node/default-storage.yaml" >"$ctx/files/kind/manifests/default-storage.yaml"
  chmod 0644 "$ctx/files/kind/version" "$ctx/files/kind/manifests/"*
  link() { cp -l "$1" "$2" 2>/dev/null || cp "$1" "$2"; }
  for f in containerd ctr containerd-shim-runc-v2 crictl; do link "$rt/bin/$f" "$ctx/bin/$f"; done
  link "$rt/bin/runc" "$ctx/libexec/runc"
  install -m 0755 "$KIT_ROOT/k3s/runc-wrapper.sh" "$ctx/sbin/runc"
  for f in "$rt/cni/"*; do link "$f" "$ctx/cni/$(basename "$f")"; done
  for f in kubeadm kubelet kubectl; do link "$k8s/bin/$f" "$ctx/kube/$f"; done
  cp "$KIND_DIR/node/Dockerfile" "$ctx/"
}

# kind_stage_node K8S_OUT RUNTIME_OUT STAMP: stage 1 (docker build), then the
# pod images imported into the node's containerd in a build container and
# committed as $KIND_NODE_IMAGE, as kind's `build node-image` does.
kind_stage_node() {
  local k8s=$1 rt=$2 stamp=$3 stage ctx cid img missing
  stage="devstack-kit/kind-node-stage1:$KIND_K8S_VERSION"
  kit_rootfs_image "$KIND_NODE_BASE" "$KIND_NODE_PACKAGES"
  ctx="$KIT_CACHE/build/kind-node"
  kind_node_context "$ctx" "$k8s" "$rt"
  local old_stage; old_stage=$(docker image inspect -f '{{.Id}}' "$stage" 2>/dev/null || true)
  docker_build "$stage" "$stamp" "$ctx" --build-arg "BASE=$KIND_NODE_BASE"
  if [ -n "$old_stage" ] && [ "$old_stage" != "$(docker image inspect -f '{{.Id}}' "$stage")" ]; then
    docker rmi "$old_stage" >/dev/null 2>&1 || true
  fi
  log "docker save the pod images"
  # shellcheck disable=SC2046
  docker save $(kind_pod_images) -o "$ctx/images.tar"
  cid=devstack-kit-kind-build-$$-$RANDOM
  # (not --privileged: importing with --no-unpack mounts nothing; no
  # --label: docker commit would copy it into the image, and every kind node
  # container would inherit it)
  # --init reaps containerd once it is stopped (sleep as PID 1 would not).
  docker run -d --init --name "$cid" \
    --entrypoint sleep --security-opt seccomp=unconfined "$stage" infinity >/dev/null \
    || die "cannot start the node build container"
  # shellcheck disable=SC2064
  trap "docker rm -f -v $cid >/dev/null 2>&1 || true" EXIT
  docker exec "$cid" bash -c 'nohup containerd >/var/log/kit-containerd.log 2>&1 &
    for i in $(seq 1 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done
    cat /var/log/kit-containerd.log; exit 1' >&2 || die "containerd did not start in the build container"
  log "ctr images import (pinned) into the node's containerd"
  docker exec -i "$cid" ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned \
    --all-platforms --no-unpack --digests - <"$ctx/images.tar" >"$ctx.import.log" 2>&1 \
    || { tail -20 "$ctx.import.log" >&2; die "ctr images import failed"; }
  missing=""
  local have; have=$(docker exec "$cid" ctr --namespace=k8s.io images list -q)
  for img in $(kind_pod_images); do
    grep -qxF "$img" <<<"$have" || missing="$missing $img"
  done
  [ -z "$missing" ] || die "images missing in the node's containerd:$missing"
  docker exec "$cid" bash -c 'pkill containerd; for i in $(seq 1 50); do pgrep -x containerd >/dev/null || exit 0; sleep 0.2; done; exit 1' \
    || die "containerd did not stop in the build container"
  docker exec "$cid" rm -f /var/log/kit-containerd.log
  local old_id; old_id=$(docker image inspect -f '{{.Id}}' "$KIND_NODE_IMAGE" 2>/dev/null || true)
  log "docker commit $KIND_NODE_IMAGE"
  docker commit \
    --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
    --change 'CMD []' \
    --change "LABEL dev.devstack.kit.stamp=$stamp" \
    --change "LABEL org.opencontainers.image.version=$KIND_K8S_VERSION" \
    "$cid" "$KIND_NODE_IMAGE" >/dev/null || die "docker commit $KIND_NODE_IMAGE failed"
  docker rm -f -v "$cid" >/dev/null 2>&1 || true
  trap - EXIT
  # The replaced node image (~1 GB of its own layer) is dead weight; docker
  # refuses if a container still uses it.
  [ -z "$old_id" ] || docker rmi "$old_id" >/dev/null 2>&1 || true
  rm -rf "$ctx" "$ctx.log" "$ctx.import.log"
}
