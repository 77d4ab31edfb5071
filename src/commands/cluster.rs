//! `devstack cluster up|down`: the stack's cluster alone.

use std::sync::Arc;

use serde_json::json;

use crate::cli::ClusterCommand;
use crate::cluster::{self, ProvisionOptions};
use crate::commands::Context;
use crate::error::Error;
use crate::pipeline::{Interrupts, Runner};
use crate::profile::Settings;
use crate::{docker, k8s};

pub async fn run(ctx: &Context, cmd: ClusterCommand) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    let engine = docker::connect_or_absent(cluster::on_existing_cluster(&settings)).await?;
    match cmd {
        ClusterCommand::Up { retain, recreate } => {
            let recorded = crate::stack::Found::recorded(&settings).provider();
            let (settings, choice) = cluster::choice::settle(&engine, &settings, recorded).await?;
            if let Some(notice) = choice.notice() {
                ctx.ui.warn(notice);
            }
            up(
                ctx,
                &engine,
                &settings,
                retain,
                ProvisionOptions {
                    recreate,
                    coredns_later: false,
                    images_restored: false,
                },
            )
            .await
        }
        ClusterCommand::Down => {
            let _lock = super::localstack::lock(ctx, &settings, "cluster down").await?;
            let settings = crate::stack::recorded_on_its_provider(&engine, &settings).await?;
            let removed = cluster::delete(&engine, &settings).await?;
            ctx.ui.info(if removed {
                format!(
                    "removed the {} cluster of stack `{}`",
                    settings.cluster.provider.as_str(),
                    settings.name
                )
            } else {
                format!("stack `{}` has no cluster", settings.name)
            });
            if ctx.ui.json() {
                ctx.ui
                    .emit_json(&json!({"stack": settings.name, "removed": removed}));
            }
            Ok(0)
        }
    }
}

pub async fn up(
    ctx: &Context,
    engine: &Arc<dyn docker::Engine>,
    settings: &Settings,
    retain: bool,
    options: ProvisionOptions,
) -> Result<i32, Error> {
    // One rollback owner, as for `up`: the runner undoes a cluster this run
    // created when provisioning fails or Ctrl-C cancels it.
    let interrupts = Interrupts::watch(true);
    // Before the lock, which lives in the same state directory: an
    // unwritable one is the user's to fix, said as such.
    cluster::check_kubeconfig_writable(settings)?;
    // The stack's lock, as `up` takes it: two runs must not create (or one
    // remove) the same cluster at once.
    let _lock = tokio::select! {
        lock = super::localstack::lock(ctx, settings, "cluster up") => lock?,
        _ = interrupts.cancel.cancelled() => return Err(interrupts.attribute(Error::interrupted())),
    };
    let runner = Runner::with_cancel(&ctx.ui, interrupts.cancel.clone());
    // Judged once locked: a run that held the lock may just have created it.
    let existed = cluster::exists(engine, settings).await?;
    crate::stack::record_new_state_dir(&runner, settings);
    let provisioned = match cluster::provision_step(&runner, engine, settings, options).await {
        Ok(provisioned) => provisioned,
        Err(err) => {
            let err = runner
                .roll_back_after(err, existed, retain, &interrupts.received)
                .await;
            return Err(interrupts.attribute(err));
        }
    };
    crate::stack::record_cluster(settings, &provisioned.info)?;
    let info = &provisioned.info;
    let path = &provisioned.kubeconfig_path;
    for repair in &info.repaired {
        ctx.ui.info(format!("  repaired: {repair}"));
    }
    let in_cluster = settings.localstack.mode == crate::profile::LocalStackMode::InCluster;
    let routed = in_cluster || {
        let client = k8s::client_from_kubeconfig(&info.kubeconfig).await?;
        crate::localstack::route_for_pods(engine.as_ref(), settings, &client).await?
    };
    if !routed {
        ctx.ui.warn(format!(
            "LocalStack is not running; pods reach it at {} once `devstack localstack up` starts it",
            k8s::localstack_in_cluster_url(&settings.names)
        ));
    }
    if ctx.ui.json() {
        ctx.ui.emit_json(&json!({
            "cluster": info,
            "kubeconfig": path,
            "mergedInto": provisioned.merged_into,
            "context": settings.kube_context(),
            "localstackInCluster": k8s::localstack_in_cluster_url(&settings.names),
            "localstackRouted": routed,
        }));
    } else {
        ctx.ui.info(format!(
            "kubeconfig: {} (context {})",
            path.display(),
            settings.kube_context()
        ));
        ctx.ui.info(next_command(&settings.cli_flags()));
    }
    Ok(0)
}

/// How to use the new cluster, with the flags that reach this stack (`env`
/// needs LocalStack too, which `cluster up` does not start).
pub fn next_command(flags: &str) -> String {
    format!("next: export KUBECONFIG=\"$(devstack{flags} kubeconfig --path)\"")
}

#[cfg(test)]
mod tests {
    #[test]
    fn next_command_reaches_the_same_stack() {
        assert_eq!(
            super::next_command(" -p ci --name job1"),
            "next: export KUBECONFIG=\"$(devstack -p ci --name job1 kubeconfig --path)\""
        );
    }
}
