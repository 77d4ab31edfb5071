//! `devstack diagnose`: the library's detectors ([`crate::diagnose`]),
//! rendered; and the pointer a failed `up`, `verify` or `status` ends with.

use std::time::Duration;

use crate::commands::Context;
use crate::diagnose::{self, Finding};
use crate::error::{Error, Kind};
use crate::profile::Settings;

pub async fn run(ctx: &Context) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    let step = ctx.ui.step(format!("Reading stack `{}`", settings.name));
    let (evidence, findings) = match diagnose::diagnose(&settings).await {
        Ok(read) => read,
        Err(err) => {
            step.fail("cannot read it");
            return Err(err);
        }
    };
    step.done(format!("{} detectors run", diagnose::DETECTORS.len()));
    for (what, why) in &evidence.unread {
        if why == diagnose::NOT_SERVED {
            ctx.ui.detail(format!("{what}: {why}"));
        } else {
            ctx.ui.warn(format!("could not read {what}: {why}"));
        }
    }
    if ctx.ui.json() {
        ctx.ui
            .emit_json(&serde_json::to_value(&findings).expect("findings serialize"));
    } else if !findings.is_empty() {
        ctx.ui
            .out(render(&findings, &|ok| ctx.ui.check_mark(ok)).trim_end());
    }
    if findings.is_empty() {
        ctx.ui
            .info(format!("stack `{}`: nothing found", settings.name));
        return Ok(0);
    }
    ctx.ui.info(format!(
        "stack `{}`: {} finding(s)",
        settings.name,
        findings.len()
    ));
    Ok(Kind::Unhealthy.exit_code())
}

/// Each finding as its symptom, its evidence (indented), its cause and its fix.
pub fn render(findings: &[Finding], mark: &dyn Fn(bool) -> String) -> String {
    let mut out = String::new();
    for finding in findings {
        out.push_str(&format!(
            "{} {}  [{}]\n",
            mark(false),
            finding.symptom,
            finding.detector
        ));
        for line in &finding.evidence {
            out.push_str(&format!("    {line}\n"));
        }
        out.push_str(&format!("  cause: {}\n", finding.cause));
        match &finding.fix.command {
            Some(command) => out.push_str(&format!(
                "  fix: {command}\n       {}\n",
                finding.fix.action
            )),
            None => out.push_str(&format!("  fix: {}\n", finding.fix.action)),
        }
        out.push('\n');
    }
    out
}

/// How long a failed command spends looking for the causes it points at.
const POINTER_LIMIT: Duration = Duration::from_secs(20);
/// Findings a failed command lists; `diagnose` shows them all.
const POINTED_FINDINGS: usize = 5;

/// `err` (of a failed `up`, `verify` or `status`) with the findings that
/// match appended to its hint, or the line pointing at `diagnose` when they
/// could not be read in time. A stack that does not exist (rolled back) or
/// an error that is not about its health gets nothing.
pub async fn point(ctx: &Context, err: Error) -> Error {
    if !matches!(err.kind(), Kind::Unhealthy | Kind::Timeout) {
        return err;
    }
    let Ok(settings) = ctx.settings(|_| {}) else {
        return err;
    };
    let lines = match tokio::time::timeout(POINTER_LIMIT, diagnose::diagnose(&settings)).await {
        Ok(Ok((_, findings))) => pointer_lines(&settings, &findings),
        Ok(Err(_)) => return err,
        Err(_) => vec!["run `devstack diagnose` for causes and fixes".to_string()],
    };
    if lines.is_empty() {
        return err;
    }
    let lines = lines
        .iter()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n");
    let hint = match err.hint() {
        Some(hint) => format!("{hint}\n{lines}"),
        None => lines.trim_start().to_string(),
    };
    err.with_hint(hint)
}

/// One line per finding, with plain `devstack ...` commands: the CLI adds
/// the stack's flags to every command of an error once.
fn pointer_lines(settings: &Settings, findings: &[Finding]) -> Vec<String> {
    if findings.is_empty() {
        return Vec::new();
    }
    let flags = settings.cli_flags();
    let plain = |text: String| {
        if flags.is_empty() {
            text
        } else {
            text.replace(&format!("devstack{flags} "), "devstack ")
        }
    };
    let mut lines: Vec<String> = findings
        .iter()
        .take(POINTED_FINDINGS)
        .map(|f| format!("found: {}", plain(f.summary())))
        .collect();
    if findings.len() > POINTED_FINDINGS {
        lines.push(format!("found: {} more", findings.len() - POINTED_FINDINGS));
    }
    lines.push("`devstack diagnose` shows the evidence".to_string());
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(command: Option<&str>) -> Finding {
        let mut f = crate::diagnose::detect(
            &crate::diagnose::Evidence {
                localstack: Default::default(),
                cluster: crate::diagnose::ClusterEvidence {
                    kubeconfig: true,
                    api_error: Some("connection refused".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
            &Settings::builtin(&Default::default()).unwrap(),
        )
        .remove(0);
        f.fix.command = command.map(String::from);
        f
    }

    #[test]
    fn findings_render_symptom_evidence_cause_and_fix() {
        let text = render(&[finding(Some("devstack up"))], &|_| "✗".into());
        insta::assert_snapshot!(text, @r"
        ✗ the cluster's API server does not answer  [cluster-unreachable]
            API: connection refused
          cause: the cluster's node containers are gone
          fix: devstack up
               starts stopped nodes (or recreates a missing cluster) and converges the stack
        ");
    }

    #[test]
    fn pointers_name_plain_commands_the_cli_then_flags_once() {
        let mut settings = Settings::builtin(&Default::default()).unwrap();
        settings.profile_reference = Some("ci".into());
        let f = finding(Some("devstack -p ci localstack down && devstack -p ci up"));
        let lines = pointer_lines(&settings, &[f]);
        assert_eq!(
            lines,
            [
                "found: the cluster's API server does not answer: the cluster's node containers are gone; fix: `devstack localstack down` && `devstack up`",
                "`devstack diagnose` shows the evidence",
            ]
        );
        let err = Error::unhealthy("x")
            .with_hint(lines.join("\n"))
            .with_command_flags(&settings.cli_flags());
        assert!(
            err.hint()
                .unwrap()
                .contains("`devstack -p ci localstack down` && `devstack -p ci up`"),
            "{err:?}"
        );
        assert!(pointer_lines(&settings, &[]).is_empty());
    }
}
