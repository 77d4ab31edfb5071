//! The round trip's checks, run in order against the stack, each recorded
//! with its latency, and the removal of every probe object afterwards.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_secretsmanager::error::{ProvideErrorMetadata, SdkError};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::probe::{
    COMPONENT, MANAGED_BY, Probe, VALUE_KEY, probe_external_secret, probe_push_objects,
};
use super::report::{CheckResult, CheckStatus};
use super::{ESO_GROUP, ESO_VERSION, PUSH_SECRET_VERSION, external_secret_synced};
use crate::error::{Error, Kind};
use crate::k8s::wait::ready_verdict;
use crate::k8s::{Budget, Verdict, Wait, conditions, dynamic_api};
use crate::profile::{SecretString, Settings};
use crate::ui::{Step, Ui, format_duration};

const POLL: Duration = Duration::from_millis(250);

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

/// The API server could not reach ESO's webhook (as opposed to the webhook
/// refusing the object).
fn webhook_unreachable(message: &str) -> bool {
    message.contains("failed calling webhook")
        && [
            "no route to host",
            "connection refused",
            "no endpoints available",
        ]
        .iter()
        .any(|m| message.contains(m))
}

/// What the run may have created, for cleanup (marked before each request:
/// a request that timed out may still have happened).
#[derive(Default)]
pub(super) struct Touched {
    pub(super) remote: bool,
    pub(super) external_secret: bool,
    pub(super) push_source: bool,
    pub(super) push_secret: bool,
    pub(super) parameter: bool,
    pub(super) parameter_external_secret: bool,
}

pub(super) enum Fail {
    Reason(String),
    Cancelled,
}

/// Latency and a detail line, or why the check failed.
pub(super) type Outcome = Result<(Duration, String), Fail>;

/// One run of the checks with its probe: what it created (for cleanup),
/// what each check found, and whether it was interrupted.
pub(super) struct RoundTrip<'a> {
    pub(super) settings: &'a Settings,
    pub(super) client: kube::Client,
    pub(super) sm: aws_sdk_secretsmanager::Client,
    /// Set when the probe also proves the Parameter Store.
    pub(super) ssm: Option<aws_sdk_ssm::Client>,
    pub(super) ui: &'a Ui,
    pub(super) timeout: Duration,
    pub(super) cancel: CancellationToken,
    pub(super) probe: Probe,
    pub(super) touched: Touched,
    pub(super) checks: Vec<CheckResult>,
    pub(super) interrupted: bool,
}

/// Runs one check method of a `RoundTrip` with a progress step and records
/// it; evaluates to whether it passed. Nothing runs once interrupted.
macro_rules! check {
    ($self:ident, $name:expr, $description:expr, $method:ident) => {{
        let description: String = $description.into();
        if $self.interrupted {
            false
        } else {
            let step = $self.ui.step(&description);
            let outcome = $self.$method().await;
            $self.record(step, $name, None, description, outcome)
        }
    }};
}

/// Store Ready, then sync, rotate and recreate, each skipped (with why) when
/// the one it builds on failed; evaluates to whether the first sync passed.
macro_rules! round_trip {
    (
        $self:ident,
        store: ($store_name:expr, $store_description:expr, $store:ident),
        sync: ($sync_name:expr, $sync_description:expr, $sync:ident),
        rotate: ($rotate_name:expr, $rotate_description:expr, $rotate:ident),
        recreate: ($recreate_name:expr, $recreate_description:expr, $recreate:ident) $(,)?
    ) => {{
        let store = check!($self, $store_name, $store_description, $store);
        let synced = if store {
            check!($self, $sync_name, $sync_description, $sync)
        } else {
            $self.skip($sync_name, $sync_description, "the store is not Ready");
            false
        };
        let rotated = if synced {
            check!($self, $rotate_name, $rotate_description, $rotate)
        } else {
            $self.skip($rotate_name, $rotate_description, "the first sync failed");
            false
        };
        if rotated {
            check!($self, $recreate_name, $recreate_description, $recreate);
        } else {
            $self.skip(
                $recreate_name,
                $recreate_description,
                "an earlier check failed",
            );
        }
        synced
    }};
}

impl<'a> RoundTrip<'a> {
    pub(super) fn new(
        settings: &'a Settings,
        client: &kube::Client,
        ui: &'a Ui,
        timeout: Duration,
        cancel: CancellationToken,
        probe: Probe,
    ) -> Self {
        RoundTrip {
            settings,
            client: client.clone(),
            sm: crate::aws::secrets_manager(settings),
            ssm: (!probe.parameter_store.is_empty()).then(|| crate::aws::ssm(settings)),
            ui,
            timeout,
            cancel,
            probe,
            touched: Touched::default(),
            checks: Vec::new(),
            interrupted: false,
        }
    }

