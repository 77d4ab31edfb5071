//! Watches the chain (root -> CRDs -> operator -> CRs, plus the HelmRelease)
//! until every level is Ready for its source's current revision, nudging
//! each level the moment the one before it turns Ready, so no level sits in
//! Flux's 30 s dependency requeue or a retry interval, and asking Flux to
//! check a level's health again the moment what it checks is healthy, so
//! no level waits for Flux's next 5 s health poll. Records every failure
//! Flux reports on the way (Ready=False with a failure reason, and Warning
//! events), which is how the race shows.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use serde::Serialize;
use serde_json::{Value, json};

use super::{CHAIN, FLUX_NAMESPACE, HELM_RELEASE, ROOT_KUSTOMIZATION};
use crate::error::Error;
use crate::k8s::conditions::{self, Condition};
use crate::k8s::dynamic_api;
use crate::k8s::wait::{self, Budget, Objects, Seen, Verdict, Wait};
use crate::ui::Step;

pub const RECONCILE_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";

/// Ready reasons that mean "not yet", not "failed": waiting for a
/// dependency or for a source (the HelmRelease's chart) to be fetched.
const WAITING_REASONS: &[&str] = &[
    "Progressing",
    "ProgressingWithRetry",
    "DependencyNotReady",
    "SourceNotReady",
    "Succeeded",
    "ReconciliationSucceeded",
    // devstack's reconcile request ended a health check that would have
    // passed at its next poll; Flux starts it over at once.
    "HealthCheckCanceled",
];

/// Whether a Ready=False condition (or Warning event) means "not yet" rather
/// than "failed". kustomize-controller reports a source that exists but has
/// no artifact yet, or does not exist yet, as `ArtifactFailed` with these
/// messages and retries by itself: a Kustomization applied beside its new
/// Bucket shows it until the first fetch lands.
///
/// An apply whose dry-run could not reach an admission webhook waits too:
/// after a restart (or a restore) the operator level still reads Ready from
/// before, so the custom resources' level applies while the webhook's pod
/// is coming back; devstack asks for it again (`WEBHOOK_NOT_SERVING_PAUSE`).
/// A webhook that answers and denies is a failure.
///
/// A download the artifact server refused waits as well: devstack asks the
/// level (or the HelmRelease) again (see `artifact_server_not_serving`).
fn waiting(reason: &str, message: &str) -> bool {
    WAITING_REASONS.contains(&reason)
        || (reason == "ArtifactFailed"
            && (message.starts_with("Source artifact not found")
                || (message.starts_with("Source '") && message.ends_with("' not found"))
                || artifact_server_not_serving(message)))
        || (reason == "ReconciliationFailed" && webhook_not_serving(message))
}

/// A Flux controller's download of a source's artifact met the
/// source-controller not serving yet. After a restart (or a restore) the
/// controllers start together and the first downloads race the artifact
/// server; Flux's fetchers would wait 5 s before trying again, so
/// devstack's Flux install makes a download fail at once (`--http-retry=0`)
/// and the chain asks for the level (or the HelmRelease) again
/// (`REFUSED_DOWNLOAD_PAUSE`).
///
/// Refused, the message is Flux's HTTP client's (`GET URL giving up after
/// 1 attempt(s): ...`), in kustomize-controller's "failed to download
/// archive" and helm-controller's "Could not load chart" alike. Answered
/// 404, each controller says the source is not ready and waits its 30 s
/// dependency requeue, which no new source revision cuts short: seen on a
/// restore whose downloads left the node before its kube-proxy had
/// programmed the artifact Service (something outside answered them), and
/// the chain then sat 30 s.
fn artifact_server_not_serving(message: &str) -> bool {
    const ANSWERED_NOT_FOUND: &[&str] = &[
        // kustomize-controller v1.9.5
        "Source is not ready, artifact not found",
        // helm-controller v1.6.4
        "Source not ready: artifact not found",
    ];
    (message.contains(" giving up after ")
        && ["connection refused", "no route to host"]
            .iter()
            .any(|m| message.contains(m)))
        || ANSWERED_NOT_FOUND.iter().any(|m| message.starts_with(m))
}

/// Between a download the artifact server refused and the request to try
/// again: a server that starts within it is not asked many times over.
const REFUSED_DOWNLOAD_PAUSE: Duration = Duration::from_millis(300);

/// How long a level may check health before devstack tells Flux that its
/// checks pass: Flux's first poll comes right after its apply and, with
/// everything healthy (a restart's re-apply), ends the check by itself; a
/// request then would cancel it and apply the level again.
const HEALTH_NUDGE_GRACE: Duration = Duration::from_millis(500);

/// Whether a level checking health since `since` has had its grace; if not,
/// `look_again` makes the chain look at it again when it has.
fn grace_over(since: Instant, look_again: &mut Option<Instant>) -> bool {
    let due = since + HEALTH_NUDGE_GRACE;
    if due <= Instant::now() {
        return true;
    }
    *look_again = Some(look_again.map_or(due, |at| at.min(due)));
    false
}

/// Between an apply whose admission webhook did not answer and the request
/// to try again. Flux itself tries again at the level's `retryInterval`
/// (1 min): seen on Kind, where the API server reached the webhook's new
/// pod a moment after the pod was Ready and the custom resources' level sat
/// 60 s.
const WEBHOOK_NOT_SERVING_PAUSE: Duration = Duration::from_secs(1);

/// How long to wait before asking again for a level whose reconcile failed
/// on something about to serve; `None` for any other failure.
fn retry_pause(message: &str) -> Option<Duration> {
    if artifact_server_not_serving(message) {
        Some(REFUSED_DOWNLOAD_PAUSE)
    } else if webhook_not_serving(message) {
        Some(WEBHOOK_NOT_SERVING_PAUSE)
    } else {
        None
    }
}

/// `retry_pause` of a Ready=False condition whose failure counts as
/// waiting; `None` for any other condition.
fn retry_pause_of(condition: &Condition) -> Option<Duration> {
    let message = condition.message.as_deref().unwrap_or_default();
    (condition.status == "False"
        && waiting(condition.reason.as_deref().unwrap_or_default(), message))
    .then(|| retry_pause(message))
    .flatten()
}

fn webhook_not_serving(message: &str) -> bool {
    const UNREACHABLE: &[&str] = &[
        "no endpoints available for service",
        "connect: connection refused",
        "context deadline exceeded",
        "i/o timeout",
    ];
    message.contains("failed calling webhook") && UNREACHABLE.iter().any(|m| message.contains(m))
}

pub fn kustomizations(client: &kube::Client) -> Api<DynamicObject> {
    dynamic_api(
        client,
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
        Some(FLUX_NAMESPACE),
    )
}

pub fn helm_releases(client: &kube::Client) -> Api<DynamicObject> {
    dynamic_api(
        client,
        "helm.toolkit.fluxcd.io/v2",
        "HelmRelease",
        Some(HELM_RELEASE.0),
    )
}

fn workloads(client: &kube::Client) -> Api<DynamicObject> {
    dynamic_api(client, "apps/v1", "Deployment", Some(HELM_RELEASE.0))
}

