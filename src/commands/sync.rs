//! `devstack sync`: republish the manifests and wait for the chain.

use serde_json::json;

use crate::cli::SyncArgs;
use crate::commands::Context;
use crate::error::Error;
use crate::gitops::{self, DeliverOptions};

/// Installs Flux when needed, republishes the manifests and waits until the
/// chain is Ready again.
pub async fn run(ctx: &Context, args: SyncArgs) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    gitops::repository::check_substitution(&settings)?;
    let client = crate::k8s::stack_client(&settings).await?;
    // The manifests go to the bucket in LocalStack.
    let reached = crate::localstack::in_cluster::reach(&settings).await?;
    let settings = &reached.settings;
    let options = DeliverOptions {
        nudge: !args.no_nudge,
        ..DeliverOptions::default()
    };
    let runner = crate::pipeline::Runner::new(&ctx.ui);
    let report = gitops::deliver(&client, settings, options, &runner).await?;
    if ctx.ui.json() {
        ctx.ui.emit_json(&json!(report));
    }
    Ok(0)
}
