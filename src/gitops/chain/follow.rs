//! Following the chain until it is Ready: one stream of every change its
//! state depends on, every level and the HelmRelease judged after each
//! burst of changes, and each level nudged when the one before it turns
//! Ready or its health checks pass.

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, Event};
use serde_json::Value;

use super::api::{helm_releases, kustomizations, request_reconcile, source_revision, workloads};
use super::judge::{
    applying_current, checking_health, dependency_requeued, handled, health_checks_pass,
    not_reconciled_yet, ready_condition, release_is_ready, settled, warning_failure,
};
use super::retry::{Asks, grace_over, retry_pause_of, waiting};
use super::{ChainReport, Failure, LevelTiming, WaitOptions};
use crate::error::Error;
use crate::gitops::{FLUX_NAMESPACE, LOCALSTACK_LEVEL};
use crate::k8s::conditions::Condition;
use crate::k8s::wait::{self, Objects, Seen, Wait};
use crate::ui::Step;

/// One level of the chain as watched.
struct Level {
    name: String,
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

impl Level {
    fn new(name: String) -> Self {
        Level {
            name,
            ready_at: None,
            requested: None,
            health_nudged: false,
            checking_since: None,
        }
    }
}

/// What the chain's watches report.
enum ChainEvent {
    Kustomization(Event<DynamicObject>),
    Release(Event<DynamicObject>),
    /// The Deployments in the HelmRelease's namespace, which the operator
    /// level checks the health of.
    Workload(Event<DynamicObject>),
    /// A failure a Warning event records (none for other events).
    Warning(Option<Failure>),
}

type ChainEvents = BoxStream<'static, Result<ChainEvent, watcher::Error>>;

/// One stream of every change the chain's state depends on: the
/// Kustomizations in flux-system, the HelmRelease, and Warning events
/// where Flux records failures.
fn chain_events(
    client: &kube::Client,
    release: &(String, String),
    since: SystemTime,
) -> ChainEvents {
    let mut streams = vec![
        wait::watch(kustomizations(client), watcher::Config::default())
            .map_ok(ChainEvent::Kustomization)
            .boxed(),
        wait::watch(
            helm_releases(client, &release.0),
            watcher::Config::default().fields(&format!("metadata.name={}", release.1)),
        )
        .map_ok(ChainEvent::Release)
        .boxed(),
        wait::watch(workloads(client, &release.0), watcher::Config::default())
            .map_ok(ChainEvent::Workload)
            .boxed(),
    ];
    let mut namespaces = vec![FLUX_NAMESPACE.to_string(), release.0.clone()];
    namespaces.dedup();
    for ns in namespaces {
        let events: Api<CoreEvent> = Api::namespaced(client.clone(), &ns);
        streams.push(
            wait::watch(events, watcher::Config::default().fields("type=Warning"))
                .map_ok(move |event| {
                    ChainEvent::Warning(match event {
                        Event::Apply(e) | Event::InitApply(e) => warning_failure(&e, since),
                        _ => None,
                    })
                })
                .boxed(),
        );
    }
    futures::stream::select_all(streams).boxed()
}

/// Follows the chain to Ready (see [`super::wait_ready`]) and reports each
/// level's timing and the failures Flux reported on the way.
pub(super) async fn watch_chain(
    client: &kube::Client,
    options: WaitOptions,
    root_request: Option<String>,
    step: &Step,
) -> Result<ChainReport, Error> {
    let started = Instant::now();
    let mut follower = ChainFollower::new(client, options, step, started, root_request);
    let outcome = follower.follow().await;
    record_level_spans(step, started, &follower.levels);
    outcome?;
    Ok(follower.report())
}

/// Each level's share of the chain on the step's timeline.
fn record_level_spans(step: &Step, started: Instant, levels: &[Level]) {
    let Some((timeline, parent)) = step.timeline() else {
        return;
    };
    let ready: Vec<_> = levels
        .iter()
        .map(|l| (l.name.as_str(), l.ready_at))
        .collect();
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

fn to_value(object: &DynamicObject) -> Value {
    serde_json::to_value(object).unwrap_or_default()
}

/// One wait for the chain: what its watches have shown, what devstack has
/// asked of each level and when to look again. `levels` and `failures` say
/// how far it got.
struct ChainFollower<'a> {
    client: &'a kube::Client,
    options: WaitOptions,
    /// The operator's HelmRelease (namespace, name), judged when the stack
    /// delivers one.
    release: (String, String),
    step: &'a Step,
    started: Instant,
    wait: Wait,
    /// Where the levels' reconciles are requested.
    ks: Api<DynamicObject>,
    events: ChainEvents,
    kustomizations: Objects<DynamicObject>,
    releases: Objects<DynamicObject>,
    deployments: Objects<DynamicObject>,
    seen: Seen,
    /// Whether the chain has been looked at (the wait's first-look
    /// deadline no longer applies).
    looked: bool,
    levels: Vec<Level>,
    failures: BTreeSet<Failure>,
    /// The last reconcile devstack asked of the HelmRelease, after a
    /// failure on something not serving yet.
    release_requested: Option<String>,
    /// Requests to try again that wait out their pause, by level index
    /// (`None`: the HelmRelease); the watch goes on meanwhile, so one
    /// level's pause does not hold back what another level reports.
    asks: Asks,
    /// When a level whose health checks pass is to be looked at again, its
    /// nudge held back until Flux had time for its own first check.
    look_again: Option<Instant>,
}

impl<'a> ChainFollower<'a> {
    fn new(
        client: &'a kube::Client,
        options: WaitOptions,
        step: &'a Step,
        started: Instant,
        root_request: Option<String>,
    ) -> Self {
        // With devstack's own ESO the operator level waits for the CRD
        // level anyway, by which time LocalStack's level is long Ready.
        // A stack that shares the cluster has no CRD level, so its operator
        // level is the one that waits for LocalStack's.
        let plan = &options.plan;
        let follows_localstack = plan.localstack_level && !plan.installs_eso_shared;
        let localstack = follows_localstack.then(|| plan.names.of(LOCALSTACK_LEVEL));
        let mut levels: Vec<Level> = std::iter::once(plan.root())
            .chain(localstack)
            .chain(plan.chain_levels())
            .chain(plan.apps.iter().cloned())
            .map(Level::new)
            .collect();
        let release = plan.release().unwrap_or_else(|| plan.names.helm_release());
        levels[0].requested = root_request;
        let since = SystemTime::now() - Duration::from_secs(1);
        let events = chain_events(client, &release, since);
        let wait = Wait::new("the External Secrets chain", "Ready", options.budget).advice(
            "`devstack status` shows each level, `kubectl -n flux-system get kustomizations,buckets` more",
        );
        ChainFollower {
            client,
            options,
            release,
            step,
            started,
            wait,
            ks: kustomizations(client),
            events,
            kustomizations: Objects::default(),
            releases: Objects::default(),
            deployments: Objects::default(),
            seen: Seen::default(),
            looked: false,
            levels,
            failures: BTreeSet::new(),
            release_requested: None,
            asks: Asks::default(),
            look_again: None,
        }
    }

