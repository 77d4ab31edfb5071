//! The manifest tree devstack publishes to the stack's GitOps source: the
//! copy of `manifests/external-secrets/` built into the binary, or the
//! profile's `gitops.path`, checked locally (YAML syntax, the chain's files
//! present) before anything is published, and rewritten for the `naive`
//! layout that demonstrates the race.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::error::Error;
use crate::k8s::apply::parse_documents;
use crate::profile::{GitopsLayout, LocalStackMode, StackNames};

/// Relative path -> file content.
pub type Tree = BTreeMap<String, Vec<u8>>;

macro_rules! embedded {
    ($($path:literal),* $(,)?) => {
        &[$(($path, include_str!(concat!("../../manifests/external-secrets/", $path)))),*]
    };
}

/// `manifests/external-secrets/` as shipped, so the binary works from any
/// directory.
const EMBEDDED: &[(&str, &str)] = embedded!(
    "kustomization.yaml",
    "namespace.yaml",
    "localstack-credentials.yaml",
    "repositories.yaml",
    "chart.yaml",
    "deployment-crds.yaml",
    "deployment-operator.yaml",
    "deployment-crs.yaml",
    "operator/kustomization.yaml",
    "operator/helmrelease.yaml",
    "crs/kustomization.yaml",
    "crs/cluster-secret-store.yaml",
    "crs/parameter-store.yaml",
    "deployment-localstack.yaml",
    "localstack/kustomization.yaml",
    "localstack/namespace.yaml",
    "localstack/deployment.yaml",
    "localstack/service.yaml",
);

/// The `localstack` level: its Flux Kustomization, and the directory of
/// what it applies.
pub const LOCALSTACK_LEVEL_FILE: &str = "deployment-localstack.yaml";
const LOCALSTACK_DIR: &str = "localstack/";
const LOCALSTACK_OBJECT_FILES: [&str; 3] = [
    "localstack/namespace.yaml",
    "localstack/deployment.yaml",
    "localstack/service.yaml",
];
const OPERATOR_LEVEL_FILE: &str = "deployment-operator.yaml";
const OPERATOR_DIR: &str = "operator/";
const STORE_FILE: &str = "crs/cluster-secret-store.yaml";
/// The Parameter Store's store, which only a profile with `parameters` gets.
const PARAMETER_STORE_FILE: &str = "crs/parameter-store.yaml";
const STORE_FILES: [&str; 2] = [STORE_FILE, PARAMETER_STORE_FILE];
const CREDENTIALS_FILE: &str = "localstack-credentials.yaml";
const HELM_RELEASE_FILE: &str = "operator/helmrelease.yaml";

/// Files of the chain devstack relies on (it rewrites or leaves them out).
pub const REPOSITORIES_FILE: &str = "repositories.yaml";
const CHAIN_FILES: [&str; 3] = [
    "deployment-crds.yaml",
    "deployment-operator.yaml",
    "deployment-crs.yaml",
];
const CRDS_LEVEL_FILE: &str = CHAIN_FILES[0];
const CRS_LEVEL_FILE: &str = CHAIN_FILES[2];

pub fn embedded() -> Tree {
    EMBEDDED
        .iter()
        .map(|(path, text)| (path.to_string(), text.as_bytes().to_vec()))
        .collect()
}

/// Every regular file under `dir` (hidden files and directories skipped).
pub fn read_dir(dir: &Path) -> Result<Tree, Error> {
    fn walk(root: &Path, dir: &Path, out: &mut Tree) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                walk(root, &path, out)?;
            } else {
                let rel = path.strip_prefix(root).unwrap_or(&path);
                out.insert(
                    rel.to_string_lossy().replace('\\', "/"),
                    std::fs::read(&path)?,
                );
            }
        }
        Ok(())
    }
    let mut out = Tree::new();
    walk(dir, dir, &mut out).map_err(|e| {
        Error::user(format!(
            "cannot read the GitOps manifests in {}: {e}",
            dir.display()
        ))
        .with_hint("point `gitops.path` at a directory laid out like manifests/external-secrets/")
    })?;
    if !out.contains_key("kustomization.yaml") {
        return Err(
            Error::user(format!("{} has no kustomization.yaml", dir.display())).with_hint(
                "`gitops.path` must be a directory laid out like manifests/external-secrets/",
            ),
        );
    }
    Ok(out)
}

/// The tree to publish for these settings: checked, rewritten for the
/// layout, and without upstream's sources when an offline bundle serves them.
pub fn prepare(
    mut tree: Tree,
    origin: &str,
    layout: GitopsLayout,
    offline: bool,
) -> Result<Tree, Error> {
    for (path, bytes) in &tree {
        if path.ends_with(".yaml") || path.ends_with(".yml") {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| Error::user(format!("{origin}/{path} is not UTF-8 text")))?;
            parse_documents(text, &format!("{origin}/{path}"))
                .map_err(|e| e.with_hint("fix the YAML; nothing was published"))?;
        }
    }
    if offline && tree.contains_key(REPOSITORIES_FILE) {
        tree.remove(REPOSITORIES_FILE);
        let root = tree
            .get("kustomization.yaml")
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        tree.insert(
            "kustomization.yaml".into(),
            drop_resource(&root, REPOSITORIES_FILE).into_bytes(),
        );
    }
    if layout == GitopsLayout::Naive {
        for file in CHAIN_FILES {
            if !tree.contains_key(file) {
                return Err(Error::user(format!(
                    "the naive layout rewrites {origin}/{file}, which is missing"
                ))
                .with_hint("use `gitops.layout: chain` with custom manifests"));
            }
            rewrite(&mut tree, file, naive)?;
        }
    }
    Ok(tree)
}

