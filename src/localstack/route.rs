//! LocalStack as a container reached by pods: the Service without selector
//! in the cluster pointed at the container's address on the stack network.

use std::sync::Arc;

use crate::docker::Engine;
use crate::error::Error;
use crate::profile::Settings;

/// Points the in-cluster LocalStack name at the container, when both exist.
/// Returns whether LocalStack is routed.
pub async fn route_localstack(
    docker: &bollard::Docker,
    settings: &Settings,
    kubeconfig_yaml: &str,
) -> Result<bool, Error> {
    let endpoint = super::describe(docker, settings).await?;
    let Some(ip) = endpoint.network_ip else {
        return Ok(false);
    };
    let client = crate::k8s::client_from_kubeconfig(kubeconfig_yaml).await?;
    crate::k8s::route_localstack(&client, &settings.names, &ip).await?;
    Ok(true)
}

/// After LocalStack (re)starts: re-point the cluster at its new address when
/// the stack has a reachable cluster.
pub async fn reroute_after_localstack(
    docker: &bollard::Docker,
    settings: &Settings,
) -> Result<bool, Error> {
    let path = crate::state::kubeconfig_path(settings);
    let Ok(config) = std::fs::read_to_string(&path) else {
        return Ok(false);
    };
    let engine: Arc<dyn Engine> = Arc::new(docker.clone());
    if !crate::cluster::exists(&engine, settings).await? {
        return Ok(false);
    }
    route_localstack(docker, settings, &config).await
}
