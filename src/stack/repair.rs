//! What `up` finds drifted on an existing stack and repairs: how it names
//! each repair, the Flux objects it restores, ESO's Deployments scaled to
//! zero, and the crashed pods it recreates.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::gitops;
use crate::localstack::Action;

/// What `up` did to an existing stack's LocalStack, as one line: how it
/// found the container, and what it put back into a LocalStack that lost
/// its state (the seeded secrets; the GitOps source, which the GitOps step
/// republishes on every `up`). `kept_state`: the GitOps bucket was there.
pub(super) fn localstack_repair(
    action: &Action,
    kept_state: bool,
    reseeded: usize,
) -> Option<String> {
    let mut restored = Vec::new();
    if reseeded > 0 {
        restored.push(format!("re-seeded {reseeded} secret(s)"));
    }
    if !kept_state {
        restored.push("re-published the GitOps source".to_string());
    }
    let restored = restored.join(", ");
    let then = |what: String| {
        if restored.is_empty() {
            what
        } else {
            format!("{what}; {restored}")
        }
    };
    match action {
        Action::Created => Some(then("LocalStack container was missing: created it".into())),
        Action::Restarted => Some(then("LocalStack was stopped: restarted it".into())),
        Action::Recreated(why) => Some(then(format!("LocalStack recreated ({why})"))),
        Action::Reused if !kept_state => Some(format!(
            "LocalStack restarted and lost its state: {restored}"
        )),
        Action::Reused if reseeded > 0 => Some(format!(
            "{reseeded} secret(s) were missing in LocalStack: seeded them"
        )),
        Action::Reused => None,
    }
}

/// The chain's Flux objects that do not exist or are being deleted (drift
/// `up` repairs).
pub(super) async fn missing_flux_objects(
    client: &kube::Client,
    plan: &gitops::ChainPlan,
) -> BTreeSet<String> {
    let gone = |found: Result<Option<kube::api::DynamicObject>, kube::Error>| match found {
        Ok(None) => true,
        Ok(Some(object)) => object.metadata.deletion_timestamp.is_some(),
        // Flux not installed, or the API unreachable: nothing to say yet.
        Err(_) => false,
    };
    let mut missing = BTreeSet::new();
    let ks = gitops::chain::kustomizations(client);
    for name in std::iter::once(plan.root()).chain(plan.chain_levels()) {
        if gone(ks.get_opt(&name).await) {
            missing.insert(format!("Kustomization {}/{name}", gitops::FLUX_NAMESPACE));
        }
    }
    let Some((namespace, release)) = plan.release() else {
        return missing;
    };
    let releases = gitops::chain::helm_releases(client, &namespace);
    if gone(releases.get_opt(&release).await) {
        missing.insert(format!("HelmRelease {namespace}/{release}"));
    }
    missing
}

/// ESO's Deployments that `up` found scaled to zero and gave a replica.
#[derive(Default)]
pub(super) struct Rescaled {
    namespace: String,
    names: Vec<String>,
}

impl Rescaled {
    /// Waits until each is Available: the operator level is Ready from
    /// before and would not wait for them.
    pub(super) async fn wait_available(
        &self,
        client: &kube::Client,
        settings: &crate::profile::Settings,
    ) -> Result<(), crate::Error> {
        if self.names.is_empty() {
            return Ok(());
        }
        let namespace = &self.namespace;
        let budget = crate::k8s::wait::Budget::new(settings.timeouts.eso.get(), "timeouts.eso");
        let advice =
            format!("`kubectl -n {namespace} describe deployments` says why they do not start");
        crate::k8s::wait_deployments_available(client, namespace, &self.names, budget, &advice)
            .await
    }

    pub(super) fn repairs(&self) -> impl Iterator<Item = String> + '_ {
        self.names.iter().map(|name| {
            format!(
                "Deployment {}/{name} was scaled to 0: gave it 1 replica",
                self.namespace
            )
        })
    }
}

/// ESO's Deployments scaled to zero by hand: the operator level's health
/// checks pass on them (none of none ready) while nothing serves, and Helm
/// leaves them so. Each gets one replica back.
pub(super) async fn restore_scaled_down(
    client: &kube::Client,
    names: &crate::profile::StackNames,
) -> Rescaled {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Patch, PatchParams};
    let (namespace, release) = names.helm_release();
    let api: kube::Api<Deployment> = kube::Api::namespaced(client.clone(), &namespace);
    let mut rescaled = Vec::new();
    // A stack that shares the cluster has only the controller.
    for name in gitops::chain::eso_deployments(&release) {
        let Ok(Some(deployment)) = api.get_opt(&name).await else {
            continue;
        };
        if deployment.spec.replicas != Some(0) {
            continue;
        }
        let patch = serde_json::json!({"spec": {"replicas": 1}});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => rescaled.push(name),
            Err(e) => tracing::debug!("scaling {namespace}/{name} back to 1: {e}"),
        }
    }
    Rescaled {
        namespace,
        names: rescaled,
    }
}

/// Gives the cluster's own pods that crashed while a node that started
/// again (restored, or its container restarted) did not yet serve its API
/// certificate a fresh start (see
/// [`crate::k8s::sandbox::recreate_crashed_pods`]): otherwise the Flux
/// controllers and ESO come back only after kubelet's 10 + 20 s back-off.
async fn recreate_crashed_pods(client: kube::Client, recreated: Arc<Mutex<Vec<String>>>) {
    let namespaces = [
        "kube-system",
        // The kit's Kind node image runs flannel there.
        "kube-flannel",
        crate::gitops::FLUX_NAMESPACE,
        crate::gitops::SHARED_ESO_RELEASE.0,
    ];
    crate::k8s::sandbox::recreate_crashed_pods(
        client,
        &namespaces,
        Duration::from_secs(120),
        |pod| {
            tracing::info!("recreated pod {pod}: it crashed as its node started");
            if let Ok(mut pods) = recreated.lock() {
                pods.push(pod.to_string());
            }
        },
    )
    .await
}

/// Recreates the cluster's own pods that crash as their node starts again
/// (see [`recreate_crashed_pods`]), in the background until dropped.
pub(super) struct CrashedPods {
    recreated: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl CrashedPods {
    pub(super) fn watch(client: &kube::Client) -> Self {
        let recreated = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(recreate_crashed_pods(client.clone(), recreated.clone()));
        CrashedPods { recreated, task }
    }

    /// The pods recreated so far.
    pub(super) fn recreated(&self) -> Vec<String> {
        self.recreated.lock().map(|p| p.clone()).unwrap_or_default()
    }
}

impl Drop for CrashedPods {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_localstack_that_lost_its_state_is_one_repair_naming_what_came_back() {
        assert_eq!(
            localstack_repair(&Action::Reused, false, 2).as_deref(),
            Some(
                "LocalStack restarted and lost its state: re-seeded 2 secret(s), re-published the GitOps source"
            )
        );
        assert_eq!(
            localstack_repair(&Action::Restarted, false, 1).as_deref(),
            Some(
                "LocalStack was stopped: restarted it; re-seeded 1 secret(s), re-published the GitOps source"
            )
        );
        assert_eq!(
            localstack_repair(&Action::Created, false, 0).as_deref(),
            Some("LocalStack container was missing: created it; re-published the GitOps source")
        );
        // A secret deleted by hand, LocalStack otherwise as it was.
        assert_eq!(
            localstack_repair(&Action::Reused, true, 1).as_deref(),
            Some("1 secret(s) were missing in LocalStack: seeded them")
        );
        assert_eq!(localstack_repair(&Action::Reused, true, 0), None);
    }
}
