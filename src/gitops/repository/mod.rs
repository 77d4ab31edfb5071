//! The user's own GitOps repository on the stack: the facts its
//! Kustomizations substitute (`postBuild.substituteFrom`), the per-release
//! Helm values ConfigMaps its HelmReleases read (`valuesFrom`), and its apps
//! as Flux Kustomizations after the External Secrets chain.
//!
//! In production, infrastructure code creates these ConfigMaps and Secrets
//! (Flux Operator's `flux-runtime-info` contract); here devstack does, from
//! the profile's `facts:`, and before any Kustomization that reads them is
//! applied, so no level waits on a missing object. Flux 2.9 fails a whole
//! Kustomization on a `${VAR}` nobody provides: [`check_substitution`]
//! applies the same rule before anything is created, with file and line.

mod files;
mod report;
mod substitution;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Value, json};

use super::manifests::Tree;

use super::substitute;
use crate::error::Error;
use crate::profile::settings::{AppSettings, HelmValuesSettings};
use crate::profile::{GitopsSourceKind, SecretString, Settings};
pub use files::repository_files;
pub use report::{FactRow, FactsReport, dotenv, report};
pub use substitution::check_substitution;

/// Label of every object this module publishes, with what it is: so that
/// objects a later profile no longer asks for are found and removed, and
/// `down` removes these and nothing else.
pub const LABEL_PUBLISHED: &str = "dev.devstack.published";
const PUBLISHED_FACTS: &str = "facts";
const PUBLISHED_SECRET: &str = "sensitive-facts";
const PUBLISHED_VALUES: &str = "helm-values";
const PUBLISHED_NAMESPACE: &str = "namespace";
const PUBLISHED_APP: &str = "app";

/// Top-level directories of the GitOps bucket that hold devstack's own
/// objects; a repository published beside them must not use them.
pub(super) const BUCKET_OWN_PREFIXES: [&str; 2] = [super::source::MANIFESTS_PREFIX, "eso"];

/// Shown where a sensitive fact's value would be.
pub const REDACTED: &str = "<sensitive>";

fn labels(settings: &Settings, what: &str) -> Value {
    json!({
        "app.kubernetes.io/managed-by": "devstack",
        crate::docker::LABEL_STACK: settings.name,
        LABEL_PUBLISHED: what,
    })
}

/// The facts the stack publishes in its ConfigMaps: devstack's own (`own`)
/// and the profile's that are not sensitive.
pub fn plain_facts(
    settings: &Settings,
    own: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut plain = own.clone();
    for (name, fact) in &settings.facts.facts {
        if !fact.sensitive {
            plain.insert(name.clone(), fact.value.expose().to_string());
        }
    }
    plain
}

/// The profile's sensitive facts, which go to the stack's Secret.
pub fn sensitive_facts(settings: &Settings) -> BTreeMap<String, SecretString> {
    settings
        .facts
        .facts
        .iter()
        .filter(|(_, f)| f.sensitive)
        .map(|(name, f)| (name.clone(), f.value.clone()))
        .collect()
}

/// Whether the stack publishes a Secret of sensitive facts.
pub fn publishes_secret(settings: &Settings) -> bool {
    settings.facts.facts.values().any(|f| f.sensitive)
}

/// Every fact name a Kustomization of the stack can substitute, known before
/// anything runs: devstack's own (those that exist only with an offline
/// bundle included, and the ARN of every secret the profile seeds) and the
/// profile's.
pub fn fact_names(settings: &Settings) -> BTreeSet<String> {
    let offline = super::source::OfflineEso {
        objects: Tree::new(),
        chart_path: String::new(),
    };
    let arns: BTreeMap<String, String> = settings
        .secrets
        .iter()
        .map(|s| (s.name.clone(), String::new()))
        .collect();
    super::source::facts(settings, Some(&offline), &arns)
        .into_keys()
        .chain(settings.facts.facts.keys().cloned())
        .collect()
}

/// The `substituteFrom` list of the stack's apps: every ConfigMap of facts
/// and, when there are sensitive facts, their Secret.
fn substitute_from(settings: &Settings) -> Vec<Value> {
    let mut from = vec![json!({"kind": "ConfigMap", "name": settings.names.facts()})];
    for name in &settings.facts.config_maps {
        from.push(json!({"kind": "ConfigMap", "name": name}));
    }
    if publishes_secret(settings) {
        from.push(json!({"kind": "Secret", "name": settings.facts.secret}));
    }
    from
}

