//! The ExternalSecret round trip, proven with a fresh random probe.
//!
//! `run` writes a randomly named secret with a random value into LocalStack,
//! points an ExternalSecret at it through the stack's ClusterSecretStore and
//! waits until the Kubernetes Secret holds the same value; then rotates the
//! value (refreshed at once through the `force-sync` annotation), deletes the
//! Kubernetes Secret and waits for ESO to recreate it, optionally pushes a
//! value back to LocalStack with a PushSecret, runs the same round trip
//! through the Parameter Store's store when the profile has `parameters`,
//! and checks that every ExternalSecret the profile declares is synced. Every probe object is
//! removed afterwards, whatever happened.
//!
//! Probe values are compared in memory only: they never appear in progress
//! lines, errors, logs or the report (any text that passes through here is
//! scrubbed of them).

mod checks;
mod cleanup;
mod parameters;
mod probe;
mod report;

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::k8s::conditions;
use crate::profile::Settings;
use crate::ui::Ui;
use checks::RoundTrip;
use probe::Probe;

pub use report::{CheckResult, CheckStatus, VerifyReport};

/// Prefix of every probe name, in LocalStack and in the cluster.
pub const PROBE_PREFIX: &str = "devstack-verify";
pub use crate::gitops::{ESO_GROUP, ESO_VERSION};
/// PushSecret is still `v1alpha1` in ESO 0.19.
pub const PUSH_SECRET_VERSION: &str = "v1alpha1";
/// Annotation whose change makes ESO refresh an ExternalSecret at once.
pub const FORCE_SYNC_ANNOTATION: &str = "force-sync";
/// Condition reason of a synced ExternalSecret.
pub const REASON_SECRET_SYNCED: &str = "SecretSynced";

/// What `run` does beyond the settings.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// Also prove the push direction with a PushSecret (also on when the
    /// profile sets `verify.pushSecret`).
    pub push_secret: bool,
    /// Bound of each wait; `None` = `timeouts.verify`.
    pub timeout: Option<Duration>,
    /// Cancelling stops the checks; the probe objects are still removed and
    /// `run` returns an `interrupted` error.
    pub cancel: Option<CancellationToken>,
}

impl VerifyOptions {
    /// The profile's choices: `verify.pushSecret`, `timeouts.verify`.
    pub fn from_settings(settings: &Settings) -> Self {
        VerifyOptions {
            push_secret: settings.verify.push_secret,
            timeout: Some(settings.timeouts.verify.get()),
            cancel: None,
        }
    }
}

/// Whether an ExternalSecret (as JSON) reports Ready=True, SecretSynced.
pub fn external_secret_synced(object: &Value) -> bool {
    conditions::condition(object, "Ready")
        .is_some_and(|c| c.is_true() && c.reason.as_deref() == Some(REASON_SECRET_SYNCED))
}

