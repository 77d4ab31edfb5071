//! `devstack doctor`: the library's checks, rendered.

use crate::commands::Context;
use crate::doctor::{self, Status};
use crate::error::Error;

pub async fn run(ctx: &Context) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    let report = doctor::examine(&settings).await;
    if ctx.ui.json() {
        ctx.ui
            .emit_json(&serde_json::to_value(&report).expect("report serializes"));
    } else {
        for check in &report.checks {
            let mark = match check.status {
                Status::Pass => ctx.ui.check_mark(true),
                Status::Warn => "!".to_string(),
                Status::Fail => ctx.ui.check_mark(false),
            };
            ctx.ui
                .out(format!("{mark} {:<18} {}", check.name, check.detail));
            if let Some(hint) = &check.hint {
                ctx.ui.out(format!("  hint: {hint}"));
            }
        }
        let failed = report
            .checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .count();
        ctx.ui.out(if report.ok {
            format!("{} can run here", report.subject())
        } else {
            format!(
                "{} cannot run here: {failed} check(s) failed",
                report.subject()
            )
        });
    }
    Ok(report.exit_code)
}