/// A Helm values ConfigMap as published: the profile's values with every
/// `${VAR}` replaced by its fact, as IaC would have written them.
#[derive(Debug, Clone)]
pub struct RenderedValues {
    pub entry: HelmValuesSettings,
    pub yaml: String,
}

/// The profile's `helmValues` with the facts substituted. A sensitive fact
/// is refused there: a ConfigMap is not a Secret.
pub fn render_helm_values(
    settings: &Settings,
    plain: &BTreeMap<String, String>,
) -> Result<Vec<RenderedValues>, Error> {
    let sensitive: BTreeSet<&String> = settings
        .facts
        .facts
        .iter()
        .filter(|(_, f)| f.sensitive)
        .map(|(k, _)| k)
        .collect();
    let mut problems = Vec::new();
    let mut rendered = Vec::new();
    for (i, entry) in settings.facts.helm_values.iter().enumerate() {
        let what = format!("facts.helmValues[{i}] ({}/{})", entry.namespace, entry.name);
        let mut values = Value::Object(entry.values.clone());
        let mut missing = BTreeSet::new();
        let mut secret_used = BTreeSet::new();
        render_strings(&mut values, &mut |text| {
            for r in substitute::references(text) {
                if sensitive.contains(&r.name) {
                    secret_used.insert(r.name.clone());
                }
            }
            match substitute::render(text, &|name| plain.get(name).cloned()) {
                Ok(out) => out,
                Err(refs) => {
                    missing.extend(refs.into_iter().map(|r| r.name));
                    text.to_string()
                }
            }
        });
        if !secret_used.is_empty() {
            problems.push(format!(
                "{what} uses the sensitive fact(s) {}: a ConfigMap would show them to anyone who can read {}",
                list(&secret_used),
                entry.namespace
            ));
        }
        if !missing.is_empty() {
            problems.push(format!(
                "{what} substitutes {} that no fact provides and that have no default",
                missing
                    .iter()
                    .map(|n| format!("${{{n}}}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        rendered.push(RenderedValues {
            entry: entry.clone(),
            yaml: serde_json::to_string_pretty(&values).expect("JSON serializes"),
        });
    }
    if problems.is_empty() {
        return Ok(rendered);
    }
    Err(Error::user(format!(
        "the profile {}: {}",
        settings.profile,
        problems.join("; ")
    ))
    .with_hint(
        "add the missing names to `facts` (or give them a default: `${NAME:=value}`); read sensitive values in a HelmRelease with `valuesFrom: [{kind: Secret, …}]`",
    ))
}

fn render_strings(value: &mut Value, render: &mut dyn FnMut(&str) -> String) {
    match value {
        Value::String(text) => *text = render(text),
        Value::Array(items) => items.iter_mut().for_each(|v| render_strings(v, render)),
        Value::Object(map) => map.values_mut().for_each(|v| render_strings(v, render)),
        _ => {}
    }
}

fn list<'a>(names: impl IntoIterator<Item = &'a String>) -> String {
    names
        .into_iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The name of an app's Kustomization: the app's own, suffixed like every
/// name of a stack that shares its cluster.
pub fn app_kustomization(settings: &Settings, app: &AppSettings) -> String {
    settings.names.of(&app.name)
}

/// The apps' Kustomizations, dependencies first.
pub fn app_kustomizations(settings: &Settings) -> Vec<String> {
    settings
        .gitops
        .apps
        .iter()
        .map(|app| app_kustomization(settings, app))
        .collect()
}

/// What the stack publishes for the user's repository, beside the chain's
/// own objects: the profile's facts ConfigMaps, the sensitive facts'
/// Secret, the Helm values ConfigMaps (with any namespace they need), and
/// the apps' Kustomizations. `apply_all` applies namespaces first and
/// Kustomizations last, so nothing an app reads is missing when it starts.
pub fn flux_objects(
    settings: &Settings,
    plain: &BTreeMap<String, String>,
    values: &[RenderedValues],
    missing_namespaces: &BTreeSet<String>,
) -> Vec<Value> {
    let ns = super::FLUX_NAMESPACE;
    let mut objects = Vec::new();
    for name in &settings.facts.config_maps {
        objects.push(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": labels(settings, PUBLISHED_FACTS)},
            "data": plain,
        }));
    }
    let sensitive = sensitive_facts(settings);
    if !sensitive.is_empty() {
        let data: BTreeMap<&String, &str> =
            sensitive.iter().map(|(k, v)| (k, v.expose())).collect();
        objects.push(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": settings.facts.secret, "namespace": ns, "labels": labels(settings, PUBLISHED_SECRET)},
            "type": "Opaque",
            "stringData": data,
        }));
    }
    for namespace in missing_namespaces {
        objects.push(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": labels(settings, PUBLISHED_NAMESPACE)},
        }));
    }
    for rendered in values {
        let entry = &rendered.entry;
        let mut labels = labels(settings, PUBLISHED_VALUES);
        // helm-controller watches a labelled `valuesFrom` ConfigMap: changed
        // values reach the release at once.
        labels["reconcile.fluxcd.io/watch"] = json!("Enabled");
        objects.push(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": entry.name, "namespace": entry.namespace, "labels": labels},
            "data": {entry.key.clone(): rendered.yaml},
        }));
    }
    objects.extend(app_objects(settings));
    objects
}

