//! The GitOps source Flux reads without GitHub: a bucket in the stack's own
//! LocalStack S3, read by a Flux `Bucket` source (provider `generic`).
//!
//! Why S3 in LocalStack rather than an in-cluster git server or OCI
//! registry: LocalStack already runs in every stack and pods already reach
//! it by a stable name, so this needs no extra image, container or port;
//! publishing is plain S3 uploads from the host; and the source-controller's
//! Bucket support is stable and revisions objects by content, so publishing
//! unchanged files changes nothing in the cluster.
//!
//! The same bucket carries the ESO CRDs and the unpacked chart from an
//! offline bundle, so the CRDs level and the HelmRelease read them from it
//! instead of from upstream.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use aws_sdk_s3::primitives::ByteStream;
use serde_json::{Value, json};

use super::manifests::Tree;
use crate::error::Error;
use crate::profile::{GitopsSourceKind, Settings};

/// The bucket in the stack's LocalStack holding what Flux reads.
pub const BUCKET: &str = "devstack-gitops";
/// Prefixes inside the bucket.
pub const MANIFESTS_PREFIX: &str = "external-secrets";
const ESO_CRDS_PREFIX: &str = "eso/crds";
const ESO_CRDS_FILE: &str = "external-secrets-crds.yaml";
const ESO_CHART_PREFIX: &str = "eso/chart";

/// Where Flux reads the stack's manifests from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRef {
    pub kind: &'static str,
    pub name: String,
    /// Path of the manifests inside the source.
    pub path: String,
}

pub fn source_ref(settings: &Settings) -> SourceRef {
    match settings.gitops.source {
        GitopsSourceKind::Local => SourceRef {
            kind: "Bucket",
            name: settings.names.source(),
            path: format!("./{MANIFESTS_PREFIX}"),
        },
        GitopsSourceKind::Git => SourceRef {
            kind: "GitRepository",
            name: settings.names.source(),
            path: settings.gitops.git_path.clone(),
        },
    }
}

/// ESO's CRDs and chart from the offline bundle, as bucket objects.
#[derive(Debug, Clone)]
pub struct OfflineEso {
    pub objects: Tree,
    /// Chart directory inside the bucket, `./eso/chart/<name>`.
    pub chart_path: String,
}

/// Reads the bundle's ESO artifacts, when a bundle is configured and has them.
pub fn offline_eso(settings: &Settings) -> Result<Option<OfflineEso>, Error> {
    if !settings.eso.installs() {
        return Ok(None);
    }
    let Some(bundle) = crate::bundle::open(settings)? else {
        return Ok(None);
    };
    if bundle.artifact("eso-crds").is_none() || bundle.artifact("eso-chart").is_none() {
        return Ok(None);
    }
    // The chart and CRDs of the wanted version (`eso-chart` 2.9.0 and
    // `eso-crds` v2.9.0): a bundle may hold several, for upgrades.
    let wanted = &settings.eso.chart_version;
    let (Some(crds), Some(chart)) = (
        bundle.artifact_version("eso-crds", wanted),
        bundle.artifact_version("eso-chart", wanted),
    ) else {
        let held = bundle.versions_of("eso-chart");
        return Err(Error::user(format!(
            "the offline bundle holds the ESO chart and CRDs {} but the profile asks for {wanted}",
            held.join(", ")
        ))
        .with_hint(format!(
            "set `eso.chartVersion: {}` or rebuild the bundle with `make kit`",
            held.first().map(String::as_str).unwrap_or("?")
        )));
    };
    let read = |artifact| crate::artifacts::read_checked(settings, &bundle, artifact);
    let mut objects = Tree::new();
    objects.insert(format!("{ESO_CRDS_PREFIX}/{ESO_CRDS_FILE}"), read(crds)?);
    // Spares kustomize-controller generating one from ESO's 1.9 MB of CRDs on each reconcile.
    objects.insert(
        format!("{ESO_CRDS_PREFIX}/kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {ESO_CRDS_FILE}\n"
        )
        .into_bytes(),
    );
    let tgz = bundle.path_of(chart);
    let (files, chart_dir) = unpack_chart(&read(chart)?)
        .map_err(|e| Error::user(format!("cannot unpack the chart {}: {e}", tgz.display())))?;
    for (path, bytes) in files {
        objects.insert(format!("{ESO_CHART_PREFIX}/{path}"), bytes);
    }
    Ok(Some(OfflineEso {
        objects,
        chart_path: format!("./{ESO_CHART_PREFIX}/{chart_dir}"),
    }))
}

