//! `devstack status`: one row per part of the stack — cluster and nodes,
//! LocalStack, Flux controllers, the Kustomization chain, the ESO
//! HelmRelease, the ClusterSecretStore and every ExternalSecret — each
//! healthy, unhealthy or missing. Nothing missing is a crash: it is a row.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams};
use serde::Serialize;

use crate::commands::Context;
use crate::error::Error;
use crate::gitops::{
    CHAIN, CLUSTER_SECRET_STORE, FLUX_NAMESPACE, HELM_RELEASE, ROOT_KUSTOMIZATION,
};
use crate::k8s::conditions::{self, one_line};
use crate::k8s::dynamic_api;
use crate::profile::Settings;
use crate::verify::{ESO_GROUP, ESO_VERSION, profile_external_secret_name};
use crate::{docker, localstack, state};

const KUSTOMIZATION_API: &str = "kustomize.toolkit.fluxcd.io/v1";
const HELM_RELEASE_API: &str = "helm.toolkit.fluxcd.io/v2";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    Healthy,
    Unhealthy,
    Missing,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusRow {
    /// `cluster`, `node`, `localstack`, `flux`, `kustomization`,
    /// `helmrelease`, `clustersecretstore`, `externalsecret`.
    pub component: String,
    /// The object (`namespace/name` for namespaced ones).
    pub name: String,
    pub health: Health,
    pub healthy: bool,
    /// Short state: `Ready`, `running`, `missing`, the failing reason...
    pub state: String,
    /// One line of detail: the condition message, versions, addresses.
    pub detail: String,
    /// What to do about an unhealthy row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl StatusRow {
    fn new(
        component: &str,
        name: impl Into<String>,
        health: Health,
        state: impl Into<String>,
    ) -> Self {
        StatusRow {
            component: component.into(),
            name: name.into(),
            health,
            healthy: health == Health::Healthy,
            state: state.into(),
            detail: String::new(),
            hint: None,
        }
    }
    fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = one_line(&detail.into());
        self
    }
    fn hint(mut self, hint: impl Into<String>) -> Self {
        if !self.healthy {
            self.hint = Some(hint.into());
        }
        self
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub stack: String,
    pub healthy: bool,
    pub rows: Vec<StatusRow>,
}

pub async fn run(ctx: &Context) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    let report = collect(&settings).await;
    if ctx.ui.json() {
        ctx.ui
            .emit_json(&serde_json::to_value(&report).expect("report serializes"));
    } else {
        ctx.ui
            .out(render_table(&report.rows, &|ok| ctx.ui.check_mark(ok)));
    }
    if report.healthy {
        return Ok(0);
    }
    let bad: Vec<&StatusRow> = report.rows.iter().filter(|r| !r.healthy).collect();
    let first = bad[0];
    let mut err = Error::unhealthy(format!(
        "stack `{}` is not healthy: {} {} {}{}",
        report.stack,
        first.component,
        first.name,
        first.state,
        match bad.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        }
    ));
    if let Some(hint) = bad.iter().find_map(|r| r.hint.clone()) {
        err = err.with_hint(hint);
    }
    Err(err)
}

/// Every row, LocalStack and the cluster looked at concurrently.
pub async fn collect(settings: &Settings) -> StatusReport {
    let (mut rows, localstack) = tokio::join!(cluster_rows(settings), localstack_row(settings));
    // The cluster and its nodes first, then LocalStack, then what runs in
    // the cluster.
    let split = rows
        .iter()
        .take_while(|r| matches!(r.component.as_str(), "cluster" | "node"))
        .count();
    let in_cluster = rows.split_off(split);
    rows.push(localstack);
    rows.extend(in_cluster);
    StatusReport {
        stack: settings.name.clone(),
        healthy: rows.iter().all(|r| r.healthy),
        rows,
    }
}

