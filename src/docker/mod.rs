//! The only module that talks to the Docker engine (through bollard).

use std::time::Duration;

use bollard::Docker;

use crate::envvars;
use crate::error::{Error, Kind};

/// Label carried by everything devstack creates; listing and deleting go by
/// label filters, never by name patterns.
pub const LABEL_MANAGED_BY: &str = "dev.devstack.managed-by";
pub const MANAGED_BY_VALUE: &str = "devstack";
/// The stack a resource belongs to.
pub const LABEL_STACK: &str = "dev.devstack.stack";
/// What the resource is within the stack (localstack, node, network, ...).
pub const LABEL_ROLE: &str = "dev.devstack.role";
/// Hash of the settings a container was created from; a different hash
/// means the container must be recreated.
pub const LABEL_SPEC_HASH: &str = "dev.devstack.spec-hash";

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the engine is expected, for messages.
pub fn engine_address() -> String {
    envvars::get(envvars::DOCKER_HOST).unwrap_or_else(|| "unix:///var/run/docker.sock".into())
}

fn unreachable(detail: impl std::fmt::Display) -> Error {
    let address = engine_address();
    let hint = if envvars::is_set(envvars::DOCKER_HOST) {
        format!(
            "start the Docker engine at {address}, or unset DOCKER_HOST to use the local socket"
        )
    } else {
        "start the Docker engine (e.g. `sudo systemctl start docker`, or `sudo dockerd &`), \
         or set DOCKER_HOST to its address"
            .to_string()
    };
    Error::prerequisite(format!(
        "cannot reach the Docker engine at {address}: {detail}"
    ))
    .with_hint(hint)
}

/// Connects, negotiates the API version with the engine and pings it.
pub async fn connect() -> Result<Docker, Error> {
    let docker = Docker::connect_with_defaults().map_err(unreachable)?;
    let docker = tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version())
        .await
        .map_err(|_| unreachable("no answer within 10s"))?
        .map_err(unreachable)?;
    tokio::time::timeout(CONNECT_TIMEOUT, docker.ping())
        .await
        .map_err(|_| unreachable("no answer within 10s"))?
        .map_err(unreachable)?;
    Ok(docker)
}

/// Label filter selecting one stack's resources (or all stacks' with `None`).
pub fn stack_filter(stack: Option<&str>) -> Vec<String> {
    let mut labels = vec![format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}")];
    if let Some(stack) = stack {
        labels.push(format!("{LABEL_STACK}={stack}"));
    }
    labels
}

/// Maps an engine error to a devstack error, recognising the engine going away.
pub fn engine_error(what: impl std::fmt::Display, err: bollard::errors::Error) -> Error {
    use bollard::errors::Error as E;
    match &err {
        E::HyperResponseError { .. }
        | E::IOError { .. }
        | E::RequestTimeoutError
        | E::SocketNotFoundError(_) => unreachable(format!("{what}: {err}")),
        _ => Error::new(Kind::Internal, format!("{what}: {}", docker_message(&err))),
    }
}

/// The engine's own message for a failed request, without bollard's wrapping.
pub fn docker_message(err: &bollard::errors::Error) -> String {
    match err {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

pub fn is_not_found(err: &bollard::errors::Error) -> bool {
    matches!(
        err,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

pub fn is_conflict(err: &bollard::errors::Error) -> bool {
    matches!(
        err,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 409,
            ..
        }
    )
}