/// The apps as Flux Kustomizations of the stack's source, each after the
/// chain's custom resources (so an app's ExternalSecret finds the store)
/// and after the apps it names.
fn app_objects(settings: &Settings) -> Vec<Value> {
    let source = super::source::source_ref(settings);
    let plan = super::ChainPlan::of(settings);
    let after_chain = plan.chain_levels().last().cloned();
    let interval = settings.gitops.interval.to_string();
    settings
        .gitops
        .apps
        .iter()
        .map(|app| {
            let depends_on: Vec<Value> = after_chain
                .iter()
                .cloned()
                .chain(app.depends_on.iter().map(|d| settings.names.of(d)))
                .map(|name| json!({"name": name}))
                .collect();
            json!({
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                "metadata": {
                    "name": app_kustomization(settings, app),
                    "namespace": super::FLUX_NAMESPACE,
                    "labels": labels(settings, PUBLISHED_APP),
                },
                "spec": {
                    "interval": interval,
                    "retryInterval": "1m",
                    "timeout": app.timeout.to_string(),
                    "prune": true,
                    "wait": app.wait,
                    "sourceRef": {"kind": source.kind, "name": source.name},
                    "path": app_path(app),
                    "dependsOn": depends_on,
                    "postBuild": {"substituteFrom": substitute_from(settings)},
                },
            })
        })
        .collect()
}

/// An app's path inside the stack's source: relative to the repository's
/// root in git, and a local repository is published at the bucket's root,
/// so the path reads the same in both.
fn app_path(app: &AppSettings) -> String {
    match app.path.trim_start_matches("./").trim_end_matches('/') {
        "" | "." => "./".into(),
        p => format!("./{p}"),
    }
}

/// The namespaces the Helm values ConfigMaps need that `exists` says are
/// not on the cluster: devstack creates them, labelled as the stack's, so
/// IaC's race (values written before Flux made the namespace) cannot occur.
pub async fn missing_namespaces(client: &kube::Client, settings: &Settings) -> BTreeSet<String> {
    use k8s_openapi::api::core::v1::Namespace;
    let api: kube::Api<Namespace> = kube::Api::all(client.clone());
    let mut missing = BTreeSet::new();
    for namespace in settings
        .facts
        .helm_values
        .iter()
        .map(|v| &v.namespace)
        .collect::<BTreeSet<_>>()
    {
        match api.get_opt(namespace).await {
            Ok(Some(found)) => {
                // A namespace this stack made before stays the stack's.
                let ours = found
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(crate::docker::LABEL_STACK))
                    == Some(&settings.name);
                if ours {
                    missing.insert(namespace.clone());
                }
            }
            _ => {
                missing.insert(namespace.clone());
            }
        }
    }
    missing
}

/// The facts that differ between what the cluster holds and `plain` and
/// `sensitive` (names only); `None` when the cluster holds none yet, so
/// everything is new.
pub async fn changed_facts(
    client: &kube::Client,
    settings: &Settings,
    plain: &BTreeMap<String, String>,
) -> Option<BTreeSet<String>> {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let ns = super::FLUX_NAMESPACE;
    let maps: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), ns);
    let live = maps.get_opt(&settings.names.facts()).await.ok()??;
    let live = live.data.unwrap_or_default();
    let mut changed: BTreeSet<String> = plain
        .keys()
        .chain(live.keys())
        .filter(|k| plain.get(*k) != live.get(*k))
        .cloned()
        .collect();
    let sensitive = sensitive_facts(settings);
    let secrets: kube::Api<Secret> = kube::Api::namespaced(client.clone(), ns);
    let live_secret = secrets
        .get_opt(&settings.facts.secret)
        .await
        .ok()
        .flatten()
        .and_then(|s| s.data)
        .unwrap_or_default();
    for key in sensitive.keys().chain(live_secret.keys()) {
        let now = sensitive.get(key).map(|v| v.expose().as_bytes());
        let before = live_secret.get(key).map(|b| b.0.as_slice());
        if now != before {
            changed.insert(key.clone());
        }
    }
    Some(changed)
}