async fn localstack_row(settings: &Settings) -> StatusRow {
    let name = localstack::container_name(settings);
    let up = "`devstack localstack up` starts or repairs it";
    let docker = match docker::connect().await {
        Ok(d) => d,
        Err(e) => {
            return StatusRow::new("localstack", name, Health::Unhealthy, "Docker unreachable")
                .detail(e.message())
                .hint(e.hint().unwrap_or("start the Docker engine").to_string());
        }
    };
    let container = match docker::inspect(&docker, &name).await {
        Ok(Some(c)) => c,
        Ok(None) => {
            return StatusRow::new("localstack", name, Health::Missing, "missing")
                .detail("no container")
                .hint(up);
        }
        Err(e) => {
            return StatusRow::new("localstack", name, Health::Unhealthy, "unknown")
                .detail(e.message())
                .hint(up);
        }
    };
    let state = container
        .state
        .and_then(|s| s.status)
        .map(|s| s.to_string())
        .unwrap_or_else(|| "unknown".into());
    let endpoint = match localstack::describe(&docker, settings).await {
        Ok(e) => e.url,
        Err(_) => localstack::endpoint_url(settings),
    };
    if state != "running" {
        return StatusRow::new("localstack", name, Health::Unhealthy, state)
            .detail(format!("at {endpoint}"))
            .hint(up);
    }
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(3))
        .no_proxy()
        .build();
    let health = match http {
        Ok(http) => localstack::health(&http, &format!("{endpoint}/_localstack/health")).await,
        Err(e) => Err(format!("HTTP client: {e}")),
    };
    match health {
        Ok(services) => {
            let bad: Vec<String> = localstack::unavailable_services(settings, &services)
                .into_iter()
                .map(|s| {
                    format!(
                        "{s} {}",
                        services.get(s).map(String::as_str).unwrap_or("absent")
                    )
                })
                .collect();
            if bad.is_empty() {
                StatusRow::new("localstack", name, Health::Healthy, "running").detail(format!(
                    "{} at {endpoint}",
                    settings.localstack.services.join(", ")
                ))
            } else {
                StatusRow::new(
                    "localstack",
                    name,
                    Health::Unhealthy,
                    "services unavailable",
                )
                .detail(bad.join(", "))
                .hint("`devstack localstack logs` shows why; `devstack localstack up` repairs it")
            }
        }
        Err(why) => StatusRow::new("localstack", name, Health::Unhealthy, "not answering")
            .detail(why)
            .hint(up),
    }
}

/// A row from a kube object read with `get_opt`.
fn object_row<E: std::fmt::Display>(
    component: &str,
    name: String,
    result: Result<Option<serde_json::Value>, E>,
    judge: impl Fn(&serde_json::Value) -> (bool, String, String),
    hint: &str,
) -> StatusRow {
    match result {
        Ok(Some(object)) => {
            let (ok, state, detail) = judge(&object);
            let health = if ok {
                Health::Healthy
            } else {
                Health::Unhealthy
            };
            StatusRow::new(component, name, health, state)
                .detail(detail)
                .hint(hint)
        }
        Ok(None) => StatusRow::new(component, name, Health::Missing, "missing").hint(hint),
        Err(e) => StatusRow::new(component, name, Health::Unhealthy, "unreadable")
            .detail(e.to_string())
            .hint(hint),
    }
}

/// `Ready` condition judged as (ok, state, detail).
fn ready_judgement(object: &serde_json::Value) -> (bool, String, String) {
    judge_condition(object, "Ready", None)
}

/// Whether condition `type_` is True (and has `reason`, when given), with
/// the reason as state and the message as detail.
fn judge_condition(
    object: &serde_json::Value,
    type_: &str,
    reason: Option<&str>,
) -> (bool, String, String) {
    match conditions::condition(object, type_) {
        Some(c) => {
            let ok = c.is_true() && reason.is_none_or(|r| c.reason.as_deref() == Some(r));
            let state = match (&c.reason, ok) {
                (_, true) => type_.to_string(),
                (Some(reason), false) => reason.clone(),
                (None, false) => format!("{type_}={}", c.status),
            };
            (ok, state, c.message.unwrap_or_default())
        }
        None => (false, "no status yet".into(), String::new()),
    }
}

fn dynamic_to_json(object: DynamicObject) -> serde_json::Value {
    object.data
}

async fn get_json(
    api: &Api<DynamicObject>,
    name: &str,
) -> Result<Option<serde_json::Value>, kube::Error> {
    api.get_opt(name).await.map(|o| o.map(dynamic_to_json))
}

