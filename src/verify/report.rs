//! What a round trip reports: each check's outcome, and the error and
//! hint a failed run amounts to.

use serde::Serialize;

use crate::error::Error;
use crate::profile::Settings;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    Passed,
    Failed,
    /// Not run because a check it depends on failed.
    Skipped,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckResult {
    /// Stable identifier: `clusterSecretStore`, `sync`, `rotate`,
    /// `recreate`, `push`, `profileExternalSecret`.
    pub name: String,
    /// The object the check is about (`namespace/name`), when not the probe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    pub description: String,
    pub status: CheckStatus,
    pub passed: bool,
    /// From the action (create, rotate, delete, push) to the observed result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// Why it failed or was skipped, or what was observed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    pub stack: String,
    pub passed: bool,
    /// Random id of this run's probe objects (`devstack-verify-<probe>`).
    pub probe: String,
    pub push_secret: bool,
    pub checks: Vec<CheckResult>,
    /// Probe objects that could not be removed.
    pub cleanup_warnings: Vec<String>,
    pub elapsed_ms: u64,
}

impl VerifyReport {
    pub fn failures(&self) -> impl Iterator<Item = &CheckResult> {
        self.checks
            .iter()
            .filter(|c| c.status == CheckStatus::Failed)
    }

    /// `passed of total checks passed` (skipped ones count as not passed).
    pub fn summary(&self) -> String {
        let passed = self.checks.iter().filter(|c| c.passed).count();
        format!("{passed} of {} checks passed", self.checks.len())
    }

    /// The `unhealthy` error (exit 4) a failed run amounts to, with a hint
    /// naming what to look at; `None` when every check passed.
    pub fn to_error(&self, settings: &Settings) -> Option<Error> {
        let first = self.failures().next()?;
        let count = self.failures().count();
        let mut message = format!(
            "verify failed: {}: {}",
            first.description,
            first.detail.as_deref().unwrap_or("failed")
        );
        if count > 1 {
            message.push_str(&format!(" (and {} more failed checks)", count - 1));
        }
        Some(Error::unhealthy(message).with_hint(failure_hint(settings, &first.name)))
    }
}

fn failure_hint(settings: &Settings, check: &str) -> String {
    let (ns, deployment) = match &settings.eso.cluster {
        Some(eso) => (eso.namespace.clone(), eso.deployment.clone()),
        None => settings.names.helm_release(),
    };
    let eso_logs = format!(
        "ESO's log: `kubectl --context {} -n {ns} logs deploy/{deployment}`",
        settings.kube_context()
    );
    match check {
        "clusterSecretStore" => format!(
            "`devstack status` shows the Flux chain and the store; {eso_logs}; `devstack up` converges the stack"
        ),
        "profileExternalSecret" => format!(
            "check the secret exists in LocalStack (`devstack seed`), then `devstack status`; {eso_logs}"
        ),
        _ => format!(
            "`devstack status` shows each component; {eso_logs}; LocalStack's log: `devstack localstack logs`"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;

    fn report(statuses: &[(&str, CheckStatus)]) -> VerifyReport {
        VerifyReport {
            stack: "dev".into(),
            passed: statuses.iter().all(|(_, s)| *s == CheckStatus::Passed),
            probe: "abc".into(),
            push_secret: false,
            checks: statuses
                .iter()
                .map(|(name, status)| CheckResult {
                    name: name.to_string(),
                    object: None,
                    description: format!("check {name}"),
                    status: *status,
                    passed: *status == CheckStatus::Passed,
                    latency_ms: Some(12),
                    detail: (*status != CheckStatus::Passed).then(|| "timed out".to_string()),
                })
                .collect(),
            cleanup_warnings: vec![],
            elapsed_ms: 40,
        }
    }

    #[test]
    fn report_json_is_camel_case_and_errors_are_unhealthy() {
        let settings = Settings::builtin(&Default::default()).unwrap();
        let ok = report(&[("sync", CheckStatus::Passed)]);
        assert!(ok.to_error(&settings).is_none());
        let value = serde_json::to_value(&ok).unwrap();
        assert_eq!(value["checks"][0]["latencyMs"], 12);
        assert_eq!(value["checks"][0]["status"], "passed");
        assert!(value.get("cleanupWarnings").is_some());
        assert!(value["checks"][0].get("object").is_none());

        let bad = report(&[
            ("sync", CheckStatus::Failed),
            ("rotate", CheckStatus::Skipped),
            ("push", CheckStatus::Failed),
        ]);
        let err = bad.to_error(&settings).unwrap();
        assert_eq!(err.kind(), Kind::Unhealthy);
        assert_eq!(
            err.message(),
            "verify failed: check sync: timed out (and 1 more failed checks)"
        );
        assert!(err.hint().unwrap().contains("devstack status"));
        assert_eq!(bad.summary(), "0 of 3 checks passed");
    }
}
