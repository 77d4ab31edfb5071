//! The `cluster` section: provider, node image, node counts and ports.

use std::net::IpAddr;

use super::{BIND_ADDRESS_HINT, Resolver};
use crate::envvars;
use crate::error::Error;
use crate::profile::schema::{ClusterSpec, PortMappingSpec, Provider};
use crate::profile::settings::ClusterSettings;
use crate::versions;

pub(super) fn resolve(
    r: &mut Resolver,
    spec: Option<ClusterSpec>,
) -> Result<ClusterSettings, Error> {
    let provider = provider(r, spec.as_ref())?;
    if provider == Provider::Existing {
        check_existing(r, spec.as_ref());
    }
    let context = r.overrides.context.clone();
    let env_context = r.env(envvars::DEVSTACK_CONTEXT);
    let profile_context = spec.as_ref().and_then(|c| c.context.clone());
    let context = match (context, env_context, profile_context) {
        (None, None, None) => None,
        (flag, env, profile) => Some(r.pick("cluster.context", flag, env, profile, String::new())),
    };
    let (version, image, servers, agents, api_port, ports, mirrors, kubeconfig, k3s_args) =
        match spec {
            Some(c) => (
                c.version,
                c.image,
                c.servers,
                c.agents,
                c.api_server_port,
                c.ports,
                c.registry_mirrors,
                c.kubeconfig,
                c.k3s_args,
            ),
            None => Default::default(),
        };
    let asked_version = if image.is_none() {
        version.clone()
    } else {
        None
    };
    let image = match (image, version) {
        (Some(image), _) => image,
        (None, Some(version)) => node_image_for_version(provider, &version),
        (None, None) => match provider {
            Provider::K3s => versions::K3S_IMAGE.to_string(),
            Provider::Kind => versions::KIND_NODE_IMAGE.to_string(),
            Provider::Existing => String::new(),
        },
    };
    // The user's own context is already in their kubeconfig.
    let merge = provider != Provider::Existing;
    let servers = servers.unwrap_or(1);
    check_servers(r, provider, servers);
    check_ports(r, &ports);
    Ok(ClusterSettings {
        provider,
        image,
        version: asked_version,
        servers,
        agents: agents.unwrap_or(0),
        api_server_port: api_port.unwrap_or_default(),
        ports,
        registry_mirrors: mirrors,
        merge_kubeconfig: merge && kubeconfig.as_ref().and_then(|k| k.merge).unwrap_or(true),
        switch_context: kubeconfig
            .as_ref()
            .and_then(|k| k.switch_context)
            .unwrap_or(false),
        k3s_args,
        context,
    })
}

/// What only a cluster devstack creates has: refused for `existing`.
fn check_existing(r: &mut Resolver, spec: Option<&ClusterSpec>) {
    let Some(spec) = spec else { return };
    let set = [
        ("version", spec.version.is_some()),
        ("image", spec.image.is_some()),
        ("servers", spec.servers.is_some()),
        ("agents", spec.agents.is_some()),
        ("apiServerPort", spec.api_server_port.is_some()),
        ("ports", !spec.ports.is_empty()),
        ("registryMirrors", !spec.registry_mirrors.is_empty()),
        ("k3sArgs", !spec.k3s_args.is_empty()),
    ];
    for (key, _) in set.iter().filter(|(_, set)| *set) {
        r.problems.at_path(
            &format!("cluster.{key}"),
            format!(
                "`cluster.{key}` shapes a cluster devstack creates, and `cluster.provider: existing` uses one it did not"
            ),
            Some(format!(
                "remove `cluster.{key}`, or use `cluster.provider: kind` or `k3s`"
            )),
        );
    }
}

fn provider(r: &mut Resolver, spec: Option<&ClusterSpec>) -> Result<Provider, Error> {
    let env_provider = match r.env(envvars::DEVSTACK_PROVIDER).as_deref() {
        None => None,
        Some("k3s") => Some(Provider::K3s),
        Some("kind") => Some(Provider::Kind),
        Some("existing") => Some(Provider::Existing),
        Some(other) => {
            return Err(Error::user(format!(
                "environment variable {} has an invalid value `{other}`",
                envvars::DEVSTACK_PROVIDER
            ))
            .with_hint("use `k3s`, `kind` or `existing`"));
        }
    };
    // A context names a cluster that exists, so a context alone picks the
    // existing provider, at the level it was given: `--context` as a flag,
    // DEVSTACK_CONTEXT as a variable (beating a profile's provider, losing
    // to `--provider`). A provider named at the same level still wins.
    let implied = |context: Option<&String>| context.map(|_| Provider::Existing);
    let flag = r
        .overrides
        .provider
        .or(implied(r.overrides.context.as_ref()));
    let env = env_provider.or(implied(r.env(envvars::DEVSTACK_CONTEXT).as_ref()));
    Ok(r.pick(
        "cluster.provider",
        flag,
        env,
        spec.map(|c| c.provider),
        // K3s past 1.32 cannot be built offline; `up` falls back to it without a kind CLI.
        Provider::Kind,
    ))
}

