//! The pointer a failed `up`, `verify` or `status` ends with: the findings
//! that explain it, one line each, with the command that fixes each.

use std::time::Duration;

use super::Finding;
use crate::error::{Error, Kind};
use crate::profile::Settings;

/// How long a failed command spends looking for the causes it points at.
const POINTER_LIMIT: Duration = Duration::from_secs(20);
/// Findings a failed command lists; `diagnose` shows them all.
const POINTED_FINDINGS: usize = 5;

/// `err` (of a failed `up`, `verify` or `status`) with the findings that
/// match appended to its hint, or the line pointing at `diagnose` when they
/// could not be read in time. A stack that does not exist (rolled back) or
/// an error that is not about its health gets nothing.
pub async fn point(settings: &Settings, err: Error) -> Error {
    if !matches!(err.kind(), Kind::Unhealthy | Kind::Timeout) {
        return err;
    }
    let lines = match tokio::time::timeout(POINTER_LIMIT, super::diagnose(settings)).await {
        Ok(Ok((_, findings))) => pointer_lines(settings, &findings),
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
    use crate::diagnose::fixtures::unreachable_api_finding as finding;

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