async fn cluster_rows(settings: &Settings) -> Vec<StatusRow> {
    let context = settings.kube_context();
    let up = "`devstack up` creates or repairs the stack";
    let path = state::kubeconfig_path(&settings.name);
    let yaml = match std::fs::read_to_string(&path) {
        Ok(yaml) => yaml,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return vec![
                StatusRow::new("cluster", context, Health::Missing, "missing")
                    .detail(format!("stack `{}` has no cluster", settings.name))
                    .hint(up),
            ];
        }
        Err(e) => {
            return vec![
                StatusRow::new(
                    "cluster",
                    context,
                    Health::Unhealthy,
                    "unreadable kubeconfig",
                )
                .detail(format!("{}: {}", path.display(), e.kind())),
            ];
        }
    };
    let client = match crate::k8s::client_from_kubeconfig(&yaml).await {
        Ok(c) => c,
        Err(e) => {
            return vec![
                StatusRow::new("cluster", context, Health::Unhealthy, "bad kubeconfig")
                    .detail(e.message())
                    .hint(up),
            ];
        }
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let list = match nodes.list(&ListParams::default()).await {
        Ok(list) => list,
        Err(e) => {
            return vec![
                StatusRow::new("cluster", context, Health::Unhealthy, "API unreachable")
                    .detail(e.to_string())
                    .hint(format!(
                        "{up}; `docker ps --filter label={}={}` lists its nodes",
                        docker::LABEL_STACK,
                        settings.name
                    )),
            ];
        }
    };
    let version = client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .unwrap_or_else(|_| "version unknown".into());
    let mut rows = vec![
        StatusRow::new("cluster", context, Health::Healthy, "reachable").detail(format!(
            "{}, Kubernetes {version}, {} node(s)",
            settings.cluster.provider.as_str(),
            list.items.len()
        )),
    ];
    for node in &list.items {
        let name = node.metadata.name.clone().unwrap_or_default();
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        let ok = ready.is_some_and(|c| c.status == "True");
        let kubelet = node
            .status
            .as_ref()
            .and_then(|s| s.node_info.as_ref())
            .map(|i| format!("kubelet {}", i.kubelet_version))
            .unwrap_or_default();
        let message = ready
            .filter(|_| !ok)
            .and_then(|c| c.message.clone())
            .unwrap_or_default();
        let detail = [kubelet, message]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        let health = if ok {
            Health::Healthy
        } else {
            Health::Unhealthy
        };
        rows.push(
            StatusRow::new("node", name, health, if ok { "Ready" } else { "NotReady" })
                .detail(detail)
                .hint(format!("{up}; `docker logs <node>` shows the node's log")),
        );
    }

    let flux_hint = "`devstack sync` installs Flux and the External Secrets chain";
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), FLUX_NAMESPACE);
    for component in &settings.flux.components {
        let result = deployments
            .get_opt(component)
            .await
            .map(|d| d.map(|d| serde_json::to_value(d).unwrap_or_default()));
        rows.push(object_row(
            "flux",
            format!("{FLUX_NAMESPACE}/{component}"),
            result,
            |d| judge_condition(d, "Available", None),
            flux_hint,
        ));
    }

    let kustomizations = dynamic_api(
        &client,
        KUSTOMIZATION_API,
        "Kustomization",
        Some(FLUX_NAMESPACE),
    );
    for name in std::iter::once(ROOT_KUSTOMIZATION).chain(CHAIN) {
        rows.push(object_row(
            "kustomization",
            format!("{FLUX_NAMESPACE}/{name}"),
            get_json(&kustomizations, name).await,
            ready_judgement,
            flux_hint,
        ));
    }

    let (release_ns, release) = HELM_RELEASE;
    let releases = dynamic_api(&client, HELM_RELEASE_API, "HelmRelease", Some(release_ns));
    rows.push(object_row(
        "helmrelease",
        format!("{release_ns}/{release}"),
        get_json(&releases, release).await,
        ready_judgement,
        flux_hint,
    ));

    let eso_api = format!("{ESO_GROUP}/{ESO_VERSION}");
    let stores = dynamic_api(&client, &eso_api, "ClusterSecretStore", None);
    rows.push(object_row(
        "clustersecretstore",
        CLUSTER_SECRET_STORE.to_string(),
        get_json(&stores, CLUSTER_SECRET_STORE).await,
        ready_judgement,
        "`devstack status` rows above show whether the chain delivered it; `devstack sync` converges it",
    ));

    rows.extend(external_secret_rows(&client, settings, &eso_api).await);
    rows
}

async fn external_secret_rows(
    client: &kube::Client,
    settings: &Settings,
    eso_api: &str,
) -> Vec<StatusRow> {
    let hint = "`devstack seed` writes the profile's secrets; `devstack verify` proves the path";
    let all = dynamic_api(client, eso_api, "ExternalSecret", None);
    let mut rows = Vec::new();
    let mut seen = Vec::new();
    match all.list(&ListParams::default()).await {
        Ok(list) => {
            for es in list.items {
                let ns = es.metadata.namespace.clone().unwrap_or_default();
                let name = es.metadata.name.clone().unwrap_or_default();
                seen.push((ns.clone(), name.clone()));
                rows.push(object_row::<kube::Error>(
                    "externalsecret",
                    format!("{ns}/{name}"),
                    Ok(Some(es.data)),
                    |o| judge_condition(o, "Ready", Some(crate::verify::REASON_SECRET_SYNCED)),
                    hint,
                ));
            }
        }
        // No ExternalSecret kind served: ESO's CRDs are absent, which the
        // store row already reports; the profile's ones are missing below.
        Err(kube::Error::Api(s)) if s.is_not_found() => {}
        Err(e) => rows.push(
            StatusRow::new("externalsecret", "*", Health::Unhealthy, "unreadable")
                .detail(e.to_string()),
        ),
    }
    for secret in settings.secrets.iter().filter(|s| s.sync.is_some()) {
        let (ns, name) = profile_external_secret_name(secret);
        if !seen.contains(&(ns.clone(), name.clone())) {
            rows.push(
                StatusRow::new(
                    "externalsecret",
                    format!("{ns}/{name}"),
                    Health::Missing,
                    "missing",
                )
                .detail(format!("declared by the profile for `{}`", secret.name))
                .hint("`devstack up` creates the profile's ExternalSecrets"),
            );
        }
    }
    rows
}

