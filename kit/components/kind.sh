#!/usr/bin/env bash
# kind CLI and Kind node image (kindest/node:<Kubernetes version>), built
# offline, for devstack's Kind provider and airgapped users.
#   - kind CLI (sigs.k8s.io/kind) -> bundle file bin/kind (kind "binary", name "kind");
#   - Kubernetes: kubeadm, kubelet, kubectl, kube-apiserver,
#     kube-controller-manager, kube-scheduler, kube-proxy from k8s.io/kubernetes
#     in ONE go build (packages compile once);
#   - node runtime: containerd v2, runc (behind the kit's runc wrapper), crictl,
#     CNI plugins (+ the kit's flannel CNI plugin);
#   - pod images under the names kubeadm lists (registry.k8s.io/...), plus
#     flannel (default CNI) and local-path-provisioner (default storage);
#   - the node: Debian bookworm + systemd + kind's images/base/files, the
#     binaries above, /kind/version, /kind/manifests/default-{cni,storage}.yaml,
#     pod images imported pinned into its containerd (as kind's
#     pkg/build/nodeimage does) -> bundle image role "kind-node".
# Every stage is cached by a stamp of its inputs (tests/kit/kind/stages.sh); a
# warm run only inspects. Versions: tests/kit/kind/versions.sh.
# Standalone and idempotent.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$KIT_ROOT/k3s/common.sh"
source "$KIT_ROOT/kind/versions.sh"
source "$KIT_ROOT/kind/stages.sh"

# Bump when the node assembly changes in a way the stamps below do not see.
KIND_NODE_REV=1

# --- 1. kind CLI -----------------------------------------------------------------
cli=$(kind_stage_cli)
mkdir -p "$KIT_BUNDLE/bin"
if ! cmp -s "$cli/kind" "$KIT_BUNDLE/bin/kind"; then
  install -m 0755 "$cli/kind" "$KIT_BUNDLE/bin/kind.tmp" && mv "$KIT_BUNDLE/bin/kind.tmp" "$KIT_BUNDLE/bin/kind"
fi
"$KIT_BUNDLE/bin/kind" version | grep -q "^kind $KIND_VERSION " || die "bundle's kind is not $KIND_VERSION"
bundle_add_file binary "$KIND_VERSION" bin/kind kind

# --- 2. binaries -------------------------------------------------------------------
k8s=$(kind_stage_kubernetes)
rt=$(kind_stage_runtime)
add=$(kind_stage_addons)

# --- 3. pod images -------------------------------------------------------------------
kind_stage_images "$k8s" "$add"

# --- 4. node image -------------------------------------------------------------------
img_ids=$(for i in $(kind_pod_images); do docker image inspect -f '{{.Id}}' "$i"; done)
kindsrc_sum=$(cd /tmp && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Sum)
node_stamp=$(stamp_of "$KIND_NODE_IMAGE" "$KIND_NODE_REV" "$(basename "$k8s")" "$(basename "$rt")" "$img_ids" \
  "$kindsrc_sum" "$KIND_NODE_PACKAGES" "$KIT_DEBIAN_SUITE" \
  "$(cat "$KIT_ROOT/kind/node/"* "$KIT_ROOT/k3s/runc-wrapper.sh" "$KIT_ROOT/kind/stages.sh" "$KIT_ROOT/kind/versions.sh" | sha256sum)")
if image_stamp_ok "$KIND_NODE_IMAGE" "$node_stamp"; then
  log "reuse $KIND_NODE_IMAGE"
else
  kind_stage_node "$k8s" "$rt" "$node_stamp"
fi

bundle_add_image "$KIND_NODE_IMAGE" "kind-node-$KIND_K8S_VERSION" "$KIND_K8S_VERSION" kind-node
log "kind: $KIND_NODE_IMAGE ($(image_size "$KIND_NODE_IMAGE")), kind CLI $KIND_VERSION at $KIT_BUNDLE/bin/kind"
