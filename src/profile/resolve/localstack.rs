//! The `localstack` section: image, port, services and the auth token's variable.

use std::net::IpAddr;

use super::{BIND_ADDRESS_HINT, Resolver};
use crate::envvars;
use crate::error::Error;
use crate::profile::schema::{
    HostPort, LocalStackMode, LocalStackSpec, PORT_FORMS, Provider, default_bind_address,
};
use crate::profile::settings::{
    DEFAULT_LOCALSTACK_SERVICES, LocalStackSettings, REQUIRED_LOCALSTACK_SERVICES,
};
use crate::versions;

pub(super) fn resolve(
    r: &mut Resolver,
    spec: Option<LocalStackSpec>,
    provider: Provider,
) -> Result<LocalStackSettings, Error> {
    let image = r.pick(
        "localstack.image",
        r.overrides.localstack_image.clone(),
        r.env(envvars::DEVSTACK_LOCALSTACK_IMAGE),
        spec.as_ref().and_then(|l| l.image.clone()),
        versions::LOCALSTACK_IMAGE.to_string(),
    );
    let port = r.pick(
        "localstack.port",
        r.overrides.localstack_port,
        r.env_parsed::<HostPort>(envvars::DEVSTACK_LOCALSTACK_PORT, PORT_FORMS)?,
        spec.as_ref().and_then(|l| l.port),
        HostPort::Auto,
    );
    let services = services(r, spec.as_ref());
    let bind = spec
        .as_ref()
        .and_then(|l| l.bind_address.clone())
        .unwrap_or_else(default_bind_address);
    let bind_address: IpAddr = bind.parse().unwrap_or_else(|_| {
        r.problems.at_path(
            "localstack.bindAddress",
            format!("`localstack.bindAddress` `{bind}` is not an IP address"),
            Some(BIND_ADDRESS_HINT.into()),
        );
        IpAddr::from([127, 0, 0, 1])
    });
    let auth_token_env = spec
        .as_ref()
        .and_then(|l| l.auth_token_env.clone())
        .unwrap_or_else(|| envvars::LOCALSTACK_AUTH_TOKEN.to_string());
    // Pods of a cluster devstack did not create cannot reach a container here.
    let default_mode = match provider {
        Provider::Existing => LocalStackMode::InCluster,
        Provider::K3s | Provider::Kind => LocalStackMode::Container,
    };
    let mode = r.pick(
        "localstack.mode",
        None,
        None,
        spec.as_ref().and_then(|l| l.mode),
        default_mode,
    );
    if provider == Provider::Existing && mode == LocalStackMode::Container {
        r.problems.at_path(
            "localstack.mode",
            "`localstack.mode: container` runs LocalStack on this machine, which the pods of an existing cluster cannot reach".into(),
            Some("use `localstack.mode: in-cluster` (the default with `cluster.provider: existing`)".into()),
        );
    }
    Ok(LocalStackSettings {
        mode,
        image,
        services,
        port,
        bound_port: None,
        bind_address,
        region: spec
            .as_ref()
            .and_then(|l| l.region.clone())
            .unwrap_or_else(|| "us-east-1".into()),
        auth_token_present: r.env(&auth_token_env).is_some(),
        auth_token_env,
        env: spec.map(|l| l.env).unwrap_or_default(),
    })
}

/// The services to start, which must include the ones the stack needs.
fn services(r: &mut Resolver, spec: Option<&LocalStackSpec>) -> Vec<String> {
    let services: Vec<String> = spec.and_then(|l| l.services.clone()).unwrap_or_else(|| {
        DEFAULT_LOCALSTACK_SERVICES
            .iter()
            .map(|s| s.to_string())
            .collect()
    });
    for (required, why) in REQUIRED_LOCALSTACK_SERVICES {
        if !services.iter().any(|s| s == required) {
            r.problems.at_path(
                "localstack.services",
                format!("`localstack.services` lacks `{required}`, which {why}"),
                Some(format!("add `{required}` to localstack.services")),
            );
        }
    }
    services
}
