//! Bounded waits on Kubernetes objects, driven by watches rather than
//! polling. A wait ends when its check says `Done` or `Failed`, or at its
//! deadline with one `Timeout` error (exit code 5) that names what was
//! awaited, the last state seen and the profile key that sets the limit.
//!
//! `Wait::object` and `Wait::list` cover single objects and sets of one
//! kind; waits over several kinds (the GitOps chain) drive their own loop
//! with `watch`, `Objects` and `Wait::next`, which keep the same deadline
//! and error.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::profile::HumanDuration;

/// What a check makes of the state it is shown.
#[derive(Debug)]
pub enum Verdict {
    Done,
    /// Not yet: a one-line summary of what was seen, quoted if time runs out.
    Waiting(String),
    /// A failure that waiting cannot fix; ends the wait at once.
    Failed(Error),
}

/// `Done` once `verdict` says so for every name, `Failed` at the first
/// failure; otherwise what the others wait for, joined (each verdict names
/// its object).
pub fn every_named(names: &[String], mut verdict: impl FnMut(&str) -> Verdict) -> Verdict {
    let mut waiting = Vec::new();
    for name in names {
        match verdict(name) {
            Verdict::Done => {}
            Verdict::Waiting(why) => waiting.push(why),
            failed @ Verdict::Failed(_) => return failed,
        }
    }
    if waiting.is_empty() {
        Verdict::Done
    } else {
        Verdict::Waiting(waiting.join("; "))
    }
}

/// An object whose Ready condition must be True; any other state is "not
/// yet" (its controller retries), summarised for the time-out message.
pub fn ready_verdict(object: &serde_json::Value) -> Verdict {
    match crate::k8s::conditions::condition(object, "Ready") {
        Some(c) if c.is_true() => Verdict::Done,
        Some(c) => Verdict::Waiting(c.summary()),
        None => Verdict::Waiting("no Ready condition yet".into()),
    }
}

/// A time limit and the profile key that sets it. Waits that together make
/// up one step share one budget, so the step as a whole keeps its limit.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    limit: Duration,
    setting: &'static str,
    started: Instant,
}

impl Budget {
    /// A budget that starts now.
    pub fn new(limit: Duration, setting: &'static str) -> Self {
        Self::since(Instant::now(), limit, setting)
    }

    /// A budget that started at `started` (the beginning of the step).
    pub fn since(started: Instant, limit: Duration, setting: &'static str) -> Self {
        Budget {
            limit,
            setting,
            started,
        }
    }

    pub fn deadline(&self) -> Instant {
        self.started + self.limit
    }

    pub fn limit(&self) -> Duration {
        self.limit
    }

    pub fn setting(&self) -> &'static str {
        self.setting
    }
}

/// However spent the budget, a wait looks at the state once: what is
/// already done must not time out because earlier steps were slow.
const FIRST_LOOK: Duration = Duration::from_secs(5);

/// One wait: what is awaited (`Kustomization flux-system/devstack`), the
/// state it must reach (`Ready`), its budget and what to check besides
/// raising the limit.
#[derive(Debug, Clone)]
pub struct Wait {
    what: String,
    goal: String,
    budget: Budget,
    advice: Option<String>,
    /// The deadline until the first look.
    first_look: Instant,
}

impl Wait {
    pub fn new(what: impl Into<String>, goal: impl Into<String>, budget: Budget) -> Self {
        Wait {
            what: what.into(),
            goal: goal.into(),
            budget,
            advice: None,
            first_look: budget.deadline().max(Instant::now() + FIRST_LOOK),
        }
    }

    /// Where to look besides the limit, appended to the timeout's hint.
    pub fn advice(mut self, advice: impl Into<String>) -> Self {
        self.advice = Some(advice.into());
        self
    }

    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// The one error of a wait that ran out of time.
    pub fn timed_out(&self, last_seen: &str) -> Error {
        let mut hint = format!("raise `{}` in the profile", self.budget.setting);
        if let Some(advice) = &self.advice {
            hint.push_str("; ");
            hint.push_str(advice);
        }
        Error::timeout(format!(
            "{} did not become {} within {} (last seen: {last_seen})",
            self.what,
            self.goal,
            HumanDuration(self.budget.limit)
        ))
        .with_hint(hint)
    }