    /// Follows the chain until it is Ready, fails for good, or runs out of
    /// time.
    async fn follow(&mut self) -> Result<(), Error> {
        loop {
            let event = self.next_event().await?;
            let mut changed = false;
            if event.is_none() {
                self.send_due_asks().await;
                // A health nudge held back for its grace is looked at again.
                if self.look_again.is_none_or(|at| at > Instant::now()) {
                    continue;
                }
                changed = true;
            }
            changed |= self.take_in(event).await;
            if !changed || !self.kustomizations.listed() || !self.releases.listed() {
                continue;
            }
            if self.look().await? {
                return Ok(());
            }
            self.looked = true;
            self.wait.check_deadline(&self.seen)?;
        }
    }

    fn report(self) -> ChainReport {
        ChainReport {
            levels: self
                .levels
                .iter()
                .map(|l| LevelTiming {
                    name: l.name.to_string(),
                    ready_after_ms: l.ready_at.unwrap_or_default().as_millis() as u64,
                    nudged: l.requested.is_some(),
                })
                .collect(),
            failures: self.failures.into_iter().collect(),
            elapsed_ms: self.started.elapsed().as_millis() as u64,
        }
    }

    /// The next change the watches report, or `None` when a request to try
    /// again (or a held-back health nudge) is due first.
    async fn next_event(&mut self) -> Result<Option<Result<ChainEvent, watcher::Error>>, Error> {
        let wake = self
            .asks
            .next_due()
            .into_iter()
            .chain(self.look_again)
            .min();
        let next = self.wait.next(&mut self.events, self.looked, &self.seen);
        Ok(match wake {
            Some(at) => tokio::select! {
                event = next => Some(event?),
                () = tokio::time::sleep_until(at.into()) => None,
            },
            None => Some(next.await?),
        })
    }