/// The tree for where LocalStack runs: as shipped for `in-cluster`; for a
/// container beside the cluster, without the `localstack` level and with
/// the operator level no longer depending on it.
pub fn for_localstack_mode(mut tree: Tree, mode: LocalStackMode) -> Result<Tree, Error> {
    if mode == LocalStackMode::InCluster || tree.remove(LOCALSTACK_LEVEL_FILE).is_none() {
        return Ok(tree);
    }
    tree.retain(|path, _| !path.starts_with(LOCALSTACK_DIR));
    if let Some(root) = tree.get("kustomization.yaml") {
        let root = drop_resource(&String::from_utf8_lossy(root), LOCALSTACK_LEVEL_FILE);
        tree.insert("kustomization.yaml".into(), root.into_bytes());
    }
    rewrite(&mut tree, OPERATOR_LEVEL_FILE, |doc| {
        // `pointer_mut`, not `doc["spec"]["dependsOn"]`: indexing inserts a null
        // the Kustomization API rejects when the level has no dependsOn.
        if let Some(depends) = doc
            .pointer_mut("/spec/dependsOn")
            .and_then(Value::as_array_mut)
        {
            depends.retain(|d| d["name"] != crate::gitops::LOCALSTACK_LEVEL);
        }
    })?;
    Ok(tree)
}

/// The tree for a stack that the cluster's own ESO serves: without the CRD
/// and operator levels (and the ESO sources and namespace they use), the
/// custom resources depending on LocalStack's level instead, and the
/// store's credentials in LocalStack's namespace, which the stack owns
/// (the cluster's ESO may live in `external-secrets`, which it does not).
pub fn for_cluster_eso(mut tree: Tree) -> Result<Tree, Error> {
    let dropped = [
        CRDS_LEVEL_FILE,
        OPERATOR_LEVEL_FILE,
        "chart.yaml",
        REPOSITORIES_FILE,
        "namespace.yaml",
    ];
    tree.retain(|path, _| !dropped.contains(&path.as_str()) && !path.starts_with(OPERATOR_DIR));
    if let Some(root) = tree.get("kustomization.yaml") {
        let root = dropped
            .iter()
            .fold(String::from_utf8_lossy(root).into_owned(), |root, file| {
                drop_resource(&root, file)
            });
        tree.insert("kustomization.yaml".into(), root.into_bytes());
    }
    let localstack_level = tree.contains_key(LOCALSTACK_LEVEL_FILE);
    let namespace = crate::profile::names::base::LOCALSTACK_NAMESPACE;
    rewrite(&mut tree, CRS_LEVEL_FILE, |doc| {
        if let Some(depends) = doc
            .pointer_mut("/spec/dependsOn")
            .and_then(Value::as_array_mut)
        {
            // The CRD and operator levels, which this tree leaves out.
            let dropped_levels = &crate::gitops::CHAIN[..2];
            depends.retain(|d| !dropped_levels.iter().any(|level| d["name"] == *level));
            if localstack_level && !depends.iter().any(|d| d["name"] == namespace) {
                depends.push(serde_json::json!({"name": namespace}));
            }
        }
    })?;
    rewrite(&mut tree, "localstack-credentials.yaml", |doc| {
        if doc["kind"] == "Secret" {
            doc["metadata"]["namespace"] = namespace.into();
        }
    })?;
    for file in STORE_FILES {
        rewrite(&mut tree, file, |doc| {
            if doc["kind"] == "ClusterSecretStore" {
                move_store_credentials(doc, |_| namespace.to_string());
            }
        })?;
    }
    Ok(tree)
}

/// The tree with the store naming the ESO controller `class` that serves
/// the stack (see [`crate::profile::Settings::controller_class`]).
pub fn with_controller_class(mut tree: Tree, class: &str) -> Result<Tree, Error> {
    for file in STORE_FILES {
        rewrite(&mut tree, file, |doc| {
            if doc["kind"] == "ClusterSecretStore" {
                doc["spec"]["controller"] = class.into();
            }
        })?;
    }
    Ok(tree)
}

/// The tree with the Parameter Store's store among the custom resources
/// (a profile with `parameters`), or without its file at all.
pub fn with_parameter_store(mut tree: Tree, wanted: bool) -> Tree {
    const CRS_KUSTOMIZATION: &str = "crs/kustomization.yaml";
    if !wanted {
        tree.remove(PARAMETER_STORE_FILE);
        return tree;
    }
    let listed = |text: &str| {
        text.lines().any(|l| {
            l.trim_start().strip_prefix("- ").map(str::trim) == Some("parameter-store.yaml")
        })
    };
    if tree.contains_key(PARAMETER_STORE_FILE)
        && let Some(bytes) = tree.get(CRS_KUSTOMIZATION)
    {
        let text = String::from_utf8_lossy(bytes).into_owned();
        if !listed(&text) {
            let mut text = text.trim_end().to_string();
            text.push_str("\n  - parameter-store.yaml\n");
            tree.insert(CRS_KUSTOMIZATION.into(), text.into_bytes());
        }
    }
    tree
}

/// Where EKS's pod identity webhook mounts the web identity token, and
/// what it mounts there: a projected ServiceAccount token for STS.
pub const WEB_IDENTITY_TOKEN_DIR: &str = "/var/run/secrets/eks.amazonaws.com/serviceaccount";
pub const WEB_IDENTITY_TOKEN_FILE: &str = "/var/run/secrets/eks.amazonaws.com/serviceaccount/token";