    /// The next item of `stream`, or the timeout error once the deadline
    /// passes. Until the first look (`looked` false) the deadline is at
    /// least `FIRST_LOOK` after the wait began.
    pub async fn next<S: Stream + Unpin>(
        &self,
        stream: &mut S,
        looked: bool,
        seen: &Seen,
    ) -> Result<S::Item, Error> {
        let deadline = if looked {
            self.budget.deadline()
        } else {
            self.first_look
        };
        match tokio::time::timeout_at(deadline.into(), stream.next()).await {
            Ok(Some(item)) => Ok(item),
            // A watcher retries for ever; an ended stream is a bug.
            Ok(None) => Err(Error::internal(format!(
                "the watch of {} ended unexpectedly",
                self.what
            ))),
            Err(_) => Err(self.timed_out(&seen.summary())),
        }
    }

    /// After a look that was not `Done`: the timeout error if the deadline
    /// has passed.
    pub fn check_deadline(&self, seen: &Seen) -> Result<(), Error> {
        if Instant::now() >= self.budget.deadline() {
            return Err(self.timed_out(&seen.summary()));
        }
        Ok(())
    }

    /// Watches the object `name` of `api` until `check` says `Done` (returns
    /// the object, `None` if absent) or `Failed`. `check` sees `None` while
    /// the object does not exist.
    pub async fn object<K>(
        &self,
        api: Api<K>,
        name: &str,
        mut check: impl FnMut(Option<&K>) -> Verdict,
    ) -> Result<Option<K>, Error>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let objects = self
            .list(api, config, |objects| check(objects.get(name)))
            .await?;
        Ok(objects.get(name).cloned())
    }

    /// Watches every object of `api` that `config` selects until `check`,
    /// shown the whole current set after each change, says `Done` (returns
    /// the set) or `Failed`.
    pub async fn list<K>(
        &self,
        api: Api<K>,
        config: watcher::Config,
        mut check: impl FnMut(&Objects<K>) -> Verdict,
    ) -> Result<Objects<K>, Error>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        // A watch can keep failing where plain requests work (an API server
        // short of CPU dropping its watch streams): each failure is followed
        // by one list, judged like a watch event.
        let lister = api.clone();
        let selection = kube::api::ListParams {
            label_selector: config.label_selector.clone(),
            field_selector: config.field_selector.clone(),
            ..Default::default()
        };
        let mut stream = watch(api, config);
        let mut objects = Objects::default();
        let mut seen = Seen::default();
        let mut looked = false;
        loop {
            let event = self.next(&mut stream, looked, &seen).await?;
            let failed = event.is_err();
            let mut changed = seen.record(event.map(|e| objects.apply(e)));
            if failed && let Ok(list) = lister.list(&selection).await {
                objects.replace(list.items);
                changed = true;
            }
            if !changed {
                continue;
            }
            match check(&objects) {
                Verdict::Done => return Ok(objects),
                Verdict::Failed(e) => return Err(e),
                Verdict::Waiting(state) => seen.state = Some(state),
            }
            looked = true;
            self.check_deadline(&seen)?;
        }
    }
}

/// The last state a wait saw and whether the watch is failing now, which
/// together explain a timeout.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub state: Option<String>,
    pub watch_error: Option<String>,
}

impl Seen {
    /// Notes a watcher outcome: `Ok(changed)` clears a watch error; an
    /// error is kept until the watch recovers. True when there is a new
    /// state to look at.
    pub fn record(&mut self, outcome: Result<bool, watcher::Error>) -> bool {
        match outcome {
            Ok(changed) => {
                self.watch_error = None;
                changed
            }
            Err(e) => {
                self.watch_error = Some(crate::k8s::conditions::one_line(&e.to_string()));
                false
            }
        }
    }

    pub fn summary(&self) -> String {
        match (&self.state, &self.watch_error) {
            (Some(state), None) => state.clone(),
            (Some(state), Some(e)) => format!("{state}; since then the watch fails: {e}"),
            // Not only an API server still starting: a kind whose CRD is
            // missing fails the same way (404 on list).
            (None, Some(e)) => format!("cannot watch: {e}"),
            (None, None) => "nothing yet".into(),
        }
    }
}