    /// Sends each request to try again whose pause is over.
    async fn send_due_asks(&mut self) {
        for target in self.asks.take_due() {
            match target {
                Some(i) => {
                    if let Ok(token) = request_reconcile(&self.ks, &self.levels[i].name).await {
                        self.levels[i].requested = Some(token);
                    }
                }
                None => {
                    if let Ok(token) = request_reconcile(
                        &helm_releases(self.client, &self.release.0),
                        &self.release.1,
                    )
                    .await
                    {
                        self.release_requested = Some(token);
                    }
                }
            }
        }
    }

    /// Takes in `first` and every change already queued behind it: a burst
    /// (a relist, a reconcile's status updates) is looked at once. Whether
    /// anything the chain's state depends on changed.
    async fn take_in(&mut self, first: Option<Result<ChainEvent, watcher::Error>>) -> bool {
        let mut changed = false;
        let mut next = first;
        let mut watch_failed = false;
        while let Some(event) = next.take() {
            watch_failed |= event.is_err();
            let outcome = event.map(|event| self.apply(event));
            changed |= self.seen.record(outcome);
            next = self.events.next().now_or_never().flatten();
        }
        // As in `Wait::list`: a failing watch is followed by plain lists.
        if watch_failed {
            changed |= self.relist().await;
        }
        changed
    }

    /// Applies one change to what the watches have shown; whether it
    /// changed an object.
    fn apply(&mut self, event: ChainEvent) -> bool {
        match event {
            ChainEvent::Kustomization(event) => self.kustomizations.apply(event),
            ChainEvent::Release(event) => self.releases.apply(event),
            ChainEvent::Workload(event) => self.deployments.apply(event),
            ChainEvent::Warning(failure) => {
                self.failures.extend(failure);
                false
            }
        }
    }

    /// Lists every watched kind afresh; whether all three lists came back.
    async fn relist(&mut self) -> bool {
        let (Ok(listed_ks), Ok(listed_releases), Ok(listed_deployments)) = (
            self.ks.list(&Default::default()).await,
            helm_releases(self.client, &self.release.0)
                .list(&Default::default())
                .await,
            workloads(self.client, &self.release.0)
                .list(&Default::default())
                .await,
        ) else {
            return false;
        };
        self.kustomizations.replace(listed_ks.items);
        self.releases.replace(listed_releases.items);
        self.deployments.replace(listed_deployments.items);
        true
    }

    /// Judges every level, then the HelmRelease; whether the whole chain is
    /// Ready. When not, `seen` says what holds it up first.
    async fn look(&mut self) -> Result<bool, Error> {
        let mut blocking: Option<String> = None;
        self.look_again = None;
        for i in 0..self.levels.len() {
            if let Some(why) = self.judge_level(i).await? {
                blocking.get_or_insert(why);
            }
        }
        let (release_ready, release_state) = if self.options.plan.installs_eso {
            self.judge_release()
        } else {
            (true, String::new())
        };
        if blocking.is_none() && release_ready {
            return Ok(true);
        }
        self.seen.state = Some(blocking.unwrap_or_else(|| {
            format!(
                "HelmRelease {}/{}: {release_state}",
                self.release.0, self.release.1
            )
        }));
        Ok(false)
    }

