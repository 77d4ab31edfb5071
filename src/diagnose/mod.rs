//! `devstack diagnose`: the runbooks of the platform's ESO service page,
//! automated. [`gather`] reads everything the detectors need from the stack
//! (kube objects, Docker, LocalStack's health and secret names) into an
//! [`Evidence`]; each detector is a pure function of that evidence and the
//! settings, and says what it found as a [`Finding`]: the symptom, the
//! evidence, the cause and the fix (a command carrying the flags that
//! select the stack). Secret values are never read; certificates are
//! compared by fingerprint.

mod cluster;
mod eso;
mod evidence;
mod external_secrets;
mod flux;
mod gather;
mod localstack;
mod pointer;
mod webhook;

use serde::Serialize;
use serde_json::Value;

use crate::k8s::conditions::{self, one_line};
use crate::profile::Settings;

pub use evidence::*;
pub use gather::{NOT_SERVED, gather};
pub use pointer::point;

/// What one detector found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// Stable id of the detector (`localstack-container`, `webhook-ca-bundle`, ...).
    pub detector: &'static str,
    /// The object it is about (`HelmRelease external-secrets/external-secrets`).
    pub object: String,
    /// What is wrong, as a user sees it.
    pub symptom: String,
    /// What shows it: conditions, events, container states, log lines.
    pub evidence: Vec<String>,
    /// Why it is so.
    pub cause: String,
    pub fix: Fix,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fix {
    /// The command that repairs it, with the flags that reach the stack;
    /// `None` when the fix is an edit (`action` says which).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// What to do, or what the command does.
    pub action: String,
}

impl Finding {
    fn new(detector: &'static str, object: impl Into<String>, symptom: impl Into<String>) -> Self {
        Finding {
            detector,
            object: object.into(),
            symptom: symptom.into(),
            evidence: Vec::new(),
            cause: String::new(),
            fix: Fix {
                command: None,
                action: String::new(),
            },
        }
    }

    fn evidence(mut self, lines: impl IntoIterator<Item = String>) -> Self {
        self.evidence.extend(lines);
        self
    }

    fn cause(mut self, cause: impl Into<String>) -> Self {
        self.cause = cause.into();
        self
    }

    /// The fix: `command` (from [`devstack`]) and what it does.
    fn fix(mut self, command: Option<String>, action: impl Into<String>) -> Self {
        self.fix = Fix {
            command,
            action: action.into(),
        };
        self
    }

    /// One line: the symptom, the cause and the fix (each command quoted
    /// on its own, as errors quote commands).
    pub fn summary(&self) -> String {
        let fix = match &self.fix.command {
            Some(command) => command
                .split(" && ")
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(" && "),
            None => self.fix.action.clone(),
        };
        format!("{}: {}; fix: {fix}", self.symptom, self.cause)
    }
}

/// `devstack ARGS` as the user runs it on this stack (`-p`, `--name`, ...).
pub fn devstack(settings: &Settings, args: &str) -> String {
    format!("devstack{} {args}", settings.cli_flags())
}

/// A detector: what it finds in the evidence.
pub type Detector = fn(&Evidence, &Settings) -> Vec<Finding>;

/// Which stacks a detector applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applies {
    Always,
    /// Only where devstack installs ESO: the detector judges its
    /// HelmRelease, Deployments or webhook. A cluster's own ESO is its
    /// owners' to run, and `status` shows its controller.
    OwnEso,
    /// Only where devstack installs ESO's shared parts (its webhook and
    /// cert-controller): not for a stack that joined a cluster another
    /// stack runs on, which uses that stack's.
    OwnSharedEso,
}

/// Every detector, in the order findings are shown: the stack's parts from
/// the bottom up (Docker, nodes, LocalStack, Flux, ESO, the secrets).
pub const DETECTORS: &[(Detector, Applies)] = &[
    (cluster::unreachable, Applies::Always),
    (cluster::nodes, Applies::Always),
    (cluster::image_pull, Applies::Always),
    (localstack::container, Applies::Always),
    (localstack::route, Applies::Always),
    (localstack::credentials, Applies::Always),
    (flux::controllers, Applies::Always),
    (flux::sources, Applies::Always),
    (flux::kustomizations, Applies::Always),
    (flux::helm_release, Applies::OwnEso),
    (eso::workloads, Applies::OwnEso),
    (eso::oom_killed, Applies::OwnEso),
    (webhook::certificate, Applies::OwnSharedEso),
    (webhook::not_serving, Applies::OwnSharedEso),
    (webhook::ca_bundle, Applies::OwnSharedEso),
    (eso::role, Applies::Always),
    (eso::store, Applies::Always),
    (external_secrets::missing_in_localstack, Applies::Always),
    (
        external_secrets::parameter_missing_in_localstack,
        Applies::Always,
    ),
    (external_secrets::failing, Applies::Always),
];

