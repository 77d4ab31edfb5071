//! Detectors for Flux and the chain it delivers: its controllers, the
//! GitOps source, the Kustomizations, and the ESO HelmRelease (the CRD
//! ordering runbook, failures and exhausted retries).

use serde_json::Value;

use super::{
    Evidence, Finding, age_secs, condition_line, devstack, events_about, not_running, object_name,
    read,
};
use crate::gitops::chain::waiting;
use crate::gitops::{CHAIN, ChainPlan, FLUX_NAMESPACE};
use crate::k8s::conditions::{self, one_line};
use crate::profile::{GitopsLayout, GitopsSourceKind, Settings};

/// How long an install may stay in progress before it counts as stuck.
const STUCK_INSTALL_SECS: i64 = 5 * 60;
/// What Helm and the API server say when a chart's objects need CRDs that
/// are not served yet.
const CRDS_NOT_SERVED: &[&str] = &[
    "no matches for kind",
    "ensure CRDs are installed first",
    "resource mapping not found",
    "could not find the requested resource",
];
/// What Helm says when the release's values are wrong.
const VALUES_ERRORS: &[&str] = &[
    "values don't meet the specifications",
    "cannot unmarshal",
    "error converting YAML",
    "failed to render",
    "unable to build kubernetes objects",
    "execution error at",
    "nil pointer evaluating",
];

/// A Ready=False condition that means failed, not "not yet".
fn failed(object: &Value) -> Option<conditions::Condition> {
    conditions::condition(object, "Ready").filter(|c| {
        c.status == "False"
            && !waiting(
                c.reason.as_deref().unwrap_or_default(),
                c.message.as_deref().unwrap_or_default(),
            )
    })
}

/// Flux's controllers not installed, scaled down, crashing or not ready.
pub fn controllers(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if !read(evidence, "Deployments in flux-system") {
        return Vec::new();
    }
    let sync = devstack(settings, "sync");
    let installed = evidence
        .cluster
        .deployments
        .iter()
        .any(|d| d.namespace == FLUX_NAMESPACE);
    if !installed {
        return vec![
            Finding::new("flux-controller", format!("namespace {FLUX_NAMESPACE}"), "Flux is not installed")
                .cause(format!("no Flux controller runs in {FLUX_NAMESPACE}, so nothing delivers the External Secrets chain"))
                .fix(Some(sync), "installs Flux and delivers the chain"),
        ];
    }
    settings
        .flux
        .components
        .iter()
        .filter_map(|component| {
            let why = not_running(evidence, FLUX_NAMESPACE, component)?;
            Some(
                Finding::new(
                    "flux-controller",
                    format!("Deployment {FLUX_NAMESPACE}/{component}"),
                    format!("Flux's {}", why.symptom),
                )
                .evidence(why.evidence)
                .cause(why.cause)
                .fix(
                    Some(sync.clone()),
                    "re-applies Flux's manifests and waits for the chain",
                ),
            )
        })
        .collect()
}

/// The stack's GitOps source missing, suspended or failing to fetch, and
/// any other Flux source in flux-system failing.
pub fn sources(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if !read(evidence, "source") || !read(evidence, "kustomizations") {
        return Vec::new();
    }
    let sync = devstack(settings, "sync");
    let own = crate::gitops::source::source_ref(settings);
    let is = |o: &Value, kind: &str, name: &str| o["kind"] == kind && o["metadata"]["name"] == name;
    let mut out = Vec::new();
    if !evidence
        .cluster
        .sources
        .iter()
        .any(|o| is(o, own.kind, &own.name))
    {
        out.push(
            Finding::new(
                "gitops-source",
                format!("{} {FLUX_NAMESPACE}/{}", own.kind, own.name),
                format!(
                    "the GitOps source {} {FLUX_NAMESPACE}/{} is missing",
                    own.kind, own.name
                ),
            )
            .cause("Flux has nothing to read the External Secrets chain from")
            .fix(
                Some(sync.clone()),
                "applies the source and publishes the manifests",
            ),
        );
    }
    for source in &evidence.cluster.sources {
        let kind = source["kind"].as_str().unwrap_or("source");
        let object = format!("{kind} {}", object_name(source));
        let finding = |symptom: String| Finding::new("gitops-source", &object, symptom);
        if source["spec"]["suspend"] == true {
            out.push(
                finding(format!("{object} is suspended"))
                    .cause("a run of devstack that suspended it while it re-published the bucket did not finish")
                    .fix(Some(sync.clone()), "re-publishes the bucket and resumes the source"),
            );
            continue;
        }
        let Some(c) = failed(source) else {
            continue;
        };
        let message = one_line(c.message.as_deref().unwrap_or_default());
        let (cause, action) = source_cause(evidence, settings, source, &message);
        out.push(
            finding(format!("{object} cannot fetch"))
                .evidence(condition_line(source, "Ready"))
                .evidence(events_about(
                    evidence,
                    kind,
                    FLUX_NAMESPACE,
                    source["metadata"]["name"].as_str().unwrap_or(""),
                ))
                .cause(cause)
                .fix(Some(sync.clone()), action),
        );
    }
    out
}