/// The tree for `eso.auth: serviceAccount`: every store authenticates as
/// on EKS (`auth.jwt.serviceAccountRef`, the controller's account, see
/// `manifests/eks/`); the static keys' Secret is left out; and the
/// controller gets what EKS gives it: its ServiceAccount annotated with
/// `role_arn`, the right to request tokens for it, and what the pod
/// identity webhook injects (the token of audience `sts.amazonaws.com`,
/// `AWS_ROLE_ARN`, `AWS_WEB_IDENTITY_TOKEN_FILE`), so that a store with no
/// `auth` at all authenticates too. That ambient path's STS client is the
/// AWS SDK's own, which reads `AWS_ENDPOINT_URL_STS`, not ESO's
/// `AWS_STS_ENDPOINT`: it gets LocalStack's address as well.
/// `(namespace, name)`: the controller's ServiceAccount.
pub fn for_service_account_auth(
    mut tree: Tree,
    service_account: (&str, &str),
    role_arn: &str,
) -> Result<Tree, Error> {
    let (namespace, account) = service_account;
    for file in STORE_FILES {
        rewrite(&mut tree, file, |doc| {
            if doc["kind"] == "ClusterSecretStore"
                && let Some(aws) = doc.pointer_mut("/spec/provider/aws")
            {
                aws["auth"] = serde_json::json!({
                    "jwt": {"serviceAccountRef": {"name": account, "namespace": namespace}}
                });
            }
        })?;
    }
    if tree.remove(CREDENTIALS_FILE).is_some()
        && let Some(root) = tree.get("kustomization.yaml")
    {
        let root = drop_resource(&String::from_utf8_lossy(root), CREDENTIALS_FILE);
        tree.insert("kustomization.yaml".into(), root.into_bytes());
    }
    rewrite(&mut tree, HELM_RELEASE_FILE, |doc| {
        if doc["kind"] != "HelmRelease" {
            return;
        }
        let values = &mut doc["spec"]["values"];
        values["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"] = role_arn.into();
        values["rbac"]["serviceAccountTokenCreate"] = true.into();
        let sts = "${LOCALSTACK_ENDPOINT:=http://localstack.localstack.svc.cluster.local:4566}";
        let mut env = values["extraEnv"].as_array().cloned().unwrap_or_default();
        env.retain(|e| {
            ![
                "AWS_ROLE_ARN",
                "AWS_WEB_IDENTITY_TOKEN_FILE",
                "AWS_ENDPOINT_URL_STS",
            ]
            .iter()
            .any(|n| e["name"] == *n)
        });
        env.extend([
            serde_json::json!({"name": "AWS_ROLE_ARN", "value": role_arn}),
            serde_json::json!({"name": "AWS_WEB_IDENTITY_TOKEN_FILE", "value": WEB_IDENTITY_TOKEN_FILE}),
            serde_json::json!({"name": "AWS_ENDPOINT_URL_STS", "value": sts}),
        ]);
        values["extraEnv"] = env.into();
        values["extraVolumes"] = serde_json::json!([{
            "name": "aws-iam-token",
            "projected": {"defaultMode": 420, "sources": [{"serviceAccountToken": {
                "audience": crate::seed::role::TOKEN_AUDIENCE,
                "expirationSeconds": 86400,
                "path": "token",
            }}]},
        }]);
        values["extraVolumeMounts"] = serde_json::json!([{
            "name": "aws-iam-token", "mountPath": WEB_IDENTITY_TOKEN_DIR, "readOnly": true,
        }]);
    })?;
    Ok(tree)
}

/// The tree for a stack that joins a cluster another stack runs on: no
/// CRD level (the CRDs, webhook and cert-controller are the first stack's),
/// and every object of its own named after it (see [`StackNames`]).
pub fn for_shared_cluster(mut tree: Tree, names: &StackNames) -> Result<Tree, Error> {
    if tree.remove(CRDS_LEVEL_FILE).is_some()
        && let Some(root) = tree.get("kustomization.yaml")
    {
        let root = drop_resource(&String::from_utf8_lossy(root), CRDS_LEVEL_FILE);
        tree.insert("kustomization.yaml".into(), root.into_bytes());
    }
    let files: Vec<String> = tree
        .keys()
        .filter(|path| path.ends_with(".yaml") || path.ends_with(".yml"))
        .filter(|path| !path.ends_with("kustomization.yaml"))
        .cloned()
        .collect();
    for file in files {
        let docs = parse_documents(&String::from_utf8_lossy(&tree[&file]), &file)?;
        let kept: Vec<String> = docs
            .into_iter()
            .filter_map(|doc| rename_for(doc, names))
            .map(|doc| serde_json::to_string_pretty(&doc).expect("JSON serializes"))
            .collect();
        tree.insert(file, kept.join("\n---\n").into_bytes());
    }
    Ok(tree)
}