/// kube's `watcher` with retries. client-go's backoff (kube's default)
/// grows to 30 s, longer than some whole waits, while a node restarting
/// its API server is back within seconds: retry soon and often, and let
/// the deadline end it.
pub fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> BoxStream<'static, Result<Event<K>, watcher::Error>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher::watcher(api, config)
        .backoff(Retry::default())
        .boxed()
}

/// Doubling delays from 250 ms, capped at 4 s; back to 250 ms once the
/// watch works again.
#[derive(Debug, Default)]
struct Retry {
    next: Option<Duration>,
}

const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(4);

impl Iterator for Retry {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let delay = self.next.unwrap_or(RETRY_FIRST);
        self.next = Some((delay * 2).min(RETRY_MAX));
        Some(delay)
    }
}

impl Backoff for Retry {
    fn reset(&mut self) {
        self.next = None;
    }
}

/// The watched objects by name, kept current from watcher events. Names
/// are unique within a watch over one namespace or a cluster-wide kind,
/// which is what waits use.
#[derive(Debug, Clone)]
pub struct Objects<K> {
    current: BTreeMap<String, K>,
    /// Objects of a relist in progress; they replace `current` when it ends,
    /// so a restarted watch does not show a half-listed set.
    relist: Option<BTreeMap<String, K>>,
    listed: bool,
}

impl<K> Default for Objects<K> {
    fn default() -> Self {
        Objects {
            current: BTreeMap::new(),
            relist: None,
            listed: false,
        }
    }
}

impl<K: Resource> Objects<K> {
    /// Applies one watcher event. True when the set is complete (listed at
    /// least once) and may have changed: the moment to look again.
    pub fn apply(&mut self, event: Event<K>) -> bool {
        match event {
            Event::Init => {
                self.relist = Some(BTreeMap::new());
                false
            }
            Event::InitApply(object) => {
                let relist = self.relist.get_or_insert_with(BTreeMap::new);
                relist.insert(object.name_any(), object);
                false
            }
            Event::InitDone => {
                self.current = self.relist.take().unwrap_or_default();
                self.listed = true;
                true
            }
            Event::Apply(object) => {
                self.current.insert(object.name_any(), object);
                self.listed
            }
            Event::Delete(object) => {
                self.current.remove(&object.name_any());
                self.listed
            }
        }
    }

    /// Replaces the set with a complete list read outside the watch.
    pub fn replace(&mut self, items: Vec<K>) {
        self.current = items.into_iter().map(|o| (o.name_any(), o)).collect();
        self.listed = true;
    }

    /// Whether a full list has been seen.
    pub fn listed(&self) -> bool {
        self.listed
    }

    pub fn get(&self, name: &str) -> Option<&K> {
        self.current.get(name)
    }

    pub fn len(&self) -> usize {
        self.current.len()
    }