/// Files of a packaged chart and its top directory (the chart's name).
fn unpack_chart(tgz: &[u8]) -> std::io::Result<(Tree, String)> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tgz));
    let mut files = Tree::new();
    let mut top = BTreeSet::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path()?.to_string_lossy().replace('\\', "/");
        if path.split('/').any(|part| part == "..") {
            return Err(std::io::Error::other(format!(
                "unsafe path {path} in the chart"
            )));
        }
        if let Some((dir, _)) = path.split_once('/') {
            top.insert(dir.to_string());
        }
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        files.insert(path, bytes);
    }
    match top.len() {
        1 => Ok((files, top.pop_first().unwrap_or_default())),
        _ => Err(std::io::Error::other(
            "a packaged chart has exactly one top directory",
        )),
    }
}

#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PublishReport {
    pub bucket: String,
    pub objects: usize,
    pub removed: usize,
}

/// Whether the stack's LocalStack S3 holds the GitOps bucket (false also
/// when S3 does not answer).
pub async fn bucket_exists(settings: &Settings) -> bool {
    crate::aws::s3(settings)
        .head_bucket()
        .bucket(BUCKET)
        .send()
        .await
        .is_ok()
}

/// Makes the bucket hold exactly `objects` (uploads them, removes others).
pub async fn publish(settings: &Settings, objects: &Tree) -> Result<PublishReport, Error> {
    let s3 = crate::aws::s3(settings);
    let unreachable = |what: &str, e: String| {
        Error::prerequisite(format!(
            "cannot {what} in LocalStack S3 at {}: {e}",
            settings.localstack.endpoint_url()
        ))
        .with_hint("start LocalStack with `devstack localstack up` (or `devstack up`); S3 must be in `localstack.services`")
    };
    let exists = s3.head_bucket().bucket(BUCKET).send().await.is_ok();
    if !exists {
        let mut create = s3.create_bucket().bucket(BUCKET);
        if settings.localstack.region != "us-east-1" {
            use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};
            create = create.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(
                        settings.localstack.region.as_str(),
                    ))
                    .build(),
            );
        }
        create
            .send()
            .await
            .map_err(|e| unreachable("create bucket `devstack-gitops`", aws_message(&e)))?;
    }
    let mut stale = BTreeSet::new();
    let mut pages = s3.list_objects_v2().bucket(BUCKET).into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| unreachable("list the GitOps bucket", aws_message(&e)))?;
        for object in page.contents() {
            if let Some(key) = object.key()
                && !objects.contains_key(key)
            {
                stale.insert(key.to_string());
            }
        }
    }
    let uploads = objects.iter().map(|(key, bytes)| {
        let s3 = s3.clone();
        async move {
            s3.put_object()
                .bucket(BUCKET)
                .key(key)
                .body(ByteStream::from(bytes.clone()))
                .send()
                .await
                .map_err(|e| unreachable(&format!("upload {key}"), aws_message(&e)))
        }
    });
    futures::future::try_join_all(uploads).await?;
    for key in &stale {
        s3.delete_object()
            .bucket(BUCKET)
            .key(key)
            .send()
            .await
            .map_err(|e| unreachable(&format!("remove {key}"), aws_message(&e)))?;
    }
    Ok(PublishReport {
        bucket: BUCKET.into(),
        objects: objects.len(),
        removed: stale.len(),
    })
}

fn aws_message<E: std::error::Error>(err: &E) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

/// The chart values of the profile (`eso.values`), and where the nodes pull
/// ESO's image themselves, the image from its registry's mirror for the
/// operator, the webhook and the cert-controller, unless the profile names
/// one.
fn eso_values(settings: &Settings) -> serde_json::Map<String, Value> {
    let mut values = settings.eso.values.clone();
    if let Some(class) = settings.controller_class() {
        values.insert("controllerClass".into(), json!(class));
    }
    if settings.names.shares_cluster() {
        // The CRDs, the webhook and the cert-controller are the first
        // stack's (their cluster-wide names allow one of each); this
        // release adds only the controller that reaches this stack's
        // LocalStack.
        for part in ["webhook", "certController"] {
            values.insert(part.into(), json!({"create": false}));
        }
        values.insert("installCRDs".into(), json!(false));
    }
    let eso_image = crate::artifacts::eso_image(&settings.eso.chart_version);
    let Some((repository, tag)) =
        crate::artifacts::mirrors::node_image(&settings.images, &eso_image)
    else {
        return values;
    };
    for component in [None, Some("webhook"), Some("certController")] {
        let section = match component {
            None => Some(&mut values),
            Some(key) => values
                .entry(key)
                .or_insert_with(|| json!({}))
                .as_object_mut(),
        };
        let image = section.and_then(|s| {
            s.entry("image")
                .or_insert_with(|| json!({}))
                .as_object_mut()
        });
        if let Some(image) = image
            && !image.contains_key("repository")
            && !image.contains_key("tag")
        {
            image.insert("repository".into(), json!(repository));
            image.insert("tag".into(), json!(tag));
        }
    }
    values
}

