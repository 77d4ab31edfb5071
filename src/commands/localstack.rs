//! `devstack localstack up|down|logs|status`: the stack's LocalStack alone.

use serde_json::json;

use crate::cli::LocalstackCommand;
use crate::commands::Context;
use crate::docker;
use crate::error::Error;
use crate::localstack;

pub async fn run(ctx: &Context, cmd: LocalstackCommand) -> Result<i32, Error> {
    match cmd {
        LocalstackCommand::Up { port, image } => {
            let settings = ctx.settings(|o| {
                o.localstack_port = port;
                o.localstack_image = image;
            })?;
            let docker = docker::connect().await?;
            let step = ctx
                .ui
                .step(format!("LocalStack {}", settings.localstack.image));
            let report = match localstack::up(&docker, &settings, &|m| step.progress(m)).await {
                Ok(r) => r,
                Err(e) => {
                    step.fail("failed");
                    return Err(e);
                }
            };
            step.done(format!("{} at {}", report.action, report.endpoint.url));
            if crate::cluster::reroute_after_localstack(&docker, &settings).await? {
                ctx.ui.info(format!(
                    "pods reach it at {}",
                    crate::k8s::localstack_in_cluster_url()
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
            let docker = docker::connect().await?;
            let removed = localstack::down(&docker, &settings).await?;
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
        LocalstackCommand::Logs { tail, follow } => {
            let settings = ctx.settings(|_| {})?;
            let options = crate::logs::Options {
                tail: Some(tail as u64),
                follow,
                since: None,
            };
            let component = Some(crate::logs::Component::Localstack);
            super::logs::show(ctx, &settings, component, options).await
        }
        LocalstackCommand::Status => {
            let settings = ctx.settings(|_| {})?;
            let docker = docker::connect().await?;
            let name = localstack::container_name(&settings);
            let state = docker::inspect(&docker, &name)
                .await?
                .and_then(|c| c.state)
                .and_then(|s| s.status)
                .map(|s| s.to_string());
            let health = localstack::HealthClient::new(&settings.localstack.endpoint_url())?
                .services()
                .await;
            let healthy = health.as_ref().is_ok_and(|services| {
                localstack::unavailable_services(&settings, services).is_empty()
            });
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
    }
}