/// The detectors that apply to this stack, in the order of [`DETECTORS`].
pub fn detectors(settings: &Settings) -> Vec<Detector> {
    DETECTORS
        .iter()
        .filter(|(_, applies)| match applies {
            Applies::Always => true,
            Applies::OwnEso => settings.eso.installs(),
            Applies::OwnSharedEso => crate::gitops::ChainPlan::of(settings).installs_eso_shared,
        })
        .map(|(detector, _)| *detector)
        .collect()
}

/// What `diagnose --json` reports for a stack that does not exist (the
/// error [`diagnose`] returns then): a list of findings, as for any stack,
/// holding this one, whose fix creates the stack.
pub fn stack_missing(settings: &Settings) -> Finding {
    Finding::new(
        "stack-missing",
        format!("stack {}", settings.name),
        format!("stack `{}` does not exist", settings.name),
    )
    .evidence([
        format!(
            "no kubeconfig at {}",
            crate::state::kubeconfig_path(settings).display()
        ),
        "no node container and no LocalStack container with its labels".to_string(),
    ])
    .cause("it was never created, or `devstack down` removed it")
    .fix(
        Some(devstack(settings, "up")),
        "creates the stack and proves the round trip",
    )
}

/// Every finding in `evidence`.
pub fn detect(evidence: &Evidence, settings: &Settings) -> Vec<Finding> {
    detectors(settings)
        .iter()
        .flat_map(|detector| detector(evidence, settings))
        .collect()
}

/// Reads the stack and runs every detector on it. A stack that does not
/// exist is an error of kind `Unhealthy` ([`stack_missing`] is its finding);
/// an engine that does not answer, `Prerequisite`.
pub async fn diagnose(settings: &Settings) -> Result<(Evidence, Vec<Finding>), crate::Error> {
    let evidence = gather(settings).await?;
    let findings = detect(&evidence, settings);
    Ok((evidence, findings))
}

// Helpers the detectors share.

/// `namespace/name` of a kube object given as JSON.
fn object_name(object: &Value) -> String {
    let name = object["metadata"]["name"].as_str().unwrap_or("?");
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// `Ready=False ReconciliationFailed: message` for condition `type_`.
fn condition_line(object: &Value, type_: &str) -> Option<String> {
    let c = conditions::condition(object, type_)?;
    let mut out = format!("{type_}={}", c.status);
    if let Some(reason) = &c.reason {
        out.push_str(&format!(" {reason}"));
    }
    if let Some(message) = &c.message {
        out.push_str(&format!(": {}", one_line(message)));
    }
    Some(out)
}

/// The last Warning events about one object, most recent last.
fn events_about(evidence: &Evidence, kind: &str, namespace: &str, name: &str) -> Vec<String> {
    let mut about: Vec<&EventEvidence> = evidence
        .cluster
        .events
        .iter()
        .filter(|e| {
            e.kind == kind && e.name == name && (namespace.is_empty() || e.namespace == namespace)
        })
        .collect();
    about.sort_by(|a, b| a.last_seen.cmp(&b.last_seen));
    let skip = about.len().saturating_sub(MAX_EVENTS);
    about
        .into_iter()
        .skip(skip)
        .map(EventEvidence::line)
        .collect()
}

/// Events shown per object.
const MAX_EVENTS: usize = 3;

/// The pods of Deployment `namespace/name`.
fn pods_of<'a>(evidence: &'a Evidence, namespace: &str, name: &str) -> Vec<&'a PodEvidence> {
    evidence
        .cluster
        .pods
        .iter()
        .filter(|p| p.namespace == namespace && p.deployment.as_deref() == Some(name))
        .collect()
}

fn deployment<'a>(
    evidence: &'a Evidence,
    namespace: &str,
    name: &str,
) -> Option<&'a DeploymentEvidence> {
    evidence
        .cluster
        .deployments
        .iter()
        .find(|d| d.namespace == namespace && d.name == name)
}

/// Why a Deployment does not serve.
struct NotRunning {
    symptom: String,
    evidence: Vec<String>,
    cause: String,
    /// Its pods run but are not ready (no crash, no missing image): the
    /// detector of what it serves says why better.
    merely_unready: bool,
}