/// Why a source fails to fetch, and what the fix does.
fn source_cause(
    evidence: &Evidence,
    settings: &Settings,
    source: &Value,
    message: &str,
) -> (String, String) {
    let spec = &source["spec"];
    match source["kind"].as_str() {
        Some("Bucket") => {
            let localstack = match &evidence.localstack.container {
                Some(c) if c.status != "running" => format!("; LocalStack is {}", c.status),
                None => "; LocalStack is missing".to_string(),
                Some(_) => String::new(),
            };
            (
                format!(
                    "source-controller cannot read bucket {} at {}{localstack}: {message}",
                    spec["bucketName"].as_str().unwrap_or("?"),
                    spec["endpoint"].as_str().unwrap_or("?")
                ),
                "re-publishes the bucket in LocalStack and points the source at it".into(),
            )
        }
        Some("GitRepository") if source["metadata"]["name"] == settings.names.source()
            && settings.gitops.source == GitopsSourceKind::Git =>
        (
            format!(
                "source-controller cannot fetch {} ({}): {message}",
                spec["url"].as_str().unwrap_or("?"),
                settings.gitops.git_branch
            ),
            "check `gitops.git.url` and `gitops.git.branch` in the profile (and that the cluster reaches the repository), then run the command".into(),
        ),
        _ => (
            format!(
                "source-controller cannot fetch {}: {message}",
                spec["url"].as_str().unwrap_or("its source")
            ),
            "fetches again; without network access to upstream, use the offline bundle (`images.bundle` or DEVSTACK_BUNDLE)".into(),
        ),
    }
}