fn check_servers(r: &mut Resolver, provider: Provider, servers: u8) {
    if servers == 0 {
        r.problems.at_path(
            "cluster.servers",
            "`cluster.servers` must be at least 1".into(),
            None,
        );
    }
    if provider == Provider::K3s && servers > 1 {
        r.problems.at_path(
            "cluster.servers",
            format!("`cluster.servers: {servers}` is not supported with provider k3s"),
            Some("use one server and add `cluster.agents` for more nodes".into()),
        );
    }
}

fn check_ports(r: &mut Resolver, ports: &[PortMappingSpec]) {
    for (index, mapping) in ports.iter().enumerate() {
        if mapping.bind_address.parse::<IpAddr>().is_err() {
            r.problems.at_path(
                &format!("cluster.ports[{index}].bindAddress"),
                format!(
                    "`cluster.ports` bindAddress `{}` is not an IP address",
                    mapping.bind_address
                ),
                Some(BIND_ADDRESS_HINT.into()),
            );
        }
        if !matches!(mapping.protocol.as_str(), "tcp" | "udp" | "sctp") {
            r.problems.at_path(
                &format!("cluster.ports[{index}].protocol"),
                format!(
                    "`cluster.ports` protocol `{}` is not tcp, udp or sctp",
                    mapping.protocol
                ),
                Some("use tcp (the default), udp or sctp".into()),
            );
        }
    }
}

fn node_image_for_version(provider: Provider, version: &str) -> String {
    let v = if version.starts_with('v') {
        version.to_string()
    } else {
        format!("v{version}")
    };
    match provider {
        Provider::K3s if v.contains("k3s") => format!("rancher/k3s:{v}"),
        Provider::K3s => format!("rancher/k3s:{v}-k3s1"),
        Provider::Kind => format!("kindest/node:{v}"),
        Provider::Existing => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use crate::profile::load::parse_for_test;
    use crate::profile::resolve::resolve_with_env;
    use crate::profile::settings::{Origin, Overrides, Settings};
    use crate::profile::{LocalStackMode, Provider};

    const HEADER: &str = "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: x\n";

    fn resolve(profile: &str, flags: &Overrides, env: &[(&str, &str)]) -> Settings {
        let env: HashMap<&str, &str> = env.iter().copied().collect();
        let lookup = |name: &str| env.get(name).map(|v| v.to_string());
        let loaded = parse_for_test(&format!("{HEADER}{profile}")).unwrap();
        resolve_with_env(loaded, flags, &lookup).unwrap()
    }

    const CONTEXT: (&str, &str) = ("DEVSTACK_CONTEXT", "kind-ci");

    #[test]
    fn the_context_variable_alone_picks_the_existing_provider() {
        let s = resolve("", &Overrides::default(), &[CONTEXT]);
        assert_eq!(s.cluster.provider, Provider::Existing);
        assert_eq!(s.origins["cluster.provider"], Origin::Env);
        assert_eq!(s.cluster.context.as_deref(), Some("kind-ci"));
        assert_eq!(s.localstack.mode, LocalStackMode::InCluster);

        let s = resolve("", &Overrides::default(), &[]);
        assert_eq!(s.cluster.provider, Provider::Kind);
        assert_eq!(s.origins["cluster.provider"], Origin::Default);
    }

    #[test]
    fn the_context_variable_beats_the_profile_and_loses_to_the_flags() {
        let kind = "cluster:\n  provider: kind\n";
        let s = resolve(kind, &Overrides::default(), &[CONTEXT]);
        assert_eq!(s.cluster.provider, Provider::Existing, "env > profile");

        let flag = Overrides {
            provider: Some(Provider::K3s),
            ..Overrides::default()
        };
        let s = resolve("", &flag, &[CONTEXT]);
        assert_eq!(s.cluster.provider, Provider::K3s, "flag > env");
        assert_eq!(s.origins["cluster.provider"], Origin::Flag);

        // A provider named beside the context, at the same level, is what was asked for.
        let s = resolve(
            "",
            &Overrides::default(),
            &[CONTEXT, ("DEVSTACK_PROVIDER", "k3s")],
        );
        assert_eq!(s.cluster.provider, Provider::K3s);
        let flag = Overrides {
            context: Some("kind-other".into()),
            ..Overrides::default()
        };
        let s = resolve(kind, &flag, &[("DEVSTACK_PROVIDER", "k3s")]);
        assert_eq!(s.cluster.provider, Provider::Existing, "--context > env");
        assert_eq!(s.cluster.context.as_deref(), Some("kind-other"));
    }
}
