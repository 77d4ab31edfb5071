//! `devstack seed`: write the profile's secrets to LocalStack.

use crate::cli::SeedArgs;
use crate::commands::Context;
use crate::error::Error;
use crate::seed::{self, Outcome, SeedOptions};

pub async fn run(ctx: &Context, args: SeedArgs) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    if settings.secrets.is_empty() && settings.parameters.is_empty() {
        ctx.ui.info(format!(
            "profile `{}` declares no secrets",
            settings.profile
        ));
    }
    let reached = crate::localstack::in_cluster::reach(&settings).await?;
    let settings = &reached.settings;
    let client = crate::aws::secrets_manager(settings);
    let options = SeedOptions {
        rotate: args.rotate,
        dry_run: args.dry_run,
        concurrency: args.concurrency as usize,
    };
    let step = ctx.ui.step(format!(
        "{} secrets in {}",
        if args.dry_run { "Checking" } else { "Seeding" },
        settings.localstack.endpoint_url()
    ));
    let timeout = seed::default_timeout(settings);
    let report = match tokio::time::timeout(timeout, seed::seed(settings, &client, options)).await {
        Ok(Ok(report)) => report,
        Ok(Err(e)) => {
            step.fail("failed");
            return Err(e);
        }
        Err(_) => {
            step.fail("timed out");
            return Err(Error::timeout(format!(
                "seeding did not finish within {}",
                settings.timeouts.seed
            ))
            .with_hint("raise `timeouts.seed`, or check `devstack localstack status`; seeding converges on re-run"));
        }
    };
    step.done(seed::summary(&report));
    for secret in &report.secrets {
        let what = match secret.outcome {
            Outcome::Created => "created".to_string(),
            Outcome::Updated => format!("updated ({})", secret.changed.join(", ")),
            Outcome::Unchanged => "unchanged".to_string(),
        };
        ctx.ui.detail(format!("{}: {what}", secret.name));
    }
    for parameter in &report.parameters {
        let what = match parameter.outcome {
            Outcome::Created => "created".to_string(),
            Outcome::Updated => format!("updated ({})", parameter.changed.join(", ")),
            Outcome::Unchanged => "unchanged".to_string(),
        };
        ctx.ui.detail(format!(
            "parameter {} ({}, {} tier): {what}",
            parameter.name,
            parameter.kind.as_str(),
            parameter.tier.as_str()
        ));
    }
    if let Some(role) = &report.role {
        ctx.ui
            .detail(format!("IAM role {}: {}", role.arn, role.outcome_word()));
    }
    if ctx.ui.json() {
        ctx.ui
            .emit_json(&serde_json::to_value(&report).expect("report serializes"));
    }
    Ok(0)
}
