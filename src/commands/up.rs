use crate::cli::UpArgs;
use crate::commands::Context;
use crate::error::Error;
use crate::stack::{Stack, UpOptions};

pub async fn run(ctx: &Context, args: UpArgs) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    let stack = Stack::new(settings).with_ui(ctx.ui.clone());
    let options = UpOptions {
        retain: args.retain,
        verify: args.no_verify.then_some(false),
        handle_interrupt: true,
    };
    let report = stack.up(options).await?;
    let what = if report.created {
        "created"
    } else if report.repaired.is_empty() {
        "healthy, nothing to do"
    } else {
        "repaired"
    };
    ctx.ui.info(format!(
        "stack `{}` is up ({what}) in {}",
        report.stack,
        crate::ui::format_duration(std::time::Duration::from_millis(report.elapsed_ms))
    ));
    let profile = ctx
        .global
        .profile
        .as_deref()
        .map(|p| format!(" -p {p}"))
        .unwrap_or_default();
    ctx.ui.info(format!(
        "next:\n  eval \"$(devstack{profile} env)\"        # KUBECONFIG, AWS_ENDPOINT_URL, test credentials\n  kubectl get externalsecrets -A\n  devstack{profile} status\n  devstack{profile} verify\n  devstack{profile} down"
    ));
    if ctx.ui.json() {
        ctx.ui
            .emit_json(&serde_json::to_value(&report).expect("report serializes"));
    }
    Ok(0)
}