    /// Judges level `i` and acts on it; what holds it up, `None` once it is
    /// Ready for its source's current revision and every request of it is
    /// handled.
    async fn judge_level(&mut self, i: usize) -> Result<Option<String>, Error> {
        let name = self.levels[i].name.clone();
        let Some(object) = self.kustomizations.get(&name).map(to_value) else {
            return Ok(Some(format!(
                "Kustomization {FLUX_NAMESPACE}/{name} does not exist yet"
            )));
        };
        let current = source_revision(self.client, &object).await;
        let condition = ready_condition(&object);
        if let Some(c) = &condition
            && c.status == "False"
        {
            self.level_failed(&name, c, &object, current.as_deref())?;
        }
        let ready = settled(&object, current.as_deref())
            && handled(&object, self.levels[i].requested.as_deref());
        self.retry_level(i, &object, condition.as_ref(), ready);
        if ready {
            self.level_ready(i).await;
            return Ok(None);
        }
        self.level_not_ready(i, &object).await;
        let why = condition
            .map(|c| c.summary())
            .unwrap_or_else(|| "not reconciled yet".into());
        Ok(Some(format!(
            "Kustomization {FLUX_NAMESPACE}/{name}: {why}"
        )))
    }

    /// A level reads Ready=False: recorded unless it means "not yet"; with
    /// `fail_fast`, the end of the wait when the current revision itself
    /// does not build or apply.
    fn level_failed(
        &mut self,
        name: &str,
        condition: &Condition,
        object: &Value,
        current: Option<&str>,
    ) -> Result<(), Error> {
        let failure = Failure {
            object: format!("Kustomization {FLUX_NAMESPACE}/{name}"),
            reason: condition.reason.clone().unwrap_or_default(),
            message: condition.message.clone().unwrap_or_default(),
        };
        let attempted = object["status"]["lastAttemptedRevision"].as_str();
        if self.options.fail_fast
            && matches!(
                failure.reason.as_str(),
                "BuildFailed" | "ReconciliationFailed"
            )
            && !waiting(&failure.reason, &failure.message)
            && current.is_some()
            && attempted == current
        {
            return Err(Error::user(format!(
                "{} failed ({}): {}",
                failure.object, failure.reason, failure.message
            ))
            .with_hint(
                "fix the manifest and run `devstack sync`; `devstack status` shows the chain",
            ));
        }
        if !waiting(&failure.reason, &failure.message) {
            self.failures.insert(failure);
        }
        Ok(())
    }

    /// Asks level `i` again after a pause only while its last reconcile
    /// still stands failed on something not serving: one that Flux has
    /// since started again by itself (its source changed) or finished is
    /// left to it, as is one devstack asked for since (a nudge as the level
    /// before it turned Ready, earlier in this look: its token is not
    /// handled).
    fn retry_level(
        &mut self,
        i: usize,
        object: &Value,
        condition: Option<&Condition>,
        ready: bool,
    ) {
        let requested = self.levels[i].requested.as_deref();
        let nudge = self.options.nudge;
        match condition
            .and_then(retry_pause_of)
            .filter(|_| nudge && !ready && handled(object, requested))
        {
            Some(pause) => self.asks.add(Some(i), pause),
            None => self.asks.forget(Some(i)),
        }
    }

    /// Level `i` is Ready: when it just turned so, the level after it is
    /// nudged.
    async fn level_ready(&mut self, i: usize) {
        if self.levels[i].ready_at.is_some() {
            return;
        }
        self.levels[i].ready_at = Some(self.started.elapsed());
        self.step.progress(format!("{} Ready", self.levels[i].name));
        let (leave_alone, requeued) = self.leave_next_alone(i).await;
        if self.options.nudge
            && !leave_alone
            && let Some(next) = self.levels.get_mut(i + 1)
            && (next.requested.is_none() || requeued)
        {
            // The next level may not exist until this one applied
            // it; then Flux reconciles it on creation anyway.
            next.requested = request_reconcile(&self.ks, &next.name).await.ok();
        }
    }

