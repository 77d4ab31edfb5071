//! The ExternalSecret round trip, proven with a fresh random probe.
//!
//! `run` writes a randomly named secret with a random value into LocalStack,
//! points an ExternalSecret at it through the stack's ClusterSecretStore and
//! waits until the Kubernetes Secret holds the same value; then rotates the
//! value (refreshed at once through the `force-sync` annotation), deletes the
//! Kubernetes Secret and waits for ESO to recreate it, optionally pushes a
//! value back to LocalStack with a PushSecret, and checks that every
//! ExternalSecret the profile declares is synced. Every probe object is
//! removed afterwards, whatever happened.
//!
//! Probe values are compared in memory only: they never appear in progress
//! lines, errors, logs or the report (any text that passes through here is
//! scrubbed of them).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_secretsmanager::error::{ProvideErrorMetadata, SdkError};
use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject};
use rand::Rng;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Kind};
use crate::gitops::CLUSTER_SECRET_STORE;
use crate::k8s::wait::ready_verdict;
use crate::k8s::{Budget, Verdict, Wait, conditions, dynamic_api};
use crate::profile::schema::{Charset, GenerateSpec};
use crate::profile::settings::profile_external_secret_name;
use crate::profile::{SecretString, Settings};
use crate::ui::{Step, Ui, format_duration};

/// Prefix of every probe name, in LocalStack and in the cluster.
pub const PROBE_PREFIX: &str = "devstack-verify";
pub use crate::gitops::{ESO_GROUP, ESO_VERSION};
/// PushSecret is still `v1alpha1` in ESO 0.19.
pub const PUSH_SECRET_VERSION: &str = "v1alpha1";
/// Annotation whose change makes ESO refresh an ExternalSecret at once.
pub const FORCE_SYNC_ANNOTATION: &str = "force-sync";
/// Condition reason of a synced ExternalSecret.
pub const REASON_SECRET_SYNCED: &str = "SecretSynced";