/// Why Deployment `namespace/name` does not serve; `None` when one replica
/// at least is available.
fn not_running(evidence: &Evidence, namespace: &str, name: &str) -> Option<NotRunning> {
    let Some(d) = deployment(evidence, namespace, name) else {
        return Some(NotRunning {
            symptom: format!("Deployment {namespace}/{name} is missing"),
            evidence: Vec::new(),
            cause: format!("nothing runs {name}: its Deployment does not exist"),
            merely_unready: false,
        });
    };
    if d.replicas == 0 {
        return Some(NotRunning {
            symptom: format!("{name} is scaled to 0 replicas"),
            evidence: vec![d.line()],
            cause: format!(
                "Deployment {namespace}/{name} asks for no pod (scaled down by hand), so nothing runs it"
            ),
            merely_unready: false,
        });
    }
    if d.available > 0 {
        return None;
    }
    let pods = pods_of(evidence, namespace, name);
    let mut lines = vec![d.line()];
    for pod in &pods {
        lines.extend(pod.lines());
        lines.extend(events_about(evidence, "Pod", namespace, &pod.name));
    }
    let containers = || pods.iter().flat_map(|p| p.containers.iter());
    let failing = containers().find(|c| c.failing() || c.image_unavailable());
    let unschedulable = pods.iter().find_map(|p| p.unschedulable.clone());
    let cause = match (failing, unschedulable) {
        (Some(c), _) if c.oom_killed() => format!(
            "its container {} runs out of memory (OOMKilled{})",
            c.name,
            c.memory_limit
                .as_ref()
                .map(|l| format!(", limit {l}"))
                .unwrap_or_default()
        ),
        (Some(c), _) if c.image_unavailable() => format!("its image {} cannot be pulled", c.image),
        (Some(c), _) => format!(
            "its container {} keeps failing ({}{})",
            c.name,
            c.reason.as_deref().unwrap_or("exited"),
            c.last_exit_code
                .or(c.exit_code)
                .map(|code| format!(", exit code {code}"))
                .unwrap_or_default()
        ),
        (None, Some(why)) => format!("its pod cannot be scheduled: {}", one_line(&why)),
        (None, None) if pods.is_empty() => "it has no pod".to_string(),
        (None, None) => "its pod runs but is not ready".to_string(),
    };
    Some(NotRunning {
        symptom: format!("{name} is not running"),
        evidence: lines,
        merely_unready: failing.is_none() && !pods.is_empty() && !cause.contains("scheduled"),
        cause,
    })
}

/// Seconds from `time` (RFC 3339) to when the evidence was read.
fn age_secs(evidence: &Evidence, time: &str) -> Option<i64> {
    use k8s_openapi::jiff::Timestamp;
    let now: Timestamp = evidence.collected_at.parse().ok()?;
    let then: Timestamp = time.parse().ok()?;
    Some(now.as_second() - then.as_second())
}

/// Whether the cluster's objects were read (its API answered).
fn cluster_read(evidence: &Evidence) -> bool {
    evidence.cluster.kubeconfig && evidence.cluster.api_error.is_none()
}

/// Whether `what` was read; an object of a kind not read is not missing.
fn read(evidence: &Evidence, what: &str) -> bool {
    cluster_read(evidence) && !evidence.unread.contains_key(what)
}

#[cfg(test)]
pub(crate) mod fixtures;

#[cfg(test)]
mod tests {
    use super::fixtures::{healthy, settings};
    use super::*;

    #[test]
    fn a_healthy_stack_has_no_finding() {
        let findings = detect(&healthy(), &settings());
        assert!(findings.is_empty(), "{findings:#?}");
    }

    #[test]
    fn fixes_carry_the_flags_that_select_the_stack() {
        let mut s = settings();
        s.profile_reference = Some("ci".into());
        assert_eq!(devstack(&s, "up"), "devstack -p ci up");
        let finding = Finding::new("x", "o", "LocalStack is exited")
            .cause("the container stopped")
            .fix(Some(devstack(&s, "up")), "restarts it");
        assert_eq!(
            finding.summary(),
            "LocalStack is exited: the container stopped; fix: `devstack -p ci up`"
        );
        let json = serde_json::to_value(&finding).unwrap();
        assert_eq!(json["fix"]["command"], "devstack -p ci up");
        assert_eq!(json["detector"], "x");
    }

    #[test]
    fn evidence_round_trips_through_json() {
        let evidence = healthy();
        let text = serde_json::to_string(&evidence).unwrap();
        let back: Evidence = serde_json::from_str(&text).unwrap();
        assert_eq!(back, evidence);
    }
}
