//! Server-side apply of multi-document YAML, in dependency order:
//! namespaces and CRDs first (waiting for the CRDs to be Established), then
//! everything else, with discovery refreshed in between so new kinds resolve.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};
use serde_json::Value;

use super::FIELD_MANAGER;
use crate::error::{Error, Kind};

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

fn is_first_wave(doc: &Value) -> bool {
    matches!(
        doc["kind"].as_str(),
        Some("Namespace" | "CustomResourceDefinition")
    )
}

/// Applies `docs`; returns how many objects were applied.
pub async fn apply_all(
    client: &kube::Client,
    docs: &[Value],
    crd_timeout: Duration,
) -> Result<usize, Error> {
    let (first, rest): (Vec<&Value>, Vec<&Value>) = docs.iter().partition(|d| is_first_wave(d));
    let mut discovery = run_discovery(client).await?;
    for doc in &first {
        apply_one(client, &discovery, doc).await?;
    }
    let crds: Vec<String> = first
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .filter_map(|d| d["metadata"]["name"].as_str().map(String::from))
        .collect();
    if !crds.is_empty() {
        wait_crds_established(client, &crds, crd_timeout).await?;
        discovery = run_discovery(client).await?;
    }
    for doc in &rest {
        apply_one(client, &discovery, doc).await?;
    }
    Ok(docs.len())
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

pub async fn wait_crds_established(
    client: &kube::Client,
    names: &[String],
    timeout: Duration,
) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let started = Instant::now();
    for name in names {
        loop {
            let established = api.get_opt(name).await.ok().flatten().is_some_and(|crd| {
                crd.status.and_then(|s| s.conditions).is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                })
            });
            if established {
                break;
            }
            if started.elapsed() >= timeout {
                return Err(Error::new(
                    Kind::Timeout,
                    format!(
                        "CRD {name} was not Established within {}s",
                        timeout.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_documents_and_skips_empty_ones() {
        let docs = parse_documents("---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: a}\n", "x.yaml").unwrap();
        assert_eq!(docs.len(), 2);
        assert!(is_first_wave(&docs[0]));
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
