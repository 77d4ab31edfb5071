//! The runner every multi-step command uses: one progress line per step
//! with its timing, a bound on each step, a record of what ran, and the one
//! owner of rollback: steps tell it what they create and how to remove it,
//! and on an error or a cancellation it undoes exactly that, in reverse.
//!
//! Cancellation (Ctrl-C, SIGTERM or SIGHUP: [`crate::signals`]) is a token
//! passed down: a step that must clean up after itself (the round trip's
//! probes) watches the token and finishes its cleanup; other steps are
//! abandoned at their next await point and what they created is undone by
//! the rollback, which no signal stops: that would leave half a stack
//! behind.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::signals::{Signal, Signals};
use crate::timeline::Timeline;
use crate::ui::{Step, Ui};

/// Removes one thing a step created.
pub type Undo = Box<dyn FnOnce() -> BoxFuture<'static, Result<(), Error>> + Send>;

/// The stopping signals as cancellation, for a run with a rollback: the
/// first one cancels the run (which then rolls back); every one is also
/// [`Interrupts::received`], where the rollback tells of those it ignores.
pub struct Interrupts {
    pub cancel: CancellationToken,
    pub received: Received,
    first: Arc<OnceLock<Signal>>,
    watcher: Option<tokio::task::JoinHandle<()>>,
}

impl Interrupts {
    /// Listens for the signals when `enabled` (a library caller may handle
    /// them itself); otherwise the token is only cancelled by hand.
    pub fn watch(enabled: bool) -> Self {
        let cancel = CancellationToken::new();
        let first = Arc::new(OnceLock::new());
        let (received_tx, received_rx) = watch::channel((0, None));
        // Listening starts here, not when the task first runs: a signal
        // right after this call is already the run's.
        let signals = enabled.then(Signals::listen).and_then(|listened| {
            listened
                .map_err(|e| tracing::warn!("cannot listen for signals: {e}"))
                .ok()
        });
        let watcher = signals.map(|mut signals| {
            let (cancel, first) = (cancel.clone(), first.clone());
            tokio::spawn(async move {
                for count in 1.. {
                    let signal = signals.next().await;
                    // Counted before the run is cancelled: a rollback the
                    // cancel starts must see this signal as the first one,
                    // not as a second one arriving while it removes things.
                    let counted = received_tx.send((count, Some(signal)));
                    if first.set(signal).is_ok() {
                        cancel.cancel();
                    }
                    if counted.is_err() {
                        return;
                    }
                }
            })
        });
        Interrupts {
            cancel,
            received: Received(received_rx),
            first,
            watcher,
        }
    }

    /// The signal that cancelled the run, if one did.
    pub fn signal(&self) -> Option<Signal> {
        self.first.get().copied()
    }

    /// `err` with the signal that cancelled the run, which decides its exit
    /// code (an error a signal did not cause is returned as it is).
    pub fn attribute(&self, err: Error) -> Error {
        match self.signal() {
            Some(signal) => err.interrupted_by(signal),
            None => err,
        }
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
    }
}

/// The signals a run has received: how many so far, and the last one.
#[derive(Clone)]
pub struct Received(watch::Receiver<(u64, Option<Signal>)>);

impl Default for Received {
    /// None ever arrives (a run no signal can cancel).
    fn default() -> Self {
        Received(watch::channel((0, None)).1)
    }
}

impl Received {
    /// The next signal to arrive.
    async fn next(&mut self) -> Signal {
        loop {
            if self.0.changed().await.is_err() {
                return std::future::pending().await;
            }
            if let (_, Some(signal)) = *self.0.borrow_and_update() {
                return signal;
            }
        }
    }
}

/// What a rollback did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollback {
    /// Removed, in the order they were removed.
    pub undone: Vec<String>,
    /// Could not be removed: (what, why).
    pub failed: Vec<(String, String)>,
    /// Records kept because something they describe could not be removed:
    /// `devstack down` reads them to remove it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<String>,
}

impl Rollback {
    pub fn complete(&self) -> bool {
        self.failed.is_empty()
    }

