//! `devstack localstack up|down|logs|status|forward`: the stack's LocalStack alone.

use std::sync::Arc;

use serde_json::json;

use crate::cli::{LocalstackCommand, ShellKind};
use crate::commands::Context;
use crate::docker::{self, Engine};
use crate::error::Error;
use crate::localstack::{self, LocalStackReport};
use crate::pipeline::{Interrupts, Runner};
use crate::profile::Settings;

pub async fn run(ctx: &Context, cmd: LocalstackCommand) -> Result<i32, Error> {
    match cmd {
        LocalstackCommand::Up {
            port,
            image,
            retain,
        } => {
            let settings = ctx.settings(|o| {
                o.localstack_port = port;
                o.localstack_image = image;
            })?;
            let _lock = lock(ctx, &settings, "localstack up").await?;
            if settings.localstack.in_cluster() {
                return up_in_cluster(ctx, &settings).await;
            }
            let docker = docker::connect().await?;
            let report = up_container(ctx, &docker, &settings, retain).await?;
            crate::stack::record_localstack_port(&settings, report.endpoint.host_port)?;
            if reroute(&docker, &settings).await? {
                ctx.ui.info(format!(
                    "pods reach it at {}",
                    crate::k8s::localstack_in_cluster_url(&settings.names)
                ));
            }
            if ctx.ui.json() {
                ctx.ui
                    .emit_json(&serde_json::to_value(&report).expect("report serializes"));
            }
            Ok(0)
        }
        LocalstackCommand::Down => {
            let settings = ctx.settings(|_| {})?;
            if settings.localstack.in_cluster() {
                return Err(Error::user(format!(
                    "stack `{}` runs LocalStack in its cluster, as the Flux level `localstack` the External Secrets Operator depends on: removed alone, Flux would bring it back",
                    settings.name
                ))
                .with_hint(
                    "`devstack down` removes the whole stack",
                ));
            }
            let _lock = lock(ctx, &settings, "localstack down").await?;
            let docker = docker::connect().await?;
            let removed = localstack::down(docker.as_ref(), &settings).await?;
            let name = localstack::container_name(&settings);
            ctx.ui.info(if removed {
                format!("removed {name}")
            } else {
                format!("{name} was not there")
            });
            if ctx.ui.json() {
                ctx.ui
                    .emit_json(&json!({"container": name, "removed": removed}));
            }
            Ok(0)
        }
        LocalstackCommand::Logs(lines) => {
            let settings = ctx.settings(|_| {})?;
            let options = super::logs::options(&lines);
            let component = Some(crate::logs::Component::Localstack);
            super::logs::show(ctx, &settings, component, options).await
        }
        LocalstackCommand::Forward { port, shell } => {
            let settings = ctx.settings(|_| {})?;
            forward(ctx, &settings, port, shell).await
        }
        LocalstackCommand::Status => status(ctx).await,
    }
}

/// `localstack up` with LocalStack a container: one step, whose container
/// a failure or a signal removes, as `up`'s rollback does, unless `retain`.
async fn up_container(
    ctx: &Context,
    engine: &Arc<dyn Engine>,
    settings: &Settings,
    retain: bool,
) -> Result<LocalStackReport, Error> {
    let interrupts = Interrupts::watch(true);
    let runner = Runner::with_cancel(&ctx.ui, interrupts.cancel.clone());
    let title = format!("LocalStack {}", settings.localstack.image);
    let recorder = &runner;
    let up = runner.step(title, None, |step| async move {
        let report = localstack::up(engine, settings, recorder, &|m| step.progress(m)).await?;
        let summary = format!("{} at {}", report.action, report.endpoint.url);
        Ok((report, summary))
    });
    match up.await {
        Ok(report) => Ok(report),
        // Nothing to roll back: the error as it is.
        Err(err) if runner.created_names().is_empty() => Err(interrupts.attribute(err)),
        Err(err) => {
            let err = runner
                .roll_back_after(err, false, retain, &interrupts.received)
                .await;
            Err(interrupts.attribute(err))
        }
    }
}

/// After LocalStack (re)starts: re-points the stack's cluster, when it has
/// one, at the container's (possibly new) address.
async fn reroute(engine: &Arc<dyn Engine>, settings: &Settings) -> Result<bool, Error> {
    let path = crate::state::kubeconfig_path(settings);
    let Ok(kubeconfig) = std::fs::read_to_string(&path) else {
        return Ok(false);
    };
    if !crate::cluster::exists(engine, settings).await? {
        return Ok(false);
    }
    let client = crate::k8s::client_from_kubeconfig(&kubeconfig).await?;
    localstack::route_for_pods(engine.as_ref(), settings, &client).await
}

/// The stack's lock, as `up` and `down` take it, for `localstack up|down`
/// and `cluster up|down`: `down` (or `down --all`) lists the stack's
/// containers once, so a LocalStack or a node created meanwhile would keep
/// the stack network in use and the `down` would fail half-way.
pub(super) async fn lock(
    ctx: &Context,
    settings: &Settings,
    command: &str,
) -> Result<crate::state::StackLock, Error> {
    let ui = ctx.ui.clone();
    crate::state::StackLock::acquire(settings, command, &move |m| ui.info(m)).await
}

