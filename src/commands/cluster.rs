use serde_json::json;

use crate::cli::ClusterCommand;
use crate::cluster::{self, UpOptions, kubeconfig};
use crate::commands::Context;
use crate::error::Error;
use crate::profile::Settings;
use crate::{docker, k8s, localstack, state};

pub async fn run(ctx: &Context, cmd: ClusterCommand) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    let docker = docker::connect().await?;
    match cmd {
        ClusterCommand::Up { retain } => up(ctx, &docker, &settings, UpOptions { retain }).await,
        ClusterCommand::Down => {
            let removed = down(&docker, &settings).await?;
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

/// Whether the stack has any cluster node container, running or not.
async fn cluster_exists(docker: &bollard::Docker, settings: &Settings) -> Result<bool, Error> {
    let name = cluster::node_name(settings, "server", 0);
    let kind_node = format!("{}-control-plane", settings.resource_prefix());
    Ok(docker::inspect(docker, &name).await?.is_some()
        || docker::inspect(docker, &kind_node).await?.is_some())
}

pub async fn up(
    ctx: &Context,
    docker: &bollard::Docker,
    settings: &Settings,
    options: UpOptions,
) -> Result<i32, Error> {
    // Fail before creating anything when the kubeconfig cannot be written.
    let path = state::kubeconfig_path(&settings.name);
    kubeconfig::check_writable(&path)?;
    if settings.cluster.merge_kubeconfig {
        kubeconfig::check_writable(&kubeconfig::user_kubeconfig_path())?;
    }
    let existed = cluster_exists(docker, settings).await?;
    let step = ctx.ui.step(format!(
        "Cluster ({}, {})",
        settings.cluster.provider.as_str(),
        settings.cluster.image
    ));
    let outcome = tokio::select! {
        result = cluster::up(docker, settings, options, &step) => result,
        _ = tokio::signal::ctrl_c() => {
            let mut err = Error::interrupted();
            if !existed && !options.retain {
                err = match cluster::down(docker, settings).await {
                    Ok(_) => err.context("cluster creation interrupted and rolled back"),
                    Err(e) => err.context(format!("cluster creation interrupted; rollback also failed ({})", e.message())),
                };
            } else if !existed {
                err = err.context("cluster creation interrupted; the half-created cluster is retained (--retain)");
            }
            Err(err)
        }
    };
    let info = match outcome {
        Ok(info) => info,
        Err(e) => {
            step.fail("failed");
            return Err(e);
        }
    };
    let written = kubeconfig::write_private(&path, &info.kubeconfig).and_then(|()| {
        settings
            .cluster
            .merge_kubeconfig
            .then(|| kubeconfig::merge_into_user(&info.kubeconfig, settings.cluster.switch_context))
            .transpose()
    });
    let merged = match written {
        Ok(merged) => merged,
        Err(e) => {
            step.fail("kubeconfig");
            if info.created && !options.retain {
                let _ = down(docker, settings).await;
                return Err(e.context("the cluster was rolled back"));
            }
            return Err(e);
        }
    };
    let what = if info.created {
        "created"
    } else if info.repaired.is_empty() {
        "reused"
    } else {
        "repaired"
    };
    step.done(format!(
        "{what}, {} node(s), API {}",
        info.nodes.len(),
        info.api_server
    ));
    for repair in &info.repaired {
        ctx.ui.info(format!("  repaired: {repair}"));
    }
    let routed = route_localstack(docker, settings, &info.kubeconfig).await?;
    if !routed {
        ctx.ui.warn(format!(
            "LocalStack is not running; pods reach it at {} once `devstack localstack up` starts it",
            k8s::localstack_in_cluster_url()
        ));
    }
    if ctx.ui.json() {
        ctx.ui.emit_json(&json!({
            "cluster": info,
            "kubeconfig": path,
            "mergedInto": merged,
            "context": settings.kube_context(),
            "localstackInCluster": k8s::localstack_in_cluster_url(),
            "localstackRouted": routed,
        }));
    } else {
        ctx.ui.info(format!(
            "kubeconfig: {} (context {})",
            path.display(),
            settings.kube_context()
        ));
        ctx.ui.info(format!(
            "next: export KUBECONFIG={}   # or: eval \"$(devstack env)\"",
            path.display()
        ));
    }
    Ok(0)
}

/// Points the in-cluster LocalStack name at the container, when both exist.
/// Returns whether LocalStack is routed.
pub async fn route_localstack(
    docker: &bollard::Docker,
    settings: &Settings,
    kubeconfig_yaml: &str,
) -> Result<bool, Error> {
    let endpoint = localstack::describe(docker, settings).await?;
    let Some(ip) = endpoint.network_ip else {
        return Ok(false);
    };
    let client = k8s::client_from_kubeconfig(kubeconfig_yaml).await?;
    k8s::route_localstack(&client, &ip).await?;
    Ok(true)
}

/// After LocalStack (re)starts: re-point the cluster at its new address when
/// the stack has a reachable cluster.
pub async fn reroute_after_localstack(
    docker: &bollard::Docker,
    settings: &Settings,
) -> Result<bool, Error> {
    let path = state::kubeconfig_path(&settings.name);
    let Ok(config) = std::fs::read_to_string(&path) else {
        return Ok(false);
    };
    if !cluster_exists(docker, settings).await? {
        return Ok(false);
    }
    route_localstack(docker, settings, &config).await
}

pub async fn down(docker: &bollard::Docker, settings: &Settings) -> Result<bool, Error> {
    let removed = cluster::down(docker, settings).await?;
    let path = state::kubeconfig_path(&settings.name);
    let had_file = std::fs::remove_file(&path).is_ok();
    let had_context = kubeconfig::remove_from_user(&settings.kube_context())?;
    docker::remove_network_if_unused(docker, &settings.resource_prefix()).await?;
    Ok(removed || had_file || had_context)
}