    pub(super) async fn ensure_namespace(&self) -> Result<(), Error> {
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

    pub(super) async fn run_checks(&mut self, push_secret: bool) {
        const SYNC: &str = "ExternalSecret syncs a new secret";
        const ROTATE: &str = "A rotated value reaches the cluster (force-sync)";
        const RECREATE: &str = "A deleted Secret is recreated";
        const PUSH: &str = "PushSecret writes to LocalStack";

        let synced = round_trip!(
            self,
            store: (
                "clusterSecretStore",
                format!("ClusterSecretStore {} Ready", self.probe.store),
                check_store
            ),
            sync: ("sync", SYNC, check_sync),
            rotate: ("rotate", ROTATE, check_rotate),
            recreate: ("recreate", RECREATE, check_recreate),
        );
        if push_secret {
            if synced {
                check!(self, "push", PUSH, check_push);
            } else {
                self.skip("push", PUSH, "the first sync failed");
            }
        }
        let parameters_synced = self.run_parameter_checks().await;
        if !self.interrupted {
            self.check_profile(synced && parameters_synced).await;
        }
    }

    /// The same round trip through the Parameter Store's store, when the
    /// profile has parameters; returns whether its first sync passed.
    async fn run_parameter_checks(&mut self) -> bool {
        const SYNC: &str = "ExternalSecret syncs a new parameter (Parameter Store)";
        const ROTATE: &str = "A rotated parameter reaches the cluster (force-sync)";
        const RECREATE: &str = "A deleted Secret is recreated from its parameter";
        if self.ssm.is_none() {
            return true;
        }
        round_trip!(
            self,
            store: (
                "parameterStore",
                format!("ClusterSecretStore {} Ready", self.probe.parameter_store),
                check_parameter_store
            ),
            sync: ("parameterSync", SYNC, check_parameter_sync),
            rotate: ("parameterRotate", ROTATE, check_parameter_rotate),
            recreate: ("parameterRecreate", RECREATE, check_parameter_recreate),
        )
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

    /// Applies `object` through ESO's webhook, waiting while the webhook
    /// does not answer yet. A node that started again (`devstack start`, a
    /// machine restart) lists the webhook's pod Ready, as it was before the
    /// stop, until its kubelet has brought the pod back: the API server's
    /// calls meanwhile find no route to it.
    pub(super) async fn apply_once_the_webhook_answers(&self, object: &Value) -> Result<(), Fail> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let why = match crate::k8s::apply(&self.client, object).await {
                Ok(()) => return Ok(()),
                Err(e) => e.message().to_string(),
            };
            if !webhook_unreachable(&why) || Instant::now() >= deadline {
                return Err(Fail::Reason(why));
            }
            tokio::select! {
                _ = self.cancel.cancelled() => return Err(Fail::Cancelled),
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }

    /// Each wait of a check may take `timeouts.verify` (or the caller's bound).
    fn budget(&self, limit: Duration) -> Budget {
        Budget::new(limit, "timeouts.verify")
    }

    pub(super) fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.probe.namespace)
    }

    pub(super) fn external_secrets(&self, namespace: &str) -> Api<DynamicObject> {
        dynamic_api(
            &self.client,
            &format!("{ESO_GROUP}/{ESO_VERSION}"),
            "ExternalSecret",
            Some(namespace),
        )
    }

    pub(super) fn push_secrets(&self) -> Api<DynamicObject> {
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

    pub(super) fn aws_reason<E: ProvideErrorMetadata, R>(
        &self,
        what: &str,
        err: &SdkError<E, R>,
    ) -> String {
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

    /// The Ready condition of probe ExternalSecret `name`, to explain a timeout.
    async fn external_secret_state(&self, name: &str) -> String {
        match self
            .external_secrets(&self.probe.namespace)
            .get_opt(name)
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
        self.wait_object_value(&self.probe.object, expected, replaced)
            .await
    }

    /// [`Self::wait_secret_value`] for the Secret `name` of either round trip.
    pub(super) async fn wait_object_value(
        &self,
        name: &str,
        expected: &SecretString,
        replaced: Option<&str>,
    ) -> Result<String, Fail> {
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
                self.external_secret_state(name).await
            ))),
            other => other,
        }
    }

    async fn check_store(&mut self) -> Outcome {
        let name = self.probe.store.clone();
        self.store_ready(name).await
    }

    async fn check_parameter_store(&mut self) -> Outcome {
        let name = self.probe.parameter_store.clone();
        self.store_ready(name).await
    }

    async fn store_ready(&self, name: String) -> Outcome {
        let api = crate::gitops::cluster_secret_stores(&self.client);
        let started = Instant::now();
        let wait = Wait::new(
            format!("ClusterSecretStore {name}"),
            "Ready",
            self.budget(self.timeout),
        );
        let store = self
            .watch(wait.object(api, &name, |store| match store {
                Some(store) => ready_verdict(&store.data),
                None => Verdict::Waiting(format!(
                    "ClusterSecretStore {name} does not exist (or ESO's CRDs are not installed)"
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
        self.apply_once_the_webhook_answers(&probe_external_secret(&self.probe, None))
            .await?;
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
        let stamp = force_sync_stamp();
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
        let targets: Vec<(String, String)> =
            crate::profile::parameters::sync_targets(self.settings)
                .into_iter()
                .map(|t| (t.namespace, t.name))
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
}

/// A value for ESO's `force-sync` annotation that differs from every
/// earlier one, so each apply asks for a new sync.
pub(super) fn force_sync_stamp() -> String {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_webhook_the_api_server_cannot_reach_is_waited_for() {
        let unreachable = "apply ExternalSecret/p: ApiError: Internal error occurred: failed calling webhook \"validate.externalsecret.external-secrets.io\": failed to call webhook: Post \"https://external-secrets-webhook.external-secrets.svc:443/validate\": dial tcp 10.96.184.148:443: connect: no route to host";
        assert!(webhook_unreachable(unreachable));
        let refused = "apply ExternalSecret/p: ApiError: admission webhook \"validate.externalsecret.external-secrets.io\" denied the request: spec.target is invalid";
        assert!(!webhook_unreachable(refused));
        assert!(!webhook_unreachable(
            "apply ExternalSecret/p: connect: no route to host"
        ));
    }
    use crate::verify::REASON_SECRET_SYNCED;

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
}