fn source_api(client: &kube::Client, kind: &str, ns: &str) -> Api<DynamicObject> {
    dynamic_api(client, "source.toolkit.fluxcd.io/v1", kind, Some(ns))
}

/// The Ready condition of a Flux object.
pub fn ready_condition(object: &Value) -> Option<Condition> {
    conditions::condition(object, "Ready")
}

fn observed_current(object: &Value) -> bool {
    object["metadata"]["generation"].as_i64() == object["status"]["observedGeneration"].as_i64()
}

/// Asks Flux to reconcile `name` now; returns the request's token, which
/// the object reports as `status.lastHandledReconcileAt` once handled.
pub async fn request_reconcile(api: &Api<DynamicObject>, name: &str) -> Result<String, Error> {
    let token = chrono_like_now();
    tracing::debug!("requesting a reconcile of {name} ({token})");
    let patch = json!({"metadata": {"annotations": {RECONCILE_ANNOTATION: token}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| token)
        .map_err(|e| Error::internal(format!("request a reconcile of {name}: {e}")))
}

/// Suspends (or resumes) a Flux source in flux-system; one that does not
/// exist yet is left alone.
pub async fn suspend_source(
    client: &kube::Client,
    kind: &str,
    name: &str,
    suspend: bool,
) -> Result<(), Error> {
    let api = source_api(client, kind, FLUX_NAMESPACE);
    // `null` removes the field: resumed, the object is as devstack applies it.
    let value = if suspend { json!(true) } else { Value::Null };
    let patch = json!({"spec": {"suspend": value}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(Error::internal(format!(
            "{} {kind} {FLUX_NAMESPACE}/{name}: {e}",
            if suspend { "suspend" } else { "resume" }
        ))),
    }
}

/// Has a source fetch again now and waits until it has, so what was just
/// published is the artifact the Kustomizations see.
pub async fn refresh_source(
    client: &kube::Client,
    kind: &str,
    name: &str,
    budget: Budget,
) -> Result<(), Error> {
    let api = source_api(client, kind, FLUX_NAMESPACE);
    let mut failed_fetches = 0;
    loop {
        let token = request_reconcile(&api, name).await?;
        let fetched = Wait::new(
            format!("{kind} {FLUX_NAMESPACE}/{name}"),
            "Ready with a fresh fetch",
            budget,
        )
        .advice(
            "check the source-controller: `kubectl -n flux-system logs deploy/source-controller`",
        )
        .object(api.clone(), name, |object| {
            let object = object.map(|o| serde_json::to_value(o).unwrap_or_default());
            source_verdict(kind, name, object.as_ref(), &token)
        })
        .await;
        match fetched {
            // Seen in CI: the first fetch of a new stack failed with "no such
            // host" for the LocalStack route the cluster's DNS had not picked
            // up yet. A failure that lasts through a few fetches is real.
            Err(err)
                if err.kind() == crate::error::Kind::Unhealthy
                    && failed_fetches < FETCH_ATTEMPTS - 1 =>
            {
                failed_fetches += 1;
                tracing::debug!("fetch {failed_fetches} of {kind} {name} failed: {err}");
                tokio::time::sleep(FETCH_RETRY_DELAY).await;
            }
            other => return other.map(|_| ()),
        }
    }
}

/// Fetches a source gets before its failure stops `up`, and the pause
/// between them.
const FETCH_ATTEMPTS: u32 = 5;
const FETCH_RETRY_DELAY: Duration = Duration::from_secs(2);

/// Whether a source has handled the fetch requested with `token`, and how
/// that went.
fn source_verdict(kind: &str, name: &str, object: Option<&Value>, token: &str) -> Verdict {
    let Some(object) = object else {
        return Verdict::Waiting("does not exist".into());
    };
    let condition = ready_condition(object);
    let state = condition
        .as_ref()
        .map(|c| c.summary())
        .unwrap_or_else(|| "no status yet".into());
    if !handled(object, Some(token)) {
        return Verdict::Waiting(format!("fetch not handled yet; {state}"));
    }
    match &condition {
        Some(c) if c.is_true() => Verdict::Done,
        Some(c) if c.status == "False" => Verdict::Failed(
            Error::unhealthy(format!(
                "{kind} {FLUX_NAMESPACE}/{name} cannot fetch ({})",
                c.summary()
            ))
            .with_hint(match kind {
                "Bucket" => "LocalStack must be running and reachable from pods: `devstack status`",
                _ => {
                    "check the repository URL, branch and credentials in the profile's `gitops.git`"
                }
            }),
        ),
        _ => Verdict::Waiting(state),
    }
}

/// A unique, increasing token (Flux only compares it with the last handled one).
fn chrono_like_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}.{:09}", now.as_secs(), now.subsec_nanos())
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LevelTiming {
    pub name: String,
    /// From the start of the wait until Ready for the current revision.
    pub ready_after_ms: u64,
    /// Whether devstack asked Flux to reconcile it early.
    pub nudged: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// `Kustomization flux-system/external-secrets-crs`.
    pub object: String,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainReport {
    pub levels: Vec<LevelTiming>,
    /// Distinct failures Flux reported while the chain converged.
    pub failures: Vec<Failure>,
    pub elapsed_ms: u64,
}

impl ChainReport {
    pub fn failed_reconciliations(&self) -> usize {
        self.failures.len()
    }
}

#[derive(Debug, Clone, Copy)]
pub struct WaitOptions {
    /// Bounds the wait (`timeouts.eso`, shared with the steps before it).
    pub budget: Budget,
    /// Request reconciles as levels turn Ready (off only to measure Flux alone).
    pub nudge: bool,
    /// Stop at the first failure that retrying cannot fix (a manifest that
    /// does not build or apply for the current revision).
    pub fail_fast: bool,
    /// Nudge levels that are already Ready for the current revision too:
    /// needed when what they substitute (the stack facts) changed, which
    /// no revision tells. Otherwise a settled level is left alone: after a
    /// restart every level is, and re-applying the ESO CRDs alone took 8 s.
    pub nudge_settled: bool,
}

/// One level of the chain as watched.
struct Level {
    name: &'static str,
    ready_at: Option<Duration>,
    /// The reconcile devstack requested of this level, if any: the level is
    /// settled only once Flux reports it handled (`lastHandledReconcileAt`).
    requested: Option<String>,
    /// devstack told Flux that its health checks pass (once per wait).
    health_nudged: bool,
    /// Since when devstack has seen it checking health (for its current
    /// generation).
    checking_since: Option<Instant>,
}

/// Whether Flux has finished the reconcile requested with `token` (none
/// requested: nothing to finish).
pub fn handled(object: &Value, token: Option<&str>) -> bool {
    token.is_none_or(|t| object["status"]["lastHandledReconcileAt"].as_str() == Some(t))
}

/// What the chain's watches report.
enum Change {
    Kustomization(Event<DynamicObject>),
    Release(Event<DynamicObject>),
    /// The Deployments in the HelmRelease's namespace, which the operator
    /// level checks the health of.
    Workload(Event<DynamicObject>),
    /// A failure a Warning event records (none for other events).
    Warning(Option<Failure>),
}

/// One stream of every change the chain's state depends on: the
/// Kustomizations in flux-system, the HelmRelease, and Warning events
/// where Flux records failures.
fn chain_changes(
    client: &kube::Client,
    since: std::time::SystemTime,
) -> BoxStream<'static, Result<Change, watcher::Error>> {
    let mut streams = vec![
        wait::watch(kustomizations(client), watcher::Config::default())
            .map_ok(Change::Kustomization)
            .boxed(),
        wait::watch(
            helm_releases(client),
            watcher::Config::default().fields(&format!("metadata.name={}", HELM_RELEASE.1)),
        )
        .map_ok(Change::Release)
        .boxed(),
        wait::watch(workloads(client), watcher::Config::default())
            .map_ok(Change::Workload)
            .boxed(),
    ];
    let mut namespaces = vec![FLUX_NAMESPACE, HELM_RELEASE.0];
    namespaces.dedup();
    for ns in namespaces {
        let events: Api<CoreEvent> = Api::namespaced(client.clone(), ns);
        streams.push(
            wait::watch(events, watcher::Config::default().fields("type=Warning"))
                .map_ok(move |event| {
                    Change::Warning(match event {
                        Event::Apply(e) | Event::InitApply(e) => warning_failure(&e, since),
                        _ => None,
                    })
                })
                .boxed(),
        );
    }
    futures::stream::select_all(streams).boxed()
}

/// Waits until the root Kustomization, each level of the chain and the
/// HelmRelease are Ready for their sources' current revisions and have
/// finished every reconcile devstack asked for. `root_request` is the token
/// of the reconcile the caller requested of the root Kustomization.
///
/// Each level is nudged only once the level below has finished its own
/// requested reconcile and is Ready: a level reconciled while its dependency
/// is mid-reconcile fails its dependency check and waits for Flux's 30 s
/// requeue, which is how a careless nudge unsettles a healthy chain.
///
/// The chain is looked at again after every change its watches report.
/// Meanwhile the ESO webhook's certificate is made ready for its pods
/// (see [`super::webhook`]); the wait ends once the webhook also serves.
pub async fn wait_ready(
    client: &kube::Client,
    options: WaitOptions,
    root_request: Option<String>,
    step: &Step,
) -> Result<ChainReport, Error> {
    let budget = options.budget;
    let ready_and_serving = async {
        let report = watch_chain(client, options, root_request, step).await?;
        super::webhook::wait_serving(client, budget).await?;
        Ok(report)
    };
    tokio::select! {
        report = ready_and_serving => report,
        never = super::webhook::keep_certificate_ready(client) => match never {},
    }
}

async fn watch_chain(
    client: &kube::Client,
    options: WaitOptions,
    root_request: Option<String>,
    step: &Step,
) -> Result<ChainReport, Error> {
    let started = Instant::now();
    let mut levels: Vec<Level> = std::iter::once(ROOT_KUSTOMIZATION)
        .chain(CHAIN)
        .map(|name| Level {
            name,
            ready_at: None,
            requested: None,
            health_nudged: false,
            checking_since: None,
        })
        .collect();
    levels[0].requested = root_request;
    let mut failures = BTreeSet::new();
    let outcome = follow_chain(client, options, step, started, &mut levels, &mut failures).await;
    record_level_spans(step, started, &levels);
    outcome?;
    Ok(ChainReport {
        levels: levels
            .iter()
            .map(|l| LevelTiming {
                name: l.name.to_string(),
                ready_after_ms: l.ready_at.unwrap_or_default().as_millis() as u64,
                nudged: l.requested.is_some(),
            })
            .collect(),
        failures: failures.into_iter().collect(),
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// Each level's share of the chain on the step's timeline.
fn record_level_spans(step: &Step, started: Instant, levels: &[Level]) {
    let Some((timeline, parent)) = step.timeline() else {
        return;
    };
    let ready: Vec<_> = levels.iter().map(|l| (l.name, l.ready_at)).collect();
    for (name, from, to) in level_spans(&ready) {
        timeline.record(
            format!("level {name} Ready"),
            Some(parent),
            timeline.ms_at(started + from),
            Some(timeline.ms_at(started + to)),
            Some(true),
        );
    }
}

/// The spans of the levels Ready at the end (each with when it last turned
/// Ready): from when it could start (the level before it Ready) to its
/// last turn to Ready. The last, not the first: after a restart or a
/// restore a level first reads the Ready its datastore kept, then
/// reconciles again.
fn level_spans<'a>(ready: &[(&'a str, Option<Duration>)]) -> Vec<(&'a str, Duration, Duration)> {
    ready
        .iter()
        .enumerate()
        .filter_map(|(i, (name, at))| {
            let at = (*at)?;
            let from = i
                .checked_sub(1)
                .and_then(|before| ready[before].1)
                .map_or(Duration::ZERO, |before| before.min(at));
            Some((*name, from, at))
        })
        .collect()
}

/// Follows the chain until it is Ready, fails for good, or runs out of
/// time; `levels` and `failures` say how far it got.
async fn follow_chain(
    client: &kube::Client,
    options: WaitOptions,
    step: &Step,
    started: Instant,
    levels: &mut [Level],
    failures: &mut BTreeSet<Failure>,
) -> Result<(), Error> {
    let since = std::time::SystemTime::now() - Duration::from_secs(1);
    let wait = Wait::new("the External Secrets chain", "Ready", options.budget).advice(
        "`devstack status` shows each level, `kubectl -n flux-system get kustomizations,buckets` more",
    );
    let ks = kustomizations(client);
    let mut changes = chain_changes(client, since);
    let mut watched_kustomizations: Objects<DynamicObject> = Objects::default();
    let mut releases: Objects<DynamicObject> = Objects::default();
    let mut deployments: Objects<DynamicObject> = Objects::default();
    let mut seen = Seen::default();
    let mut looked = false;
    // The last reconcile devstack asked of the HelmRelease, after a
    // failure on something not serving yet.
    let mut release_requested: Option<String> = None;
    // Requests to try again that wait out their pause, by level index
    // (`None`: the HelmRelease); the watch goes on meanwhile, so one
    // level's pause does not hold back what another level reports.
    let mut asks: Asks = Asks::default();
    // When a level whose health checks pass is to be looked at again, its
    // nudge held back until Flux had time for its own first check.
    let mut look_again: Option<Instant> = None;
    loop {
        let wake = asks.next_due().into_iter().chain(look_again).min();
        let change = match wake {
            Some(at) => tokio::select! {
                change = wait.next(&mut changes, looked, &seen) => Some(change?),
                () = tokio::time::sleep_until(at.into()) => None,
            },
            None => Some(wait.next(&mut changes, looked, &seen).await?),
        };
        let mut changed = false;
        if change.is_none() {
            for target in asks.take_due() {
                match target {
                    Some(i) => {
                        if let Ok(token) = request_reconcile(&ks, levels[i].name).await {
                            levels[i].requested = Some(token);
                        }
                    }
                    None => {
                        if let Ok(token) =
                            request_reconcile(&helm_releases(client), HELM_RELEASE.1).await
                        {
                            release_requested = Some(token);
                        }
                    }
                }
            }
            // A health nudge held back for its grace is looked at again.
            if look_again.is_none_or(|at| at > Instant::now()) {
                continue;
            }
            changed = true;
        }
        let mut next = change;
        let mut watch_failed = false;
        // A burst (a relist, a reconcile's status updates) is looked at once.
        while let Some(change) = next.take() {
            watch_failed |= change.is_err();
            changed |= seen.record(change.map(|change| match change {
                Change::Kustomization(event) => watched_kustomizations.apply(event),
                Change::Release(event) => releases.apply(event),
                Change::Workload(event) => deployments.apply(event),
                Change::Warning(failure) => {
                    failures.extend(failure);
                    false
                }
            }));
            next = changes.next().now_or_never().flatten();
        }
        // As in `Wait::list`: a failing watch is followed by plain lists.
        if watch_failed
            && let (Ok(listed_ks), Ok(listed_releases), Ok(listed_deployments)) = (
                ks.list(&Default::default()).await,
                helm_releases(client).list(&Default::default()).await,
                workloads(client).list(&Default::default()).await,
            )
        {
            watched_kustomizations.replace(listed_ks.items);
            releases.replace(listed_releases.items);
            deployments.replace(listed_deployments.items);
            changed = true;
        }
        if !changed || !watched_kustomizations.listed() || !releases.listed() {
            continue;
        }
        let mut blocking: Option<String> = None;
        look_again = None;
        for i in 0..levels.len() {
            let name = levels[i].name;
            let object = watched_kustomizations.get(name);
            let Some(object) = object.map(|o| serde_json::to_value(o).unwrap_or_default()) else {
                blocking.get_or_insert(format!(
                    "Kustomization {FLUX_NAMESPACE}/{name} does not exist yet"
                ));
                continue;
            };
            let current = source_revision(client, &object).await;
            let condition = ready_condition(&object);
            if let Some(c) = &condition
                && c.status == "False"
            {
                let failure = Failure {
                    object: format!("Kustomization {FLUX_NAMESPACE}/{name}"),
                    reason: c.reason.clone().unwrap_or_default(),
                    message: c.message.clone().unwrap_or_default(),
                };
                let attempted = object["status"]["lastAttemptedRevision"].as_str();
                if options.fail_fast
                    && matches!(
                        failure.reason.as_str(),
                        "BuildFailed" | "ReconciliationFailed"
                    )
                    && !waiting(&failure.reason, &failure.message)
                    && current.is_some()
                    && attempted == current.as_deref()
                {
                    return Err(Error::user(format!(
                        "{} failed ({}): {}",
                        failure.object, failure.reason, failure.message
                    ))
                    .with_hint("fix the manifest and run `devstack sync`; `devstack status` shows the chain"));
                }
                if !waiting(&failure.reason, &failure.message) {
                    failures.insert(failure);
                }
            }
            let ready = settled(&object, current.as_deref())
                && handled(&object, levels[i].requested.as_deref());
            // Asked again only while its last reconcile still stands failed
            // on something not serving: one that Flux has since started
            // again by itself (its source changed) or finished is left to it,
            // as is one devstack asked for since (a nudge as the level before
            // it turned Ready, earlier in this pass: its token is not handled).
            match condition.as_ref().and_then(retry_pause_of).filter(|_| {
                options.nudge && !ready && handled(&object, levels[i].requested.as_deref())
            }) {
                Some(pause) => asks.add(Some(i), pause),
                None => asks.forget(Some(i)),
            }
            if ready {
                if levels[i].ready_at.is_none() {
                    levels[i].ready_at = Some(started.elapsed());
                    step.progress(format!("{name} Ready"));
                    let (leave_alone, requeued) = match levels
                        .get(i + 1)
                        .and_then(|l| watched_kustomizations.get(l.name))
                    {
                        Some(next) => {
                            let next = serde_json::to_value(next).unwrap_or_default();
                            let current = source_revision(client, &next).await;
                            let requeued =
                                dependency_requeued(&next, levels[i + 1].requested.as_deref());
                            let leave_alone = not_reconciled_yet(&next)
                                || (!options.nudge_settled
                                    && !requeued
                                    && (settled(&next, current.as_deref())
                                        || applying_current(&next, current.as_deref())));
                            (leave_alone, requeued)
                        }
                        None => (false, false),
                    };
                    if options.nudge
                        && !leave_alone
                        && let Some(next) = levels.get_mut(i + 1)
                        && (next.requested.is_none() || requeued)
                    {
                        // The next level may not exist until this one applied
                        // it; then Flux reconciles it on creation anyway.
                        next.requested = request_reconcile(&ks, next.name).await.ok();
                    }
                }
            } else {
                levels[i].ready_at = None;
                // Only once the level it depends on is Ready: the new
                // reconcile checks the dependency again first, and one not
                // Ready (after a restart every level reconciles at once)
                // sends it to Flux's 30 s dependency requeue.
                let dependency_ready = i == 0 || levels[i - 1].ready_at.is_some();
                if checking_health(&object) {
                    levels[i].checking_since.get_or_insert_with(Instant::now);
                } else {
                    levels[i].checking_since = None;
                }
                if options.nudge
                    && !levels[i].health_nudged
                    && dependency_ready
                    && let Some(since) = levels[i].checking_since
                    && health_checks_pass(&object, &releases, &deployments)
                    && grace_over(since, &mut look_again)
                {
                    // kustomize-controller polls health every 5 s; a
                    // reconcile request cancels the running check (its
                    // `CancelHealthCheckOnNewRevision` gate, set by
                    // devstack's Flux install) and the new check polls at
                    // once. Flux still decides. Once: should it not agree
                    // yet, its own polls go on.
                    levels[i].health_nudged = true;
                    if let Ok(token) = request_reconcile(&ks, name).await {
                        // Looked at before this request in this pass.
                        asks.forget(Some(i));
                        levels[i].requested = Some(token);
                        step.progress(format!("{name}: health checks pass, Flux checks again"));
                    }
                }
                let why = condition
                    .map(|c| c.summary())
                    .unwrap_or_else(|| "not reconciled yet".into());
                blocking.get_or_insert(format!("Kustomization {FLUX_NAMESPACE}/{name}: {why}"));
            }
        }
        let release = releases
            .get(HELM_RELEASE.1)
            .map(|o| serde_json::to_value(o).unwrap_or_default());
        let mut release_ready = false;
        let mut release_state = "does not exist yet".to_string();
        if let Some(release) = &release {
            let condition = ready_condition(release);
            if let Some(c) = &condition {
                let reason = c.reason.clone().unwrap_or_default();
                let message = c.message.as_deref().unwrap_or_default();
                if c.status == "False" && !waiting(&reason, message) {
                    failures.insert(Failure {
                        object: format!("HelmRelease {}/{}", HELM_RELEASE.0, HELM_RELEASE.1),
                        reason,
                        message: message.to_string(),
                    });
                }
                match retry_pause_of(c)
                    .filter(|_| options.nudge && handled(release, release_requested.as_deref()))
                {
                    Some(pause) => asks.add(None, pause),
                    None => asks.forget(None),
                }
                release_ready = release_is_ready(release);
                release_state = c.summary();
            } else {
                release_state = "not reconciled yet".into();
            }
        }
        if blocking.is_none() && release_ready {
            return Ok(());
        }
        seen.state = Some(blocking.unwrap_or_else(|| {
            format!(
                "HelmRelease {}/{}: {release_state}",
                HELM_RELEASE.0, HELM_RELEASE.1
            )
        }));
        looked = true;
        wait.check_deadline(&seen)?;
    }
}

/// Reconcile requests to send again once their pause is over: the levels
/// (by index) and the HelmRelease (`None`) whose last reconcile met
/// something not serving yet.
#[derive(Default)]
struct Asks {
    due: std::collections::BTreeMap<Option<usize>, Instant>,
}

impl Asks {
    /// A target asked again after `pause`; one already waiting keeps its
    /// time (each look at the chain reports it again).
    fn add(&mut self, target: Option<usize>, pause: Duration) {
        self.due
            .entry(target)
            .or_insert_with(|| Instant::now() + pause);
    }

    /// A target not to be asked again after all: asked for otherwise
    /// meanwhile, or reconciled again by Flux itself. A second request
    /// while Flux works on the first makes it start over (a level checking
    /// the health of what it applied cancels the check and applies again).
    fn forget(&mut self, target: Option<usize>) {
        self.due.remove(&target);
    }

    /// When the next request is due.
    fn next_due(&self) -> Option<Instant> {
        self.due.values().min().copied()
    }

    /// The targets whose pause is over, no longer waiting.
    fn take_due(&mut self) -> Vec<Option<usize>> {
        let now = Instant::now();
        let due: Vec<_> = self
            .due
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(target, _)| *target)
            .collect();
        for target in &due {
            self.due.remove(target);
        }
        due
    }
}

/// Whether a Kustomization is Ready with `current`, its source's revision,
/// applied for its current spec.
fn settled(kustomization: &Value, current: Option<&str>) -> bool {
    ready_condition(kustomization)
        .as_ref()
        .is_some_and(Condition::is_true)
        && applied(kustomization, current)
}

/// Whether a Kustomization's last apply was of `current`, its source's
/// revision, for its current spec (Ready or not since).
fn applied(kustomization: &Value, current: Option<&str>) -> bool {
    observed_current(kustomization)
        && current.is_some()
        && kustomization["status"]["lastAppliedRevision"].as_str() == current
}

/// Whether Flux is applying the source's current revision to a
/// Kustomization of the current spec right now. Flux marks it Reconciling
/// (reason Progressing, the revision in the message) only once its
/// dependencies passed, so it turns Ready on its own: a nudge would queue a
/// second reconcile behind it, seconds each when a restarted controller
/// reconciles every level at once (after a restart or a snapshot restore).
fn applying_current(kustomization: &Value, current: Option<&str>) -> bool {
    let Some(current) = current else {
        return false;
    };
    crate::k8s::conditions::condition(kustomization, "Reconciling").is_some_and(|c| {
        c.is_true()
            && c.reason.as_deref() == Some("Progressing")
            && c.message.as_deref().is_some_and(|m| m.contains(current))
    }) && observed_current(kustomization)
}

/// A Kustomization Flux has not reported on yet: just created (by the
/// level before it), which Flux reconciles anyway. A reconcile request
/// would land in that first reconcile and, with the health-check gate
/// devstack's Flux install sets, cancel its check: the CRD level then
/// applied ESO's CRDs twice (4-5 s more).
fn not_reconciled_yet(kustomization: &Value) -> bool {
    kustomization["status"]["conditions"]
        .as_array()
        .is_none_or(Vec::is_empty)
}

/// Whether Flux handled the reconcile requested with `token` by finding a
/// dependency not Ready: it then waits its 30 s dependency requeue, which a
/// new request, once the dependency is Ready, cuts short.
fn dependency_requeued(kustomization: &Value, token: Option<&str>) -> bool {
    token.is_some()
        && handled(kustomization, token)
        && ready_condition(kustomization)
            .is_some_and(|c| !c.is_true() && c.reason.as_deref() == Some("DependencyNotReady"))
}

/// Whether kustomize-controller is waiting on a Kustomization's health
/// checks (it polls them every 5 s) for its current spec. The condition
/// carries the generation it is about: `status.observedGeneration` is only
/// written once the reconcile ends, so a new level has none while checking.
fn checking_health(kustomization: &Value) -> bool {
    kustomization["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["type"] == "Healthy"
                && c["status"] == "Unknown"
                && c["reason"] == "Progressing"
                && c["observedGeneration"].as_i64().is_some()
                && c["observedGeneration"].as_i64()
                    == kustomization["metadata"]["generation"].as_i64()
        })
}