/// Proves the secret path with a fresh probe. Fails fast (`Err`) when
/// LocalStack or the cluster cannot be reached; otherwise returns the report,
/// passed or not (see [`VerifyReport::to_error`]). Progress goes to `ui`.
pub async fn run(
    settings: &Settings,
    client: &kube::Client,
    options: VerifyOptions,
    ui: &Ui,
) -> Result<VerifyReport, Error> {
    let started = Instant::now();
    require_localstack(settings).await?;
    // A profile with parameters has the Parameter Store's store: proven too.
    let parameter_store = if settings.parameters.is_empty() {
        String::new()
    } else {
        settings.names.parameter_store()
    };
    let probe = Probe::with_parameter_store(
        &settings.verify.namespace,
        &settings.names.store(),
        &parameter_store,
    );
    let push_secret = options.push_secret || settings.verify.push_secret;
    let timeout = options
        .timeout
        .unwrap_or_else(|| settings.timeouts.verify.get());
    let cancel = options.cancel.unwrap_or_default();
    let mut round_trip = RoundTrip::new(settings, client, ui, timeout, cancel, probe);
    round_trip.ensure_namespace().await?;
    tracing::debug!("verify probe {}", round_trip.probe.id);
    round_trip.run_checks(push_secret).await;
    let cleanup_warnings = round_trip.cleanup().await;
    for warning in &cleanup_warnings {
        ui.warn(warning);
    }
    if round_trip.interrupted {
        return Err(
            Error::interrupted().context(if cleanup_warnings.is_empty() {
                "verify interrupted; its probe objects were removed"
            } else {
                "verify interrupted; some probe objects remain (see the warnings)"
            }),
        );
    }
    let checks = round_trip.checks;
    Ok(VerifyReport {
        stack: settings.name.clone(),
        passed: checks.iter().all(|c| c.passed),
        probe: round_trip.probe.id.clone(),
        push_secret,
        checks,
        cleanup_warnings,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// LocalStack must answer before anything is created.
async fn require_localstack(settings: &Settings) -> Result<(), Error> {
    let endpoint = settings.localstack.endpoint_url();
    let hint = "start it with `devstack localstack up` (or the whole stack with `devstack up`)";
    match crate::localstack::HealthClient::new(&endpoint)?
        .services()
        .await
    {
        Err(why) => Err(Error::unhealthy(format!(
            "LocalStack at {endpoint} is not reachable ({why})"
        ))
        .with_hint(hint)),
        Ok(services) => match services.get("secretsmanager").map(String::as_str) {
            Some("available" | "running") => Ok(()),
            state => Err(Error::unhealthy(format!(
                "LocalStack at {endpoint} answers, but its secretsmanager service is {}",
                state.unwrap_or("absent")
            ))
            .with_hint(format!(
                "{hint}; `devstack localstack status` shows each service"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::profile::SecretString;
    use crate::profile::schema::{SecretFormat, SyncSpec};
    use crate::profile::settings::{SecretSettings, kube_name, profile_external_secret_name};

    fn secret(name: &str, sync: Option<SyncSpec>) -> SecretSettings {
        SecretSettings {
            name: name.into(),
            description: None,
            tags: BTreeMap::new(),
            source: crate::profile::SecretSource::Literal(SecretString::new("x")),
            format: SecretFormat::Text,
            sync,
        }
    }

    fn sync(namespace: &str, secret_name: Option<&str>) -> SyncSpec {
        SyncSpec {
            namespace: namespace.into(),
            secret_name: secret_name.map(String::from),
            refresh_interval: None,
        }
    }

    #[test]
    fn profile_external_secret_names() {
        assert_eq!(
            profile_external_secret_name(&secret("app/db", Some(sync("default", None)))),
            ("default".into(), "app-db".into())
        );
        assert_eq!(
            profile_external_secret_name(&secret("app/db", Some(sync("apps", Some("db-creds"))))),
            ("apps".into(), "db-creds".into())
        );
        assert_eq!(
            profile_external_secret_name(&secret("team/App_DB+x", Some(sync("default", None)))),
            ("default".into(), "team-app-db-x".into())
        );
        assert_eq!(
            profile_external_secret_name(&secret("/odd/", None)),
            ("default".into(), "odd".into())
        );
        assert_eq!(kube_name("___"), "secret");
        assert_eq!(kube_name(&"a".repeat(600)).len(), 253);
    }

    #[test]
    fn synced_means_ready_true_with_reason_secret_synced() {
        let es = |status: &str, reason: &str| json!({"status": {"conditions": [{"type": "Ready", "status": status, "reason": reason}]}});
        assert!(external_secret_synced(&es("True", "SecretSynced")));
        assert!(!external_secret_synced(&es("False", "SecretSyncedError")));
        assert!(!external_secret_synced(&es("True", "SecretDeleted")));
        assert!(!external_secret_synced(&json!({})));
    }

    /// `up` and the `Stack` API may run verify on a spawned task.
    #[allow(dead_code)]
    fn run_is_send(settings: &Settings, client: &kube::Client, ui: &Ui) {
        fn send<T: Send>(_: &T) {}
        send(&run(settings, client, VerifyOptions::default(), ui));
    }
}
