//! The devstack stacks on a cluster, known by the facts ConfigMap each one
//! keeps in flux-system: what a stack joining a cluster devstack did not
//! create, and one leaving it, must know of the others.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use super::FLUX_NAMESPACE;
use crate::error::Error;
use crate::profile::names::base;

/// A devstack stack on a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackOnCluster {
    pub name: String,
    /// It uses the shipped names: it came first.
    pub first: bool,
}

/// The devstack stacks on the cluster, the first one first.
pub async fn stacks_on_cluster(client: &kube::Client) -> Result<Vec<StackOnCluster>, Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), FLUX_NAMESPACE);
    let params = kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=devstack");
    let list = match api.list(&params).await {
        Ok(list) => list.items,
        // No flux-system yet: no stack either.
        Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
        Err(e) => {
            return Err(Error::internal(format!(
                "list ConfigMaps in {FLUX_NAMESPACE}: {e}"
            )));
        }
    };
    let mut stacks: Vec<StackOnCluster> = list
        .into_iter()
        .filter_map(|facts| {
            let name = facts.metadata.name?;
            if !name.starts_with(base::FACTS) {
                return None;
            }
            let stack = facts.data.and_then(|d| d.get("STACK_NAME").cloned())?;
            Some(StackOnCluster {
                first: name == base::FACTS,
                name: stack,
            })
        })
        .collect();
    stacks.sort_by(|a, b| (!a.first, &a.name).cmp(&(!b.first, &b.name)));
    Ok(stacks)
}

/// The stack that came first on the cluster, when it is not `stack`: it
/// holds the shipped names, which `stack` then must not use.
pub fn first_other<'s>(stacks: &'s [StackOnCluster], stack: &str) -> Option<&'s StackOnCluster> {
    stacks.iter().find(|s| s.first && s.name != stack)
}
