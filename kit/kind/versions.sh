# Versions of the kit's kind CLI and Kind node image (sourced by
# components/kind.sh and test.d/30-kind.sh). Image references are the upstream
# ones, so the same names work online and offline.
# shellcheck shell=bash disable=SC2034

# kind CLI (sigs.k8s.io/kind); its images/base/files are the node's systemd
# units, entrypoint and containerd config.
KIND_VERSION=${KIT_KIND_VERSION:-v0.33.0}

# Kubernetes of the node image: v1.36.4, the 1.36 image kind v0.33.0 publishes
# (kindest/node:v1.36.4, devstack's default; src/versions.rs). The module's
# hash is pinned here (h1: of the zip and of go.mod, as `go mod download -json`
# prints them) and checked after download.
KIND_K8S_VERSION=${KIT_KIND_K8S_VERSION:-v1.36.4}
KIND_K8S_SUM=${KIT_KIND_K8S_SUM:-h1:08GT0ZOMtyCcRnslyvnpWurf1wm20KHbC/aRS+0LxSo=}
KIND_K8S_GOMODSUM=${KIT_KIND_K8S_GOMODSUM:-h1:ZyLkHB4+fxSZ4LqpShPGJhikj4ngJaYAFlaZKs7goP4=}
KIND_K8S_BUILD_DATE=${KIT_KIND_K8S_BUILD_DATE:-2026-08-20T11:51:43Z}   # the module's .info Time
KIND_NODE_IMAGE=kindest/node:$KIND_K8S_VERSION

# What kubeadm v1.36.4 deploys (cmd/kubeadm/app/constants/constants.go;
# components/kind.sh checks these against the source and against
# `kubeadm config images list`).
KIND_ETCD_VERSION=3.6.8        # image tag 3.6.8-0
KIND_COREDNS_VERSION=1.14.2    # image tag v1.14.2
KIND_PAUSE_VERSION=3.10.2

# Node runtime, as kind v0.33.0's images/base/Dockerfile pins them.
KIND_CONTAINERD_VERSION=v2.3.4
KIND_RUNC_VERSION=v1.4.3
KIND_CRICTL_VERSION=v1.36.0
KIND_CNI_PLUGINS_VERSION=v1.9.1

# Default CNI and storage (kind's kindnetd is not served by the proxy).
KIND_FLANNEL_VERSION=v0.28.10
KIND_LOCAL_PATH_VERSION=v0.0.30

# Debian packages of the node's userland (kind's base image installs the
# same tools; bookworm, whose systemd 252 still boots on cgroup v1).
KIND_NODE_PACKAGES="systemd,systemd-sysv,dbus,libsystemd0,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,ca-certificates,curl,jq,procps,socat,bash,findutils,tar,gzip,coreutils,sed,grep,ebtables,ipset"