    /// Everything still there, for the user to remove.
    pub fn remaining(&self) -> Vec<String> {
        let failed = self.failed.iter().map(|(what, _)| what.clone());
        failed.chain(self.kept.iter().cloned()).collect()
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepRecord {
    pub name: String,
    pub elapsed_ms: u64,
    pub ok: bool,
    /// Milliseconds from the start of the run (the timeline's origin).
    pub start_ms: u64,
    pub end_ms: u64,
}

/// Something a run created, how to remove it, and whether it is a record of
/// the rest (kept when the rest cannot all be removed).
struct Created {
    what: String,
    undo: Undo,
    record: bool,
}

pub struct Runner {
    ui: Ui,
    records: Mutex<Vec<StepRecord>>,
    created: Mutex<Vec<Created>>,
    cancel: CancellationToken,
    timeline: Timeline,
}

impl Runner {
    pub fn new(ui: &Ui) -> Self {
        Self::with_cancel(ui, CancellationToken::new())
    }

    /// A runner whose steps stop when `cancel` is cancelled.
    pub fn with_cancel(ui: &Ui, cancel: CancellationToken) -> Self {
        Runner {
            ui: ui.clone(),
            records: Mutex::new(Vec::new()),
            created: Mutex::new(Vec::new()),
            cancel,
            timeline: Timeline::new(),
        }
    }

    /// Records every step (and the parts steps time) on `timeline`.
    pub fn with_timeline(mut self, timeline: Timeline) -> Self {
        self.timeline = timeline;
        self
    }

    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// The token steps that clean up after themselves watch.
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Records something this run created (or is about to create: undo
    /// must then be harmless when it is not there), with how to remove it.
    pub fn created(
        &self,
        what: impl Into<String>,
        undo: impl FnOnce() -> BoxFuture<'static, Result<(), Error>> + Send + 'static,
    ) {
        self.push(what.into(), Box::new(undo), false);
    }

    /// Records the record this run created of what it creates after (the
    /// stack's state): a rollback removes it only when it removed all that,
    /// so that what is left behind can still be found and removed.
    pub fn created_record(
        &self,
        what: impl Into<String>,
        undo: impl FnOnce() -> BoxFuture<'static, Result<(), Error>> + Send + 'static,
    ) {
        self.push(what.into(), Box::new(undo), true);
    }

    fn push(&self, what: String, undo: Undo, record: bool) {
        if let Ok(mut created) = self.created.lock() {
            created.push(Created { what, undo, record });
        }
    }

    /// What this run created, in order.
    pub fn created_names(&self) -> Vec<String> {
        self.created
            .lock()
            .map(|c| c.iter().map(|c| c.what.clone()).collect())
            .unwrap_or_default()
    }

    /// Undoes everything recorded, newest first, to the end: a signal is
    /// answered with a line saying what is still being removed (as are
    /// those after the first, which stopped the run, before it starts).
    pub async fn rollback(&self, received: &Received) -> Rollback {
        let mut created = self
            .created
            .lock()
            .map(|mut c| std::mem::take(&mut *c))
            .unwrap_or_default();
        created.reverse();
        let names: Vec<String> = created.iter().map(|c| c.what.clone()).collect();
        let ignored = |signal: Signal, at: usize| {
            self.ui.warn(format!(
                "{signal} ignored: finishing the rollback so that nothing is left; removing {}",
                names[at..].join(", ")
            ))
        };
        let mut received = received.clone();
        let (count, last) = *received.0.borrow_and_update();
        if let (2.., Some(signal)) = (count, last) {
            ignored(signal, 0);
        }
        let mut report = Rollback::default();
        for (at, Created { what, undo, record }) in created.into_iter().enumerate() {
            if record && !report.failed.is_empty() {
                report.kept.push(what);
                continue;
            }
            let undo = undo();
            tokio::pin!(undo);
            let result = loop {
                tokio::select! {
                    result = &mut undo => break result,
                    signal = received.next() => ignored(signal, at),
                }
            };
            match result {
                Ok(()) => report.undone.push(what),
                Err(e) => report.failed.push((what, e.message().to_string())),
            }
        }
        report
    }

    pub fn ui(&self) -> &Ui {
        &self.ui
    }

    /// After `err`, undoes what this run created, newest first, unless
    /// `retain`, and returns `err` saying what was rolled back, retained or
    /// left behind (and how to remove that). `existed`: the stack was there
    /// before this run.
    pub async fn roll_back_after(
        &self,
        err: Error,
        existed: bool,
        retain: bool,
        received: &Received,
    ) -> Error {
        let created = self.created_names();
        if created.is_empty() {
            return err.context(if existed {
                "the stack existed before this run and this run created nothing, so nothing was rolled back; run `devstack up` again to converge"
            } else {
                "nothing was created"
            });
        }
        if retain {
            return err.context(format!(
                "what this run created is retained (--retain: {}); `devstack up` completes it, `devstack down` removes it",
                created.join(", ")
            ));
        }
        let step = self.ui.step("Rolling back");
        let span = self.timeline.span("Rolling back", None);
        let rollback = self.rollback(received).await;
        let _ = span.finish(if rollback.complete() { Ok(()) } else { Err(()) });
        if rollback.complete() {
            step.done(format!("removed {}", rollback.undone.join(", ")));
            return err.context("rolled back");
        }
        let remaining = rollback.remaining().join(", ");
        step.fail(format!("left: {remaining}"));
        for (what, why) in &rollback.failed {
            self.ui.warn(format!("could not remove {what}: {why}"));
        }
        err.context(format!("rollback also failed; left behind: {remaining}"))
            .with_hint("`devstack down` removes the rest")
    }

    fn record(&self, name: &str, started: Instant, span: usize, ok: bool) {
        self.timeline.end(span, ok);
        if let Ok(mut records) = self.records.lock() {
            records.push(StepRecord {
                name: name.to_string(),
                elapsed_ms: started.elapsed().as_millis() as u64,
                ok,
                start_ms: self.timeline.ms_at(started),
                end_ms: self.timeline.now_ms(),
            });
        }
    }

    /// Runs one step with a progress line; `work` gets the step to report
    /// sub-states and returns its value and a one-line summary. `limit`
    /// bounds steps whose own waits are not bounded already.
    pub async fn step<T, F, Fut>(
        &self,
        title: impl Into<String>,
        limit: Option<(Duration, &str)>,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(Arc<Step>) -> Fut,
        Fut: Future<Output = Result<(T, String), Error>>,
    {
        let title = title.into();
        if self.cancel.is_cancelled() {
            return Err(Error::interrupted());
        }
        let started = Instant::now();
        let span = self.timeline.start(title.clone(), None);
        let step = Arc::new(
            self.ui
                .step(title.clone())
                .with_span(self.timeline.clone(), span),
        );
        let work = work(step.clone());
        let bounded = async {
            match limit {
                Some((limit, setting)) => match tokio::time::timeout(limit, work).await {
                    Ok(result) => result,
                    Err(_) => Err(Error::timeout(format!(
                        "{title} did not finish within {}s",
                        limit.as_secs()
                    ))
                    .with_hint(format!("raise `{setting}` in the profile"))),
                },
                None => work.await,
            }
        };
        let result = tokio::select! {
            result = bounded => result,
            _ = self.cancel.cancelled() => Err(Error::interrupted()),
        };
        // The work future is gone, so this is the last reference.
        let step = Arc::try_unwrap(step).ok();
        self.record(&title, started, span, result.is_ok());
        match result {
            Ok((value, summary)) => {
                if let Some(step) = step {
                    step.done(summary);
                }
                Ok(value)
            }
            Err(e) => {
                if let Some(step) = step {
                    step.fail(first_line(e.message()));
                }
                Err(e)
            }
        }
    }

    /// Times work that watches [`Runner::cancel_token`] itself, so that it
    /// can clean up what it made before it returns (never abandoned).
    pub async fn timed_cooperative<T>(
        &self,
        name: &str,
        work: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        if self.cancel.is_cancelled() {
            return Err(Error::interrupted());
        }
        let started = Instant::now();
        let span = self.timeline.start(name, None);
        let result = work.await;
        self.record(name, started, span, result.is_ok());
        result
    }

    pub fn records(&self) -> Vec<StepRecord> {
        self.records.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > 120 {
        format!("{}…", line.chars().take(117).collect::<String>())
    } else {
        line.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_success_failure_and_timeouts() {
        let runner = Runner::new(&Ui::silent());
        let value = runner
            .step("ok", None, |_| async { Ok((7, "done".to_string())) })
            .await
            .unwrap();
        assert_eq!(value, 7);
        let err = runner
            .step("bad", None, |_| async {
                Err::<((), String), _>(Error::user("broken\nsecond line"))
            })
            .await
            .unwrap_err();
        assert_eq!(err.message(), "broken\nsecond line");
        let err = runner
            .step(
                "slow",
                Some((Duration::from_millis(20), "timeouts.seed")),
                |_| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    Ok(((), String::new()))
                },
            )
            .await
            .unwrap_err();
        assert!(
            err.message().contains("slow did not finish within"),
            "{}",
            err.message()
        );
        assert_eq!(err.hint(), Some("raise `timeouts.seed` in the profile"));
        let records = runner.records();
        for r in &records {
            assert!(r.start_ms <= r.end_ms, "{r:?}");
        }
        let spans = runner.timeline().spans();
        assert_eq!(
            spans
                .iter()
                .map(|s| (s.name.as_str(), s.ok, s.end_ms.is_some()))
                .collect::<Vec<_>>(),
            [
                ("ok", Some(true), true),
                ("bad", Some(false), true),
                ("slow", Some(false), true)
            ],
            "every step is a span on the timeline"
        );
        assert_eq!(
            records
                .iter()
                .map(|r| (r.name.as_str(), r.ok))
                .collect::<Vec<_>>(),
            [("ok", true), ("bad", false), ("slow", false)]
        );
    }

    #[tokio::test]
    async fn parts_a_step_times_are_its_children_on_the_shared_timeline() {
        let timeline = Timeline::new();
        let runner = Runner::new(&Ui::silent()).with_timeline(timeline.clone());
        runner
            .step("Cluster", None, |step| async move {
                let part = step.span("nodes Ready");
                tokio::time::sleep(Duration::from_millis(5)).await;
                part.finish(Ok::<_, Error>(()))?;
                let _abandoned = step.span("image loads");
                Ok(((), String::new()))
            })
            .await
            .unwrap();
        let spans = timeline.spans();
        let cluster = spans.iter().find(|s| s.name == "Cluster").unwrap();
        let nodes = spans.iter().find(|s| s.name == "nodes Ready").unwrap();
        let images = spans.iter().find(|s| s.name == "image loads").unwrap();
        assert_eq!(nodes.parent, Some(cluster.id));
        assert_eq!(nodes.ok, Some(true));
        assert_eq!(images.ok, Some(false), "a part dropped unfinished failed");
        assert!(nodes.duration_ms().unwrap() >= 5);
        assert!(cluster.start_ms <= nodes.start_ms && nodes.end_ms <= cluster.end_ms);
        let record = &runner.records()[0];
        assert_eq!(
            (record.start_ms, record.end_ms),
            (cluster.start_ms, cluster.end_ms.unwrap())
        );
    }

    /// A run of `steps` steps, each creating one thing; step `fail_at`
    /// fails, or the run is cancelled while step `cancel_at` works. Returns
    /// what is left in the "world" after the rollback, and the rollback.
    async fn run_and_roll_back(
        steps: usize,
        fail_at: Option<usize>,
        cancel_at: Option<usize>,
    ) -> (Vec<String>, Rollback) {
        let world = Arc::new(Mutex::new(Vec::<String>::new()));
        let cancel = CancellationToken::new();
        let runner = Runner::with_cancel(&Ui::silent(), cancel.clone());
        let mut result = Ok(());
        for i in 0..steps {
            let world = world.clone();
            let thing = format!("thing{i}");
            {
                let world = world.clone();
                let thing = thing.clone();
                runner.created(thing.clone(), move || {
                    Box::pin(async move {
                        world.lock().unwrap().retain(|t| *t != thing);
                        Ok(())
                    })
                });
            }
            let cancel = cancel.clone();
            result = runner
                .step(format!("step {i}"), None, |_| async move {
                    world.lock().unwrap().push(thing);
                    if cancel_at == Some(i) {
                        cancel.cancel();
                        // Abandoned here, as a real step is at an await.
                        std::future::pending::<()>().await;
                    }
                    if fail_at == Some(i) {
                        return Err(Error::internal("broken"));
                    }
                    Ok(((), String::new()))
                })
                .await;
            if result.is_err() {
                break;
            }
        }
        assert!(result.is_err() || (fail_at.is_none() && cancel_at.is_none()));
        let rollback = runner.rollback(&Received::default()).await;
        let left = world.lock().unwrap().clone();
        (left, rollback)
    }

    #[tokio::test]
    async fn an_error_or_a_cancel_at_each_step_undoes_exactly_what_was_created_in_reverse() {
        for at in 0..4 {
            for (fail_at, cancel_at) in [(Some(at), None), (None, Some(at))] {
                let (left, rollback) = run_and_roll_back(4, fail_at, cancel_at).await;
                assert!(left.is_empty(), "at step {at}: left {left:?}");
                let expected: Vec<String> = (0..=at).rev().map(|i| format!("thing{i}")).collect();
                assert_eq!(
                    rollback.undone, expected,
                    "fail {fail_at:?} cancel {cancel_at:?}"
                );
                assert!(rollback.complete());
            }
        }
    }

    #[tokio::test]
    async fn a_cancelled_runner_starts_no_step_and_later_signals_do_not_stop_its_rollback() {
        let cancel = CancellationToken::new();
        let runner = Runner::with_cancel(&Ui::silent(), cancel.clone());
        let removed = Arc::new(Mutex::new(Vec::new()));
        let (received_tx, received_rx) = watch::channel((0, None));
        for what in ["network", "localstack", "cluster"] {
            let (removed, received_tx) = (removed.clone(), received_tx.clone());
            runner.created(what, move || {
                Box::pin(async move {
                    // A signal while this is being removed, and a pause in
                    // which the rollback sees it.
                    received_tx.send_modify(|(count, last)| {
                        *count += 1;
                        *last = Some(Signal::Terminate);
                    });
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    removed.lock().unwrap().push(what);
                    Ok(())
                })
            });
        }
        cancel.cancel();
        let ran = runner
            .step("after cancel", None, |_| async { Ok(((), String::new())) })
            .await;
        assert_eq!(ran.unwrap_err().kind(), crate::error::Kind::Interrupted);
        // The signal that stopped the run, and one after it.
        received_tx.send((2, Some(Signal::Hangup))).unwrap();
        let rollback = runner.rollback(&Received(received_rx)).await;
        assert_eq!(rollback.undone, ["cluster", "localstack", "network"]);
        assert_eq!(*removed.lock().unwrap(), rollback.undone);
        assert!(rollback.complete() && rollback.remaining().is_empty());

        let runner = Runner::new(&Ui::silent());
        runner.created("a", || {
            Box::pin(async { Err(Error::internal("engine gone")) })
        });
        runner.created("b", || Box::pin(async { Ok(()) }));
        let rollback = runner.rollback(&Received::default()).await;
        assert_eq!(rollback.undone, ["b"]);
        assert_eq!(
            rollback.failed,
            [("a".to_string(), "engine gone".to_string())]
        );
        assert!(!rollback.complete());
        assert!(rollback.kept.is_empty());
        assert!(
            runner.created_names().is_empty(),
            "a rollback consumes the record"
        );
    }

    /// The state is how `down` finds a cluster the rollback could not
    /// remove, and holds what its nodes mount: it stays with it.
    #[tokio::test]
    async fn a_record_stays_when_what_it_records_could_not_be_removed() {
        let run = |cluster_removal: Result<(), Error>| async move {
            let runner = Runner::new(&Ui::silent());
            runner.created_record("state", || Box::pin(async { Ok(()) }));
            runner.created("cluster", move || Box::pin(async move { cluster_removal }));
            runner.rollback(&Received::default()).await
        };
        let left = run(Err(Error::internal("engine gone"))).await;
        assert!(left.undone.is_empty(), "{left:?}");
        assert_eq!(left.kept, ["state"]);
        assert_eq!(left.remaining(), ["cluster", "state"]);
        let removed = run(Ok(())).await;
        assert_eq!(removed.undone, ["cluster", "state"]);
        assert!(removed.kept.is_empty() && removed.complete());
    }

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        let text = "é".repeat(200);
        assert!(first_line(&text).ends_with('…'));
        assert_eq!(first_line("a\nb"), "a");
    }
}
