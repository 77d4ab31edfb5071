//! What `diagnose` reads from a stack, as plain serializable data: the
//! detectors judge this alone, so tests feed them recorded objects. Secrets
//! are reduced to their key names and certificate fingerprints: no value
//! and no key material is ever held here.

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStatus, Event, Node, Pod};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Everything the detectors look at.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Evidence {
    pub stack: String,
    /// When it was read (RFC 3339): ages are judged against it.
    pub collected_at: String,
    pub localstack: LocalStackEvidence,
    pub cluster: ClusterEvidence,
    /// What could not be read, and why (`what` -> error). A detector never
    /// calls an object missing when its kind could not be read.
    pub unread: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LocalStackEvidence {
    /// `None`: there is no container.
    pub container: Option<ContainerEvidence>,
    /// The URL clients on the host use.
    pub endpoint: String,
    /// The container's address on the stack network, which pods reach.
    pub network_ip: Option<String>,
    /// Service -> state from its health endpoint, when it answered.
    pub services: Option<BTreeMap<String, String>>,
    /// Why the health endpoint did not answer.
    pub health_error: Option<String>,
    /// Names of the secrets in its Secrets Manager, when it answered.
    pub secret_names: Option<Vec<String>>,
    /// Names of the parameters in its Parameter Store, when the profile
    /// has parameters and SSM answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameter_names: Option<Vec<String>>,
    /// The ESO role of `eso.auth: serviceAccount` as its IAM holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eso_role: Option<RoleEvidence>,
}

/// The IAM role the ESO controller's ServiceAccount names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RoleEvidence {
    pub name: String,
    pub exists: bool,
    /// What is wrong with its trust policy, when something is.
    pub trust_problem: Option<String>,
    /// Why IAM could not be read.
    pub error: Option<String>,
}

/// A Docker container's state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ContainerEvidence {
    pub name: String,
    /// `running`, `exited`, `paused`, `restarting`, `created`, ...
    pub status: String,
    /// Docker's health check: `healthy`, `unhealthy`, `starting`.
    pub health: Option<String>,
    pub exit_code: Option<i64>,
    pub oom_killed: bool,
    pub error: Option<String>,
    /// The last lines of its output, when it is not running well.
    pub log_tail: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterEvidence {
    /// The stack has a kubeconfig (a cluster was created).
    pub kubeconfig: bool,
    /// Why the API server did not answer; nothing below was read then.
    pub api_error: Option<String>,
    /// The cluster's node containers (K3s or Kind).
    pub node_containers: Vec<ContainerEvidence>,
    pub nodes: Vec<NodeEvidence>,
    /// Pods of Flux and ESO, and pods Pending anywhere.
    pub pods: Vec<PodEvidence>,
    /// Deployments of Flux and ESO.
    pub deployments: Vec<DeploymentEvidence>,
    /// Warning events, every namespace.
    pub events: Vec<EventEvidence>,
    /// Flux's Kustomizations in flux-system, as the API returns them.
    pub kustomizations: Vec<Value>,
    pub helm_release: Option<Value>,
    /// Flux sources in flux-system (Bucket, GitRepository, HelmRepository, HelmChart).
    pub sources: Vec<Value>,
    pub cluster_secret_stores: Vec<Value>,
    pub external_secrets: Vec<Value>,
    pub webhook: WebhookEvidence,
    /// The Secrets the ClusterSecretStore's credentials refer to.
    pub store_secrets: Vec<SecretKeys>,
    pub localstack_route: RouteEvidence,
}

/// One condition of a core object (node, deployment, pod).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Cond {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub last_transition: Option<String>,
}