/// Whether every object a Kustomization's `healthChecks` names is healthy
/// as kstatus (Flux's health check) judges it, from what the chain watches:
/// the HelmRelease (Ready for its current spec) and the Deployments in its
/// namespace (rolled out and available). A check on anything else is not
/// judged here: false.
fn health_checks_pass(
    kustomization: &Value,
    releases: &Objects<DynamicObject>,
    deployments: &Objects<DynamicObject>,
) -> bool {
    let Some(checks) = kustomization["spec"]["healthChecks"].as_array() else {
        return false;
    };
    let own_namespace = kustomization["metadata"]["namespace"].as_str();
    let value = |o: &DynamicObject| serde_json::to_value(o).unwrap_or_default();
    !checks.is_empty()
        && checks.iter().all(|check| {
            let group = check["apiVersion"]
                .as_str()
                .and_then(|v| v.split_once('/'))
                .map_or("", |(group, _)| group);
            let name = check["name"].as_str().unwrap_or_default();
            let namespace = check["namespace"].as_str().or(own_namespace);
            match (group, check["kind"].as_str()) {
                ("helm.toolkit.fluxcd.io", Some("HelmRelease"))
                    if (namespace, name) == (Some(HELM_RELEASE.0), HELM_RELEASE.1) =>
                {
                    releases
                        .get(name)
                        .map(value)
                        .is_some_and(|release| release_is_ready(&release))
                }
                ("apps", Some("Deployment")) if namespace == Some(HELM_RELEASE.0) => deployments
                    .get(name)
                    .map(value)
                    .is_some_and(|d| deployment_current(&d)),
                _ => false,
            }
        })
}

