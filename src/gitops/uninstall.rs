//! What `down` removes from a cluster devstack did not create: what the
//! stack applied there, itself or through Flux, and Flux when this stack
//! installed it. Namespaces, CRDs and workloads that were there before stay.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::ListParams;
use serde_json::Value;

use super::census::StackOnCluster;
use super::{ChainPlan, FLUX_NAMESPACE, flux};
use crate::docker::LABEL_STACK;
use crate::error::Error;
use crate::k8s;
use crate::profile::Settings;

const KUSTOMIZATION_API: &str = "kustomize.toolkit.fluxcd.io/v1";
const HELM_RELEASE_API: &str = "helm.toolkit.fluxcd.io/v2";
const MANAGED_BY: &str = "app.kubernetes.io/managed-by=devstack";

/// Removes the stack from the cluster, where `settings` name its objects
/// as they are named there and `stacks` are the devstack stacks on it
/// ([`super::census`]); returns what it removed, as the user reads it.
pub async fn uninstall(
    client: &kube::Client,
    settings: &Settings,
    stacks: &[StackOnCluster],
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<String>, Error> {
    let limit = settings.timeouts.flux.get();
    let mut removed = Vec::new();
    let names = &settings.names;
    refuse_while_others_share_eso(settings, stacks)?;
    // While ESO still runs, so that nothing holds them.
    removed.extend(remove_profile_external_secrets(client, settings).await?);
    // The apps first, while the chain that serves them still runs.
    if !super::repository::app_kustomizations(settings).is_empty() {
        progress("waiting for Flux to remove what the apps applied");
    }
    removed.extend(super::repository::remove(client, settings, limit).await?);
    let root = names.root();
    if k8s::delete(
        client,
        KUSTOMIZATION_API,
        "Kustomization",
        Some(FLUX_NAMESPACE),
        &root,
    )
    .await?
    {
        progress("waiting for Flux to remove what the chain applied");
        wait_flux_pruned(client, settings, limit).await?;
        remove_left_crds(client, settings).await?;
        removed.push(format!(
            "Kustomization {FLUX_NAMESPACE}/{root} and what Flux applied for it"
        ));
    }
    // Both source kinds: `down --all` reads the stack through a profile that
    // may name the other one.
    for (api_version, kind, name) in [
        ("source.toolkit.fluxcd.io/v1", "Bucket", names.source()),
        (
            "source.toolkit.fluxcd.io/v1",
            "GitRepository",
            names.source(),
        ),
        ("v1", "ConfigMap", names.facts()),
    ] {
        if k8s::delete(client, api_version, kind, Some(FLUX_NAMESPACE), &name).await? {
            removed.push(format!("{kind} {FLUX_NAMESPACE}/{name}"));
        }
    }
    removed.extend(remove_namespaces(client, settings, limit, progress).await?);
    removed.extend(remove_flux(client, settings, limit, progress).await?);
    Ok(removed)
}

/// Kustomizations' finalizers prune what they applied; the HelmRelease's
/// uninstalls the chart. Both need Flux's controllers, so Flux waits.
async fn wait_flux_pruned(
    client: &kube::Client,
    settings: &Settings,
    limit: Duration,
) -> Result<(), Error> {
    let plan = ChainPlan::of(settings);
    let mut pending = Vec::new();
    for level in plan.levels() {
        let name = format!("Kustomization {FLUX_NAMESPACE}/{level}");
        let api = (
            KUSTOMIZATION_API,
            "Kustomization",
            FLUX_NAMESPACE.to_string(),
            level,
        );
        pending.push((name, api));
    }
    // A HelmRelease of that name beside the cluster's own ESO is not the stack's.
    if let Some((namespace, release)) = plan.release() {
        pending.push((
            format!("HelmRelease {namespace}/{release}"),
            (HELM_RELEASE_API, "HelmRelease", namespace, release),
        ));
    }
    for (what, (api_version, kind, namespace, name)) in pending {
        if !k8s::wait_gone(client, api_version, kind, Some(&namespace), &name, limit).await {
            return Err(Error::timeout(format!(
                "{what} was not removed within {}",
                settings.timeouts.flux
            ))
            .with_hint(format!(
                "`kubectl -n {namespace} describe {} {name}` shows what holds it; `devstack down` again finishes the job",
                kind.to_lowercase()
            )));
        }
    }
    Ok(())
}

/// The stacks that joined this stack's cluster use the ESO CRDs, webhook
/// and cert-controller it installed: taking them away would break those
/// stacks, so this stack goes down after them.
fn refuse_while_others_share_eso(
    settings: &Settings,
    stacks: &[StackOnCluster],
) -> Result<(), Error> {
    if !ChainPlan::of(settings).installs_eso_shared {
        return Ok(());
    }
    let others: Vec<&str> = stacks
        .iter()
        .map(|s| s.name.as_str())
        .filter(|s| *s != settings.name)
        .collect();
    if others.is_empty() {
        return Ok(());
    }
    let list = others.join("`, `");
    Err(Error::user(format!(
        "stack `{}` installed the External Secrets Operator's CRDs and webhook that stack(s) `{list}` on the same cluster use",
        settings.name
    ))
    .with_hint(format!(
        "take those down first (`devstack --name {} down`), then this one; nothing was removed",
        others[0]
    )))
}

/// CRDs the chain's levels applied that Flux's pruning left behind (seen
/// with ESO's generator CRDs).
async fn remove_left_crds(client: &kube::Client, settings: &Settings) -> Result<(), Error> {
    let levels = super::levels(settings).join(",");
    let selector = format!(
        "kustomize.toolkit.fluxcd.io/namespace={FLUX_NAMESPACE},kustomize.toolkit.fluxcd.io/name in ({levels})"
    );
    let crds = k8s::dynamic_api(
        client,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        None,
    );
    let list = crds
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| Error::internal(format!("list CRDs: {e}")))?;
    for crd in list.items {
        if let Some(name) = crd.metadata.name {
            k8s::delete(
                client,
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                None,
                &name,
            )
            .await?;
        }
    }
    Ok(())
}

