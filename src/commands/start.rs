//! `devstack start`: the library's `Stack::start` (`up` on the stopped
//! stack), rendered as `up` is.

use crate::cli::StartArgs;
use crate::commands::Context;
use crate::error::Error;
use crate::stack::{Stack, UpOptions};

pub async fn run(ctx: &Context, args: StartArgs) -> Result<i32, Error> {
    let stack = Stack::new(ctx.asked(|_| {})?).with_ui(ctx.ui.clone());
    let options = UpOptions {
        verify: args.no_verify.then_some(false),
        handle_interrupt: true,
        ..UpOptions::default()
    };
    // A failed `up` was diagnosed before it returned.
    let report = stack.start(options).await?;
    let what = if report.repaired.is_empty() {
        "it was running: nothing to do"
    } else {
        "started"
    };
    crate::commands::up::render(ctx, &stack, &report, what);
    Ok(0)
}