/// The apps' Kustomizations whose manifests substitute a fact in `changed`
/// (`None`: every fact changed). devstack reads a local repository's
/// manifests; a git repository's it does not, so there every app counts.
pub fn apps_using(settings: &Settings, changed: Option<&BTreeSet<String>>) -> BTreeSet<String> {
    let Some(changed) = changed else {
        return app_kustomizations(settings).into_iter().collect();
    };
    if changed.is_empty() {
        return BTreeSet::new();
    }
    settings
        .gitops
        .apps
        .iter()
        .filter(|app| match settings.gitops.source {
            GitopsSourceKind::Git => true,
            GitopsSourceKind::Local => {
                substitute::names_used(&settings.base_dir, Path::new(&app.path))
                    .map(|used| used.iter().any(|n| changed.contains(n)))
                    .unwrap_or(true)
            }
        })
        .map(|app| app_kustomization(settings, app))
        .collect()
}

/// Kinds this module publishes, for finding what a profile no longer asks
/// for and what `down` removes.
const PUBLISHED_KINDS: [(&str, &str); 4] = [
    ("kustomize.toolkit.fluxcd.io/v1", "Kustomization"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Namespace"),
];

/// The stack's published objects on the cluster: (api version, kind,
/// namespace, name).
async fn published_on_cluster(
    client: &kube::Client,
    settings: &Settings,
) -> Vec<(&'static str, &'static str, Option<String>, String)> {
    let selector = format!(
        "{LABEL_PUBLISHED},{}={}",
        crate::docker::LABEL_STACK,
        settings.name
    );
    let mut found = Vec::new();
    for (api_version, kind) in PUBLISHED_KINDS {
        let api = crate::k8s::dynamic_api(client, api_version, kind, None);
        let Ok(list) = api
            .list(&kube::api::ListParams::default().labels(&selector))
            .await
        else {
            continue;
        };
        for item in list.items {
            if let Some(name) = item.metadata.name {
                found.push((api_version, kind, item.metadata.namespace, name));
            }
        }
    }
    found
}

/// Removes the objects a previous run published that `wanted` no longer
/// holds (an app, a values ConfigMap or a facts ConfigMap taken out of the
/// profile); returns them as the user reads them.
pub async fn prune_stale(
    client: &kube::Client,
    settings: &Settings,
    wanted: &[Value],
) -> Result<Vec<String>, Error> {
    let keep: BTreeSet<(String, Option<String>, String)> = wanted
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or_default().to_string(),
                o["metadata"]["namespace"].as_str().map(String::from),
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    let mut removed = Vec::new();
    let mut stale = published_on_cluster(client, settings).await;
    // Kustomizations first: their finalizers prune what they applied while
    // what they read is still there; namespaces last.
    stale.sort_by_key(|(_, kind, _, _)| match *kind {
        "Kustomization" => 0,
        "Namespace" => 2,
        _ => 1,
    });
    for (api_version, kind, namespace, name) in stale {
        if keep.contains(&(kind.to_string(), namespace.clone(), name.clone())) {
            continue;
        }
        if crate::k8s::delete(client, api_version, kind, namespace.as_deref(), &name).await? {
            removed.push(match &namespace {
                Some(ns) => format!("{kind} {ns}/{name}"),
                None => format!("{kind} {name}"),
            });
        }
    }
    Ok(removed)
}

/// Removes everything this module published for the stack (for `down` on a
/// cluster devstack keeps); the apps' Kustomizations first, waiting until
/// Flux has pruned what they applied.
pub async fn remove(
    client: &kube::Client,
    settings: &Settings,
    limit: std::time::Duration,
) -> Result<Vec<String>, Error> {
    let removed = prune_stale(client, settings, &[]).await?;
    for name in app_kustomizations(settings) {
        let gone = crate::k8s::wait_gone(
            client,
            "kustomize.toolkit.fluxcd.io/v1",
            "Kustomization",
            Some(super::FLUX_NAMESPACE),
            &name,
            limit,
        )
        .await;
        if !gone {
            return Err(Error::timeout(format!(
                "Kustomization {}/{name} was not removed within {}",
                super::FLUX_NAMESPACE,
                settings.timeouts.flux
            ))
            .with_hint(format!(
                "`kubectl -n {} describe kustomization {name}` shows what holds it; `devstack down` again finishes the job",
                super::FLUX_NAMESPACE
            )));
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example repository's profile, resolved as `up` would with
    /// `SHOP_DOMAIN` set, from a copy in a temporary directory.
    fn example(edit: impl Fn(&Path)) -> (tempfile::TempDir, Settings) {
        let dir = tempfile::tempdir().unwrap();
        copy(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/gitops-repo"),
            dir.path(),
        );
        edit(dir.path());
        let path = dir.path().join("devstack.yaml");
        let loaded = crate::profile::load::load_file(&path).unwrap();
        let settings =
            crate::profile::resolve::resolve_with_env(loaded, &Default::default(), &|name| {
                (name == "SHOP_DOMAIN").then(|| "shop.test".to_string())
            })
            .unwrap();
        (dir, settings)
    }

    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }

    fn published(settings: &Settings) -> Vec<Value> {
        let own = super::super::source::facts(settings, None, &BTreeMap::new());
        let plain = plain_facts(settings, &own);
        let values = render_helm_values(settings, &plain).unwrap();
        let namespaces = BTreeSet::from(["platform".to_string()]);
        flux_objects(settings, &plain, &values, &namespaces)
    }

    fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} in {objects:#?}"))
    }

    #[test]
    fn the_example_publishes_its_facts_values_and_apps() {
        let (_dir, settings) = example(|_| {});
        check_substitution(&settings).unwrap();
        let objects = published(&settings);

        let runtime = &find(&objects, "ConfigMap", "flux-runtime-info")["data"];
        assert_eq!(runtime["cluster_name"], "shop-dev");
        assert_eq!(runtime["replicas"], "2");
        assert_eq!(runtime["DOMAIN"], "shop.test");
        assert_eq!(runtime["LOG_LEVEL"], "debug");
        assert_eq!(runtime["FEATURE_FLAGS"], "checkout,search");
        assert_eq!(
            runtime["LOCALSTACK_ENDPOINT"],
            "http://localstack.localstack.svc.cluster.local:4566"
        );
        assert!(
            runtime["api_token"].is_null(),
            "sensitive: not in a ConfigMap"
        );

        let secret = find(&objects, "Secret", "flux-runtime-secrets");
        assert_eq!(secret["stringData"]["api_token"], "tf-local-api-token");
        assert_eq!(
            secret["metadata"]["labels"][LABEL_PUBLISHED],
            "sensitive-facts"
        );

        let values = find(&objects, "ConfigMap", "platform-info-values");
        assert_eq!(values["metadata"]["namespace"], "platform");
        let rendered: Value =
            serde_json::from_str(values["data"]["values.yaml"].as_str().unwrap()).unwrap();
        assert_eq!(
            rendered,
            json!({"clusterName": "shop-dev", "bucket": "shop-uploads-dev", "domain": "shop.test", "environment": "dev"})
        );
        let namespace = find(&objects, "Namespace", "platform");
        assert_eq!(
            namespace["metadata"]["labels"][LABEL_PUBLISHED],
            "namespace"
        );

        let apps = find(&objects, "Kustomization", "apps");
        assert_eq!(apps["spec"]["path"], "./apps");
        assert_eq!(apps["spec"]["sourceRef"]["kind"], "Bucket");
        assert_eq!(
            apps["spec"]["dependsOn"],
            json!([{"name": "external-secrets-crs"}, {"name": "infrastructure"}])
        );
        assert_eq!(
            apps["spec"]["postBuild"]["substituteFrom"],
            json!([
                {"kind": "ConfigMap", "name": "devstack-stack-facts"},
                {"kind": "ConfigMap", "name": "flux-runtime-info"},
                {"kind": "Secret", "name": "flux-runtime-secrets"},
            ])
        );
        let infrastructure = find(&objects, "Kustomization", "infrastructure");
        assert_eq!(
            infrastructure["spec"]["dependsOn"],
            json!([{"name": "external-secrets-crs"}])
        );
        assert_eq!(
            crate::gitops::ChainPlan::of(&settings).levels()[4..],
            ["infrastructure", "apps"]
        );
    }

    #[test]
    fn the_local_repository_is_published_without_hidden_or_fact_files() {
        let (dir, settings) = example(|root| {
            std::fs::create_dir_all(root.join(".git")).unwrap();
            std::fs::write(root.join(".git/config"), "x").unwrap();
        });
        let files = repository_files(&settings).unwrap();
        assert!(files.contains_key("apps/config.yaml"));
        assert!(files.contains_key("charts/platform-info/Chart.yaml"));
        for left_out in [".git/config", "infra/outputs.json", "env/dev.env"] {
            assert!(!files.contains_key(left_out), "{left_out} published");
        }
        std::fs::create_dir_all(dir.path().join("eso")).unwrap();
        std::fs::write(dir.path().join("eso/x.yaml"), "a: b\n").unwrap();
        let err = repository_files(&settings).unwrap_err();
        assert!(err.message().contains("top-level `eso/`"), "{err:?}");
    }

    #[test]
    fn a_variable_no_fact_provides_is_refused_at_its_file_and_line() {
        let (_dir, settings) = example(|root| {
            let config = root.join("apps/config.yaml");
            let text = std::fs::read_to_string(&config).unwrap();
            std::fs::write(
                &config,
                format!("{text}  MISSING: ${{NOBODY_SETS_THIS}}\n  FINE: ${{ALSO_UNSET:=x}}\n"),
            )
            .unwrap();
        });
        let err = check_substitution(&settings).unwrap_err();
        let message = err.message();
        assert!(message.contains("${NOBODY_SETS_THIS}"), "{message}");
        assert!(message.contains("apps/config.yaml:17:"), "{message}");
        assert!(!message.contains("ALSO_UNSET"), "{message}");
        assert!(
            err.hint().unwrap().contains("`NOBODY_SETS_THIS`"),
            "{err:?}"
        );
    }

    #[test]
    fn helm_values_refuse_sensitive_and_unknown_facts() {
        let (_dir, settings) = example(|root| {
            let profile = root.join("devstack.yaml");
            let text = std::fs::read_to_string(&profile).unwrap().replace(
                "        environment: \"${ENVIRONMENT}\"",
                "        environment: \"${ENVIRONMENT}\"\n        token: \"${api_token}\"\n        other: \"${NOT_A_FACT}\"\n        fine: \"${NOT_A_FACT_EITHER:-dflt}\"",
            );
            std::fs::write(profile, text).unwrap();
        });
        let err = check_substitution(&settings).unwrap_err();
        let message = err.message();
        assert!(
            message.contains("sensitive fact(s) `api_token`"),
            "{message}"
        );
        assert!(message.contains("${NOT_A_FACT}"), "{message}");
        assert!(!message.contains("NOT_A_FACT_EITHER"), "{message}");
        assert!(!message.contains("tf-local-api-token"), "{message}");
    }

    #[test]
    fn only_apps_using_a_changed_fact_are_nudged() {
        let (_dir, settings) = example(|_| {});
        let changed = BTreeSet::from(["DOMAIN".to_string()]);
        assert_eq!(
            apps_using(&settings, Some(&changed)),
            BTreeSet::from(["apps".to_string()])
        );
        assert!(apps_using(&settings, Some(&BTreeSet::new())).is_empty());
        assert_eq!(apps_using(&settings, None).len(), 2);
    }

    #[test]
    fn dotenv_output_quotes_for_a_shell_and_redacts_sensitive_facts() {
        let report = FactsReport {
            stack: "s".into(),
            config_maps: vec!["devstack-stack-facts".into()],
            secret: Some("flux-runtime-secrets".into()),
            facts: vec![
                FactRow {
                    name: "A".into(),
                    value: Some("it's $HOME".into()),
                    sensitive: false,
                    source: "devstack".into(),
                },
                FactRow {
                    name: "T".into(),
                    value: None,
                    sensitive: true,
                    source: "env T".into(),
                },
            ],
        };
        let text = dotenv(&report);
        assert!(text.contains("A='it'\\''s $HOME'\n"), "{text}");
        assert!(text.contains("T='<sensitive>'\n"), "{text}");
        assert!(text.contains("# T is sensitive"), "{text}");
    }
}