/// The ExternalSecrets devstack applied for the profile's secrets.
async fn remove_profile_external_secrets(
    client: &kube::Client,
    settings: &Settings,
) -> Result<Vec<String>, Error> {
    let api = k8s::dynamic_api(client, "external-secrets.io/v1", "ExternalSecret", None);
    let selector = format!("{MANAGED_BY},{LABEL_STACK}={}", settings.name);
    // Without ESO's CRDs there are none.
    let Ok(list) = api.list(&ListParams::default().labels(&selector)).await else {
        return Ok(Vec::new());
    };
    let mut removed = Vec::new();
    for object in list.items {
        let (Some(name), Some(namespace)) = (object.metadata.name, object.metadata.namespace)
        else {
            continue;
        };
        if k8s::delete(
            client,
            "external-secrets.io/v1",
            "ExternalSecret",
            Some(&namespace),
            &name,
        )
        .await?
        {
            removed.push(format!("ExternalSecret {namespace}/{name}"));
        }
    }
    Ok(removed)
}

/// Namespaces devstack created for this stack (LocalStack's, the profile's
/// sync targets it made) and the round trip's, waited on until gone.
async fn remove_namespaces(
    client: &kube::Client,
    settings: &Settings,
    limit: Duration,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<String>, Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    let list = api
        .list(&ListParams::default().labels(MANAGED_BY))
        .await
        .map_err(|e| Error::internal(format!("list namespaces: {e}")))?;
    let ours = |ns: &Namespace| {
        let labels = ns.metadata.labels.clone().unwrap_or_default();
        let name = ns.metadata.name.as_deref().unwrap_or_default();
        labels.get(LABEL_STACK) == Some(&settings.name) || name == settings.verify.namespace
    };
    let names: Vec<String> = list
        .items
        .iter()
        .filter(|ns| ours(ns))
        .filter_map(|ns| ns.metadata.name.clone())
        .collect();
    if names.is_empty() {
        return Ok(Vec::new());
    }
    progress(&format!("removing namespaces {}", names.join(", ")));
    for name in &names {
        k8s::delete(client, "v1", "Namespace", None, name).await?;
    }
    for name in &names {
        if !k8s::wait_gone(client, "v1", "Namespace", None, name, limit).await {
            return Err(Error::timeout(format!(
                "Namespace {name} was not removed within {}",
                settings.timeouts.flux
            ))
            .with_hint(format!(
                "`kubectl get namespace {name} -o yaml` shows what holds it"
            )));
        }
    }
    Ok(names.iter().map(|n| format!("Namespace {n}")).collect())
}

/// Flux, when this stack installed it and nothing else uses it: its
/// cluster-wide objects and its namespace.
async fn remove_flux(
    client: &kube::Client,
    settings: &Settings,
    limit: Duration,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<String>, Error> {
    if flux::installed_by(client).await? != Some(Some(settings.name.clone())) {
        return Ok(Vec::new());
    }
    let kustomizations = k8s::dynamic_api(client, KUSTOMIZATION_API, "Kustomization", None);
    if let Ok(others) = kustomizations.list(&ListParams::default()).await
        && !others.items.is_empty()
    {
        progress("Flux stays: other Kustomizations use it");
        return Ok(Vec::new());
    }
    progress("removing Flux, which this stack installed");
    let (text, _) = flux::manifests(settings).await?;
    let docs = flux::select_components(
        crate::k8s::apply::parse_documents(&text, "Flux install manifests")?,
        &settings.flux.components,
    );
    let cluster_wide = |doc: &&Value| doc["metadata"]["namespace"].is_null();
    for doc in docs.iter().filter(cluster_wide) {
        let (Some(api_version), Some(kind), Some(name)) = (
            doc["apiVersion"].as_str(),
            doc["kind"].as_str(),
            doc["metadata"]["name"].as_str(),
        ) else {
            continue;
        };
        k8s::delete(client, api_version, kind, None, name).await?;
    }
    k8s::wait_gone(client, "v1", "Namespace", None, FLUX_NAMESPACE, limit).await;
    Ok(vec![format!(
        "Flux {} (namespace {FLUX_NAMESPACE}, its CRDs and cluster roles)",
        settings.flux.version
    )])
}