/// The HelmRelease is Ready for its current spec and no reconcile of it is
/// under way: kstatus (Flux's health check) reads `Reconciling` as in
/// progress, whatever Ready says. After a restart the release keeps Ready
/// from before while helm-controller fetches its chart again; a health
/// nudge sent then found Flux's check not passing and its next poll came
/// 5 s later.
fn release_is_ready(release: &Value) -> bool {
    let underway = |type_: &str| conditions::condition(release, type_).is_some_and(|c| c.is_true());
    conditions::is_ready(release)
        && observed_current(release)
        && !underway("Reconciling")
        && !underway("Stalled")
}

/// kstatus's "Current" for a Deployment: its current spec rolled out, every
/// wanted replica updated, ready and available, none left over. Stricter
/// than `k8s::deployment_available` (Available with one pod serving), on
/// purpose: a nudge must not come before Flux's own check would pass.
fn deployment_current(deployment: &Value) -> bool {
    let status = &deployment["status"];
    let wanted = deployment["spec"]["replicas"].as_i64().unwrap_or(1);
    let count = |field: &str| status[field].as_i64().unwrap_or(0);
    status["observedGeneration"].as_i64() >= deployment["metadata"]["generation"].as_i64()
        && [
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
        ]
        .iter()
        .all(|field| count(field) == wanted)
        && conditions::condition(deployment, "Available").is_some_and(|c| c.is_true())
}

