//! `devstack diagnose`: the library's detectors ([`crate::diagnose`]),
//! rendered; and the pointer a failed `up`, `verify` or `status` ends with.

use crate::commands::Context;
use crate::diagnose::{self, Finding};
use crate::error::{Error, Kind};

pub async fn run(ctx: &Context) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    let step = ctx.ui.step(format!("Reading stack `{}`", settings.name));
    let (evidence, findings) = match diagnose::diagnose(&settings).await {
        Ok(read) => read,
        Err(err) => {
            step.fail("cannot read it");
            // `--json` prints a list of findings whatever the stack, as
            // `status --json` prints its rows: here, that it does not exist.
            if ctx.ui.json() && err.kind() == Kind::Unhealthy {
                let findings = [diagnose::stack_missing(&settings)];
                ctx.ui
                    .emit_json(&serde_json::to_value(findings).expect("findings serialize"));
            }
            return Err(err);
        }
    };
    step.done(format!(
        "{} detectors run",
        diagnose::detectors(&settings).len()
    ));
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

/// `err` (of a failed `up`, `verify` or `status`) with the findings that
/// match appended to its hint (see [`diagnose::point`]).
pub async fn point(ctx: &Context, err: Error) -> Error {
    match ctx.settings(|_| {}) {
        Ok(settings) => diagnose::point(&settings, err).await,
        Err(_) => err,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fixtures::unreachable_api_finding as finding;

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
}