/// One object of the shipped layout as a stack that shares its cluster
/// names it; `None` for what it leaves to the first stack (the CRDs'
/// source, the shared parts' health checks).
fn rename_for(mut doc: Value, names: &StackNames) -> Option<Value> {
    use crate::profile::names::base;
    let namespace = |ns: &str| match ns {
        base::LOCALSTACK_NAMESPACE => names.localstack_namespace(),
        base::ESO_NAMESPACE => names.eso_namespace(),
        other => other.to_string(),
    };
    let (release_namespace, release) = names.helm_release();
    let crds_level = crate::gitops::CHAIN[0];
    let kind = doc["kind"].as_str().unwrap_or_default().to_string();
    let name = doc["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(ns) = doc["metadata"]["namespace"].as_str() {
        doc["metadata"]["namespace"] = namespace(ns).into();
    }
    match kind.as_str() {
        "Namespace" => doc["metadata"]["name"] = namespace(&name).into(),
        // The CRDs' git source serves only the CRD level.
        "GitRepository" if name == base::ESO_RELEASE => return None,
        "Kustomization" => {
            doc["metadata"]["name"] = names.of(&name).into();
            let spec = &mut doc["spec"];
            if let Some(depends) = spec.get_mut("dependsOn").and_then(Value::as_array_mut) {
                depends.retain(|d| d["name"] != crds_level);
                for d in depends.iter_mut() {
                    let level = d["name"].as_str().unwrap_or_default().to_string();
                    d["name"] = names.of(&level).into();
                }
            }
            if let Some(checks) = spec.get_mut("healthChecks").and_then(Value::as_array_mut) {
                checks.retain(|c| {
                    c["kind"] != "Deployment"
                        || c["namespace"] != base::ESO_NAMESPACE
                        || c["name"] == base::ESO_RELEASE
                });
                for check in checks.iter_mut() {
                    if check["namespace"] == base::ESO_NAMESPACE
                        && check["name"] == base::ESO_RELEASE
                    {
                        check["name"] = release.clone().into();
                        check["namespace"] = release_namespace.clone().into();
                    }
                }
            }
            rename_reference(spec, "/postBuild/substituteFrom", base::FACTS, names);
        }
        "HelmRelease" => {
            doc["metadata"]["name"] = release.clone().into();
            if let Some(chart) = doc.pointer_mut("/spec/chartRef/name") {
                *chart = names.of(chart.as_str().unwrap_or_default()).into();
            }
            rename_reference(&mut doc, "/spec/valuesFrom", base::ESO_VALUES, names);
        }
        "HelmChart" | "HelmRepository" => {
            doc["metadata"]["name"] = names.of(&name).into();
            // `${ESO_CHART_SOURCE_NAME:=external-secrets}`: online, the
            // chart comes from this stack's own HelmRepository.
            if let Some(source) = doc.pointer_mut("/spec/sourceRef/name")
                && let Some(text) = source.as_str()
            {
                let default = format!(":={}}}", base::ESO_RELEASE);
                let renamed = format!(":={}}}", names.of(base::ESO_RELEASE));
                *source = text.replace(&default, &renamed).into();
            }
        }
        "ClusterSecretStore" => {
            doc["metadata"]["name"] = names.of(&name).into();
            move_store_credentials(&mut doc, namespace);
        }
        _ => {}
    }
    Some(doc)
}

/// Points each credential reference of a ClusterSecretStore that names a
/// namespace at `to(namespace)`.
fn move_store_credentials(store: &mut Value, to: impl Fn(&str) -> String) {
    let Some(auth) = store
        .pointer_mut("/spec/provider/aws/auth/secretRef")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for reference in auth.values_mut() {
        if let Some(namespace) = reference["namespace"].as_str() {
            reference["namespace"] = to(namespace).into();
        }
    }
}

/// Renames the entries of the list at `pointer` that name `base` (a
/// ConfigMap Flux reads from) as the stack names it.
fn rename_reference(doc: &mut Value, pointer: &str, base: &str, names: &StackNames) {
    let entries = doc.pointer_mut(pointer).and_then(Value::as_array_mut);
    for entry in entries.into_iter().flatten() {
        if entry["name"] == base {
            entry["name"] = names.of(base).into();
        }
    }
}

/// Rewrites each document of `file` in `tree` (when it is there).
fn rewrite(tree: &mut Tree, file: &str, change: impl Fn(&mut Value)) -> Result<(), Error> {
    let Some(bytes) = tree.get(file) else {
        return Ok(());
    };
    let docs = parse_documents(&String::from_utf8_lossy(bytes), file)?;
    let rewritten: Vec<String> = docs
        .into_iter()
        .map(|mut doc| {
            change(&mut doc);
            serde_json::to_string_pretty(&doc).expect("JSON serializes")
        })
        .collect();
    tree.insert(file.to_string(), rewritten.join("\n---\n").into_bytes());
    Ok(())
}

/// The objects of the shipped `localstack` level with `facts` substituted
/// as Flux's postBuild does, for devstack to apply before the chain starts:
/// the same objects Flux then finds in place.
pub fn localstack_objects(
    facts: &BTreeMap<String, String>,
    names: &StackNames,
) -> Result<Vec<Value>, Error> {
    let tree = embedded();
    let mut objects = Vec::new();
    for file in LOCALSTACK_OBJECT_FILES {
        let text = substitute(&String::from_utf8_lossy(&tree[file]), facts);
        let docs = parse_documents(&text, file)?.into_iter();
        objects.extend(docs.filter_map(|doc| rename_for(doc, names)));
    }
    Ok(objects)
}

