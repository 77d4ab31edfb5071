//! `devstack verify`: the round trip, cancellable with Ctrl-C, SIGTERM or
//! SIGHUP.

use crate::cli::VerifyArgs;
use crate::commands::Context;
use crate::error::Error;
use crate::pipeline::Interrupts;
use crate::ui::format_duration;
use crate::verify::{self, VerifyOptions};

pub async fn run(ctx: &Context, args: VerifyArgs) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    let reached = crate::localstack::in_cluster::reach(&settings).await?;
    let settings = &reached.settings;
    let client = crate::k8s::stack_client(settings).await?;
    // A signal stops the checks; the probe objects are still removed. The
    // round trip's cleanup is bounded, so it watches only the first signal.
    let interrupts = Interrupts::watch(true);
    let options = VerifyOptions {
        push_secret: args.push_secret,
        timeout: None,
        cancel: Some(interrupts.cancel.clone()),
    };
    let result = verify::run(settings, &client, options, &ctx.ui)
        .await
        .map_err(|e| interrupts.attribute(e));
    drop(interrupts);
    let report = match result {
        Ok(report) => report,
        Err(err) => return Err(crate::commands::diagnose::point(ctx, err).await),
    };
    ctx.ui.info(format!(
        "{} {} in {}",
        ctx.ui.check_mark(report.passed),
        report.summary(),
        format_duration(std::time::Duration::from_millis(report.elapsed_ms))
    ));
    if ctx.ui.json() {
        ctx.ui
            .emit_json(&serde_json::to_value(&report).expect("report serializes"));
    }
    match report.to_error(settings) {
        Some(err) => Err(crate::commands::diagnose::point(ctx, err).await),
        None => Ok(0),
    }
}
