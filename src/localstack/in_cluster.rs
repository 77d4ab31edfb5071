//! LocalStack inside the cluster (`localstack.mode: in-cluster`): the
//! objects of the shipped `localstack` Flux level, applied by devstack
//! before the chain starts (the Bucket source is served by LocalStack
//! itself), waited on until LocalStack's own health check passes, and
//! reached from this machine through a port-forward.

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use serde_json::{Value, json};

use super::{Action, Endpoint, HealthClient, LocalStackReport, unavailable_services};
use crate::error::{Error, Kind};
use crate::k8s::forward::PortForward;
use crate::k8s::{Budget, LOCALSTACK_PORT};
use crate::profile::StackNames;
use crate::profile::{LocalStackMode, Settings};

/// The pods of the shipped Deployment.
pub const SELECTOR: &str = "app.kubernetes.io/name=localstack";
/// Holds `LOCALSTACK_AUTH_TOKEN` when the profile's token variable is set.
const AUTH_SECRET: &str = "localstack-auth";
/// Holds `localstack.env`.
const ENV_CONFIGMAP: &str = "localstack-env";

/// Applies LocalStack's Namespace, Deployment and Service (and the Secret
/// and ConfigMap the Deployment reads from the profile), waits until it is
/// rolled out and every service the stack needs reports available, and
/// returns the report with the port-forward that reaches it: the forward
/// lives as long as the returned value.
pub async fn up(
    client: &kube::Client,
    settings: &Settings,
    progress: &dyn Fn(&str),
) -> Result<(LocalStackReport, PortForward), Error> {
    let started = Instant::now();
    let namespace = settings.names.localstack_namespace();
    let name = settings.names.localstack_service();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    let before = deployments
        .get_opt(name)
        .await
        .map_err(|e| Error::internal(format!("read Deployment {namespace}/{name}: {e}")))?;
    for object in objects(settings)? {
        crate::k8s::apply(client, &object).await?;
    }
    let after = deployments.get_opt(name).await.ok().flatten();
    let action = match (before, after) {
        (None, _) => Action::Created,
        (Some(b), Some(a)) if b.metadata.generation != a.metadata.generation => {
            Action::Recreated("its Deployment changed".into())
        }
        _ => Action::Reused,
    };
    progress("waiting for its Deployment to be Available");
    let timeout = settings.timeouts.localstack.get();
    let budget = Budget::since(started, timeout, "timeouts.localstack");
    let deployment_names = [name.to_string()];
    let advice = format!(
        "`kubectl -n {namespace} describe pods` shows why its pod does not start (an image the nodes cannot pull, too little memory)"
    );
    let available = crate::k8s::wait_deployments_available(
        client,
        &namespace,
        &deployment_names,
        budget,
        &advice,
    );
    crate::k8s::sandbox::wait_recreating_failed_sandboxes(
        available,
        client,
        &namespace,
        SELECTOR,
        |pod| progress(&format!("pod {pod} recreated: its sandbox failed")),
    )
    .await?;
    let forward = open_forward(client, &settings.names, None).await?;
    progress("waiting for services to report available");
    let services = wait_services(settings, &forward, started).await?;
    let report = LocalStackReport {
        action,
        endpoint: Endpoint {
            container: format!("Deployment {namespace}/{name}"),
            url: forward.url(),
            host_port: forward.local_addr().port(),
            network_ip: None,
        },
        services,
        healthy_after: started.elapsed(),
    };
    Ok((report, forward))
}

/// A port-forward to the stack's in-cluster LocalStack, on `local_port`
/// (a free one when `None`).
pub async fn open_forward(
    client: &kube::Client,
    names: &StackNames,
    local_port: Option<u16>,
) -> Result<PortForward, Error> {
    PortForward::open(
        client.clone(),
        &names.localstack_namespace(),
        SELECTOR,
        LOCALSTACK_PORT,
        local_port,
    )
    .await
}

