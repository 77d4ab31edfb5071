//! `devstack up`: the library's `Stack::up`, rendered, with the next commands.

use crate::cli::UpArgs;
use crate::commands::Context;
use crate::error::Error;
use crate::profile::LocalStackMode;
use crate::stack::{Stack, UpOptions, UpReport};
use crate::timeline::Timeline;

pub async fn run(ctx: &Context, args: UpArgs) -> Result<i32, Error> {
    let timeline = Timeline::new();
    let stack = Stack::new(ctx.asked(|_| {})?)
        .with_ui(ctx.ui.clone())
        .with_timeline(timeline.clone());
    let options = UpOptions {
        retain: args.retain,
        verify: args.no_verify.then_some(false),
        recreate: args.recreate,
        handle_interrupt: true,
    };
    let result = match &args.from_snapshot {
        Some(name) => stack.up_from_snapshot(name, options).await,
        None => stack.up(options).await,
    };
    if let Some(path) = &args.timings {
        // Written before the outcome is judged: a failed run's waterfall
        // shows what ran until the failure.
        let title = format!(
            "devstack up `{}`{}",
            stack.name(),
            if result.is_ok() { "" } else { " (failed)" }
        );
        let page = crate::timeline::html(&title, &timeline.spans(), timeline.now_ms());
        match std::fs::write(path, page) {
            Ok(()) => ctx.ui.info(format!("timings: {}", path.display())),
            Err(e) => ctx
                .ui
                .warn(format!("could not write {}: {e}", path.display())),
        }
    }
    // A failed run was diagnosed before its rollback.
    let report = result?;
    let restored = report
        .from_snapshot
        .as_ref()
        .map(|name| format!("created from snapshot `{name}`"));
    let what = if let Some(restored) = &restored {
        restored.as_str()
    } else if report.created {
        "created"
    } else if report.repaired.is_empty() {
        "healthy, nothing to do"
    } else {
        "repaired"
    };
    render(ctx, &stack, &report, what);
    Ok(0)
}

/// The end of a run that brought the stack up (`up`, `start`): how, in how
/// long, the Kubernetes version's warnings, the next commands, and with
/// `--json` the report.
pub fn render(ctx: &Context, stack: &Stack, report: &UpReport, what: &str) {
    ctx.ui.info(format!(
        "stack `{}` is up ({what}) in {}",
        report.stack,
        crate::ui::format_duration(std::time::Duration::from_millis(report.elapsed_ms))
    ));
    if let Some(check) = &report.kubernetes {
        for warning in &check.warnings {
            ctx.ui
                .warn(format!("Kubernetes {} is {warning}", check.version));
        }
    }
    ctx.ui.info(next_commands(
        &stack.settings().cli_flags(),
        stack.settings().localstack.mode,
    ));
    if let Some(registry) = &report.registry {
        ctx.ui.info(format!(
            "registry: docker push {}/APP, and the same reference in pod specs",
            registry.host
        ));
        let context = stack.settings().kube_context();
        for line in crate::registry::tool_settings(&context, &registry.host) {
            ctx.ui.info(format!("  {line}"));
        }
    }
    if ctx.ui.json() {
        ctx.ui
            .emit_json(&serde_json::to_value(report).expect("report serializes"));
    }
}

/// What to run next, each command carrying the flags that reach this stack.
pub fn next_commands(flags: &str, localstack: LocalStackMode) -> String {
    let env = match localstack {
        LocalStackMode::Container => format!(
            "eval \"$(devstack{flags} env)\"        # KUBECONFIG, AWS_ENDPOINT_URL, test credentials"
        ),
        LocalStackMode::InCluster => format!(
            "devstack{flags} localstack forward      # a port-forward to LocalStack, and the variables that reach it"
        ),
    };
    format!(
        "next:\n  {env}\n  kubectl get externalsecrets -A\n  devstack{flags} status\n  devstack{flags} verify\n  devstack{flags} down"
    )
}
