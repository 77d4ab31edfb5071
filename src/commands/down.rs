//! `devstack down [--all]`.

use serde_json::json;

use crate::cli::DownArgs;
use crate::commands::Context;
use crate::error::Error;
use crate::profile::Overrides;
use crate::stack::{self, DownReport, Stack};

pub async fn run(ctx: &Context, args: DownArgs) -> Result<i32, Error> {
    let mut reports: Vec<DownReport> = Vec::new();
    if args.all {
        let docker = crate::docker::connect().await?;
        for name in stack::all_stack_names(&docker).await? {
            // Identity comes from the labels; the provider decides how the
            // cluster is removed, so try the profile's first, then the other.
            let base = ctx.settings(|o| o.name = Some(name.clone()))?;
            let mut report = Stack::new(base.clone())
                .with_ui(ctx.ui.clone())
                .down()
                .await?;
            let other = match base.cluster.provider {
                crate::profile::Provider::K3s => crate::profile::Provider::Kind,
                crate::profile::Provider::Kind => crate::profile::Provider::K3s,
            };
            if let Ok(settings) = crate::profile::select(
                ctx.global.profile.as_deref(),
                &Overrides {
                    name: Some(name.clone()),
                    provider: Some(other),
                    ..Overrides::default()
                },
            ) && let Ok(again) = Stack::new(settings).with_ui(ctx.ui.clone()).down().await
            {
                report.cluster |= again.cluster;
            }
            reports.push(report);
        }
    } else {
        let settings = ctx.settings(|_| {})?;
        let docker = crate::docker::connect().await?;
        let settings = super::on_existing_provider(&docker, settings).await?;
        reports.push(Stack::new(settings).with_ui(ctx.ui.clone()).down().await?);
    }
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
