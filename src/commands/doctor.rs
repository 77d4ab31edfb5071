//! `devstack doctor`: the library's checks, rendered.

use crate::commands::Context;
use crate::doctor::{self, Status};
use crate::error::{Error, Kind};

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
            format!("profile `{}` can run here", report.stack)
        } else {
            format!(
                "profile `{}` cannot run here: {failed} check(s) failed",
                report.stack
            )
        });
    }
    Ok(if report.ok {
        0
    } else {
        Kind::Prerequisite.exit_code()
    })
}
