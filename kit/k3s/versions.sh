# Versions of the K3s node, pause and CoreDNS images (sourced by
# components/{k3s,pause,coredns}.sh and test.sh). Image references are the
# upstream ones, so devstack runs the same references online and offline.
#
# K3s: v1.32.0+k3s1 is the newest k3s release whose module the Go module proxy
# reachable here serves (v1.33.x/v1.34.x tags and pseudo-versions answer 403);
# the proxy maps the tag to this pseudo-version (commit cca8facaa33a).
K3S_VERSION=${KIT_K3S_VERSION:-v1.32.0+k3s1}
K3S_MODULE_VERSION=${KIT_K3S_MODULE_VERSION:-v1.32.1-0.20250107171309-cca8facaa33a}
K3S_COMMIT=${KIT_K3S_COMMIT:-cca8facaa33a3ec7897349a8740fd96029590c31}
K3S_COMMIT_DATE=${KIT_K3S_COMMIT_DATE:-2025-01-07T17:13:09Z}
K3S_IMAGE=rancher/k3s:${K3S_VERSION/+/-}
# What this k3s version references by default (pkg/cli/cmds/const_linux.go
# DefaultPauseImage, manifests/coredns.yaml); k3s.sh checks they still match.
PAUSE_VERSION=${KIT_PAUSE_VERSION:-3.6}
PAUSE_IMAGE=rancher/mirrored-pause:$PAUSE_VERSION
COREDNS_VERSION=${KIT_COREDNS_VERSION:-1.12.0}
COREDNS_COMMIT=${KIT_COREDNS_COMMIT:-51e11f166ef6c247a78e9e15468647c593b79b9f}
COREDNS_IMAGE=rancher/mirrored-coredns-coredns:$COREDNS_VERSION
# CNI plugins in the node image (k3s v1.32.0 ships plugins v1.6.0-k3s1).
CNI_PLUGINS_VERSION=v1.6.2   # pinned in kit/k3s/cni/go.mod
# Debian packages of the node image's userland.
K3S_NODE_PACKAGES="ca-certificates,iptables,nftables,conntrack,ipset,iproute2,kmod,mount,util-linux,procps,libseccomp2,libsqlite3-0,findutils,tar,gzip,jq"