impl Cond {
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }

    /// `Ready=False KubeletNotReady: message`.
    pub fn line(&self) -> String {
        let mut out = format!("{}={}", self.type_, self.status);
        if let Some(reason) = &self.reason {
            out.push_str(&format!(" {reason}"));
        }
        if let Some(message) = self.message.as_deref().filter(|m| !m.is_empty()) {
            out.push_str(&format!(": {}", crate::k8s::conditions::one_line(message)));
        }
        out
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeEvidence {
    pub name: String,
    pub conditions: Vec<Cond>,
}

impl NodeEvidence {
    pub fn from_node(node: &Node) -> Self {
        let conditions = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .map(|c| Cond {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition: c.last_transition_time.as_ref().map(|t| t.0.to_string()),
            })
            .collect();
        NodeEvidence {
            name: node.metadata.name.clone().unwrap_or_default(),
            conditions,
        }
    }

    pub fn condition(&self, type_: &str) -> Option<&Cond> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodEvidence {
    pub namespace: String,
    pub name: String,
    /// The Deployment it belongs to, from its ReplicaSet's name.
    pub deployment: Option<String>,
    pub phase: String,
    /// Why it is not scheduled, when it is not.
    pub unschedulable: Option<String>,
    pub containers: Vec<PodContainer>,
    /// The last lines of the log of its failing container.
    pub log_tail: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodContainer {
    pub name: String,
    pub image: String,
    pub ready: bool,
    pub restarts: i32,
    /// `running`, `waiting` or `terminated`.
    pub state: String,
    /// The waiting or terminated reason (`CrashLoopBackOff`, `OOMKilled`, ...).
    pub reason: Option<String>,
    pub message: Option<String>,
    pub exit_code: Option<i32>,
    /// How its previous run ended.
    pub last_reason: Option<String>,
    pub last_exit_code: Option<i32>,
    /// Its memory limit, from the pod's spec.
    pub memory_limit: Option<String>,
}

/// Waiting reasons of a container that fails to start or keeps exiting.
pub const FAILING_REASONS: &[&str] = &[
    "CrashLoopBackOff",
    "Error",
    "OOMKilled",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "StartError",
];

/// Waiting reasons of a container whose image cannot be had.
pub const IMAGE_REASONS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
];

impl PodContainer {
    fn from_status(status: &ContainerStatus, memory_limit: Option<String>) -> Self {
        let state = status.state.clone().unwrap_or_default();
        let (kind, reason, message, exit_code) = if let Some(w) = &state.waiting {
            ("waiting", w.reason.clone(), w.message.clone(), None)
        } else if let Some(t) = &state.terminated {
            (
                "terminated",
                t.reason.clone(),
                t.message.clone(),
                Some(t.exit_code),
            )
        } else if state.running.is_some() {
            ("running", None, None, None)
        } else {
            ("unknown", None, None, None)
        };
        let last = status
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref());
        PodContainer {
            name: status.name.clone(),
            image: status.image.clone(),
            ready: status.ready,
            restarts: status.restart_count,
            state: kind.into(),
            reason,
            message,
            exit_code,
            last_reason: last.and_then(|t| t.reason.clone()),
            last_exit_code: last.map(|t| t.exit_code),
            memory_limit,
        }
    }

    /// Fails to start or keeps exiting (not an image problem).
    pub fn failing(&self) -> bool {
        self.state != "running"
            && self
                .reason
                .as_deref()
                .is_some_and(|r| FAILING_REASONS.contains(&r))
    }

    pub fn image_unavailable(&self) -> bool {
        self.reason
            .as_deref()
            .is_some_and(|r| IMAGE_REASONS.contains(&r))
    }

    /// Killed for memory, now or on its previous run.
    pub fn oom_killed(&self) -> bool {
        self.reason.as_deref() == Some("OOMKilled")
            || self.last_reason.as_deref() == Some("OOMKilled")
    }

    /// `manager: waiting CrashLoopBackOff, 5 restarts, last exit 1 (Error)`.
    pub fn line(&self) -> String {
        let mut out = format!("{}: {}", self.name, self.state);
        if let Some(reason) = &self.reason {
            out.push_str(&format!(" {reason}"));
        }
        if let Some(code) = self.exit_code {
            out.push_str(&format!(" (exit code {code})"));
        }
        if self.state == "running" {
            out.push_str(if self.ready { ", ready" } else { ", not ready" });
        }
        if self.restarts > 0 {
            out.push_str(&format!(", {} restart(s)", self.restarts));
        }
        if let Some(last) = &self.last_reason {
            out.push_str(&format!(
                ", last run ended {last} (exit code {})",
                self.last_exit_code.unwrap_or_default()
            ));
        }
        if let Some(message) = self.message.as_deref().filter(|m| !m.is_empty()) {
            out.push_str(&format!(": {}", crate::k8s::conditions::one_line(message)));
        }
        out
    }
}

impl PodEvidence {
    pub fn from_pod(pod: &Pod) -> Self {
        let spec_limits: BTreeMap<String, String> = pod
            .spec
            .iter()
            .flat_map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
            })
            .filter_map(|c| {
                let limit = c.resources.as_ref()?.limits.as_ref()?.get("memory")?;
                Some((c.name.clone(), limit.0.clone()))
            })
            .collect();
        let status = pod.status.clone().unwrap_or_default();
        let containers = status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten())
            .map(|c| PodContainer::from_status(c, spec_limits.get(&c.name).cloned()))
            .collect();
        let unschedulable = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .map(|c| c.message.clone().or(c.reason.clone()).unwrap_or_default());
        let deployment = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "ReplicaSet")
            .and_then(|o| o.name.rsplit_once('-').map(|(d, _)| d.to_string()));
        PodEvidence {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            deployment,
            phase: status.phase.unwrap_or_default(),
            unschedulable,
            containers,
            log_tail: Vec::new(),
        }
    }

    pub fn failing(&self) -> bool {
        self.containers.iter().any(PodContainer::failing)
    }

    /// The container whose log tells why the pod fails, and whether that
    /// is its previous run's log (a container restarting).
    pub fn failing_container(&self) -> Option<(&str, bool)> {
        let c = self
            .containers
            .iter()
            .find(|c| c.failing() || c.oom_killed())
            .or_else(|| {
                self.containers
                    .iter()
                    .find(|c| c.state == "running" && !c.ready)
            })?;
        let previous = c.state != "running" && c.restarts > 0;
        Some((c.name.as_str(), previous))
    }

    /// Evidence lines: the pod, each container, its log tail.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "pod {}/{}: {}",
            self.namespace, self.name, self.phase
        )];
        if let Some(why) = &self.unschedulable {
            out.push(format!(
                "  not scheduled: {}",
                crate::k8s::conditions::one_line(why)
            ));
        }
        out.extend(self.containers.iter().map(|c| format!("  {}", c.line())));
        out.extend(self.log_tail.iter().map(|l| format!("  log: {l}")));
        out
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DeploymentEvidence {
    pub namespace: String,
    pub name: String,
    /// Replicas asked for (`spec.replicas`, 1 when unset).
    pub replicas: i32,
    pub ready: i32,
    pub available: i32,
    pub conditions: Vec<Cond>,
}

