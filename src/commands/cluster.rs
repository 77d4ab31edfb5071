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
    let docker = docker::connect_or_absent(cluster::on_existing_cluster(&settings)).await?;
    let engine: Arc<dyn docker::Engine> = Arc::new(docker.clone());
    match cmd {
        ClusterCommand::Up { retain, recreate } => {
            let (settings, choice) = cluster::choice::settle(&docker, &settings).await?;
            if let Some(notice) = choice.notice() {
                ctx.ui.warn(notice);
            }
            up(
                ctx,
                &docker,
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
            let settings = cluster::choice::on_recorded_provider(&docker, settings).await?;
            let removed = cluster::remove(&engine, &settings).await?;
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
    docker: &bollard::Docker,
    engine: &Arc<dyn docker::Engine>,
    settings: &Settings,
    retain: bool,
    options: ProvisionOptions,
) -> Result<i32, Error> {
    // One rollback owner, as for `up`: the runner undoes a cluster this run
    // created when provisioning fails or Ctrl-C cancels it.
    let interrupts = Interrupts::watch(true);
    let runner = Runner::with_cancel(&ctx.ui, interrupts.cancel.clone());
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
    let info = &provisioned.info;
    let path = &provisioned.kubeconfig_path;
    for repair in &info.repaired {
        ctx.ui.info(format!("  repaired: {repair}"));
    }
    let in_cluster = settings.localstack.mode == crate::profile::LocalStackMode::InCluster;
    let routed = in_cluster
        || crate::localstack::route_localstack(docker, settings, &info.kubeconfig).await?;
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
