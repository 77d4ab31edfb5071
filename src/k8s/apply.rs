//! Server-side apply of multi-document YAML, in dependency order:
//! namespaces and CRDs first (waiting for the CRDs to be Established), then
//! everything else, with discovery refreshed in between so new kinds resolve.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use serde_json::Value;

use super::FIELD_MANAGER;
use super::conditions::Condition;
use super::wait::{Budget, Verdict, Wait};
use crate::error::Error;

/// Every non-empty document of a multi-document YAML stream.
pub fn parse_documents(yaml: &str, origin: &str) -> Result<Vec<Value>, Error> {
    let docs: Vec<Value> = serde_saphyr::from_str_multiple(yaml).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!(":{}:{}", l.line(), l.column()))
            .unwrap_or_default();
        Error::user(format!(
            "{origin}{at}: invalid YAML: {}",
            crate::profile::load::raw_message(&e)
        ))
    })?;
    Ok(docs
        .into_iter()
        .filter(|d| d.is_object() && d.get("kind").is_some())
        .collect())
}

fn describe(doc: &Value) -> String {
    let kind = doc["kind"].as_str().unwrap_or("?");
    let name = doc["metadata"]["name"].as_str().unwrap_or("?");
    match doc["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// The order objects are applied in: namespaces and CRDs first, what the
/// rest refers to (accounts, roles, config, services, sources) next, and
/// what acts on the rest last: workloads, whose pods need their service
/// account and config, and Flux's reconcilers, which read their sources and
/// substituted facts the moment they exist. Each wave is applied at once.
fn wave_of(doc: &Value) -> usize {
    match doc["kind"].as_str() {
        Some("Namespace" | "CustomResourceDefinition") => 0,
        Some(
            "Deployment" | "StatefulSet" | "DaemonSet" | "Job" | "CronJob" | "Pod" | "ReplicaSet"
            | "Kustomization" | "HelmRelease",
        ) => 2,
        _ => 1,
    }
}

/// Requests in flight at once within a wave: enough to hide the API
/// server's round trips, few enough not to queue behind its own limits.
const CONCURRENT_APPLIES: usize = 8;

/// Applies `docs`; returns how many objects were applied. Waiting for the
/// CRDs to be Established spends `budget`.
pub async fn apply_all(
    client: &kube::Client,
    docs: &[Value],
    budget: Budget,
) -> Result<usize, Error> {
    let mut waves: [Vec<&Value>; 3] = Default::default();
    for doc in docs {
        waves[wave_of(doc)].push(doc);
    }
    let mut discovery = run_discovery(client).await?;
    apply_wave(client, &discovery, &waves[0]).await?;
    let crds: Vec<String> = waves[0]
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .filter_map(|d| d["metadata"]["name"].as_str().map(String::from))
        .collect();
    if !crds.is_empty() {
        wait_crds_established(client, &crds, budget).await?;
        discovery = run_discovery(client).await?;
    }
    for wave in &waves[1..] {
        apply_wave(client, &discovery, wave).await?;
    }
    Ok(docs.len())
}

async fn apply_wave(
    client: &kube::Client,
    discovery: &Discovery,
    docs: &[&Value],
) -> Result<(), Error> {
    use futures::{StreamExt, TryStreamExt};
    futures::stream::iter(docs.iter().map(|doc| apply_one(client, discovery, doc)))
        .buffer_unordered(CONCURRENT_APPLIES)
        .try_collect()
        .await
}

async fn run_discovery(client: &kube::Client) -> Result<Discovery, Error> {
    Discovery::new(client.clone())
        .run_aggregated()
        .await
        .map_err(|e| Error::internal(format!("API discovery: {e}")))
}

async fn apply_one(client: &kube::Client, discovery: &Discovery, doc: &Value) -> Result<(), Error> {
    let what = describe(doc);
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = discovery.resolve_gvk(&gvk).ok_or_else(|| {
        Error::user(format!(
            "cannot apply {what}: the cluster does not serve {api_version} {kind}"
        ))
        .with_hint(
            "install the CRD that defines it first (that is what the chain's CRDs level is for)",
        )
    })?;
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = match (caps.scope, doc["metadata"]["namespace"].as_str()) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
        (Scope::Namespaced, None) => Api::default_namespaced_with(client.clone(), &resource),
        (Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(doc),
    )
    .await
    .map(|_| ())
    .map_err(|e| match &e {
        kube::Error::Api(status) if (400..500).contains(&status.code) => {
            Error::user(format!("cannot apply {what}: {}", status.message))
                .with_hint("fix the manifest; the API server's message names the field")
        }
        _ => Error::internal(format!("cannot apply {what}: {e}")),
    })
}

/// Waits for every CRD named, with one watch of them all.
pub async fn wait_crds_established(
    client: &kube::Client,
    names: &[String],
    budget: Budget,
) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let what = match names {
        [name] => format!("CRD {name}"),
        _ => format!("{} CRDs", names.len()),
    };
    Wait::new(what, "Established", budget)
        .list(api, Default::default(), |crds| {
            super::wait::every_named(names, |name| match crd_verdict(crds.get(name)) {
                Verdict::Waiting(why) => Verdict::Waiting(format!("{name}: {why}")),
                other => other,
            })
        })
        .await
        .map(|_| ())
}

fn crd_verdict(crd: Option<&CustomResourceDefinition>) -> Verdict {
    let Some(crd) = crd else {
        return Verdict::Waiting("does not exist".into());
    };
    let established = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Established"));
    match established {
        Some(c) if c.status == "True" => Verdict::Done,
        Some(c) => Verdict::Waiting(
            Condition::new(
                &c.type_,
                &c.status,
                c.reason.as_deref(),
                c.message.as_deref(),
            )
            .summary(),
        ),
        None => Verdict::Waiting("no Established condition yet".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_documents_and_skips_empty_ones() {
        let docs = parse_documents("---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: a}\n", "x.yaml").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(wave_of(&docs[0]), 0);
        assert_eq!(wave_of(&docs[1]), 1);
        assert_eq!(describe(&docs[1]), "ConfigMap a/b");
    }

    #[test]
    fn invalid_yaml_names_the_file_and_position() {
        let err = parse_documents("a: [\n", "broken.yaml").unwrap_err();
        assert!(
            err.message().starts_with("broken.yaml:"),
            "{}",
            err.message()
        );
    }
}