impl DeploymentEvidence {
    pub fn from_deployment(deployment: &Deployment) -> Self {
        let status = deployment.status.clone().unwrap_or_default();
        let conditions = status
            .conditions
            .iter()
            .flatten()
            .map(|c| Cond {
                type_: c.type_.clone().unwrap_or_default(),
                status: c.status.clone().unwrap_or_default(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition: c.last_transition_time.as_ref().map(|t| t.0.to_string()),
            })
            .collect();
        DeploymentEvidence {
            namespace: deployment.metadata.namespace.clone().unwrap_or_default(),
            name: deployment.metadata.name.clone().unwrap_or_default(),
            replicas: deployment.spec.replicas.unwrap_or(1),
            ready: status.ready_replicas.unwrap_or(0),
            available: status.available_replicas.unwrap_or(0),
            conditions,
        }
    }

    /// `Deployment ns/name: 0/1 ready, 0 available`.
    pub fn line(&self) -> String {
        format!(
            "Deployment {}/{}: {}/{} ready, {} available",
            self.namespace, self.name, self.ready, self.replicas, self.available
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EventEvidence {
    pub namespace: String,
    /// The object it is about.
    pub kind: String,
    pub name: String,
    pub reason: String,
    pub message: String,
    pub count: i32,
    pub last_seen: Option<String>,
}

impl EventEvidence {
    pub fn from_event(event: &Event) -> Self {
        let seen = event
            .last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or(event.event_time.as_ref().map(|t| t.0))
            .or(event.metadata.creation_timestamp.as_ref().map(|t| t.0));
        let involved = &event.involved_object;
        EventEvidence {
            namespace: involved
                .namespace
                .clone()
                .or(event.metadata.namespace.clone())
                .unwrap_or_default(),
            kind: involved.kind.clone().unwrap_or_default(),
            name: involved.name.clone().unwrap_or_default(),
            reason: event.reason.clone().unwrap_or_default(),
            message: event.message.clone().unwrap_or_default(),
            count: event.count.unwrap_or(1),
            last_seen: seen.map(|t| t.to_string()),
        }
    }

    /// `event BackOff (x12): message`.
    pub fn line(&self) -> String {
        let times = if self.count > 1 {
            format!(" (x{})", self.count)
        } else {
            String::new()
        };
        format!(
            "event {}{times}: {}",
            self.reason,
            crate::k8s::conditions::one_line(&self.message)
        )
    }
}

/// The ESO webhook: its Service, who serves it, its certificate and who
/// trusts it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WebhookEvidence {
    pub service: Option<String>,
    pub ready_endpoints: usize,
    pub not_ready_endpoints: usize,
    /// `None`: the certificate Secret does not exist.
    pub certificate: Option<CertificateEvidence>,
    /// Each validating webhook that calls the Service.
    pub callers: Vec<WebhookCaller>,
}

/// The webhook's certificate Secret, as SHA-256 fingerprints of the
/// certificates it holds (never the key).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CertificateEvidence {
    pub secret: String,
    pub ca: Vec<String>,
    pub serving: Vec<String>,
    /// devstack filled it ([`crate::gitops::webhook::ISSUED_CA_ANNOTATION`]).
    pub issued_by_devstack: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WebhookCaller {
    /// `ValidatingWebhookConfiguration/webhook`.
    pub name: String,
    /// Fingerprints of the certificates in its `caBundle`.
    pub ca_bundle: Vec<String>,
}

/// A Secret's key names, and which of them are empty; never a value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SecretKeys {
    pub namespace: String,
    pub name: String,
    pub exists: bool,
    pub keys: Vec<String>,
    pub empty_keys: Vec<String>,
}

impl SecretKeys {
    pub fn of(
        namespace: &str,
        name: &str,
        secret: Option<&k8s_openapi::api::core::v1::Secret>,
    ) -> Self {
        let data = secret.and_then(|s| s.data.clone()).unwrap_or_default();
        SecretKeys {
            namespace: namespace.into(),
            name: name.into(),
            exists: secret.is_some(),
            keys: data.keys().cloned().collect(),
            empty_keys: data
                .iter()
                .filter(|(_, v)| v.0.is_empty())
                .map(|(k, _)| k.clone())
                .collect(),
        }
    }
}

/// The in-cluster `localstack` Service and where it points.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteEvidence {
    pub service: bool,
    pub cluster_ip: Option<String>,
    /// Ready endpoint addresses of its EndpointSlices.
    pub addresses: Vec<String>,
}

/// SHA-256 fingerprints (hex) of each certificate in PEM `bytes`: safe to
/// show, and equal for the same certificate however its PEM is wrapped.
pub fn certificate_fingerprints(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut out = Vec::new();
    let mut body: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with("-----BEGIN CERTIFICATE") {
            body = Some(String::new());
        } else if line.starts_with("-----END CERTIFICATE") {
            if let Some(b64) = body.take()
                && let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b64)
            {
                out.push(hex::encode(Sha256::digest(der)));
            }
        } else if let Some(b) = body.as_mut() {
            b.push_str(line);
        }
    }
    out
}