/// Whether the chain has applied before, for its current spec, what its
/// sources hold now, with the HelmRelease it installs deployed for its
/// current spec: a restart or a restore, where Flux only re-applies the
/// same objects. A level not found, or not reconciled yet, says no.
pub async fn applied_before(client: &kube::Client) -> bool {
    let ks = kustomizations(client);
    for name in std::iter::once(ROOT_KUSTOMIZATION).chain(CHAIN) {
        let Ok(Some(object)) = ks.get_opt(name).await else {
            return false;
        };
        let object = serde_json::to_value(object).unwrap_or_default();
        if !applied(&object, source_revision(client, &object).await.as_deref()) {
            return false;
        }
    }
    // Its own reconcile after a restart may be under way (or have met a
    // source not serving yet): what counts is the spec it last handled and
    // the release that stands installed.
    match helm_releases(client).get_opt(HELM_RELEASE.1).await {
        Ok(Some(release)) => {
            let release = serde_json::to_value(release).unwrap_or_default();
            observed_current(&release) && release["status"]["history"][0]["status"] == "deployed"
        }
        _ => false,
    }
}

/// The artifact revision of the source a Kustomization reads.
pub async fn source_revision(client: &kube::Client, kustomization: &Value) -> Option<String> {
    let source = &kustomization["spec"]["sourceRef"];
    let kind = source["kind"].as_str()?;
    let name = source["name"].as_str()?;
    let ns = source["namespace"]
        .as_str()
        .or(kustomization["metadata"]["namespace"].as_str())?;
    let object = source_api(client, kind, ns).get_opt(name).await.ok()??;
    serde_json::to_value(object).ok()?["status"]["artifact"]["revision"]
        .as_str()
        .map(String::from)
}

