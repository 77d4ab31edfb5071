//! The runner every multi-step command uses: one progress line per step
//! with its timing, a bound on each step, and a record of what ran, so the
//! caller can report timings and decide what to roll back.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::Error;
use crate::ui::{Step, Ui};

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepRecord {
    pub name: String,
    pub elapsed_ms: u64,
    pub ok: bool,
}

pub struct Runner {
    ui: Ui,
    records: Mutex<Vec<StepRecord>>,
}

impl Runner {
    pub fn new(ui: &Ui) -> Self {
        Runner {
            ui: ui.clone(),
            records: Mutex::new(Vec::new()),
        }
    }

    pub fn ui(&self) -> &Ui {
        &self.ui
    }

    fn record(&self, name: &str, elapsed: Duration, ok: bool) {
        if let Ok(mut records) = self.records.lock() {
            records.push(StepRecord {
                name: name.to_string(),
                elapsed_ms: elapsed.as_millis() as u64,
                ok,
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
        let started = Instant::now();
        let step = Arc::new(self.ui.step(title.clone()));
        let work = work(step.clone());
        let result = match limit {
            Some((limit, setting)) => match tokio::time::timeout(limit, work).await {
                Ok(result) => result,
                Err(_) => Err(Error::timeout(format!(
                    "{title} did not finish within {}s",
                    limit.as_secs()
                ))
                .with_hint(format!("raise `{setting}` in the profile"))),
            },
            None => work.await,
        };
        // The work future is gone, so this is the last reference.
        let step = Arc::try_unwrap(step).ok();
        self.record(&title, started.elapsed(), result.is_ok());
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

    /// Times work that prints its own steps.
    pub async fn timed<T>(
        &self,
        name: &str,
        work: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let started = Instant::now();
        let result = work.await;
        self.record(name, started.elapsed(), result.is_ok());
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
        assert_eq!(
            records
                .iter()
                .map(|r| (r.name.as_str(), r.ok))
                .collect::<Vec<_>>(),
            [("ok", true), ("bad", false), ("slow", false)]
        );
    }

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        let text = "é".repeat(200);
        assert!(first_line(&text).ends_with('…'));
        assert_eq!(first_line("a\nb"), "a");
    }
}
