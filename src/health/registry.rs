//! The `registry` row of `status`: the stack's registry container runs.

use super::{Health, StatusRow};
use crate::docker;
use crate::profile::Settings;

/// `None` when the stack has no registry (or no port for it yet).
pub(super) async fn row(settings: &Settings) -> Option<StatusRow> {
    let host = settings.registry.host()?;
    let name = crate::registry::container_name(settings);
    let up = "`devstack up` starts or repairs it";
    let Ok(docker) = docker::connect().await else {
        return Some(
            StatusRow::new("registry", name, Health::Unhealthy, "Docker unreachable").hint(up),
        );
    };
    let status = crate::registry::status(docker.as_ref(), settings).await?;
    Some(if status.running {
        StatusRow::new("registry", name, Health::Healthy, "running").detail(format!("at {host}"))
    } else {
        StatusRow::new("registry", name, Health::Missing, "not running")
            .detail(format!("at {host}"))
            .hint(up)
    })
}