    /// Whether the level after `i` is to be left alone (Flux reconciles it
    /// anyway, or it is settled and the stack facts did not change), and
    /// whether Flux sent devstack's last request of it to its dependency
    /// requeue.
    async fn leave_next_alone(&self, i: usize) -> (bool, bool) {
        let Some(next) = self
            .levels
            .get(i + 1)
            .and_then(|l| self.kustomizations.get(&l.name))
            .map(to_value)
        else {
            return (false, false);
        };
        let current = source_revision(self.client, &next).await;
        let requeued = dependency_requeued(&next, self.levels[i + 1].requested.as_deref());
        let leave_alone = not_reconciled_yet(&next)
            || (!self
                .options
                .nudge_settled
                .contains(&self.levels[i + 1].name)
                && !requeued
                && (settled(&next, current.as_deref())
                    || applying_current(&next, current.as_deref())));
        (leave_alone, requeued)
    }

    /// Level `i` is not Ready: its health checks are followed, and Flux is
    /// told once that they pass.
    async fn level_not_ready(&mut self, i: usize, object: &Value) {
        self.levels[i].ready_at = None;
        // Only once the level it depends on is Ready: the new
        // reconcile checks the dependency again first, and one not
        // Ready (after a restart every level reconciles at once)
        // sends it to Flux's 30 s dependency requeue.
        let dependency_ready = i == 0 || self.levels[i - 1].ready_at.is_some();
        let level = &mut self.levels[i];
        if checking_health(object) {
            level.checking_since.get_or_insert_with(Instant::now);
        } else {
            level.checking_since = None;
        }
        if self.options.nudge
            && !level.health_nudged
            && dependency_ready
            && let Some(since) = level.checking_since
            && health_checks_pass(
                object,
                (self.release.0.as_str(), self.release.1.as_str()),
                &self.releases,
                &self.deployments,
            )
            && grace_over(since, &mut self.look_again)
        {
            self.health_nudge(i).await;
        }
    }

    /// Asks Flux to reconcile level `i`, whose health checks pass.
    /// kustomize-controller polls health every 5 s; a reconcile request
    /// cancels the running check (its `CancelHealthCheckOnNewRevision`
    /// gate, set by devstack's Flux install) and the new check polls at
    /// once. Flux still decides. Once: should it not agree yet, its own
    /// polls go on.
    async fn health_nudge(&mut self, i: usize) {
        let name = self.levels[i].name.clone();
        self.levels[i].health_nudged = true;
        if let Ok(token) = request_reconcile(&self.ks, &name).await {
            // Looked at before this request in this look.
            self.asks.forget(Some(i));
            self.levels[i].requested = Some(token);
            self.step
                .progress(format!("{name}: health checks pass, Flux checks again"));
        }
    }

    /// Judges the HelmRelease: records its failure and asks it again after
    /// one on something not serving. Whether it is Ready, and its state.
    fn judge_release(&mut self) -> (bool, String) {
        let Some(release) = self.releases.get(&self.release.1).map(to_value) else {
            return (false, "does not exist yet".to_string());
        };
        let Some(c) = ready_condition(&release) else {
            return (false, "not reconciled yet".into());
        };
        let reason = c.reason.clone().unwrap_or_default();
        let message = c.message.as_deref().unwrap_or_default();
        if c.status == "False" && !waiting(&reason, message) {
            self.failures.insert(Failure {
                object: format!("HelmRelease {}/{}", self.release.0, self.release.1),
                reason,
                message: message.to_string(),
            });
        }
        let requested = self.release_requested.as_deref();
        let nudge = self.options.nudge;
        match retry_pause_of(&c).filter(|_| nudge && handled(&release, requested)) {
            Some(pause) => self.asks.add(None, pause),
            None => self.asks.forget(None),
        }
        (release_is_ready(&release), c.summary())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