/// The stack's facts for `postBuild.substituteFrom`: what devstack knows
/// that manifests should not hard-code.
pub fn facts(
    settings: &Settings,
    offline: Option<&OfflineEso>,
    secret_arns: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let source = source_ref(settings);
    let mut facts = BTreeMap::from([
        ("STACK_NAME".to_string(), settings.name.clone()),
        ("AWS_REGION".into(), settings.localstack.region.clone()),
        (
            "LOCALSTACK_IMAGE".into(),
            crate::artifacts::mirrors::node_reference(&settings.images, &settings.localstack.image),
        ),
        (
            "LOCALSTACK_SERVICES".into(),
            settings.localstack.services.join(","),
        ),
        (
            "LOCALSTACK_ENDPOINT".into(),
            crate::k8s::localstack_in_cluster_url(&settings.names),
        ),
        (
            "DEVSTACK_INTERVAL".into(),
            settings.gitops.interval.to_string(),
        ),
        ("DEVSTACK_SOURCE_KIND".into(), source.kind.to_string()),
        ("DEVSTACK_SOURCE_NAME".into(), source.name.clone()),
        ("DEVSTACK_MANIFESTS_PATH".into(), source.path.clone()),
        (
            "ESO_CHART_VERSION".into(),
            settings.eso.chart_version.clone(),
        ),
    ]);
    if let Some(offline) = offline {
        for (key, value) in [
            ("ESO_CRDS_SOURCE_KIND", "Bucket".to_string()),
            ("ESO_CRDS_SOURCE_NAME", settings.names.source()),
            ("ESO_CRDS_PATH", format!("./{ESO_CRDS_PREFIX}")),
            ("ESO_CHART", offline.chart_path.clone()),
            ("ESO_CHART_SOURCE_KIND", "Bucket".to_string()),
            ("ESO_CHART_SOURCE_NAME", settings.names.source()),
        ] {
            facts.insert(key.into(), value);
        }
    }
    let names: Vec<&str> = settings.secrets.iter().map(|s| s.name.as_str()).collect();
    facts.insert("SEEDED_SECRETS".into(), names.join(","));
    for (name, arn) in secret_arns {
        facts.insert(format!("SECRET_{}_ARN", fact_key(name)), arn.clone());
    }
    parameter_facts(settings, &mut facts);
    facts
}

/// The parameters' facts: their names (`SEEDED_PARAMETERS`) and ARNs
/// (`PARAMETER_<X>_ARN`, `/dev/app/db-url` -> `PARAMETER_DEV_APP_DB_URL_ARN`).
/// A parameter's ARN follows from its name, unlike a secret's (which ends
/// in a random suffix), so no lookup is needed; and with `eso.auth:
/// serviceAccount`, the role the stores assume (`DEVSTACK_ESO_ROLE_ARN`).
fn parameter_facts(settings: &Settings, facts: &mut BTreeMap<String, String>) {
    use crate::seed::role;
    if !settings.parameters.is_empty() {
        let names: Vec<&str> = settings
            .parameters
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        facts.insert("SEEDED_PARAMETERS".into(), names.join(","));
    }
    for p in &settings.parameters {
        let arn = crate::profile::parameters::parameter_arn(
            &settings.localstack.region,
            role::LOCALSTACK_ACCOUNT,
            &p.name,
        );
        let key = fact_key(p.name.trim_start_matches('/'));
        facts.insert(format!("PARAMETER_{key}_ARN"), arn);
    }
    if settings.eso.auth == crate::profile::parameters::EsoAuth::ServiceAccount {
        facts.insert("DEVSTACK_ESO_ROLE_ARN".into(), role::role_arn(settings));
    }
}