/// The failure a Warning event records, if it is about a Kustomization or
/// HelmRelease, happened since `since` and is not a "not yet" reason.
fn warning_failure(event: &CoreEvent, since: std::time::SystemTime) -> Option<Failure> {
    let kind = event.involved_object.kind.as_deref().unwrap_or_default();
    if !matches!(kind, "Kustomization" | "HelmRelease") {
        return None;
    }
    let when = event
        .last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or(event.event_time.as_ref().map(|t| t.0));
    let recent = when.is_some_and(|t| std::time::SystemTime::from(t) >= since);
    let reason = event.reason.clone().unwrap_or_default();
    if !recent || waiting(&reason, event.message.as_deref().unwrap_or_default()) {
        return None;
    }
    let ns = event
        .involved_object
        .namespace
        .as_deref()
        .or(event.metadata.namespace.as_deref())
        .unwrap_or("?");
    Some(Failure {
        object: format!(
            "{kind} {ns}/{}",
            event.involved_object.name.as_deref().unwrap_or("?")
        ),
        reason,
        message: event.message.clone().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(items: Vec<Value>) -> Objects<DynamicObject> {
        let mut set = Objects::default();
        set.replace(
            items
                .into_iter()
                .map(|v| serde_json::from_value(v).expect("a Kubernetes object"))
                .collect(),
        );
        set
    }

    fn deployment(name: &str, generation: i64, observed: i64, ready: i64) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "external-secrets", "generation": generation},
            "spec": {"replicas": 1},
            "status": {"observedGeneration": observed, "replicas": 1, "updatedReplicas": 1,
                "readyReplicas": ready, "availableReplicas": ready,
                "conditions": [{"type": "Available", "status": if ready == 1 { "True" } else { "False" }}]}})
    }

    fn operator_level(healthy: &str, reason: &str) -> Value {
        json!({"metadata": {"name": "external-secrets-operator", "namespace": "flux-system", "generation": 1},
            "spec": {
                "healthChecks": [
                    {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                     "name": "external-secrets", "namespace": "external-secrets"},
                    {"apiVersion": "apps/v1", "kind": "Deployment",
                     "name": "external-secrets-webhook", "namespace": "external-secrets"}],
},
            "status": {"conditions": [
                {"type": "Ready", "status": "Unknown", "reason": "Progressing", "message": "Running health checks", "observedGeneration": 1},
                {"type": "Healthy", "status": healthy, "reason": reason, "message": "Running health checks", "observedGeneration": 1}]}})
    }

    #[test]
    fn a_level_is_told_its_health_checks_pass_only_when_every_named_object_is_healthy() {
        let release = |ready: &str| {
            objects(vec![
                json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                "metadata": {"name": "external-secrets", "namespace": "external-secrets", "generation": 2},
                "status": {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": ready}]}}),
            ])
        };
        let level = operator_level("Unknown", "Progressing");
        assert!(checking_health(&level));
        let available = objects(vec![deployment("external-secrets-webhook", 3, 3, 1)]);
        assert!(health_checks_pass(&level, &release("True"), &available));
        // Any named object not healthy, or not there: no.
        assert!(!health_checks_pass(&level, &release("False"), &available));
        // Ready from before while helm-controller reconciles it again (a
        // restart): not yet, as kstatus reads it.
        for underway in ["Reconciling", "Stalled"] {
            let mut again = release("True");
            let mut object = serde_json::to_value(again.get("external-secrets").unwrap()).unwrap();
            object["status"]["conditions"]
                .as_array_mut()
                .unwrap()
                .push(json!({"type": underway, "status": "True", "reason": "Progressing"}));
            again = objects(vec![object]);
            assert!(
                !health_checks_pass(&level, &again, &available),
                "{underway}"
            );
        }
        assert!(!health_checks_pass(&level, &objects(vec![]), &available));
        for not_yet in [
            deployment("external-secrets-webhook", 3, 3, 0),
            deployment("external-secrets-webhook", 4, 3, 1),
            deployment("another", 3, 3, 1),
        ] {
            assert!(!health_checks_pass(
                &level,
                &release("True"),
                &objects(vec![not_yet])
            ));
        }
        // A check on a kind the chain does not watch is never judged passed.
        let mut foreign = level.clone();
        foreign["spec"]["healthChecks"][1] = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "x", "namespace": "external-secrets"});
        assert!(!health_checks_pass(&foreign, &release("True"), &available));
        // Nor are no checks at all (a `wait: true` level).
        let mut none = level.clone();
        none["spec"]["healthChecks"] = json!([]);
        assert!(!health_checks_pass(&none, &release("True"), &available));
    }

    #[test]
    fn only_a_running_health_check_for_the_current_spec_is_nudged() {
        assert!(!checking_health(&operator_level("True", "Succeeded")));
        assert!(!checking_health(&operator_level(
            "False",
            "HealthCheckFailed"
        )));
        let mut stale = operator_level("Unknown", "Progressing");
        stale["metadata"]["generation"] = json!(2);
        assert!(!checking_health(&stale));
        // The canceled check's Ready=False is "not yet".
        assert!(waiting(
            "HealthCheckCanceled",
            "New reconciliation triggered by ConfigMap/flux-system/x"
        ));
    }

    #[test]
    fn settled_means_ready_for_the_current_revision_and_spec() {
        let ks = |ready: &str, applied: &str, generation: i64| {
            json!({"metadata": {"generation": generation}, "status": {"observedGeneration": 2,
                "lastAppliedRevision": applied,
                "conditions": [{"type": "Ready", "status": ready, "reason": "r", "message": "m"}]}})
        };
        assert!(settled(&ks("True", "sha256:a", 2), Some("sha256:a")));
        assert!(!settled(&ks("True", "sha256:a", 2), Some("sha256:b")));
        assert!(!settled(&ks("True", "sha256:a", 3), Some("sha256:a")));
        assert!(!settled(&ks("False", "sha256:a", 2), Some("sha256:a")));
        assert!(!settled(&ks("True", "sha256:a", 2), None));
    }

    #[test]
    fn a_level_applying_the_current_revision_needs_no_nudge() {
        let ks = |status: &str, reason: &str, message: &str, generation: i64| {
            json!({"metadata": {"generation": generation}, "status": {"observedGeneration": 2,
                "conditions": [{"type": "Reconciling", "status": status, "reason": reason, "message": message}]}})
        };
        let applying = "Detecting drift for revision sha256:a with a timeout of 5m0s";
        assert!(applying_current(
            &ks("True", "Progressing", applying, 2),
            Some("sha256:a")
        ));
        // Another revision, a newer spec, no source yet, or not reconciling.
        assert!(!applying_current(
            &ks("True", "Progressing", applying, 2),
            Some("sha256:b")
        ));
        assert!(!applying_current(
            &ks("True", "Progressing", applying, 3),
            Some("sha256:a")
        ));
        assert!(!applying_current(
            &ks("True", "Progressing", applying, 2),
            None
        ));
        assert!(!applying_current(
            &ks("False", "Succeeded", applying, 2),
            Some("sha256:a")
        ));
    }

    #[test]
    fn a_request_flux_sent_to_its_dependency_requeue_is_asked_again() {
        let ks = |handled: &str, status: &str, reason: &str| {
            json!({"status": {"lastHandledReconcileAt": handled, "conditions": [
                {"type": "Ready", "status": status, "reason": reason, "message": "dependency not ready"}]}})
        };
        assert!(dependency_requeued(
            &ks("t1", "False", "DependencyNotReady"),
            Some("t1")
        ));
        // Not our request, none of ours, or another outcome.
        assert!(!dependency_requeued(
            &ks("t0", "False", "DependencyNotReady"),
            Some("t1")
        ));
        assert!(!dependency_requeued(
            &ks("t1", "False", "DependencyNotReady"),
            None
        ));
        assert!(!dependency_requeued(
            &ks("t1", "True", "ReconciliationSucceeded"),
            Some("t1")
        ));
        assert!(!dependency_requeued(
            &ks("t1", "False", "HealthCheckFailed"),
            Some("t1")
        ));
    }

    #[test]
    fn a_level_flux_has_not_reported_on_is_not_nudged() {
        assert!(not_reconciled_yet(&json!({"metadata": {"generation": 1}})));
        assert!(not_reconciled_yet(&json!({"status": {"conditions": []}})));
        assert!(!not_reconciled_yet(&json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "DependencyNotReady"}]}})));
    }

    #[test]
    fn generation_must_be_observed() {
        assert!(observed_current(
            &json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 2}})
        ));
        assert!(!observed_current(
            &json!({"metadata": {"generation": 3}, "status": {"observedGeneration": 2}})
        ));
    }

    #[test]
    fn a_source_is_done_only_once_it_handled_this_fetch() {
        let bucket = |token: &str, status: &str, reason: &str| {
            json!({"status": {"lastHandledReconcileAt": token, "conditions": [
                {"type": "Ready", "status": status, "reason": reason, "message": "m"}]}})
        };
        let waiting = |v: Verdict| match v {
            Verdict::Waiting(state) => state,
            other => panic!("{other:?}"),
        };
        // Ready from an earlier fetch is not this fetch.
        let old = bucket("1", "True", "Succeeded");
        assert_eq!(
            waiting(source_verdict("Bucket", "b", Some(&old), "2")),
            "fetch not handled yet; Succeeded: m"
        );
        let done = bucket("2", "True", "Succeeded");
        assert!(matches!(
            source_verdict("Bucket", "b", Some(&done), "2"),
            Verdict::Done
        ));
        let failed = bucket("2", "False", "BucketOperationFailed");
        let Verdict::Failed(err) = source_verdict("Bucket", "b", Some(&failed), "2") else {
            panic!("a failed fetch must fail the wait");
        };
        assert_eq!(err.kind(), crate::error::Kind::Unhealthy);
        assert!(err.message().contains("Bucket flux-system/b cannot fetch"));
        assert_eq!(
            waiting(source_verdict("Bucket", "b", None, "2")),
            "does not exist"
        );
    }

    #[test]
    fn warning_events_become_failures_only_when_recent_and_relevant() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let since = std::time::SystemTime::now() - Duration::from_secs(60);
        let event = |kind: &str, reason: &str, age: u64| {
            let mut e = CoreEvent::default();
            e.metadata.namespace = Some("flux-system".into());
            e.involved_object.kind = Some(kind.into());
            e.involved_object.name = Some("external-secrets-crs".into());
            e.reason = Some(reason.into());
            e.message = Some("webhook refused".into());
            let at = std::time::SystemTime::now() - Duration::from_secs(age);
            e.last_timestamp = Some(Time(at.try_into().unwrap()));
            e
        };
        assert_eq!(
            warning_failure(&event("Kustomization", "ReconciliationFailed", 1), since),
            Some(Failure {
                object: "Kustomization flux-system/external-secrets-crs".into(),
                reason: "ReconciliationFailed".into(),
                message: "webhook refused".into(),
            })
        );
        assert_eq!(
            warning_failure(&event("Kustomization", "ReconciliationFailed", 600), since),
            None
        );
        assert_eq!(warning_failure(&event("Pod", "BackOff", 1), since), None);
        assert_eq!(
            warning_failure(&event("HelmRelease", "Progressing", 1), since),
            None
        );
    }

    #[test]
    fn a_source_without_its_first_artifact_is_waiting_not_failed() {
        // kustomize-controller v1.9.5's messages for a source not fetched yet.
        assert!(waiting(
            "ArtifactFailed",
            "Source artifact not found, retrying in 30s"
        ));
        assert!(waiting(
            "ArtifactFailed",
            "Source 'Bucket/flux-system/devstack' not found"
        ));
        assert!(waiting("DependencyNotReady", "dependency not ready"));
        // A download the artifact server refused (kustomize-controller
        // v1.9.5 with `--http-retry=0`, its source-controller starting):
        // devstack asks again.
        assert!(waiting(
            "ArtifactFailed",
            "failed to download archive: GET http://10.43.150.30/bucket/flux-system/devstack/050d.tar.gz giving up after 1 attempt(s): Get \"http://10.43.150.30/bucket/flux-system/devstack/050d.tar.gz\": dial tcp 10.43.150.30:80: connect: connection refused"
        ));
        // helm-controller v1.6.4's, loading the chart (condition, event).
        let chart = "GET http://10.43.150.30/helmchart/flux-system/external-secrets/external-secrets-2.9.0.tgz giving up after 1 attempt(s): Get \"http://10.43.150.30/helmchart/flux-system/external-secrets/external-secrets-2.9.0.tgz\": dial tcp 10.43.150.30:80: connect: connection refused";
        assert!(waiting(
            "ArtifactFailed",
            &format!("Could not load chart: {chart}")
        ));
        assert!(waiting("ArtifactFailed", chart));
        // Answered 404 (a restore's downloads that left the node before its
        // kube-proxy knew the artifact Service): both controllers wait 30 s.
        assert!(artifact_server_not_serving(
            "Source is not ready, artifact not found, retrying in 30s"
        ));
        assert!(artifact_server_not_serving(
            "Source not ready: artifact not found. Retrying in 30s"
        ));
        assert!(waiting(
            "ArtifactFailed",
            "Source not ready: artifact not found. Retrying in 30s"
        ));
        // A download that failed otherwise is a failure, as is anything else.
        assert!(!waiting(
            "ArtifactFailed",
            "failed to download archive from http://10.43.150.30/x.tar.gz (status: 500 Internal Server Error)"
        ));
        assert!(!waiting(
            "ArtifactFailed",
            "failed to download artifact: HTTP status 500"
        ));
        assert!(!waiting(
            "ReconciliationFailed",
            "Source artifact not found"
        ));
    }

    #[test]
    fn a_webhook_not_serving_yet_is_waiting_and_one_that_denies_is_a_failure() {
        // kustomize-controller v1.9.5 on a restored stack, the webhook's pod
        // not back yet.
        assert!(waiting(
            "ReconciliationFailed",
            "ClusterSecretStore/localstack dry-run failed (InternalError): Internal error occurred: \
             failed calling webhook \"validate.clustersecretstore.external-secrets.io\": failed to \
             call webhook: Post \"https://external-secrets-webhook.external-secrets.svc:443/validate-\
             external-secrets-io-v1-clustersecretstore?timeout=5s\": no endpoints available for \
             service \"external-secrets-webhook\""
        ));
        assert!(!waiting(
            "ReconciliationFailed",
            "ClusterSecretStore/localstack dry-run failed (Forbidden): admission webhook \
             \"validate.clustersecretstore.external-secrets.io\" denied the request: \
             spec.provider: Required value"
        ));
        assert!(!waiting(
            "BuildFailed",
            "failed calling webhook: no endpoints available for service"
        ));
    }

    #[test]
    fn a_level_that_met_something_not_serving_is_asked_again_soon() {
        assert_eq!(
            retry_pause("Source is not ready, artifact not found, retrying in 30s"),
            Some(REFUSED_DOWNLOAD_PAUSE)
        );
        assert_eq!(
            retry_pause(
                "ClusterSecretStore/localstack dry-run failed: failed calling webhook \
                 \"validate.clustersecretstore.external-secrets.io\": ... connect: connection refused"
            ),
            Some(WEBHOOK_NOT_SERVING_PAUSE)
        );
        // Only a Ready=False whose failure counts as waiting is asked again.
        let not_found = "Source not ready: artifact not found. Retrying in 30s";
        let ready = |status: &str, reason: &str| {
            Condition::new("Ready", status, Some(reason), Some(not_found))
        };
        assert_eq!(
            retry_pause_of(&ready("False", "ArtifactFailed")),
            Some(REFUSED_DOWNLOAD_PAUSE)
        );
        assert_eq!(retry_pause_of(&ready("Unknown", "ArtifactFailed")), None);
        assert_eq!(retry_pause_of(&ready("False", "InstallFailed")), None);
        // A webhook that answers and denies waits for a fix, not a retry.
        assert_eq!(
            retry_pause(
                "admission webhook \"validate.clustersecretstore.external-secrets.io\" denied \
                 the request: spec.provider: Required value"
            ),
            None
        );
    }

    #[test]
    fn a_health_nudge_waits_for_flux_s_own_first_check() {
        let mut look_again = None;
        let just_now = Instant::now();
        assert!(!grace_over(just_now, &mut look_again));
        assert_eq!(look_again, Some(just_now + HEALTH_NUDGE_GRACE));
        // The earliest of two levels held back is looked at first.
        let earlier = just_now - HEALTH_NUDGE_GRACE / 2;
        assert!(!grace_over(earlier, &mut look_again));
        assert_eq!(look_again, Some(earlier + HEALTH_NUDGE_GRACE));
        assert!(!grace_over(just_now, &mut look_again));
        assert_eq!(look_again, Some(earlier + HEALTH_NUDGE_GRACE));
        // A level checking health for longer is nudged at once.
        let mut none = None;
        assert!(grace_over(just_now - HEALTH_NUDGE_GRACE, &mut none));
        assert_eq!(none, None);
    }

    #[test]
    fn a_level_span_runs_to_its_last_ready_from_the_level_before_it() {
        let ms = Duration::from_millis;
        // After a restore: the CRD level read its kept Ready at once and
        // turned Ready again 3 s later; the operator level did not make it.
        let spans = level_spans(&[
            ("root", Some(ms(100))),
            ("crds", Some(ms(3_000))),
            ("operator", None),
            ("crs", Some(ms(50))),
        ]);
        assert_eq!(
            spans,
            vec![
                ("root", ms(0), ms(100)),
                ("crds", ms(100), ms(3_000)),
                // Its level before is not Ready: from the start.
                ("crs", ms(0), ms(50)),
            ]
        );
        // Ready before the level it depends on (its kept Ready): no
        // negative span.
        assert_eq!(
            level_spans(&[("a", Some(ms(900))), ("b", Some(ms(200)))])[1],
            ("b", ms(200), ms(200))
        );
    }

    #[test]
    fn a_request_to_try_again_waits_its_own_pause_once() {
        let mut asks = Asks::default();
        asks.add(Some(1), Duration::ZERO);
        asks.add(None, Duration::from_secs(60));
        let first = asks.next_due().expect("due");
        // Reported again while it waits: it keeps its time.
        asks.add(Some(1), Duration::from_secs(60));
        assert_eq!(asks.next_due(), Some(first));
        assert_eq!(asks.take_due(), vec![Some(1)]);
        assert!(
            asks.take_due().is_empty(),
            "the HelmRelease's pause is not over"
        );
        assert!(asks.next_due().expect("still waiting") > first);
        asks.forget(None);
        assert_eq!(asks.next_due(), None);
    }

    #[test]
    fn reconcile_tokens_increase() {
        let a = chrono_like_now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(chrono_like_now() > a);
    }
}