/// `localstack up` with LocalStack in the cluster: its objects applied and
/// waited on, as `up` does.
async fn up_in_cluster(ctx: &Context, settings: &Settings) -> Result<i32, Error> {
    let client = crate::k8s::stack_client(settings).await.map_err(|e| {
        e.context("LocalStack runs in the stack's cluster, which does not answer")
            .with_hint("`devstack up` creates the whole stack")
    })?;
    let step = ctx.ui.step(format!(
        "LocalStack {} in the cluster",
        settings.localstack.image
    ));
    let (report, _forward) =
        match localstack::in_cluster::up(&client, settings, &|m| step.progress(m)).await {
            Ok(up) => up,
            Err(e) => {
                step.fail("failed");
                return Err(e);
            }
        };
    step.done(format!(
        "{} ({} at {})",
        report.action,
        report.endpoint.container,
        crate::k8s::localstack_in_cluster_url(&settings.names)
    ));
    if ctx.ui.json() {
        ctx.ui
            .emit_json(&serde_json::to_value(&report).expect("report serializes"));
    }
    Ok(0)
}

/// Holds a port-forward to LocalStack in the cluster open until Ctrl-C,
/// SIGTERM or SIGHUP, after one health check through it, with the
/// variables that reach it.
async fn forward(
    ctx: &Context,
    settings: &Settings,
    port: Option<u16>,
    shell: ShellKind,
) -> Result<i32, Error> {
    if !settings.localstack.in_cluster() {
        return Err(Error::user(format!(
            "stack `{}` runs LocalStack as a container published on this machine at {}: there is nothing to forward",
            settings.name,
            settings.localstack.endpoint_url()
        ))
        .with_hint(
            "`devstack env` prints its variables; `localstack.mode: in-cluster` runs it in the cluster",
        ));
    }
    let client = crate::k8s::stack_client(settings).await?;
    let forward = localstack::in_cluster::open_forward(&client, &settings.names, port).await?;
    let health = localstack::HealthClient::new(&forward.url())?
        .services()
        .await;
    if let Err(why) = health {
        return Err(Error::unhealthy(format!(
            "LocalStack in the cluster does not answer through the port-forward: {}",
            forward.last_error().unwrap_or(why)
        ))
        .with_hint("`devstack status` shows its Deployment; `devstack up` repairs it"));
    }
    let bound = settings.with_localstack_port(forward.local_addr().port());
    let format = if ctx.ui.json() {
        ShellKind::Json
    } else {
        shell
    };
    ctx.ui.print(format_args!(
        "{}\n",
        super::env::render(&crate::stack::exports(&bound), format)
    ));
    ctx.ui.info(format!(
        "forwarding {} to {} in the cluster; Ctrl-C closes it",
        forward.url(),
        crate::k8s::localstack_in_cluster_url(&settings.names)
    ));
    let interrupts = crate::pipeline::Interrupts::watch(true);
    interrupts.cancel.cancelled().await;
    drop(forward);
    Ok(0)
}

/// `localstack status`: where it runs and what its health check says.
async fn status(ctx: &Context) -> Result<i32, Error> {
    let settings = ctx.settings(|_| {})?;
    let reached = localstack::in_cluster::reach(&settings).await;
    let (name, state) = if settings.localstack.in_cluster() {
        let name = format!(
            "{}/{}",
            settings.names.localstack_namespace(),
            settings.names.localstack_service()
        );
        let state = reached.as_ref().ok().map(|_| "in the cluster".to_string());
        (name, state)
    } else {
        let docker = docker::connect().await?;
        let name = localstack::container_name(&settings);
        let state = docker::inspect(docker.as_ref(), &name)
            .await?
            .and_then(|c| c.state)
            .and_then(|s| s.status)
            .map(|s| s.to_string());
        (name, state)
    };
    let reached = reached?;
    let settings = reached.settings;
    let health = localstack::HealthClient::new(&settings.localstack.endpoint_url())?
        .services()
        .await;
    let healthy = health
        .as_ref()
        .is_ok_and(|services| localstack::unavailable_services(&settings, services).is_empty());
    if ctx.ui.json() {
        ctx.ui.emit_json(&json!({
            "container": name,
            "state": state,
            "url": settings.localstack.endpoint_url(),
            "healthy": healthy,
            "services": health.as_ref().ok(),
        }));
    } else {
        ctx.ui.out(format!(
            "{} {name}: {} at {}",
            ctx.ui.check_mark(healthy),
            state.as_deref().unwrap_or("absent"),
            settings.localstack.endpoint_url()
        ));
        if let Ok(services) = &health {
            for s in &settings.localstack.services {
                ctx.ui.out(format!(
                    "  {s}: {}",
                    services.get(s).map(String::as_str).unwrap_or("absent")
                ));
            }
        }
    }
    if healthy {
        Ok(0)
    } else {
        Err(
            Error::unhealthy(format!("LocalStack {name} is not healthy"))
                .with_hint("`devstack localstack up` starts or repairs it"),
        )
    }
}