/// The chain's Kustomizations missing, or failing to build, apply or pass
/// their health checks (Flux's own message).
pub fn kustomizations(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if !read(evidence, "kustomizations") {
        return Vec::new();
    }
    let sync = devstack(settings, "sync");
    let all = &evidence.cluster.kustomizations;
    let find = |name: &str| all.iter().find(|k| k["metadata"]["name"] == name);
    let mut out = Vec::new();
    let own_chain = settings.gitops.layout == GitopsLayout::Chain
        && settings.gitops.source == GitopsSourceKind::Local
        && settings.gitops.path.is_none();
    let plan = ChainPlan::of(settings);
    let root = plan.root();
    let root_ok = find(&root).is_some_and(|r| failed(r).is_none());
    let expected: Vec<String> = std::iter::once(root)
        .chain(
            plan.chain_levels()
                .into_iter()
                .filter(|_| own_chain && root_ok),
        )
        .chain(plan.apps.iter().cloned())
        .collect();
    for name in expected.into_iter().filter(|n| find(n).is_none()) {
        let what = if plan.apps.contains(&name) {
            "an app of the profile's `gitops.apps`"
        } else {
            "a level of the External Secrets chain"
        };
        out.push(
            Finding::new(
                "kustomization-failing",
                format!("Kustomization {FLUX_NAMESPACE}/{name}"),
                format!("Kustomization {FLUX_NAMESPACE}/{name} is missing"),
            )
            .cause(format!(
                "{what} was deleted, so what it applies is not kept up"
            ))
            .fix(
                Some(sync.clone()),
                "restores the chain and waits until it is Ready",
            ),
        );
    }
    for k in all {
        let Some(c) = failed(k) else {
            continue;
        };
        let name = k["metadata"]["name"].as_str().unwrap_or("?");
        let spec = &k["spec"];
        let path = spec["path"].as_str().unwrap_or("./");
        let source = format!(
            "{} {}",
            spec["sourceRef"]["kind"].as_str().unwrap_or("?"),
            spec["sourceRef"]["name"].as_str().unwrap_or("?")
        );
        let message = one_line(c.message.as_deref().unwrap_or_default());
        let reason = c.reason.clone().unwrap_or_default();
        let doing = match reason.as_str() {
            "HealthCheckFailed" => "is not healthy after applying",
            "ReconciliationFailed" => "cannot apply",
            _ => "cannot build",
        };
        let action = match &settings.gitops.path {
            Some(dir) => format!(
                "fix the manifests in {} (the profile's `gitops.path`), then run the command: it re-publishes them and reconciles the chain",
                dir.display()
            ),
            None => "re-publishes the manifests and re-applies the chain's levels as devstack ships them".to_string(),
        };
        out.push(
            Finding::new(
                "kustomization-failing",
                format!("Kustomization {FLUX_NAMESPACE}/{name}"),
                format!("Kustomization {FLUX_NAMESPACE}/{name} fails ({reason})"),
            )
            .evidence(condition_line(k, "Ready"))
            .evidence([format!(
                "path {path} of {source}, last attempted revision {}",
                k["status"]["lastAttemptedRevision"]
                    .as_str()
                    .unwrap_or("none")
            )])
            .evidence(events_about(
                evidence,
                "Kustomization",
                FLUX_NAMESPACE,
                name,
            ))
            .cause(format!("Flux {doing} the manifests at {path}: {message}"))
            .fix(Some(sync.clone()), action),
        );
    }
    out
}

/// The ESO HelmRelease missing, stuck installing or failing on CRDs that
/// are not served (the CRD ordering runbook), or failed otherwise (its
/// values, exhausted retries).
pub fn helm_release(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    if !read(evidence, "helmrelease") {
        return Vec::new();
    }
    let (ns, name) = settings.names.helm_release();
    let (ns, name) = (ns.as_str(), name.as_str());
    let object = format!("HelmRelease {ns}/{name}");
    let Some(release) = &evidence.cluster.helm_release else {
        return missing_release(evidence, settings, object);
    };
    let lines: Vec<String> = ["Ready", "Released", "Stalled"]
        .iter()
        .filter_map(|t| condition_line(release, t))
        .chain(
            release["status"]["history"][0]["status"]
                .as_str()
                .map(|s| format!("last release: {s}")),
        )
        .chain(events_about(evidence, "HelmRelease", ns, name))
        .collect();
    if let Some(found) = crd_ordering(evidence, settings, release, &object, &lines) {
        return vec![found];
    }
    failed_release(settings, release, object, lines)
        .into_iter()
        .collect()
}

/// The HelmRelease missing once the operator level, which applies it, did.
fn missing_release(evidence: &Evidence, settings: &Settings, object: String) -> Vec<Finding> {
    let operator = evidence
        .cluster
        .kustomizations
        .iter()
        .find(|k| k["metadata"]["name"] == settings.names.of(CHAIN[1]));
    if operator.is_none_or(|o| failed(o).is_some()) {
        return Vec::new();
    }
    vec![
        Finding::new(
            "helmrelease-failed",
            &object,
            format!("{object} is missing"),
        )
        .cause(format!(
            "nothing installs ESO: the chain's level {} applies it",
            settings.names.of(CHAIN[1])
        ))
        .fix(
            Some(devstack(settings, "sync")),
            "re-applies the chain's levels",
        ),
    ]
}

fn ready_message(release: &Value) -> String {
    let ready = conditions::condition(release, "Ready");
    one_line(
        ready
            .as_ref()
            .and_then(|c| c.message.as_deref())
            .unwrap_or_default(),
    )
}

