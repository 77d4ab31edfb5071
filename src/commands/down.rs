//! `devstack down [--all]`: the library's `Stack::down` / `stack::down_all`, rendered.

use serde_json::json;

use crate::cli::DownArgs;
use crate::commands::Context;
use crate::error::Error;
use crate::stack::{self, Stack};

pub async fn run(ctx: &Context, args: DownArgs) -> Result<i32, Error> {
    let reports = if args.all {
        stack::down_all(ctx.global.profile.as_deref(), &ctx.overrides(), &ctx.ui).await?
    } else {
        let settings = ctx.settings(|_| {})?;
        vec![Stack::new(settings).with_ui(ctx.ui.clone()).down().await?]
    };
    for report in &reports {
        let mut parts = Vec::new();
        if report.cluster {
            parts.push("cluster");
        }
        if report.localstack {
            parts.push("LocalStack");
        }
        if report.state {
            parts.push("state");
        }
        for what in &report.uninstalled {
            ctx.ui.info(format!("  removed {what}"));
        }
        if !report.uninstalled.is_empty() {
            parts.push("what it installed in the cluster (the cluster stays)");
        }
        ctx.ui.info(if parts.is_empty() {
            format!("stack `{}`: nothing to remove", report.stack)
        } else {
            format!("stack `{}`: removed {}", report.stack, parts.join(", "))
        });
    }
    if args.all && reports.is_empty() {
        ctx.ui.info("no devstack stacks on this machine");
    }
    if ctx.ui.json() {
        ctx.ui.emit_json(&json!({"stacks": reports}));
    }
    Ok(0)
}