/// The first 12 hex digits of a fingerprint, for evidence lines.
pub fn short(fingerprint: &str) -> String {
    format!("sha256:{}", &fingerprint[..fingerprint.len().min(12)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_crash_looping_pod_reads_as_failing_with_its_previous_log() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "external-secrets-5d9c-abcde", "namespace": "external-secrets",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "external-secrets-5d9c", "uid": "u"}]},
            "spec": {"containers": [{"name": "external-secrets", "image": "ghcr.io/external-secrets/external-secrets:v2.9.0",
                "resources": {"limits": {"memory": "64Mi"}}}]},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "external-secrets", "image": "ghcr.io/external-secrets/external-secrets:v2.9.0",
                "imageID": "", "ready": false, "restartCount": 4,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m20s restarting failed container"}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}
        }))
        .unwrap();
        let evidence = PodEvidence::from_pod(&pod);
        assert_eq!(evidence.deployment.as_deref(), Some("external-secrets"));
        let c = &evidence.containers[0];
        assert!(c.failing() && c.oom_killed());
        assert_eq!(c.memory_limit.as_deref(), Some("64Mi"));
        assert_eq!(
            evidence.failing_container(),
            Some(("external-secrets", true))
        );
        assert_eq!(
            c.line(),
            "external-secrets: waiting CrashLoopBackOff, 4 restart(s), last run ended OOMKilled (exit code 137): back-off 1m20s restarting failed container"
        );
    }

    #[test]
    fn fingerprints_name_certificates_not_their_wrapping() {
        let der = b"not really DER, but bytes";
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        let wrapped = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n{}\n-----END CERTIFICATE-----\n",
            &b64[..10],
            &b64[10..]
        );
        let flat = format!("-----BEGIN CERTIFICATE-----\n{b64}\n-----END CERTIFICATE-----");
        assert_eq!(
            certificate_fingerprints(wrapped.as_bytes()),
            certificate_fingerprints(flat.as_bytes())
        );
        assert_eq!(certificate_fingerprints(wrapped.as_bytes()).len(), 1);
        assert!(certificate_fingerprints(b"").is_empty());
        // A private key block is not a certificate and is never read.
        assert!(
            certificate_fingerprints(
                b"-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"
            )
            .is_empty()
        );
    }

    #[test]
    fn secrets_are_reduced_to_key_names() {
        let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
            "metadata": {"name": "localstack-credentials", "namespace": "external-secrets"},
            "data": {"access-key-id": "dGVzdA==", "secret-access-key": ""}
        }))
        .unwrap();
        let keys = SecretKeys::of("external-secrets", "localstack-credentials", Some(&secret));
        assert_eq!(keys.keys, ["access-key-id", "secret-access-key"]);
        assert_eq!(keys.empty_keys, ["secret-access-key"]);
        let text = serde_json::to_string(&keys).unwrap();
        assert!(
            !text.contains("dGVzdA") && !text.contains("\"test\""),
            "{text}"
        );
    }
}