/// The runbook "HelmRelease stuck in install": an install failing on kinds
/// that are not served, or in progress for longer than any install takes.
fn crd_ordering(
    evidence: &Evidence,
    settings: &Settings,
    release: &Value,
    object: &str,
    lines: &[String],
) -> Option<Finding> {
    let message = ready_message(release);
    let (symptom, cause) = if CRDS_NOT_SERVED.iter().any(|m| message.contains(m)) {
        (
            format!("{object} cannot install: ESO's CRDs are not served"),
            format!(
                "the chart's objects reached the API server before ESO's CRDs did (CRD ordering): {message}"
            ),
        )
    } else {
        let ready = conditions::condition(release, "Ready");
        let installing = ready
            .as_ref()
            .is_some_and(|c| c.status != "True" && message.to_lowercase().contains("install"));
        let age = release["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .and_then(|c| c["lastTransitionTime"].as_str())
            .and_then(|t| age_secs(evidence, t))
            .filter(|age| installing && *age > STUCK_INSTALL_SECS)?;
        (
            format!("{object} has been installing for {} min", age / 60),
            "an install this long waits on objects whose CRDs are not served (the CRD ordering race) or on pods that do not start (see the findings about ESO's Deployments)".to_string(),
        )
    };
    let crds = evidence
        .cluster
        .kustomizations
        .iter()
        .find(|k| k["metadata"]["name"] == CHAIN[0])
        .map(|k| condition_line(k, "Ready").unwrap_or_else(|| "not reconciled yet".into()))
        .unwrap_or_else(|| "missing".into());
    Some(
        Finding::new("helmrelease-crd-ordering", object, symptom)
            .evidence(lines.to_vec())
            .evidence([format!("Kustomization {FLUX_NAMESPACE}/{}: {crds}", CHAIN[0])])
            .cause(cause)
            .fix(
                Some(devstack(settings, "sync")),
                "applies the CRDs level first and waits for every CRD, then has the release tried again",
            ),
    )
}

/// The release failed, or stalled with its retries exhausted; a values
/// error is named as such.
fn failed_release(
    settings: &Settings,
    release: &Value,
    object: String,
    lines: Vec<String>,
) -> Option<Finding> {
    let stalled = conditions::condition(release, "Stalled").filter(|c| c.is_true());
    if failed(release).is_none() && stalled.is_none() {
        return None;
    }
    let message = ready_message(release);
    let exhausted = stalled.is_some() || message.contains("exhausted");
    // Once retries are exhausted Ready may say only that; the values error
    // is then in Released or the events.
    let values = std::iter::once(&message)
        .chain(&lines)
        .find(|l| VALUES_ERRORS.iter().any(|m| l.contains(m)));
    let cause = match (values, exhausted) {
        (Some(said), _) => format!("the chart rejects its values: {said}"),
        (None, true) => format!("helm-controller gave up after its retries: {message}"),
        (None, false) => format!("Helm failed: {message}"),
    };
    let action = if values.is_some() {
        "correct `eso.values` in the profile if the message names a value it sets (they reach the chart through ConfigMap external-secrets/devstack-eso-values), then run the command: it re-applies them and helm-controller tries the release again"
    } else {
        "re-applies the release; one whose retries are exhausted is tried again once its values or chart change (`flux reconcile helmrelease -n external-secrets external-secrets --force` forces it)"
    };
    let symptom = if exhausted {
        format!("{object} failed and its retries are exhausted")
    } else {
        format!("{object} failed")
    };
    Some(
        Finding::new("helmrelease-failed", object, symptom)
            .evidence(lines)
            .cause(cause)
            .fix(Some(devstack(settings, "sync")), action),
    )
}

#[cfg(test)]
mod tests {
    use super::super::detect;
    use super::super::fixtures::{only, settings, with};
    use serde_json::json;

    #[test]
    fn flux_missing_or_a_controller_crash_looping() {
        let none = with(|e| {
            let d = e["cluster"]["deployments"].as_array_mut().unwrap();
            d.retain(|d| d["namespace"] != "flux-system");
        });
        assert_eq!(
            only(&none, "flux-controller").symptom,
            "Flux is not installed"
        );
        let crashing = with(|e| {
            e["cluster"]["deployments"][2]["available"] = json!(0);
            e["cluster"]["pods"][2]["containers"][0] = json!({"name": "manager", "image": "ghcr.io/fluxcd/helm-controller:v1.3.0",
                "state": "waiting", "reason": "CrashLoopBackOff", "restarts": 6, "lastReason": "Error", "lastExitCode": 1});
            e["cluster"]["pods"][2]["logTail"] =
                json!(["{\"level\":\"error\",\"msg\":\"unable to start manager\"}"]);
        });
        let finding = only(&crashing, "flux-controller");
        assert_eq!(finding.symptom, "Flux's helm-controller is not running");
        assert_eq!(
            finding.cause,
            "its container manager keeps failing (CrashLoopBackOff, exit code 1)"
        );
        assert!(
            finding
                .evidence
                .iter()
                .any(|l| l.contains("log: {\"level\":\"error\"")),
            "{finding:#?}"
        );
        assert_eq!(finding.fix.command.as_deref(), Some("devstack sync"));
    }

    #[test]
    fn a_bucket_that_cannot_be_read_says_where_it_looked() {
        let evidence = with(|e| {
            e["cluster"]["sources"][0]["status"]["conditions"] = json!([{"type": "Ready", "status": "False",
                "reason": "BucketOperationFailed", "message": "bucket 'devstack-gitops' does not exist"}]);
        });
        let finding = only(&evidence, "gitops-source");
        assert_eq!(finding.symptom, "Bucket flux-system/devstack cannot fetch");
        assert_eq!(
            finding.cause,
            "source-controller cannot read bucket devstack-gitops at 10.43.12.7:4566: bucket 'devstack-gitops' does not exist"
        );
        let missing = with(|e| {
            e["cluster"]["sources"].as_array_mut().unwrap().remove(0);
        });
        assert!(
            only(&missing, "gitops-source")
                .symptom
                .ends_with("is missing")
        );
        let suspended = with(|e| e["cluster"]["sources"][0]["spec"]["suspend"] = json!(true));
        assert!(
            only(&suspended, "gitops-source")
                .symptom
                .ends_with("is suspended")
        );
    }

    #[test]
    fn a_kustomization_that_does_not_build_shows_fluxs_message() {
        // kustomize-controller 1.6 on a path that is not in the artifact.
        let evidence = with(|e| {
            let crs = &mut e["cluster"]["kustomizations"][3];
            crs["spec"]["path"] = json!("./does-not-exist");
            crs["status"]["conditions"] = json!([{"type": "Ready", "status": "False", "reason": "ArtifactFailed",
                "message": "kustomization path not found: stat /tmp/kustomization-1234/does-not-exist: no such file or directory"}]);
            e["cluster"]["events"].as_array_mut().unwrap().push(json!({"namespace": "flux-system", "kind": "Kustomization",
                "name": "external-secrets-crs", "reason": "ArtifactFailed", "lastSeen": "2026-03-02T09:59:00Z",
                "message": "kustomization path not found: stat /tmp/kustomization-1234/does-not-exist: no such file or directory"}));
        });
        let finding = only(&evidence, "kustomization-failing");
        assert_eq!(
            finding.symptom,
            "Kustomization flux-system/external-secrets-crs fails (ArtifactFailed)"
        );
        assert!(
            finding.cause.starts_with(
                "Flux cannot build the manifests at ./does-not-exist: kustomization path not found"
            ),
            "{}",
            finding.cause
        );
        assert!(
            finding
                .evidence
                .iter()
                .any(|l| l.starts_with("event ArtifactFailed"))
        );
        assert_eq!(finding.fix.command.as_deref(), Some("devstack sync"));
    }

    #[test]
    fn a_missing_level_and_a_waiting_one() {
        let missing = with(|e| {
            e["cluster"]["kustomizations"]
                .as_array_mut()
                .unwrap()
                .remove(2);
        });
        assert_eq!(
            only(&missing, "kustomization-failing").symptom,
            "Kustomization flux-system/external-secrets-operator is missing"
        );
        // Waiting for a dependency is not a failure.
        let waiting = with(|e| {
            e["cluster"]["kustomizations"][3]["status"]["conditions"] = json!([{"type": "Ready", "status": "False",
                "reason": "DependencyNotReady", "message": "dependency 'flux-system/external-secrets-operator' is not ready"}]);
        });
        assert!(detect(&waiting, &settings()).is_empty());
    }

    fn release_condition(ready: serde_json::Value) -> super::Evidence {
        with(|e| e["cluster"]["helmRelease"]["status"]["conditions"] = json!([ready]))
    }

    #[test]
    fn a_release_installing_before_its_crds_is_the_crd_ordering_runbook() {
        let evidence = release_condition(
            json!({"type": "Ready", "status": "False", "reason": "InstallFailed",
            "message": "Helm install failed for release external-secrets/external-secrets with chart external-secrets@2.9.0: unable to build kubernetes objects from release manifest: resource mapping not found for name: \"external-secrets\" namespace: \"\" from \"\": no matches for kind \"ClusterSecretStore\" in version \"external-secrets.io/v1\"\nensure CRDs are installed first"}),
        );
        let finding = only(&evidence, "helmrelease-crd-ordering");
        assert_eq!(
            finding.symptom,
            "HelmRelease external-secrets/external-secrets cannot install: ESO's CRDs are not served"
        );
        assert!(
            finding
                .evidence
                .iter()
                .any(|l| l
                    .starts_with("Kustomization flux-system/external-secrets-crds: Ready=True"))
        );
        let stuck = release_condition(
            json!({"type": "Ready", "status": "Unknown", "reason": "Progressing",
            "message": "Running 'install' action with timeout of 5m0s", "lastTransitionTime": "2026-03-02T09:48:00Z"}),
        );
        assert_eq!(
            only(&stuck, "helmrelease-crd-ordering").symptom,
            "HelmRelease external-secrets/external-secrets has been installing for 12 min"
        );
        let recent = release_condition(
            json!({"type": "Ready", "status": "Unknown", "reason": "Progressing",
            "message": "Running 'install' action with timeout of 5m0s", "lastTransitionTime": "2026-03-02T09:58:00Z"}),
        );
        assert!(detect(&recent, &settings()).is_empty());
    }

    #[test]
    fn a_release_with_bad_values_points_at_eso_values() {
        let evidence = with(|e| {
            e["cluster"]["helmRelease"]["status"]["conditions"] = json!([
                {"type": "Ready", "status": "False", "reason": "RetriesExceeded",
                 "message": "Helm upgrade failed for release external-secrets/external-secrets with chart external-secrets@2.9.0: values don't meet the specifications of the schema(s) in the following chart(s):\nexternal-secrets:\n- replicaCount: Invalid type. Expected: integer, given: string"},
                {"type": "Stalled", "status": "True", "reason": "RetriesExceeded", "message": "Failed to upgrade after 4 attempt(s)"}]);
        });
        let finding = only(&evidence, "helmrelease-failed");
        assert_eq!(
            finding.symptom,
            "HelmRelease external-secrets/external-secrets failed and its retries are exhausted"
        );
        assert!(
            finding
                .cause
                .starts_with("the chart rejects its values: Helm upgrade failed"),
            "{}",
            finding.cause
        );
        assert!(finding.fix.action.contains("eso.values"));
        assert_eq!(finding.fix.command.as_deref(), Some("devstack sync"));
        let said_elsewhere = with(|e| {
            e["cluster"]["helmRelease"]["status"]["conditions"] = json!([
                {"type": "Ready", "status": "False", "reason": "RetriesExceeded", "message": "Failed to upgrade after 4 attempt(s)"},
                {"type": "Released", "status": "False", "reason": "UpgradeFailed",
                 "message": "Helm upgrade failed for release external-secrets/external-secrets with chart external-secrets@2.9.0: Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"},
                {"type": "Stalled", "status": "True", "reason": "RetriesExceeded", "message": "Failed to upgrade after 4 attempt(s)"}]);
        });
        let finding = only(&said_elsewhere, "helmrelease-failed");
        assert!(
            finding
                .cause
                .starts_with("the chart rejects its values: Released=False UpgradeFailed"),
            "{}",
            finding.cause
        );
    }
}