const VALUE_KEY: &str = "value";
const POLL: Duration = Duration::from_millis(250);
/// Bound of each cleanup request (cleanup runs even after the deadline).
const CLEANUP_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "devstack");
const COMPONENT: (&str, &str) = ("app.kubernetes.io/component", "verify-probe");

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
    let (ns, _) = crate::gitops::HELM_RELEASE;
    let eso_logs = format!(
        "ESO's log: `kubectl --context {} -n {ns} logs deploy/external-secrets`",
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

/// Whether an ExternalSecret (as JSON) reports Ready=True, SecretSynced.
pub fn external_secret_synced(object: &Value) -> bool {
    conditions::condition(object, "Ready")
        .is_some_and(|c| c.is_true() && c.reason.as_deref() == Some(REASON_SECRET_SYNCED))
}

/// A profile ExternalSecret (its JSON, `None` while absent) as a wait sees it.
fn external_secret_verdict(object: Option<&Value>) -> Verdict {
    match object {
        Some(es) if external_secret_synced(es) => Verdict::Done,
        Some(es) => Verdict::Waiting(
            conditions::condition(es, "Ready")
                .map(|c| c.summary())
                .unwrap_or_else(|| "no Ready condition yet".into()),
        ),
        None => Verdict::Waiting("does not exist".into()),
    }
}

/// Whether the probe Secret `name` holds `expected` and, when `replaced`
/// is given, is a new object (another uid). Never quotes a value.
fn secret_verdict(
    secret: Option<&Secret>,
    name: &str,
    expected: &[u8],
    replaced: Option<&str>,
) -> Verdict {
    let Some(secret) = secret else {
        return Verdict::Waiting(format!("Secret {name} absent"));
    };
    if replaced.is_some() && replaced == secret.metadata.uid.as_deref() {
        return Verdict::Waiting(format!("Secret {name} not deleted yet"));
    }
    match secret.data.as_ref().and_then(|d| d.get(VALUE_KEY)) {
        Some(bytes) if bytes.0 == expected => Verdict::Done,
        Some(_) => Verdict::Waiting(format!("Secret {name} holds another value")),
        None => Verdict::Waiting(format!("Secret {name} has no key `{VALUE_KEY}`")),
    }
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
    preflight_localstack(settings).await?;
    let probe = Probe::new(&settings.verify.namespace);
    let push_secret = options.push_secret || settings.verify.push_secret;
    let mut runner = Runner {
        settings,
        client: client.clone(),
        sm: crate::aws::secrets_manager(settings),
        ui,
        timeout: options
            .timeout
            .unwrap_or_else(|| settings.timeouts.verify.get()),
        cancel: options.cancel.unwrap_or_default(),
        probe,
        touched: Touched::default(),
        checks: Vec::new(),
        interrupted: false,
    };
    runner.ensure_namespace().await?;
    tracing::debug!("verify probe {}", runner.probe.id);
    runner.run_checks(push_secret).await;
    let cleanup_warnings = runner.cleanup().await;
    for warning in &cleanup_warnings {
        ui.warn(warning);
    }
    if runner.interrupted {
        return Err(
            Error::interrupted().context(if cleanup_warnings.is_empty() {
                "verify interrupted; its probe objects were removed"
            } else {
                "verify interrupted; some probe objects remain (see the warnings)"
            }),
        );
    }
    let checks = runner.checks;
    Ok(VerifyReport {
        stack: settings.name.clone(),
        passed: checks.iter().all(|c| c.passed),
        probe: runner.probe.id.clone(),
        push_secret,
        checks,
        cleanup_warnings,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// LocalStack must answer before anything is created.
async fn preflight_localstack(settings: &Settings) -> Result<(), Error> {
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

/// Names and values of one run. The values never leave this struct except
/// to be sent, and every text produced during the run is scrubbed of them.
struct Probe {
    id: String,
    namespace: String,
    /// LocalStack secret the ExternalSecret reads.
    remote: String,
    /// LocalStack secret the PushSecret writes.
    push_remote: String,
    /// ExternalSecret and its target Secret.
    object: String,
    /// PushSecret and its source Secret.
    push_object: String,
    initial: SecretString,
    rotated: SecretString,
    pushed: SecretString,
}

impl Probe {
    fn new(namespace: &str) -> Self {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let mut rng = rand::rng();
        let id: String = (0..10)
            .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
            .collect();
        let value = || {
            crate::seed::generate(&GenerateSpec {
                length: 32,
                charset: Charset::Alphanumeric,
            })
        };
        Probe {
            remote: format!("{PROBE_PREFIX}/{id}"),
            push_remote: format!("{PROBE_PREFIX}/{id}-push"),
            object: format!("{PROBE_PREFIX}-{id}"),
            push_object: format!("{PROBE_PREFIX}-{id}-push"),
            namespace: namespace.to_string(),
            initial: value(),
            rotated: value(),
            pushed: value(),
            id,
        }
    }

    fn scrub(&self, text: &str) -> String {
        scrub(text, &[&self.initial, &self.rotated, &self.pushed])
    }
}

/// `text` with every occurrence of a secret value, plain or base64 (as a
/// Secret's `data` carries it), masked.
fn scrub(text: &str, values: &[&SecretString]) -> String {
    let mut out = text.to_string();
    for value in values.iter().filter(|v| !v.is_empty()) {
        let encoded = base64::engine::general_purpose::STANDARD.encode(value.expose());
        for form in [value.expose(), encoded.as_str()] {
            out = out.replace(form, crate::profile::secret::MASK);
        }
    }
    out
}

fn probe_labels() -> Value {
    json!({MANAGED_BY.0: MANAGED_BY.1, COMPONENT.0: COMPONENT.1})
}

/// The probe ExternalSecret, with a `force-sync` annotation when given.
fn probe_external_secret(p: &Probe, force_sync: Option<&str>) -> Value {
    let mut metadata = json!({
        "name": p.object, "namespace": p.namespace, "labels": probe_labels(),
    });
    if let Some(stamp) = force_sync {
        metadata["annotations"] = json!({FORCE_SYNC_ANNOTATION: stamp});
    }
    json!({
        "apiVersion": format!("{ESO_GROUP}/{ESO_VERSION}"),
        "kind": "ExternalSecret",
        "metadata": metadata,
        "spec": {
            "refreshInterval": "1h",
            "secretStoreRef": {"name": CLUSTER_SECRET_STORE, "kind": "ClusterSecretStore"},
            "target": {"name": p.object, "creationPolicy": "Owner"},
            "data": [{"secretKey": VALUE_KEY, "remoteRef": {"key": p.remote}}],
        },
    })
}

/// The Secret holding the value to push, and the PushSecret that pushes it
/// to a new LocalStack secret (ESO creates it, tagged as its own).
fn probe_push_objects(p: &Probe) -> (Value, Value) {
    let encoded = base64::engine::general_purpose::STANDARD.encode(p.pushed.expose());
    let source = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": p.push_object, "namespace": p.namespace, "labels": probe_labels()},
        "type": "Opaque",
        "data": {VALUE_KEY: encoded},
    });
    let push = json!({
        "apiVersion": format!("{ESO_GROUP}/{PUSH_SECRET_VERSION}"),
        "kind": "PushSecret",
        "metadata": {"name": p.push_object, "namespace": p.namespace, "labels": probe_labels()},
        "spec": {
            "refreshInterval": "1h",
            "updatePolicy": "Replace",
            // devstack removes the remote secret itself: no finalizer that
            // could hang the cleanup when ESO is down.
            "deletionPolicy": "None",
            "secretStoreRefs": [{"name": CLUSTER_SECRET_STORE, "kind": "ClusterSecretStore"}],
            "selector": {"secret": {"name": p.push_object}},
            "data": [{"match": {"secretKey": VALUE_KEY, "remoteRef": {"remoteKey": p.push_remote}}}],
        },
    });
    (source, push)
}

/// Runs one cleanup request within its bound; `Some(warning)` on failure.
async fn bounded(
    what: String,
    request: impl std::future::Future<Output = Result<(), String>>,
) -> Option<String> {
    match tokio::time::timeout(CLEANUP_REQUEST_TIMEOUT, request).await {
        Ok(Ok(())) => None,
        Ok(Err(why)) => Some(format!("could not remove {what}: {why}")),
        Err(_) => Some(format!(
            "could not remove {what}: not done within {}",
            format_duration(CLEANUP_REQUEST_TIMEOUT)
        )),
    }
}

/// Deletes an object and returns once it is gone: an accepted delete is not
/// yet a removal (a finalizer, or a controller still holding it, keeps it
/// listed), and a caller told "removed" must not find it right after. An
/// object written again after the delete (listed, not being deleted) is
/// deleted again rather than waited on: it would never go by itself.
/// The caller bounds the whole of it.
async fn delete_object<K>(api: Api<K>, name: String) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    loop {
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(()),
            Err(e) => return Err(e.to_string()),
        }
        let budget = Budget::new(CLEANUP_REQUEST_TIMEOUT, "timeouts.verify");
        let left = Wait::new(name.clone(), "gone", budget)
            .object(api.clone(), &name, |object| match object {
                None => Verdict::Done,
                Some(o) if kube::Resource::meta(o).deletion_timestamp.is_none() => Verdict::Done,
                Some(_) => Verdict::Waiting("still listed".into()),
            })
            .await
            .map_err(|e| e.message().to_string())?;
        if left.is_none() {
            return Ok(());
        }
        tracing::debug!("{name} is listed again after its delete; deleting it again");
    }
}

/// How long an interrupted round trip's cleanup watches for a probe Secret
/// written again after its removal.
const LATE_WRITE_WINDOW: Duration = Duration::from_secs(2);

/// For `window`, removes object `name` each time it appears again.
async fn remove_late_writes<K>(api: Api<K>, name: String, window: Duration) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let until = tokio::time::Instant::now() + window;
    loop {
        let budget = Budget::new(CLEANUP_REQUEST_TIMEOUT, "timeouts.verify");
        let wait = Wait::new(name.clone(), "written again", budget);
        let appeared = wait.object(api.clone(), &name, |object| match object {
            Some(_) => Verdict::Done,
            None => Verdict::Waiting("absent".into()),
        });
        match tokio::time::timeout_at(until, appeared).await {
            Err(_) => return Ok(()),
            Ok(Err(e)) => return Err(e.message().to_string()),
            Ok(Ok(_)) => {
                tracing::debug!("{name} was written again after its removal; removing it");
                delete_object(api.clone(), name.clone()).await?;
            }
        }
    }
}

