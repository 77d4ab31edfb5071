//! LocalStack as a container reached by pods: the Service without selector
//! in the cluster pointed at the container's address on the stack network.

use crate::docker::Engine;
use crate::error::Error;
use crate::profile::Settings;

/// Points the in-cluster LocalStack name at the container, when it has an
/// address on the stack network, through the caller's client of the stack's
/// cluster. Returns whether LocalStack is routed.
pub async fn route_for_pods(
    docker: &dyn Engine,
    settings: &Settings,
    client: &kube::Client,
) -> Result<bool, Error> {
    let endpoint = super::describe(docker, settings).await?;
    let Some(ip) = endpoint.network_ip else {
        return Ok(false);
    };
    crate::k8s::apply_localstack_service_and_endpoints(client, &settings.names, &ip).await?;
    Ok(true)
}