/// The table on stdout: a mark, then aligned columns.
pub fn render_table(rows: &[StatusRow], mark: &dyn Fn(bool) -> String) -> String {
    let headers = ["COMPONENT", "NAME", "STATE", "DETAIL"];
    let cells: Vec<[&str; 4]> = rows
        .iter()
        .map(|r| {
            [
                r.component.as_str(),
                r.name.as_str(),
                r.state.as_str(),
                r.detail.as_str(),
            ]
        })
        .collect();
    let mut widths = headers.map(str::len);
    for row in &cells {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |prefix: &str, row: [&str; 4]| {
        let mut out = String::from(prefix);
        for (i, cell) in row.iter().enumerate() {
            if i == row.len() - 1 {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        out.trim_end().to_string()
    };
    let mut out = vec![line("  ", headers)];
    for (row, cell) in rows.iter().zip(cells) {
        out.push(line(&format!("{} ", mark(row.healthy)), cell));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plain(ok: bool) -> String {
        if ok { "✓".into() } else { "✗".into() }
    }

    #[test]
    fn table_aligns_columns_and_marks_rows() {
        let rows = vec![
            StatusRow::new("cluster", "devstack-dev", Health::Healthy, "reachable")
                .detail("k3s, 1 node(s)"),
            StatusRow::new(
                "kustomization",
                "flux-system/external-secrets-crs",
                Health::Unhealthy,
                "DependencyNotReady",
            )
            .detail("dependency 'flux-system/external-secrets-operator'\n is not ready"),
            StatusRow::new(
                "localstack",
                "devstack-dev-localstack",
                Health::Missing,
                "missing",
            ),
        ];
        let table = render_table(&rows, &plain);
        insta::assert_snapshot!(table, @r"
          COMPONENT      NAME                              STATE               DETAIL
        ✓ cluster        devstack-dev                      reachable           k3s, 1 node(s)
        ✗ kustomization  flux-system/external-secrets-crs  DependencyNotReady  dependency 'flux-system/external-secrets-operator' is not ready
        ✗ localstack     devstack-dev-localstack           missing
        ");
    }

    #[test]
    fn conditions_decide_rows() {
        let ready = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded", "message": "Applied revision: x"}
        ]}});
        assert_eq!(
            ready_judgement(&ready),
            (true, "Ready".into(), "Applied revision: x".into())
        );
        let failing = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "SecretSyncedError", "message": "could not get secret data from provider"}
        ]}});
        assert_eq!(
            judge_condition(&failing, "Ready", Some("SecretSynced")),
            (
                false,
                "SecretSyncedError".into(),
                "could not get secret data from provider".into()
            )
        );
        // Ready but for another reason is not synced.
        let deleted = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "SecretDeleted"}
        ]}});
        assert!(!judge_condition(&deleted, "Ready", Some("SecretSynced")).0);
        assert_eq!(
            ready_judgement(&json!({})),
            (false, "no status yet".into(), String::new())
        );
        let available =
            json!({"status": {"conditions": [{"type": "Available", "status": "True"}]}});
        assert!(judge_condition(&available, "Available", None).0);
    }

    #[test]
    fn object_rows_report_missing_and_errors_without_crashing() {
        let missing = object_row::<String>(
            "helmrelease",
            "a/b".into(),
            Ok(None),
            ready_judgement,
            "fix it",
        );
        assert_eq!(missing.health, Health::Missing);
        assert!(!missing.healthy);
        assert_eq!(missing.hint.as_deref(), Some("fix it"));
        let broken = object_row::<String>(
            "helmrelease",
            "a/b".into(),
            Err("timeout".into()),
            ready_judgement,
            "fix it",
        );
        assert_eq!(broken.health, Health::Unhealthy);
        assert_eq!(broken.detail, "timeout");
        let fine = object_row::<String>(
            "helmrelease",
            "a/b".into(),
            Ok(Some(
                json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            )),
            ready_judgement,
            "fix it",
        );
        assert!(fine.healthy);
        assert!(fine.hint.is_none(), "healthy rows carry no hint");
        let json = serde_json::to_value(&fine).unwrap();
        assert_eq!(json["health"], "healthy");
        assert!(json.get("hint").is_none());
    }

    #[allow(dead_code)]
    fn collect_is_send(settings: &Settings) {
        fn send<T: Send>(_: &T) {}
        send(&collect(settings));
    }
}