/// What the run may have created, for cleanup (marked before each request:
/// a request that timed out may still have happened).
#[derive(Default)]
struct Touched {
    remote: bool,
    external_secret: bool,
    push_source: bool,
    push_secret: bool,
}

enum Fail {
    Reason(String),
    Cancelled,
}

/// Latency and a detail line, or why the check failed.
type Outcome = Result<(Duration, String), Fail>;

struct Runner<'a> {
    settings: &'a Settings,
    client: kube::Client,
    sm: aws_sdk_secretsmanager::Client,
    ui: &'a Ui,
    timeout: Duration,
    cancel: CancellationToken,
    probe: Probe,
    touched: Touched,
    checks: Vec<CheckResult>,
    interrupted: bool,
}

impl Runner<'_> {
    async fn ensure_namespace(&self) -> Result<(), Error> {
        let ns = &self.probe.namespace;
        crate::k8s::apply(
            &self.client,
            &json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "labels": {MANAGED_BY.0: MANAGED_BY.1}},
            }),
        )
        .await
        .map_err(|e| {
            Error::unhealthy(format!(
                "cannot reach the cluster of stack `{}`: {}",
                self.settings.name,
                e.message()
            ))
            .with_hint("`devstack status` shows what is down; `devstack up` starts the stack")
        })
    }

    async fn run_checks(&mut self, push_secret: bool) {
        /// Runs one check method with a progress step and records it;
        /// evaluates to whether it passed. Nothing runs once interrupted.
        macro_rules! check {
            ($name:expr, $description:expr, $method:ident) => {{
                let description: String = $description.into();
                if self.interrupted {
                    false
                } else {
                    let step = self.ui.step(&description);
                    let outcome = self.$method().await;
                    self.record(step, $name, None, description, outcome)
                }
            }};
        }
        const SYNC: &str = "ExternalSecret syncs a new secret";
        const ROTATE: &str = "A rotated value reaches the cluster (force-sync)";
        const RECREATE: &str = "A deleted Secret is recreated";
        const PUSH: &str = "PushSecret writes to LocalStack";

        let store = check!(
            "clusterSecretStore",
            format!("ClusterSecretStore {CLUSTER_SECRET_STORE} Ready"),
            check_store
        );
        let synced = if store {
            check!("sync", SYNC, check_sync)
        } else {
            self.skip("sync", SYNC, "the store is not Ready");
            false
        };
        let rotated = if synced {
            check!("rotate", ROTATE, check_rotate)
        } else {
            self.skip("rotate", ROTATE, "the first sync failed");
            false
        };
        if rotated {
            check!("recreate", RECREATE, check_recreate);
        } else {
            self.skip("recreate", RECREATE, "an earlier check failed");
        }
        if push_secret {
            if synced {
                check!("push", PUSH, check_push);
            } else {
                self.skip("push", PUSH, "the first sync failed");
            }
        }
        if !self.interrupted {
            self.check_profile(synced).await;
        }
    }

    fn record(
        &mut self,
        step: Step,
        name: &str,
        object: Option<String>,
        description: String,
        outcome: Outcome,
    ) -> bool {
        let (status, latency, detail) = match outcome {
            Ok((latency, detail)) => {
                let detail = self.probe.scrub(&detail);
                step.done(&detail);
                (CheckStatus::Passed, Some(latency), detail)
            }
            Err(Fail::Reason(why)) => {
                let why = self.probe.scrub(&why);
                step.fail(&why);
                (CheckStatus::Failed, None, why)
            }
            Err(Fail::Cancelled) => {
                self.interrupted = true;
                step.fail("interrupted");
                (CheckStatus::Failed, None, "interrupted".to_string())
            }
        };
        self.checks.push(CheckResult {
            name: name.to_string(),
            object,
            description,
            status,
            passed: status == CheckStatus::Passed,
            latency_ms: latency.map(|d| d.as_millis() as u64),
            detail: (!detail.is_empty()).then_some(detail),
        });
        status == CheckStatus::Passed
    }

    fn skip(&mut self, name: &str, description: &str, why: &str) {
        if self.interrupted {
            return;
        }
        self.ui.step(description).skip(why);
        self.checks.push(CheckResult {
            name: name.to_string(),
            object: None,
            description: description.to_string(),
            status: CheckStatus::Skipped,
            passed: false,
            latency_ms: None,
            detail: Some(why.to_string()),
        });
    }

    /// Polls `attempt` every 250 ms until it yields a value, `timeout`
    /// passes (at least one attempt is made) or the run is cancelled.
    /// `attempt` returns `Err(observation)` while not there yet; the last
    /// observation explains a timeout.
    async fn wait_for<T, F, Fut>(&self, timeout: Duration, mut attempt: F) -> Result<T, Fail>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            // Each attempt is bounded too, but always gets a moment.
            let bound = deadline.max(Instant::now() + Duration::from_secs(5));
            let result = tokio::select! {
                _ = self.cancel.cancelled() => return Err(Fail::Cancelled),
                r = tokio::time::timeout_at(bound, attempt()) => r,
            };
            let last = match result {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(observed)) => observed,
                Err(_) => "the request did not finish in time".to_string(),
            };
            if Instant::now() >= deadline {
                return Err(Fail::Reason(format!(
                    "not within {} ({last})",
                    format_duration(timeout)
                )));
            }
            tokio::select! {
                _ = self.cancel.cancelled() => return Err(Fail::Cancelled),
                _ = tokio::time::sleep(POLL) => {}
            }
        }
    }

    /// Runs a watch-driven Kubernetes wait unless the run is cancelled; its
    /// error (a timeout naming the last state seen) is the check's reason.
    async fn watch<T>(
        &self,
        wait: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Fail> {
        tokio::select! {
            _ = self.cancel.cancelled() => Err(Fail::Cancelled),
            result = wait => result.map_err(|e| Fail::Reason(e.message().to_string())),
        }
    }

    /// Each wait of a check may take `timeouts.verify` (or the caller's bound).
    fn budget(&self, limit: Duration) -> Budget {
        Budget::new(limit, "timeouts.verify")
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.probe.namespace)
    }

    fn external_secrets(&self, namespace: &str) -> Api<DynamicObject> {
        dynamic_api(
            &self.client,
            &format!("{ESO_GROUP}/{ESO_VERSION}"),
            "ExternalSecret",
            Some(namespace),
        )
    }

    fn push_secrets(&self) -> Api<DynamicObject> {
        dynamic_api(
            &self.client,
            &format!("{ESO_GROUP}/{PUSH_SECRET_VERSION}"),
            "PushSecret",
            Some(&self.probe.namespace),
        )
    }

    fn aws_tags(&self) -> Vec<aws_sdk_secretsmanager::types::Tag> {
        let tag = |k: &str, v: &str| {
            aws_sdk_secretsmanager::types::Tag::builder()
                .key(k)
                .value(v)
                .build()
        };
        vec![
            tag(
                crate::docker::LABEL_MANAGED_BY,
                crate::docker::MANAGED_BY_VALUE,
            ),
            tag(crate::docker::LABEL_STACK, &self.settings.name),
            tag(crate::docker::LABEL_ROLE, COMPONENT.1),
        ]
    }

    fn aws_reason<E: ProvideErrorMetadata, R>(&self, what: &str, err: &SdkError<E, R>) -> String {
        let endpoint = self.settings.localstack.endpoint_url();
        match err {
            SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => {
                format!("cannot {what}: LocalStack at {endpoint} did not answer")
            }
            _ => format!(
                "cannot {what}: LocalStack answered {}: {}",
                err.code().unwrap_or("an error"),
                err.message().unwrap_or("no message")
            ),
        }
    }

    /// The Ready condition of the probe ExternalSecret, to explain a timeout.
    async fn external_secret_state(&self) -> String {
        match self
            .external_secrets(&self.probe.namespace)
            .get_opt(&self.probe.object)
            .await
        {
            Ok(Some(es)) => match conditions::condition(&es.data, "Ready") {
                Some(c) => format!("ExternalSecret: {}", c.summary()),
                None => "ExternalSecret has no Ready condition yet".into(),
            },
            Ok(None) => "ExternalSecret is gone".into(),
            Err(e) => format!("ExternalSecret unreadable: {e}"),
        }
    }

    /// Waits until the probe's Kubernetes Secret holds `expected` (and, when
    /// given, is not the object with uid `replaced`); returns its uid.
    async fn wait_secret_value(
        &self,
        expected: &SecretString,
        replaced: Option<&str>,
    ) -> Result<String, Fail> {
        let name = self.probe.object.as_str();
        let wait = Wait::new(
            format!("Secret {}/{name}", self.probe.namespace),
            if replaced.is_some() {
                "recreated with the probe value"
            } else {
                "synced with the probe value"
            },
            self.budget(self.timeout),
        );
        let check = |secret: Option<&Secret>| {
            secret_verdict(secret, name, expected.expose().as_bytes(), replaced)
        };
        let result = self
            .watch(wait.object(self.secrets(), name, check))
            .await
            .map(|secret| secret.and_then(|s| s.metadata.uid).unwrap_or_default());
        match result {
            Err(Fail::Reason(why)) => Err(Fail::Reason(format!(
                "{why}; {}",
                self.external_secret_state().await
            ))),
            other => other,
        }
    }

    async fn check_store(&mut self) -> Outcome {
        let api = crate::gitops::cluster_secret_stores(&self.client);
        let started = Instant::now();
        let wait = Wait::new(
            format!("ClusterSecretStore {CLUSTER_SECRET_STORE}"),
            "Ready",
            self.budget(self.timeout),
        );
        let store = self
            .watch(wait.object(api, CLUSTER_SECRET_STORE, |store| match store {
                Some(store) => ready_verdict(&store.data),
                None => Verdict::Waiting(format!(
                    "ClusterSecretStore {CLUSTER_SECRET_STORE} does not exist (or ESO's CRDs are not installed)"
                )),
            }))
            .await?;
        let detail = store
            .and_then(|s| conditions::condition(&s.data, "Ready"))
            .map(|c| c.summary())
            .unwrap_or_default();
        Ok((started.elapsed(), detail))
    }

    async fn check_sync(&mut self) -> Outcome {
        self.touched.remote = true;
        let remote = self.probe.remote.clone();
        let created = self
            .sm
            .create_secret()
            .name(&remote)
            .description("devstack verify probe; removed when verify ends")
            .secret_string(self.probe.initial.expose())
            .set_tags(Some(self.aws_tags()))
            .send()
            .await;
        if let Err(e) = created {
            return Err(Fail::Reason(
                self.aws_reason(&format!("create secret `{remote}`"), &e),
            ));
        }
        self.touched.external_secret = true;
        let started = Instant::now();
        crate::k8s::apply(&self.client, &probe_external_secret(&self.probe, None))
            .await
            .map_err(|e| Fail::Reason(e.message().to_string()))?;
        self.wait_secret_value(&self.probe.initial, None).await?;
        Ok((
            started.elapsed(),
            format!(
                "{} -> Secret {}/{}",
                remote, self.probe.namespace, self.probe.object
            ),
        ))
    }

    async fn check_rotate(&mut self) -> Outcome {
        let remote = self.probe.remote.clone();
        let put = self
            .sm
            .put_secret_value()
            .secret_id(&remote)
            .secret_string(self.probe.rotated.expose())
            .send()
            .await;
        if let Err(e) = put {
            return Err(Fail::Reason(
                self.aws_reason(&format!("rotate secret `{remote}`"), &e),
            ));
        }
        let started = Instant::now();
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
            .to_string();
        crate::k8s::apply(
            &self.client,
            &probe_external_secret(&self.probe, Some(&stamp)),
        )
        .await
        .map_err(|e| Fail::Reason(e.message().to_string()))?;
        self.wait_secret_value(&self.probe.rotated, None).await?;
        Ok((started.elapsed(), String::new()))
    }

    async fn check_recreate(&mut self) -> Outcome {
        let api = self.secrets();
        let name = &self.probe.object;
        let old = match api.get_opt(name).await {
            Ok(Some(s)) => s.metadata.uid.unwrap_or_default(),
            Ok(None) => return Err(Fail::Reason(format!("Secret {name} vanished"))),
            Err(e) => return Err(Fail::Reason(format!("reading Secret {name}: {e}"))),
        };
        let started = Instant::now();
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(Fail::Reason(format!("deleting Secret {name}: {e}"))),
        }
        self.wait_secret_value(&self.probe.rotated, Some(&old))
            .await?;
        Ok((started.elapsed(), String::new()))
    }

    async fn check_push(&mut self) -> Outcome {
        let (source, push) = probe_push_objects(&self.probe);
        self.touched.push_source = true;
        crate::k8s::apply(&self.client, &source)
            .await
            .map_err(|e| Fail::Reason(e.message().to_string()))?;
        self.touched.push_secret = true;
        let started = Instant::now();
        crate::k8s::apply(&self.client, &push)
            .await
            .map_err(|e| Fail::Reason(e.message().to_string()))?;
        let this: &Self = self;
        let remote = this.probe.push_remote.as_str();
        let expected = this.probe.pushed.expose().as_bytes();
        let result = this
            .wait_for(this.timeout, move || async move {
                match this.sm.get_secret_value().secret_id(remote).send().await {
                    Ok(out) => {
                        // ESO pushes binary by default (`secretPushFormat`).
                        let matches = out.secret_string().map(str::as_bytes) == Some(expected)
                            || out.secret_binary().map(|b| b.as_ref()) == Some(expected);
                        if matches {
                            Ok(())
                        } else {
                            Err(format!("`{remote}` holds another value"))
                        }
                    }
                    Err(e)
                        if e.as_service_error()
                            .is_some_and(|s| s.is_resource_not_found_exception()) =>
                    {
                        Err(format!("`{remote}` not in LocalStack yet"))
                    }
                    Err(e) => Err(this.aws_reason(&format!("read secret `{remote}`"), &e)),
                }
            })
            .await;
        match result {
            Ok(()) => Ok((
                started.elapsed(),
                format!(
                    "Secret {}/{} -> {remote}",
                    self.probe.namespace, self.probe.push_object
                ),
            )),
            Err(Fail::Reason(why)) => {
                let state = match self.push_secrets().get_opt(&self.probe.push_object).await {
                    Ok(Some(ps)) => match conditions::condition(&ps.data, "Ready") {
                        Some(c) => format!("PushSecret: {}", c.summary()),
                        None => "PushSecret has no Ready condition yet".into(),
                    },
                    Ok(None) => "PushSecret is gone".into(),
                    Err(e) => format!("PushSecret unreadable: {e}"),
                };
                Err(Fail::Reason(format!("{why}; {state}")))
            }
            Err(e) => Err(e),
        }
    }

    /// Every ExternalSecret the profile declares is Ready (SecretSynced).
    /// Waits for them when the probe round trip worked (they may have been
    /// created moments ago); otherwise looks once.
    async fn check_profile(&mut self, wait: bool) {
        let targets: Vec<(String, String)> = self
            .settings
            .secrets
            .iter()
            .filter(|s| s.sync.is_some())
            .map(profile_external_secret_name)
            .collect();
        if targets.is_empty() {
            return;
        }
        let step = self.ui.step(format!(
            "{} profile ExternalSecret(s) Synced",
            targets.len()
        ));
        let started = Instant::now();
        let timeout = if wait { self.timeout } else { Duration::ZERO };
        let budget = self.budget(timeout);
        let this: &Self = self;
        // (namespace, name) -> Ok(latency) once synced, or Err(last state).
        let waits = targets.iter().map(|(ns, name)| async move {
            let until = Wait::new(format!("ExternalSecret {ns}/{name}"), "Synced", budget);
            // The report names the object: its detail is the state alone.
            let mut last = "not read yet".to_string();
            let synced = until
                .object(this.external_secrets(ns), name, |es| {
                    let verdict = external_secret_verdict(es.map(|es| &es.data));
                    if let Verdict::Waiting(state) = &verdict {
                        last.clone_from(state);
                    }
                    verdict
                })
                .await;
            let state = match synced {
                Ok(_) => Ok(started.elapsed()),
                Err(e) if e.kind() == Kind::Timeout => Err(last),
                Err(e) => Err(e.message().to_string()),
            };
            ((ns.clone(), name.clone()), state)
        });
        let all = async { Ok::<_, Error>(futures::future::join_all(waits).await) };
        let (cancelled, states): (bool, BTreeMap<_, _>) = match this.watch(all).await {
            Ok(states) => (false, states.into_iter().collect()),
            Err(_) => (
                true,
                targets
                    .iter()
                    .map(|t| (t.clone(), Err("interrupted".to_string())))
                    .collect(),
            ),
        };
        let failed = states.values().filter(|s| s.is_err()).count();
        if cancelled {
            self.interrupted = true;
            step.fail("interrupted");
        } else if failed == 0 {
            step.done("");
        } else {
            step.fail(format!("{failed} of {} not synced", states.len()));
        }
        for ((ns, name), state) in states {
            let (status, latency, detail) = match state {
                Ok(latency) => (CheckStatus::Passed, Some(latency), None),
                Err(_) if cancelled => (CheckStatus::Failed, None, Some("interrupted".into())),
                Err(why) => (CheckStatus::Failed, None, Some(self.probe.scrub(&why))),
            };
            if let Some(why) = &detail {
                self.ui.info(format!("  {ns}/{name}: {why}"));
            }
            self.checks.push(CheckResult {
                name: "profileExternalSecret".into(),
                object: Some(format!("{ns}/{name}")),
                description: format!("ExternalSecret {ns}/{name} Synced"),
                status,
                passed: status == CheckStatus::Passed,
                latency_ms: latency.map(|d| d.as_millis() as u64),
                detail,
            });
        }
    }

    /// Removes every probe object that may exist; returns what failed.
    async fn cleanup(&self) -> Vec<String> {
        let p = &self.probe;
        let ns = &p.namespace;
        let delete_remote = |name: String| async move {
            match self
                .sm
                .delete_secret()
                .secret_id(&name)
                .force_delete_without_recovery(true)
                .send()
                .await
            {
                Ok(_) => Ok(()),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|s| s.is_resource_not_found_exception()) =>
                {
                    Ok(())
                }
                Err(e) => Err(self.aws_reason(&format!("delete secret `{name}`"), &e)),
            }
        };
        let mut warnings = Vec::new();
        // The ExternalSecret goes first so ESO does not recreate its Secret;
        // the PushSecret before its remote secret so ESO does not push again.
        if self.touched.external_secret {
            let what = format!("ExternalSecret {ns}/{}", p.object);
            let request = delete_object(self.external_secrets(ns), p.object.clone());
            warnings.extend(bounded(what, request).await);
            let what = format!("Secret {ns}/{}", p.object);
            let request = delete_object(self.secrets(), p.object.clone());
            warnings.extend(bounded(what.clone(), request).await);
            // Interrupted, the round trip did not wait for ESO's reconcile of
            // the probe: one still in flight can write the Secret after both
            // removals above (seen once in CI, a probe Secret left after
            // Ctrl-C). Its next write comes within moments, or not at all.
            if self.interrupted {
                let request =
                    remove_late_writes(self.secrets(), p.object.clone(), LATE_WRITE_WINDOW);
                warnings.extend(bounded(what, request).await);
            }
        }
        if self.touched.push_secret {
            let what = format!("PushSecret {ns}/{}", p.push_object);
            let request = delete_object(self.push_secrets(), p.push_object.clone());
            warnings.extend(bounded(what, request).await);
        }
        if self.touched.push_source {
            let what = format!("Secret {ns}/{}", p.push_object);
            let request = delete_object(self.secrets(), p.push_object.clone());
            warnings.extend(bounded(what, request).await);
        }
        if self.touched.remote {
            let what = format!("LocalStack secret `{}`", p.remote);
            warnings.extend(bounded(what, delete_remote(p.remote.clone())).await);
        }
        if self.touched.push_secret {
            let what = format!("LocalStack secret `{}`", p.push_remote);
            warnings.extend(bounded(what, delete_remote(p.push_remote.clone())).await);
        }
        warnings.iter().map(|w| p.scrub(w)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;
    use crate::profile::schema::{SecretFormat, SyncSpec};
    use crate::profile::settings::{SecretSettings, kube_name};

    #[test]
    fn secret_waits_say_what_is_wrong_without_the_value() {
        use k8s_openapi::ByteString;
        let secret = |uid: &str, value: &str| {
            let mut s = Secret::default();
            s.metadata.uid = Some(uid.into());
            s.data = Some([(VALUE_KEY.to_string(), ByteString(value.as_bytes().to_vec()))].into());
            s
        };
        let state = |v: Verdict| match v {
            Verdict::Waiting(state) => state,
            Verdict::Done => "done".into(),
            Verdict::Failed(e) => panic!("{e:?}"),
        };
        let old = secret("u1", "hunter2");
        assert_eq!(
            state(secret_verdict(Some(&old), "p", b"hunter2", None)),
            "done"
        );
        assert_eq!(
            state(secret_verdict(Some(&old), "p", b"rotated", None)),
            "Secret p holds another value"
        );
        assert_eq!(
            state(secret_verdict(Some(&old), "p", b"hunter2", Some("u1"))),
            "Secret p not deleted yet"
        );
        let new = secret("u2", "hunter2");
        assert_eq!(
            state(secret_verdict(Some(&new), "p", b"hunter2", Some("u1"))),
            "done"
        );
        assert_eq!(
            state(secret_verdict(None, "p", b"x", None)),
            "Secret p absent"
        );
    }

    #[test]
    fn external_secret_waits_need_secret_synced() {
        let es = |status: &str, reason: &str| json!({"status": {"conditions": [{"type": "Ready", "status": status, "reason": reason}]}});
        assert!(matches!(
            external_secret_verdict(Some(&es("True", REASON_SECRET_SYNCED))),
            Verdict::Done
        ));
        assert!(matches!(
            external_secret_verdict(Some(&es("False", "SecretSyncedError"))),
            Verdict::Waiting(s) if s == "SecretSyncedError"
        ));
        assert!(
            matches!(external_secret_verdict(None), Verdict::Waiting(s) if s == "does not exist")
        );
        assert!(
            matches!(ready_verdict(&json!({})), Verdict::Waiting(s) if s == "no Ready condition yet")
        );
    }

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

    #[test]
    fn probe_names_are_valid_and_values_distinct() {
        let p = Probe::new("devstack-verify");
        assert_eq!(p.id.len(), 10);
        assert!(p.object.starts_with("devstack-verify-"));
        assert_eq!(kube_name(&p.object), p.object);
        assert_eq!(kube_name(&p.push_object), p.push_object);
        assert!(p.remote.starts_with("devstack-verify/"));
        crate::profile::settings::validate_secret_name(&p.push_remote).unwrap();
        assert_ne!(p.initial, p.rotated);
        assert_ne!(p.rotated, p.pushed);
        assert_eq!(p.initial.expose().len(), 32);
    }

    #[test]
    fn scrub_masks_every_probe_value() {
        let p = Probe::new("ns");
        let text = format!(
            "saw {} then {} and {}",
            p.initial.expose(),
            p.rotated.expose(),
            p.pushed.expose()
        );
        let clean = p.scrub(&text);
        assert_eq!(clean, "saw ******** then ******** and ********");
        let (source, _) = probe_push_objects(&p);
        let clean = p.scrub(&format!("rejected: {source}"));
        assert!(!clean.contains(source["data"][VALUE_KEY].as_str().unwrap()));
        assert!(clean.contains("********"));
    }

    #[test]
    fn probe_objects_reference_the_store_and_carry_no_plain_value() {
        let p = Probe::new("verify-ns");
        let es = probe_external_secret(&p, None);
        assert_eq!(es["apiVersion"], "external-secrets.io/v1");
        assert_eq!(es["metadata"]["namespace"], "verify-ns");
        assert!(es["metadata"].get("annotations").is_none());
        assert_eq!(es["spec"]["secretStoreRef"]["kind"], "ClusterSecretStore");
        assert_eq!(es["spec"]["secretStoreRef"]["name"], CLUSTER_SECRET_STORE);
        assert_eq!(es["spec"]["target"]["name"], p.object.as_str());
        assert_eq!(es["spec"]["data"][0]["remoteRef"]["key"], p.remote.as_str());
        let forced = probe_external_secret(&p, Some("123"));
        assert_eq!(forced["metadata"]["annotations"]["force-sync"], "123");

        let (source, push) = probe_push_objects(&p);
        assert_eq!(push["apiVersion"], "external-secrets.io/v1alpha1");
        assert_eq!(
            push["spec"]["selector"]["secret"]["name"],
            p.push_object.as_str()
        );
        assert_eq!(
            push["spec"]["secretStoreRefs"][0]["kind"],
            "ClusterSecretStore"
        );
        let matched = &push["spec"]["data"][0]["match"];
        assert_eq!(matched["secretKey"], VALUE_KEY);
        assert_eq!(matched["remoteRef"]["remoteKey"], p.push_remote.as_str());
        let encoded = source["data"][VALUE_KEY].as_str().unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        assert_eq!(decoded, p.pushed.expose().as_bytes());
        for object in [&es, &forced, &source, &push] {
            let text = object.to_string();
            for value in [&p.initial, &p.rotated, &p.pushed] {
                assert!(!text.contains(value.expose()), "{text}");
            }
        }
    }

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

    /// `up` and the `Stack` API may run verify on a spawned task.
    #[allow(dead_code)]
    fn run_is_send(settings: &Settings, client: &kube::Client, ui: &Ui) {
        fn send<T: Send>(_: &T) {}
        send(&run(settings, client, VerifyOptions::default(), ui));
    }
}
