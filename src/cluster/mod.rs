//! Kubernetes clusters in Docker. Two providers behind one interface:
//! `k3s` runs K3s node containers through bollard (nothing but Docker
//! needed), `kind` drives the `kind` CLI.

pub mod k3s;
pub mod kind;
pub mod kubeconfig;
pub mod preload;

use serde::Serialize;

use crate::error::Error;
use crate::profile::{Provider, Settings};
use crate::ui::Step;

/// What `up` produced.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInfo {
    pub provider: Provider,
    /// Node container names, servers first.
    pub nodes: Vec<String>,
    /// API server URL reachable from this host.
    pub api_server: String,
    /// Kubeconfig (YAML) whose context, cluster and user are `devstack-<name>`.
    #[serde(skip)]
    pub kubeconfig: String,
    /// Whether `up` created the cluster (false: it existed and was reused).
    pub created: bool,
    /// What `up` repaired on an existing cluster (started a stopped node, ...).
    pub repaired: Vec<String>,
}

/// Options for `up` that are not settings.
#[derive(Debug, Clone, Copy, Default)]
pub struct UpOptions {
    /// Keep a half-created cluster on failure, for debugging.
    pub retain: bool,
}

/// Kubernetes node container name `devstack-<stack>-<role><index>`.
pub fn node_name(settings: &Settings, role: &str, index: usize) -> String {
    format!("{}-{role}-{index}", settings.resource_prefix())
}

pub fn provider_label(settings: &Settings) -> &'static str {
    settings.cluster.provider.as_str()
}

/// Brings the cluster up (or converges an existing one) and waits for every
/// node Ready within `timeouts.cluster`.
pub async fn up(
    docker: &bollard::Docker,
    settings: &Settings,
    options: UpOptions,
    step: &Step,
) -> Result<ClusterInfo, Error> {
    let started = std::time::Instant::now();
    let info = match settings.cluster.provider {
        Provider::K3s => k3s::up(docker, settings, options, step).await?,
        Provider::Kind => kind::up(docker, settings, options, step).await?,
    };
    // Ready nodes are not yet a usable cluster: pods resolve service names
    // only once CoreDNS serves.
    step.progress("waiting for CoreDNS");
    let dns = async {
        let client = crate::k8s::client_from_kubeconfig(&info.kubeconfig).await?;
        let remaining = settings
            .timeouts
            .cluster
            .get()
            .saturating_sub(started.elapsed());
        crate::k8s::wait_deployments_available(
            &client,
            "kube-system",
            &["coredns".to_string()],
            remaining,
        )
        .await
    };
    match dns.await {
        Ok(()) => Ok(info),
        Err(err) => {
            let err = err.with_hint("raise `timeouts.cluster`; `kubectl -n kube-system describe pods` shows why CoreDNS is not running");
            if info.created && !options.retain {
                return Err(match down(docker, settings).await {
                    Ok(_) => err.context("cluster creation failed and was rolled back"),
                    Err(e) => err.context(format!(
                        "cluster creation failed, and rollback also failed ({})",
                        e.message()
                    )),
                });
            }
            Err(err)
        }
    }
}

/// Removes the cluster; absent is fine. Returns whether anything was removed.
pub async fn down(docker: &bollard::Docker, settings: &Settings) -> Result<bool, Error> {
    match settings.cluster.provider {
        Provider::K3s => k3s::down(docker, settings).await,
        Provider::Kind => kind::down(docker, settings).await,
    }
}
