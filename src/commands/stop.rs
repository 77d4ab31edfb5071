//! `devstack stop`: the library's `Stack::stop`, rendered.

use crate::commands::Context;
use crate::error::Error;
use crate::stack::Stack;

pub async fn run(ctx: &Context) -> Result<i32, Error> {
    let stack = Stack::new(ctx.asked(|_| {})?).with_ui(ctx.ui.clone());
    let report = stack.stop().await?;
    let flags = stack.settings().cli_flags();
    let took = crate::ui::format_duration(std::time::Duration::from_millis(report.elapsed_ms));
    ctx.ui.info(if report.stopped.is_empty() {
        format!("stack `{}` was stopped already", report.stack)
    } else {
        format!(
            "stack `{}` is stopped in {took}: {} (volumes, network and kubeconfig kept)",
            report.stack,
            report.stopped.join(", ")
        )
    });
    ctx.ui.info(format!(
        "next:\n  devstack{flags} start      # verified again"
    ));
    if ctx.ui.json() {
        ctx.ui
            .emit_json(&serde_json::to_value(&report).expect("report serializes"));
    }
    Ok(0)
}