/// Flux's postBuild substitution: `${NAME}`, `${NAME:=default}` and
/// `${NAME:-default}` take the fact, else the default (else nothing).
pub fn substitute(text: &str, facts: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let inner = &after[..end];
        let (name, default) = match inner.find(":=").or_else(|| inner.find(":-")) {
            Some(at) => (&inner[..at], &inner[at + 2..]),
            None => (inner, ""),
        };
        out.push_str(facts.get(name).map(String::as_str).unwrap_or(default));
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// What many hand-written repositories do: every level independent, no
/// health checks, retries only at the interval. Flux then applies the custom
/// resources before the CRDs or the webhook are there.
fn naive(doc: &mut Value) {
    if doc["kind"] == "Kustomization"
        && let Some(spec) = doc.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.remove("dependsOn");
        spec.remove("healthChecks");
        spec.insert("wait".into(), Value::Bool(false));
        let interval = spec.get("interval").cloned().unwrap_or(Value::Null);
        spec.insert("retryInterval".into(), interval);
    }
}

/// Removes one `- entry` line from a kustomization.yaml's resources list,
/// keeping its comments and layout.
fn drop_resource(kustomization: &str, entry: &str) -> String {
    kustomization
        .lines()
        .filter(|line| {
            let item = line.trim_start().strip_prefix("- ").map(str::trim);
            item != Some(entry) && item != Some(&format!("./{entry}"))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_copy_matches_the_repository() {
        let tree = embedded();
        let on_disk =
            read_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/external-secrets"))
                .unwrap();
        assert_eq!(
            tree.keys().collect::<Vec<_>>(),
            on_disk.keys().collect::<Vec<_>>(),
            "add new files under manifests/external-secrets/ to EMBEDDED"
        );
        prepare(tree, "manifests", GitopsLayout::Chain, false).unwrap();
    }

    /// The manifests also work copied into a repository without devstack's
    /// facts: their fallbacks must be the matrix's defaults.
    #[test]
    fn manifest_defaults_are_the_version_matrix() {
        let tree = embedded();
        let text = |path: &str| String::from_utf8(tree[path].clone()).unwrap();
        let fallback = format!(
            "${{ESO_CHART_VERSION:={}}}",
            crate::versions::ESO_CHART_VERSION
        );
        assert!(text("chart.yaml").contains(&fallback));
        assert!(text(REPOSITORIES_FILE).contains(&format!("tag: v{fallback}")));
        assert!(text(REPOSITORIES_FILE).contains(crate::versions::ESO_GIT_REPOSITORY));
        assert!(text(REPOSITORIES_FILE).contains(crate::versions::ESO_CHART_REPOSITORY));
    }

    #[test]
    fn a_localstack_container_leaves_out_the_localstack_level() {
        let tree = for_localstack_mode(embedded(), LocalStackMode::Container).unwrap();
        assert!(
            !tree.keys().any(|k| k.contains("localstack/")),
            "{:?}",
            tree.keys()
        );
        assert!(!tree.contains_key(LOCALSTACK_LEVEL_FILE));
        let root = String::from_utf8(tree["kustomization.yaml"].clone()).unwrap();
        assert!(!root.contains("- deployment-localstack.yaml"), "{root}");
        assert!(root.contains("- deployment-operator.yaml"), "{root}");
        let operator = &parse_documents(
            &String::from_utf8_lossy(&tree[OPERATOR_LEVEL_FILE]),
            "operator",
        )
        .unwrap()[0];
        assert_eq!(
            operator["spec"]["dependsOn"],
            serde_json::json!([{"name": "external-secrets-crds"}])
        );
        assert_eq!(
            operator["spec"]["healthChecks"].as_array().unwrap().len(),
            4
        );
    }

    #[test]
    fn the_clusters_own_eso_leaves_the_crs_level_on_localstack_and_nothing_in_its_namespace() {
        let tree = with_controller_class(for_cluster_eso(embedded()).unwrap(), "dev").unwrap();
        for gone in [
            "deployment-crds.yaml",
            OPERATOR_LEVEL_FILE,
            "chart.yaml",
            "namespace.yaml",
        ] {
            assert!(!tree.contains_key(gone), "{gone}");
        }
        assert!(!tree.keys().any(|k| k.starts_with(OPERATOR_DIR)));
        let root = String::from_utf8(tree["kustomization.yaml"].clone()).unwrap();
        let resources: Vec<&str> = root
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- "))
            .collect();
        assert_eq!(
            resources,
            [
                "localstack-credentials.yaml",
                "deployment-localstack.yaml",
                "deployment-crs.yaml"
            ]
        );
        let doc = |file: &str| {
            parse_documents(&String::from_utf8_lossy(&tree[file]), file).unwrap()[0].clone()
        };
        assert_eq!(
            doc(CRS_LEVEL_FILE)["spec"]["dependsOn"],
            serde_json::json!([{"name": "localstack"}])
        );
        assert_eq!(
            doc("localstack-credentials.yaml")["metadata"]["namespace"],
            "localstack"
        );
        let store = doc(STORE_FILE);
        assert_eq!(store["spec"]["controller"], "dev");
        let refs = &store["spec"]["provider"]["aws"]["auth"]["secretRef"];
        assert_eq!(refs["accessKeyIDSecretRef"]["namespace"], "localstack");
        assert_eq!(refs["secretAccessKeySecretRef"]["namespace"], "localstack");
        // Flux still substitutes the region there.
        assert_eq!(
            store["spec"]["provider"]["aws"]["region"],
            "${AWS_REGION:=us-east-1}"
        );
        let unclassed = for_cluster_eso(embedded()).unwrap();
        let store =
            parse_documents(&String::from_utf8_lossy(&unclassed[STORE_FILE]), "store").unwrap();
        assert!(store[0]["spec"].get("controller").is_none());
    }

    #[test]
    fn a_stack_sharing_the_cluster_names_its_objects_after_itself_and_leaves_eso_shared_parts_alone()
     {
        let names = StackNames::sharing("b");
        let tree = for_shared_cluster(embedded(), &names).unwrap();
        assert!(!tree.contains_key(CRDS_LEVEL_FILE));
        let root = String::from_utf8(tree["kustomization.yaml"].clone()).unwrap();
        assert!(!root.contains(CRDS_LEVEL_FILE));
        let docs =
            |file: &str| parse_documents(&String::from_utf8_lossy(&tree[file]), file).unwrap();
        let operator = &docs(OPERATOR_LEVEL_FILE)[0];
        assert_eq!(operator["metadata"]["name"], "external-secrets-operator-b");
        assert_eq!(
            operator["spec"]["dependsOn"],
            serde_json::json!([{"name": "localstack-b"}])
        );
        // Only its own HelmRelease and controller: the webhook and the
        // cert-controller are the first stack's.
        let checks: Vec<String> = operator["spec"]["healthChecks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                format!(
                    "{}/{}/{}",
                    c["kind"].as_str().unwrap(),
                    c["namespace"].as_str().unwrap(),
                    c["name"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(
            checks,
            [
                "HelmRelease/external-secrets-b/external-secrets-b",
                "Deployment/external-secrets-b/external-secrets-b"
            ]
        );
        assert_eq!(
            operator["spec"]["postBuild"]["substituteFrom"][0]["name"],
            "devstack-stack-facts-b"
        );
        let crs = &docs(CRS_LEVEL_FILE)[0];
        assert_eq!(crs["metadata"]["name"], "external-secrets-crs-b");
        assert_eq!(
            crs["spec"]["dependsOn"],
            serde_json::json!([{"name": "external-secrets-operator-b"}])
        );
        let release = &docs("operator/helmrelease.yaml")[0];
        assert_eq!(release["metadata"]["name"], "external-secrets-b");
        assert_eq!(release["metadata"]["namespace"], "external-secrets-b");
        assert_eq!(release["spec"]["chartRef"]["name"], "external-secrets-b");
        assert_eq!(
            release["spec"]["valuesFrom"][0]["name"],
            "devstack-eso-values-b"
        );
        let chart = &docs("chart.yaml")[0];
        assert_eq!(chart["metadata"]["name"], "external-secrets-b");
        assert_eq!(
            chart["spec"]["sourceRef"]["name"],
            "${ESO_CHART_SOURCE_NAME:=external-secrets-b}"
        );
        let repositories = docs(REPOSITORIES_FILE);
        assert_eq!(repositories.len(), 1, "the CRDs' git source is left out");
        assert_eq!(repositories[0]["metadata"]["name"], "external-secrets-b");
        let store = &docs(STORE_FILE)[0];
        assert_eq!(store["metadata"]["name"], "localstack-b");
        let refs = &store["spec"]["provider"]["aws"]["auth"]["secretRef"];
        assert_eq!(
            refs["accessKeyIDSecretRef"]["namespace"],
            "external-secrets-b"
        );
        assert_eq!(
            docs("namespace.yaml")[0]["metadata"]["name"],
            "external-secrets-b"
        );
        assert_eq!(
            docs("localstack/namespace.yaml")[0]["metadata"]["name"],
            "localstack-b"
        );
        assert_eq!(
            docs("localstack/service.yaml")[0]["metadata"]["namespace"],
            "localstack-b"
        );
        assert_eq!(
            docs(LOCALSTACK_LEVEL_FILE)[0]["metadata"]["name"],
            "localstack-b"
        );
        let objects = localstack_objects(&BTreeMap::new(), &names).unwrap();
        assert!(objects.iter().all(|o| o["kind"] == "Namespace"
            && o["metadata"]["name"] == "localstack-b"
            || o["metadata"]["namespace"] == "localstack-b"));
        // Alone, the shipped names stay.
        assert_eq!(
            localstack_objects(&BTreeMap::new(), &StackNames::alone()).unwrap(),
            localstack_objects(&BTreeMap::new(), &StackNames::default()).unwrap()
        );
    }

    #[test]
    fn in_cluster_the_operator_level_depends_on_localstack() {
        let tree = for_localstack_mode(embedded(), LocalStackMode::InCluster).unwrap();
        assert_eq!(tree, embedded());
        let operator = &parse_documents(
            &String::from_utf8_lossy(&tree[OPERATOR_LEVEL_FILE]),
            "operator",
        )
        .unwrap()[0];
        let depends: Vec<&str> = operator["spec"]["dependsOn"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap())
            .collect();
        assert_eq!(depends, ["external-secrets-crds", "localstack"]);
        let level = &parse_documents(
            &String::from_utf8_lossy(&tree[LOCALSTACK_LEVEL_FILE]),
            "localstack",
        )
        .unwrap()[0];
        assert_eq!(level["metadata"]["name"], "localstack");
        assert_eq!(level["spec"]["wait"], true);
    }

    #[test]
    fn localstack_objects_take_the_facts_else_the_matrix_defaults() {
        let defaults = localstack_objects(&BTreeMap::new(), &StackNames::alone()).unwrap();
        let container = |objects: &[Value]| {
            objects.iter().find(|o| o["kind"] == "Deployment").unwrap()["spec"]["template"]["spec"]
                ["containers"][0]
                .clone()
        };
        assert_eq!(
            container(&defaults)["image"],
            crate::versions::LOCALSTACK_IMAGE
        );
        let facts = BTreeMap::from([
            ("LOCALSTACK_IMAGE".to_string(), "example/ls:1".to_string()),
            ("LOCALSTACK_SERVICES".to_string(), "s3,sts".to_string()),
        ]);
        let objects = localstack_objects(&facts, &StackNames::alone()).unwrap();
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["Namespace", "Deployment", "Service"]);
        assert_eq!(container(&objects)["image"], "example/ls:1");
        assert_eq!(container(&objects)["env"][0]["value"], "s3,sts");
        let service = objects.iter().find(|o| o["kind"] == "Service").unwrap();
        assert_eq!(
            service["spec"]["selector"],
            objects[1]["spec"]["selector"]["matchLabels"]
        );
    }

    #[test]
    fn substitution_reads_facts_then_defaults() {
        let facts = BTreeMap::from([("A".to_string(), "1".to_string())]);
        assert_eq!(
            substitute("x ${A:=9} ${B:=2} ${C:-3} ${D} ${A}", &facts),
            "x 1 2 3  1"
        );
        assert_eq!(substitute("unterminated ${A", &facts), "unterminated ${A");
    }

    #[test]
    fn offline_leaves_out_upstream_sources() {
        let tree = prepare(embedded(), "m", GitopsLayout::Chain, true).unwrap();
        assert!(!tree.contains_key(REPOSITORIES_FILE));
        let root = String::from_utf8(tree["kustomization.yaml"].clone()).unwrap();
        assert!(!root.contains(REPOSITORIES_FILE), "{root}");
        assert!(root.contains("- deployment-crs.yaml"), "{root}");
    }

    #[test]
    fn naive_layout_drops_dependencies_and_waits() {
        for mode in [LocalStackMode::Container, LocalStackMode::InCluster] {
            let naive = prepare(embedded(), "m", GitopsLayout::Naive, false).unwrap();
            let tree = for_localstack_mode(naive, mode).unwrap();
            for file in CHAIN_FILES {
                let docs = parse_documents(&String::from_utf8_lossy(&tree[file]), file).unwrap();
                let spec = &docs[0]["spec"];
                assert!(spec.get("dependsOn").is_none(), "{mode:?} {file}: {spec}");
                assert!(spec.get("healthChecks").is_none(), "{file}");
                assert_eq!(spec["wait"], false, "{file}");
                assert_eq!(spec["retryInterval"], spec["interval"], "{file}");
            }
        }
    }

    /// The race the chain removes: the custom resources must not apply
    /// before the webhook serves. The operator level is Ready only once the
    /// release is installed and its Deployments, the webhook's among them,
    /// are Available.
    #[test]
    fn the_operator_level_is_ready_only_when_the_webhook_serves() {
        let tree = prepare(embedded(), "m", GitopsLayout::Chain, false).unwrap();
        let level = &parse_documents(
            &String::from_utf8_lossy(&tree["deployment-operator.yaml"]),
            "operator",
        )
        .unwrap()[0];
        let (namespace, release) = StackNames::alone().helm_release();
        let checked: Vec<String> = level["spec"]["healthChecks"]
            .as_array()
            .unwrap()
            .iter()
            .inspect(|check| assert_eq!(check["namespace"], namespace))
            .map(|check| {
                format!(
                    "{}/{}",
                    check["kind"].as_str().unwrap(),
                    check["name"].as_str().unwrap()
                )
            })
            .collect();
        let deployment = |suffix: &str| format!("Deployment/{release}{suffix}");
        assert_eq!(
            checked,
            [
                format!("HelmRelease/{release}"),
                deployment(""),
                deployment("-webhook"),
                deployment("-cert-controller"),
            ]
        );
        // `wait: true` would check the HelmRelease alone.
        assert_eq!(level["spec"]["wait"], false);
        assert_eq!(
            level["spec"]["dependsOn"][0]["name"],
            "external-secrets-crds"
        );
        let helm_release = &parse_documents(
            &String::from_utf8_lossy(&tree["operator/helmrelease.yaml"]),
            "helmrelease",
        )
        .unwrap()[0];
        assert_eq!(helm_release["metadata"]["name"], release);
        // The chart is fetched at the chain's root, before this level applies.
        let chart =
            &parse_documents(&String::from_utf8_lossy(&tree["chart.yaml"]), "chart").unwrap()[0];
        assert_eq!(chart["kind"], "HelmChart");
        assert_eq!(helm_release["spec"]["chartRef"]["kind"], "HelmChart");
        assert_eq!(
            helm_release["spec"]["chartRef"]["name"],
            chart["metadata"]["name"]
        );
        assert_eq!(
            helm_release["spec"]["chartRef"]["namespace"],
            chart["metadata"]["namespace"]
        );
        assert!(helm_release["spec"].get("chart").is_none());
        let root = String::from_utf8_lossy(&tree["kustomization.yaml"]).into_owned();
        assert!(root.contains("- chart.yaml"), "{root}");
        assert_eq!(helm_release["spec"]["install"]["disableWait"], true);
        assert!(helm_release["spec"]["upgrade"].get("disableWait").is_none());
    }

    fn stores(tree: &Tree) -> Vec<Value> {
        STORE_FILES
            .iter()
            .filter(|f| tree.contains_key(**f))
            .flat_map(|f| parse_documents(&String::from_utf8_lossy(&tree[*f]), f).unwrap())
            .collect()
    }

    /// What Flux applies of the custom resources' level: the files its
    /// kustomization.yaml lists.
    fn applied_stores(tree: &Tree) -> Vec<Value> {
        let crs = String::from_utf8_lossy(&tree["crs/kustomization.yaml"]).into_owned();
        let listed: Vec<String> = crs
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("- "))
            .map(|f| format!("crs/{}", f.trim()))
            .collect();
        stores(tree)
            .into_iter()
            .filter(|s| {
                let name = s["metadata"]["name"].as_str().unwrap();
                listed.iter().any(|f| {
                    parse_documents(&String::from_utf8_lossy(&tree[f]), f)
                        .unwrap()
                        .iter()
                        .any(|d| d["metadata"]["name"] == name)
                })
            })
            .collect()
    }

    #[test]
    fn a_profile_without_parameters_gets_no_parameter_store_store() {
        let without = with_parameter_store(embedded(), false);
        assert!(!without.contains_key(PARAMETER_STORE_FILE));
        let services: Vec<Value> = applied_stores(&without)
            .iter()
            .map(|s| s["spec"]["provider"]["aws"]["service"].clone())
            .collect();
        assert_eq!(services, [serde_json::json!("SecretsManager")]);
        // Shipped as it is, the layout does not apply it either.
        assert_eq!(applied_stores(&embedded()).len(), 1);

        let with = with_parameter_store(embedded(), true);
        let applied = applied_stores(&with);
        let services: Vec<&str> = applied
            .iter()
            .map(|s| s["spec"]["provider"]["aws"]["service"].as_str().unwrap())
            .collect();
        assert_eq!(services, ["SecretsManager", "ParameterStore"]);
        assert_eq!(applied[1]["metadata"]["name"], "localstack-parameters");
        // Listed once, however often the tree is prepared.
        let twice = with_parameter_store(with, true);
        let crs = String::from_utf8_lossy(&twice["crs/kustomization.yaml"]).into_owned();
        assert_eq!(crs.matches("parameter-store.yaml").count(), 1, "{crs}");
    }

    #[test]
    fn service_account_auth_writes_the_stores_as_on_eks_with_no_static_key() {
        let arn = "arn:aws:iam::000000000000:role/dev-eso";
        let tree = for_service_account_auth(
            with_parameter_store(embedded(), true),
            ("external-secrets", "external-secrets"),
            arn,
        )
        .unwrap();
        let eks = parse_documents(
            include_str!("../../manifests/eks/cluster-secret-stores.yaml"),
            "eks",
        )
        .unwrap();
        assert_eq!(applied_stores(&tree), eks[..2].to_vec());
        assert!(!tree.contains_key(CREDENTIALS_FILE));
        let root = String::from_utf8_lossy(&tree["kustomization.yaml"]).into_owned();
        assert!(!root.contains(CREDENTIALS_FILE), "{root}");
        for (path, bytes) in &tree {
            let text = String::from_utf8_lossy(bytes);
            for key in ["secretRef", "access-key-id", "secret-access-key"] {
                assert!(!text.contains(key), "{key} in {path}");
            }
        }
        let release = &parse_documents(
            &String::from_utf8_lossy(&tree[HELM_RELEASE_FILE]),
            "release",
        )
        .unwrap()[0];
        let values = &release["spec"]["values"];
        assert_eq!(
            values["serviceAccount"]["annotations"]["eks.amazonaws.com/role-arn"],
            arn
        );
        assert_eq!(values["rbac"]["serviceAccountTokenCreate"], true);
        let env: BTreeMap<&str, &str> = values["extraEnv"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["name"].as_str().unwrap(), e["value"].as_str().unwrap()))
            .collect();
        assert_eq!(env["AWS_ROLE_ARN"], arn);
        assert_eq!(env["AWS_WEB_IDENTITY_TOKEN_FILE"], WEB_IDENTITY_TOKEN_FILE);
        // The ambient path's STS client reads the SDK's variable, ESO's the other.
        assert_eq!(env["AWS_ENDPOINT_URL_STS"], env["AWS_STS_ENDPOINT"]);
        assert!(env.contains_key("AWS_SSM_ENDPOINT"));
        let volume = &values["extraVolumes"][0];
        assert_eq!(
            volume["projected"]["sources"][0]["serviceAccountToken"]["audience"],
            "sts.amazonaws.com"
        );
        let mount = &values["extraVolumeMounts"][0];
        assert_eq!(mount["name"], volume["name"]);
        assert_eq!(
            format!("{}/token", mount["mountPath"].as_str().unwrap()),
            WEB_IDENTITY_TOKEN_FILE
        );
        // A stack sharing the cluster names its own controller's account.
        let shared = for_service_account_auth(
            for_shared_cluster(
                with_parameter_store(embedded(), true),
                &StackNames::sharing("b"),
            )
            .unwrap(),
            ("external-secrets-b", "external-secrets-b"),
            arn,
        )
        .unwrap();
        for store in stores(&shared) {
            assert_eq!(
                store["spec"]["provider"]["aws"]["auth"]["jwt"]["serviceAccountRef"]["namespace"],
                "external-secrets-b"
            );
            assert!(store["metadata"]["name"].as_str().unwrap().ends_with("-b"));
        }
    }

    #[test]
    fn broken_yaml_is_rejected_with_its_position_before_publishing() {
        let mut tree = embedded();
        tree.insert(
            "crs/cluster-secret-store.yaml".into(),
            b"kind: [\n".to_vec(),
        );
        let err = prepare(tree, "manifests", GitopsLayout::Chain, false).unwrap_err();
        assert!(
            err.message()
                .starts_with("manifests/crs/cluster-secret-store.yaml:"),
            "{}",
            err.message()
        );
    }
}