    pub fn is_empty(&self) -> bool {
        self.current.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &K> {
        self.current.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn config_map(name: &str, value: &str) -> ConfigMap {
        let mut object = ConfigMap::default();
        object.metadata.name = Some(name.into());
        object.data = Some([("v".to_string(), value.to_string())].into());
        object
    }

    fn value(objects: &Objects<ConfigMap>, name: &str) -> Option<String> {
        objects
            .get(name)
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get("v").cloned())
    }

    #[test]
    fn timeout_names_the_object_last_state_and_setting() {
        let wait = Wait::new(
            "Kustomization flux-system/external-secrets-crds",
            "Ready",
            Budget::new(Duration::from_secs(360), "timeouts.eso"),
        )
        .advice("`devstack status` shows each level");
        let seen = Seen {
            state: Some("Progressing: Reconciliation in progress".into()),
            watch_error: None,
        };
        let err = wait.timed_out(&seen.summary());
        assert_eq!(err.kind(), Kind::Timeout);
        assert_eq!(err.kind().exit_code(), 5);
        assert_eq!(
            err.message(),
            "Kustomization flux-system/external-secrets-crds did not become Ready within 6m \
             (last seen: Progressing: Reconciliation in progress)"
        );
        assert_eq!(
            err.hint(),
            Some("raise `timeouts.eso` in the profile; `devstack status` shows each level")
        );
    }

    #[test]
    fn deadline_passes_only_after_the_budget() {
        let wait = Wait::new(
            "x",
            "Ready",
            Budget::new(Duration::ZERO, "timeouts.cluster"),
        );
        let err = wait.check_deadline(&Seen::default()).unwrap_err();
        assert_eq!(
            err.message(),
            "x did not become Ready within 0s (last seen: nothing yet)"
        );
        assert_eq!(err.hint(), Some("raise `timeouts.cluster` in the profile"));
        let wait = Wait::new("x", "Ready", Budget::new(Duration::from_secs(60), "t"));
        assert!(wait.check_deadline(&Seen::default()).is_ok());
        let late = Budget::since(
            Instant::now() - Duration::from_secs(61),
            Duration::from_secs(60),
            "t",
        );
        assert!(
            Wait::new("x", "Ready", late)
                .check_deadline(&Seen::default())
                .is_err()
        );
    }

    #[test]
    fn last_seen_keeps_the_state_and_says_when_the_watch_fails() {
        let mut seen = Seen::default();
        assert!(!seen.record(Err(watcher::Error::NoResourceVersion)));
        assert!(
            seen.summary()
                .starts_with("cannot watch: no metadata.resourceVersion")
        );
        assert!(seen.record(Ok(true)));
        seen.state = Some("1/2 nodes Ready".into());
        assert_eq!(seen.summary(), "1/2 nodes Ready");
        seen.record(Err(watcher::Error::NoResourceVersion));
        assert!(
            seen.summary()
                .starts_with("1/2 nodes Ready; since then the watch fails: no metadata")
        );
        assert!(!seen.record(Ok(false)));
        assert_eq!(seen.summary(), "1/2 nodes Ready");
    }

    #[test]
    fn objects_are_complete_only_after_the_first_list() {
        let mut objects = Objects::default();
        assert!(!objects.apply(Event::Init));
        assert!(!objects.apply(Event::InitApply(config_map("a", "1"))));
        assert!(!objects.listed());
        assert!(objects.get("a").is_none());
        assert!(objects.apply(Event::InitDone));
        assert_eq!(value(&objects, "a").as_deref(), Some("1"));
        assert!(objects.apply(Event::Apply(config_map("a", "2"))));
        assert!(objects.apply(Event::Apply(config_map("b", "1"))));
        assert_eq!(value(&objects, "a").as_deref(), Some("2"));
        assert!(objects.apply(Event::Delete(config_map("b", "1"))));
        assert_eq!(objects.len(), 1);
    }

    #[test]
    fn a_list_read_outside_the_watch_replaces_the_set() {
        let mut objects = Objects::default();
        assert!(!objects.listed());
        objects.apply(Event::Apply(config_map("a", "1")));
        objects.replace(vec![config_map("b", "2")]);
        assert!(objects.listed());
        assert_eq!(value(&objects, "a"), None);
        assert_eq!(value(&objects, "b").as_deref(), Some("2"));
    }

    #[test]
    fn a_relist_replaces_the_set_when_it_ends() {
        let mut objects = Objects::default();
        objects.apply(Event::Init);
        objects.apply(Event::InitApply(config_map("gone", "1")));
        objects.apply(Event::InitDone);
        // A restarted watch lists again; until the list ends the old set stays.
        objects.apply(Event::Init);
        objects.apply(Event::InitApply(config_map("new", "1")));
        assert!(objects.get("gone").is_some());
        assert!(objects.apply(Event::InitDone));
        assert!(objects.get("gone").is_none());
        assert!(objects.get("new").is_some());
    }

    #[test]
    fn retries_start_fast_and_are_capped() {
        let mut retry = Retry::default();
        let delays: Vec<u64> = retry
            .by_ref()
            .take(7)
            .map(|d| d.as_millis() as u64)
            .collect();
        assert_eq!(delays, [250, 500, 1000, 2000, 4000, 4000, 4000]);
        retry.reset();
        assert_eq!(retry.next(), Some(RETRY_FIRST));
    }
}