/// Whether any of `tree`'s files substitutes `${key` (postBuild syntax).
pub fn substitutes(tree: &Tree, key: &str) -> bool {
    let needle = format!("${{{key}");
    tree.values()
        .any(|bytes| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
}

/// `app/db-password` -> `APP_DB_PASSWORD`.
pub fn fact_key(secret_name: &str) -> String {
    secret_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// ARNs of the profile's secrets that exist in LocalStack.
pub async fn secret_arns(settings: &Settings) -> BTreeMap<String, String> {
    let sm = crate::aws::secrets_manager(settings);
    let lookups = settings.secrets.iter().map(|s| {
        let sm = sm.clone();
        async move {
            let arn = sm
                .describe_secret()
                .secret_id(&s.name)
                .send()
                .await
                .ok()
                .and_then(|d| d.arn().map(String::from));
            arn.map(|a| (s.name.clone(), a))
        }
    });
    futures::future::join_all(lookups)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// The Flux objects that make the source and the root Kustomization: the
/// bucket's credentials, the source itself, the facts ConfigMap, the ESO
/// values ConfigMap, and the root Kustomization applying the manifests.
/// `bucket_endpoint`: where the source-controller reaches LocalStack
/// (`host:port`, see [`crate::k8s::localstack_in_cluster_address`]).
pub fn flux_objects(
    settings: &Settings,
    facts: &BTreeMap<String, String>,
    bucket_endpoint: &str,
) -> Vec<serde_json::Value> {
    let ns = super::FLUX_NAMESPACE;
    let labels =
        json!({"app.kubernetes.io/managed-by": "devstack", "dev.devstack.stack": settings.name});
    let interval = settings.gitops.interval.to_string();
    let source = source_ref(settings);
    let names = &settings.names;
    let (credentials, bucket_source) = (names.source_credentials(), names.source());
    let eso_namespace = names.eso_namespace();
    // With `eso.auth: serviceAccount` no static key is in the cluster: the
    // Bucket reads LocalStack's S3 anonymously, which LocalStack allows.
    let static_keys = settings.eso.auth == crate::profile::parameters::EsoAuth::Static;
    let mut objects = Vec::new();
    if static_keys {
        objects.push(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": credentials, "namespace": ns, "labels": labels},
            "type": "Opaque",
            "stringData": {"accesskey": crate::aws::TEST_ACCESS_KEY_ID, "secretkey": crate::aws::TEST_SECRET_ACCESS_KEY},
        }));
    }
    // The bucket also carries offline ESO artifacts, so it exists for git
    // sources too; it is only the manifests' source when `source: local`.
    objects.push(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "Bucket",
        "metadata": {"name": bucket_source, "namespace": ns, "labels": labels},
        "spec": {
            "provider": "generic",
            "bucketName": BUCKET,
            "endpoint": bucket_endpoint,
            "insecure": true,
            "region": settings.localstack.region,
            "interval": interval,
            "timeout": "60s",
        },
    }));
    if static_keys {
        let last = objects.len() - 1;
        objects[last]["spec"]["secretRef"] = json!({"name": credentials});
    }
    if settings.gitops.source == GitopsSourceKind::Git {
        objects.push(json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": source.name, "namespace": ns, "labels": labels},
            "spec": {
                "url": settings.gitops.git_url,
                "ref": {"branch": settings.gitops.git_branch},
                "interval": interval,
                "timeout": "60s",
            },
        }));
    }
    objects.push(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": names.facts(), "namespace": ns, "labels": labels},
        "data": facts,
    }));
    objects.push(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": eso_namespace},
    }));
    // helm-controller watches a `valuesFrom` ConfigMap with this label: new
    // values reach the release at once, and a release failed on its values
    // is tried again as soon as they are corrected.
    let mut values_labels = labels.clone();
    values_labels["reconcile.fluxcd.io/watch"] = json!("Enabled");
    objects.push(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": names.eso_values(), "namespace": eso_namespace, "labels": values_labels},
        "data": {"values.yaml": serde_json::to_string_pretty(&eso_values(settings)).expect("JSON serializes")},
    }));
    objects.push(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": names.root(), "namespace": ns, "labels": labels},
        "spec": {
            "interval": interval,
            "retryInterval": "1m",
            "timeout": "2m",
            "prune": true,
            "sourceRef": {"kind": source.kind, "name": source.name},
            "path": source.path,
            "postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": names.facts()}]},
        },
    }));
    objects
}

