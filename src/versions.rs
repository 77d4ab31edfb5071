//! Pinned versions of everything devstack runs. The offline kit
//! (`tests/kit/`) builds exactly these, so online and offline runs use the
//! same image references.

/// K3s node image. Kubernetes 1.32 runs on cgroup v1 hosts without extra
/// kubelet flags, and it is the newest K3s whose Go module the offline kit
/// can build (see tests/kit/k3s/versions.sh).
pub const K3S_IMAGE: &str = "rancher/k3s:v1.32.0-k3s1";
/// Kind node image: the one the offline kit builds (tests/kit/kind/versions.sh),
/// Kubernetes 1.36. Its kubelet needs `failCgroupV1: false` on cgroup v1
/// hosts, which devstack's kind config sets.
pub const KIND_NODE_IMAGE: &str = "kindest/node:v1.36.5";
/// Oldest kind CLI devstack drives: node images of Kubernetes 1.36 are built
/// from kind's base files of v0.30.0 to v0.33.0 (identical in those), and
/// older CLIs are untried with them.
pub const KIND_MIN_VERSION: (u64, u64, u64) = (0, 30, 0);
/// A pinned 4.x community tag: runs without an auth token (`latest` needs one).
pub const LOCALSTACK_IMAGE: &str = "localstack/localstack:4.3.0";
pub const FLUX_VERSION: &str = "v2.9.5";
pub const ESO_CHART_VERSION: &str = "0.19.2";
/// ESO's Helm repository, used when no offline bundle provides the chart.
pub const ESO_CHART_REPOSITORY: &str = "https://charts.external-secrets.io";
