//! `devstack logs [COMPONENT] [--tail N] [-f] [--since D]`: the logs of the
//! stack's components ([`crate::logs`]), merged, each line prefixed by its
//! source when there are several.

use futures::StreamExt;

use crate::cli::{LogLines, LogsArgs};
use crate::commands::Context;
use crate::docker;
use crate::error::Error;
use crate::logs::{Component, Failure, Line, Options, StackLogs, in_written_order};
use crate::profile::Settings;
use crate::signals::Signals;

/// Lines of each source printed when neither --tail nor --since says.
pub const DEFAULT_TAIL: u64 = 200;

pub async fn run(ctx: &Context, args: LogsArgs) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    let options = options(&args.lines);
    show(ctx, &settings, args.component.map(Into::into), options).await
}

/// What `--tail`, `-f` and `--since` ask for, of `logs` and `localstack logs` alike.
pub fn options(lines: &LogLines) -> Options {
    Options {
        tail: lines
            .tail
            .or((lines.since.is_none()).then_some(DEFAULT_TAIL)),
        follow: lines.follow,
        since: lines.since.map(|d| d.get()),
    }
}

/// Prints the logs of `component` (`None`: every component's) until they
/// end, or with `follow` until Ctrl-C, SIGTERM or SIGHUP: the way a follow
/// is meant to end, so with exit 0.
pub async fn show(
    ctx: &Context,
    settings: &Settings,
    component: Option<Component>,
    options: Options,
) -> Result<i32, Error> {
    let docker = docker::connect_or_absent(crate::cluster::on_existing_cluster(settings)).await?;
    let components = component.map_or(Component::ALL.to_vec(), |c| vec![c]);
    let logs = StackLogs::find(docker, settings, &components, options.follow).await;
    let logs = readable(ctx, logs, component.is_some(), settings)?;
    let mut out = Output {
        json: ctx.ui.json(),
        labelled: component.is_none() || logs.sources.len() > 1,
        width: logs
            .sources
            .iter()
            .map(|s| s.label.len())
            .max()
            .unwrap_or(0),
    };
    let mut lines = logs.stream(options);
    let mut failures = Vec::new();
    if options.follow {
        // Listening before the first line is read: a signal after it ends
        // the follow instead of the process.
        let mut signals = Signals::listen()
            .map_err(|e| Error::internal(format!("cannot listen for signals: {e}")))?;
        loop {
            let next = tokio::select! {
                biased;
                _ = signals.next() => break,
                next = lines.next() => next,
            };
            match next {
                None => break,
                Some(Ok(line)) => {
                    if !out.write(&line) {
                        break;
                    }
                }
                Some(Err(failure)) => failures.push(warned(ctx, failure)),
            }
        }
    } else {
        let mut read = Vec::new();
        while let Some(next) = lines.next().await {
            match next {
                Ok(line) => read.push(line),
                Err(failure) => failures.push(warned(ctx, failure)),
            }
        }
        for line in in_written_order(read) {
            if !out.write(&line) {
                break;
            }
        }
    }
    // Each source fails at most once: all of them failing is the command failing.
    if failures.len() == logs.sources.len()
        && let Some(first) = failures.into_iter().next()
    {
        return Err(first.error);
    }
    Ok(0)
}

/// The components with logs. A component asked for by name must have some;
/// of all components, those without are told with -v, and only none at all
/// is an error.
fn readable(
    ctx: &Context,
    mut logs: StackLogs,
    named: bool,
    settings: &Settings,
) -> Result<StackLogs, Error> {
    if named {
        return match logs.missing.pop() {
            Some((_, error)) => Err(error),
            None => Ok(logs),
        };
    }
    for (component, error) in &logs.missing {
        ctx.ui.detail(format!(
            "no {} logs: {}",
            component.as_str(),
            error.message()
        ));
    }
    if logs.sources.is_empty() {
        return Err(Error::unhealthy(format!(
            "stack `{}` has no LocalStack and no cluster: there are no logs to show",
            settings.name
        ))
        .with_hint("create the stack with `devstack up`"));
    }
    Ok(logs)
}

fn warned(ctx: &Context, failure: Failure) -> Failure {
    ctx.ui
        .warn(format!("{}: {}", failure.source, failure.error.message()));
    failure
}

/// How lines are written to stdout.
struct Output {
    json: bool,
    /// Prefix each line with its source, padded to `width`.
    labelled: bool,
    width: usize,
}

impl Output {
    fn render(&self, line: &Line) -> String {
        if self.json {
            serde_json::json!({
                "source": &*line.source,
                "time": line.stamp.map(|s| s.to_string()),
                "line": line.text,
            })
            .to_string()
        } else if self.labelled {
            format!("{:width$} | {}", line.source, line.text, width = self.width)
        } else {
            line.text.clone()
        }
    }

    /// `false` once stdout's output has ended: its reader closed (`| head`)
    /// and has seen enough, or a write failed (the binary reports that).
    fn write(&mut self, line: &Line) -> bool {
        crate::ui::write_stdout(format!("{}\n", self.render(line)).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(source: &str, text: &str) -> Line {
        let (stamp, text) = crate::logs::split_stamp(text);
        Line {
            source: source.into(),
            stamp,
            text: text.into(),
        }
    }

    #[test]
    fn lines_carry_their_source_when_there_are_several() {
        let mut out = Output {
            json: false,
            labelled: true,
            width: 11,
        };
        assert_eq!(
            out.render(&line("eso/webhook", "2025-01-01T00:00:00Z ready")),
            "eso/webhook | ready"
        );
        assert_eq!(out.render(&line("localstack", "up")), "localstack  | up");
        out.labelled = false;
        assert_eq!(out.render(&line("localstack", "up")), "up");
        out.json = true;
        let json: serde_json::Value = serde_json::from_str(&out.render(&line(
            "flux/helm-controller",
            "2025-01-01T00:00:00.5Z {\"a\":1}",
        )))
        .unwrap();
        assert_eq!(json["source"], "flux/helm-controller");
        assert_eq!(json["time"], "2025-01-01T00:00:00.500000000Z");
        assert_eq!(json["line"], "{\"a\":1}");
    }
}