/// Removes the Bucket's static credentials (an earlier run with static
/// keys made them): with `eso.auth: serviceAccount` no static key stays.
pub async fn remove_source_credentials(
    client: &kube::Client,
    settings: &Settings,
) -> Result<(), Error> {
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client.clone(), super::FLUX_NAMESPACE);
    let name = settings.names.source_credentials();
    match secrets.delete(&name, &Default::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        Err(e) => Err(Error::internal(format!(
            "remove Secret {}/{name}: {e}",
            super::FLUX_NAMESPACE
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ci profile on an existing cluster whose nodes pull through a mirror of ghcr.io.
    fn nodes_pulling_through_a_mirror() -> Settings {
        let loaded = crate::profile::load_reference("ci").unwrap();
        let mut settings = Settings::resolve(loaded, &Default::default()).unwrap();
        settings.images.nodes_pull = true;
        settings.images.mirrors.insert(
            "ghcr.io".into(),
            "http://mirror.example:5000/ghcr.io".into(),
        );
        settings
    }

    #[test]
    fn nodes_that_pull_run_eso_from_the_mirror_unless_the_profile_names_an_image() {
        let mut settings = nodes_pulling_through_a_mirror();
        settings.eso.values.insert(
            "webhook".into(),
            json!({"image": {"repository": "mine/eso"}}),
        );
        let values = Value::Object(eso_values(&settings));
        let eso = crate::artifacts::eso_image(&settings.eso.chart_version);
        let tag = crate::artifacts::mirrors::ImageName::parse(&eso).tag;
        let digest = crate::artifacts::Pins::builtin()
            .image(&eso)
            .unwrap()
            .to_string();
        for image in [&values["image"], &values["certController"]["image"]] {
            assert_eq!(
                image,
                &json!({
                    "repository": "mirror.example:5000/ghcr.io/external-secrets/external-secrets",
                    "tag": format!("{tag}@{digest}"),
                })
            );
        }
        assert_eq!(
            values["webhook"]["image"],
            json!({"repository": "mine/eso"})
        );

        settings.images.nodes_pull = false;
        assert_eq!(Value::Object(eso_values(&settings))["image"], Value::Null);
    }

    #[test]
    fn only_facts_the_manifests_substitute_count() {
        let tree = Tree::from([(
            "m/a.yaml".to_string(),
            b"value: ${LOCALSTACK_ENDPOINT:=x}\n".to_vec(),
        )]);
        assert!(substitutes(&tree, "LOCALSTACK_ENDPOINT"));
        assert!(!substitutes(&tree, "SECRET_APP_DB_ARN"));
    }

    #[test]
    fn fact_keys_are_shell_names() {
        assert_eq!(fact_key("app/db-password"), "APP_DB_PASSWORD");
        assert_eq!(fact_key("ci/app/token"), "CI_APP_TOKEN");
    }

    #[test]
    fn unpacks_a_chart_below_its_top_directory() {
        let mut tgz = Vec::new();
        {
            let gz = flate2::write::GzEncoder::new(&mut tgz, flate2::Compression::fast());
            let mut tar = tar::Builder::new(gz);
            for (path, data) in [
                ("external-secrets/Chart.yaml", "name: external-secrets\n"),
                ("external-secrets/templates/a.yaml", "kind: X\n"),
            ] {
                let mut header = tar::Header::new_gnu();
                header.set_size(data.len() as u64);
                header.set_mode(0o644);
                header.set_cksum();
                tar.append_data(&mut header, path, data.as_bytes()).unwrap();
            }
            tar.into_inner().unwrap().finish().unwrap();
        }
        let (files, top) = unpack_chart(&tgz).unwrap();
        assert_eq!(top, "external-secrets");
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            [
                "external-secrets/Chart.yaml",
                "external-secrets/templates/a.yaml"
            ]
        );
    }

    #[test]
    fn facts_point_eso_at_the_bucket_only_when_offline() {
        let settings = Settings::builtin(&Default::default()).unwrap();
        let online = facts(&settings, None, &BTreeMap::new());
        assert!(!online.contains_key("ESO_CHART_SOURCE_KIND"));
        assert_eq!(online["DEVSTACK_SOURCE_KIND"], "Bucket");
        assert_eq!(
            online["LOCALSTACK_ENDPOINT"],
            "http://localstack.localstack.svc.cluster.local:4566"
        );
        let offline = OfflineEso {
            objects: Tree::new(),
            chart_path: "./eso/chart/external-secrets".into(),
        };
        let arns = BTreeMap::from([("app/db".to_string(), "arn:x".to_string())]);
        let facts = facts(&settings, Some(&offline), &arns);
        assert_eq!(facts["ESO_CHART_SOURCE_KIND"], "Bucket");
        assert_eq!(facts["ESO_CHART"], "./eso/chart/external-secrets");
        assert_eq!(facts["SECRET_APP_DB_ARN"], "arn:x");
    }
}