/// LocalStack as this machine reaches it: the settings every AWS client
/// uses, and for `in-cluster` the port-forward they go through, open while
/// this value lives.
pub struct Reached {
    pub settings: Settings,
    pub forward: Option<PortForward>,
}

/// The stack's LocalStack reached from this machine: the container's host
/// port as recorded, or a port-forward opened to the in-cluster Deployment.
pub async fn reach(settings: &Settings) -> Result<Reached, Error> {
    if settings.localstack.mode != LocalStackMode::InCluster {
        super::require_port(settings)?;
        return Ok(Reached {
            settings: settings.clone(),
            forward: None,
        });
    }
    let client = crate::k8s::stack_client(settings).await.map_err(|e| {
        e.context(format!(
            "stack `{}` runs LocalStack in its cluster, which does not answer",
            settings.name
        ))
    })?;
    let forward = open_forward(&client, &settings.names, None).await?;
    Ok(Reached {
        settings: settings.with_localstack_port(forward.local_addr().port()),
        forward: Some(forward),
    })
}

/// The objects to apply: the shipped level's, with the stack's facts, and
/// the profile's token and environment beside them.
fn objects(settings: &Settings) -> Result<Vec<Value>, Error> {
    let facts = crate::gitops::source::facts(settings, None, &BTreeMap::new());
    let mut objects = crate::gitops::manifests::localstack_objects(&facts, &settings.names)?;
    let namespace = settings.names.localstack_namespace();
    let token = crate::envvars::get(&settings.localstack.auth_token_env);
    if let Some(token) = token {
        objects.push(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": AUTH_SECRET, "namespace": namespace},
            "type": "Opaque",
            "stringData": {"token": token},
        }));
    }
    if !settings.localstack.env.is_empty() {
        objects.push(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": ENV_CONFIGMAP, "namespace": namespace},
            "data": settings.localstack.env,
        }));
    }
    for object in &mut objects {
        object["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("devstack");
        object["metadata"]["labels"][crate::docker::LABEL_STACK] = json!(settings.name);
    }
    Ok(objects)
}

/// Polls LocalStack's `/_localstack/health` through the forward until every
/// service the stack needs reports available.
async fn wait_services(
    settings: &Settings,
    forward: &PortForward,
    started: Instant,
) -> Result<BTreeMap<String, String>, Error> {
    let timeout = settings.timeouts.localstack.get();
    let client = HealthClient::new(&forward.url())?;
    loop {
        let last = match client.services().await {
            Ok(services) => {
                let missing = unavailable_services(settings, &services);
                if missing.is_empty() {
                    return Ok(services);
                }
                let missing: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
                format!("waiting for {}", missing.join(", "))
            }
            Err(e) => forward.last_error().unwrap_or(e),
        };
        if started.elapsed() >= timeout {
            return Err(Error::new(
                Kind::Timeout,
                format!(
                    "LocalStack in the cluster was not healthy within {}: {last}",
                    settings.timeouts.localstack
                ),
            )
            .with_hint(format!(
                "`kubectl -n {} logs deploy/localstack` shows LocalStack's log; raise `timeouts.localstack` on a slow machine",
                settings.names.localstack_namespace()
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        crate::profile::select(Some("ci"), &Default::default()).unwrap()
    }

    #[test]
    fn objects_are_labelled_as_the_stack_s_and_carry_the_profile_env() {
        let mut settings = settings();
        settings.localstack.env.insert("DEBUG".into(), "1".into());
        let objects = objects(&settings).unwrap();
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert!(
            kinds.starts_with(&["Namespace", "Deployment", "Service"]),
            "{kinds:?}"
        );
        assert!(kinds.contains(&"ConfigMap"), "{kinds:?}");
        for object in &objects {
            assert_eq!(
                object["metadata"]["labels"][crate::docker::LABEL_STACK],
                settings.name
            );
        }
        let deployment = &objects[1];
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["image"],
            settings.localstack.image
        );
        let config = objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
        assert_eq!(config["data"]["DEBUG"], "1");
    }
}
