//! The `cluster` section: provider, node image, node counts and ports.

use std::net::IpAddr;

use super::{BIND_ADDRESS_HINT, Resolver};
use crate::envvars;
use crate::error::Error;
use crate::profile::load::Provenance;
use crate::profile::schema::{ClusterSpec, PortMappingSpec, Provider};
use crate::profile::settings::{ClusterSettings, Origin};
use crate::versions;

pub(super) fn resolve(
    r: &mut Resolver,
    mut spec: Option<ClusterSpec>,
) -> Result<ClusterSettings, Error> {
    let provider = provider(r, spec.as_ref())?;
    let context = context(r, spec.as_ref(), provider)?;
    if provider == Provider::Existing
        && let Some(spec) = spec.as_mut()
    {
        set_aside_node_shape(r, spec, context.as_deref());
    }
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
    // The user's own context is already in their kubeconfig: nothing is
    // merged, so nothing is switched to either.
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
        switch_context: merge
            && kubeconfig
                .as_ref()
                .and_then(|k| k.switch_context)
                .unwrap_or(false),
        k3s_args,
        context,
    })
}

/// The kubeconfig context of an existing cluster. With a provider that
/// creates its cluster, a context is refused where both were given at one
/// level (flags, the environment, the profile), and set aside with a notice
/// where the provider was given at a higher one: kept, it would be shown
/// and never used.
fn context(
    r: &mut Resolver,
    spec: Option<&ClusterSpec>,
    provider: Provider,
) -> Result<Option<String>, Error> {
    let flag = r.overrides.context.clone();
    let env = r.env(envvars::DEVSTACK_CONTEXT);
    let profile = spec.and_then(|c| c.context.clone());
    if flag.is_none() && env.is_none() && profile.is_none() {
        return Ok(None);
    }
    let context = r.pick("cluster.context", flag, env, profile, String::new());
    if provider == Provider::Existing {
        return Ok(Some(context));
    }
    let provider_origin = r.origins["cluster.provider"];
    let context_origin = r.origins["cluster.context"];
    let name = provider.as_str();
    let given_provider = match provider_origin {
        Origin::Flag => format!("`--provider {name}`"),
        Origin::Env => format!("`{}={name}`", envvars::DEVSTACK_PROVIDER),
        Origin::Profile | Origin::Default => format!("`cluster.provider: {name}`"),
    };
    match context_origin {
        Origin::Flag | Origin::Env if context_origin == provider_origin => {
            let (given_context, drop_provider, drop_context) = if context_origin == Origin::Flag {
                (
                    format!("`--context {context}`"),
                    "drop `--provider`".to_string(),
                    "drop `--context`".to_string(),
                )
            } else {
                (
                    format!("`{}={context}`", envvars::DEVSTACK_CONTEXT),
                    format!("unset {}", envvars::DEVSTACK_PROVIDER),
                    format!("unset {}", envvars::DEVSTACK_CONTEXT),
                )
            };
            Err(Error::user(format!(
                "{given_provider} creates a cluster, and {given_context} names one that exists"
            ))
            .with_hint(format!(
                "{drop_provider} to install the stack into the cluster of context `{context}`, or {drop_context} to have devstack create a {name} cluster"
            )))
        }
        Origin::Profile if provider_origin == Origin::Profile => {
            r.problems.at_path(
                "cluster.context",
                format!(
                    "`cluster.context` names an existing cluster, and `cluster.provider: {name}` creates one"
                ),
                Some(format!(
                    "use `cluster.provider: existing` to install the stack into the cluster of context `{context}`, or remove `cluster.context`"
                )),
            );
            Ok(None)
        }
        _ => {
            let given_context = match context_origin {
                Origin::Flag => format!("`--context {context}`"),
                Origin::Env => format!("`{}={context}`", envvars::DEVSTACK_CONTEXT),
                Origin::Profile | Origin::Default => {
                    format!("`cluster.context: {context}` of the profile")
                }
            };
            r.notices.push(format!(
                "ignoring {given_context}: {given_provider} has devstack create the cluster"
            ));
            r.origins.remove("cluster.context");
            Ok(None)
        }
    }
}

/// What only a cluster devstack creates has, with the existing provider:
/// set aside with a notice when devstack wrote it (a shipped profile made
/// for a cluster devstack creates, used with `--context`), refused when the
/// user did.
fn set_aside_node_shape(r: &mut Resolver, spec: &mut ClusterSpec, context: Option<&str>) {
    let set = [
        ("version", spec.version.take().is_some()),
        ("image", spec.image.take().is_some()),
        ("servers", spec.servers.take().is_some()),
        ("agents", spec.agents.take().is_some()),
        ("apiServerPort", spec.api_server_port.take().is_some()),
        ("ports", !std::mem::take(&mut spec.ports).is_empty()),
        (
            "registryMirrors",
            !std::mem::take(&mut spec.registry_mirrors).is_empty(),
        ),
        ("k3sArgs", !std::mem::take(&mut spec.k3s_args).is_empty()),
    ];
    let keys: Vec<&str> = set
        .iter()
        .filter(|(_, set)| *set)
        .map(|(k, _)| *k)
        .collect();
    if keys.is_empty() {
        return;
    }
    let (uses, undo) = existing_because(r, context);
    let shipped = match r.provenance {
        Provenance::Shipped(name) => Some(format!("the shipped profile {name}")),
        Provenance::BuiltIn => Some("the built-in default".to_string()),
        Provenance::File => None,
    };
    if let Some(shipped) = shipped {
        let listed: Vec<String> = keys.iter().map(|k| format!("cluster.{k}")).collect();
        r.notices.push(format!(
            "ignoring {} of {shipped}: they shape a cluster devstack creates, and {uses}",
            listed.join(", ")
        ));
        return;
    }
    for key in keys {
        r.problems.at_path(
            &format!("cluster.{key}"),
            format!("`cluster.{key}` shapes a cluster devstack creates, and {uses}"),
            Some(format!(
                "remove `cluster.{key}` from the profile, or {undo}"
            )),
        );
    }
}

/// What made the provider `existing`, as the end of a sentence ("`--context
/// kind-ci` uses a cluster devstack did not create"), and how to undo it.
fn existing_because(r: &Resolver, context: Option<&str>) -> (String, String) {
    let create = "to have devstack create the cluster";
    let chosen_by_context = |given: String, undo: String| {
        (
            format!("{given} uses a cluster devstack did not create"),
            undo,
        )
    };
    let cluster = match context {
        Some(context) => format!("the cluster of context `{context}`"),
        None => "the current context's cluster".to_string(),
    };
    let chosen_by_provider = |given: String, undo: String| {
        (
            format!("{given} uses {cluster}, which devstack did not create"),
            undo,
        )
    };
    match (r.origins.get("cluster.provider"), context) {
        (Some(Origin::Flag), Some(context)) if r.overrides.provider.is_none() => chosen_by_context(
            format!("`--context {context}`"),
            format!("drop `--context` {create}"),
        ),
        (Some(Origin::Env), Some(context)) if r.env(envvars::DEVSTACK_PROVIDER).is_none() => {
            chosen_by_context(
                format!("`{}={context}`", envvars::DEVSTACK_CONTEXT),
                format!("unset {} {create}", envvars::DEVSTACK_CONTEXT),
            )
        }
        (Some(Origin::Flag), _) => chosen_by_provider(
            "`--provider existing`".into(),
            format!("drop `--provider existing` {create}"),
        ),
        (Some(Origin::Env), _) => chosen_by_provider(
            format!("`{}=existing`", envvars::DEVSTACK_PROVIDER),
            format!("unset {} {create}", envvars::DEVSTACK_PROVIDER),
        ),
        _ => chosen_by_provider(
            "`cluster.provider: existing`".into(),
            "use `cluster.provider: kind` or `k3s`".into(),
        ),
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
    // to `--provider`). A provider named at the same level is taken here,
    // and the pair refused by `context`.
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
            Some("use `servers: 1` (one control plane), or remove it for the default 1".into()),
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

        let flag = Overrides {
            context: Some("kind-other".into()),
            ..Overrides::default()
        };
        let s = resolve(kind, &flag, &[("DEVSTACK_PROVIDER", "k3s")]);
        assert_eq!(s.cluster.provider, Provider::Existing, "--context > env");
        assert_eq!(s.cluster.context.as_deref(), Some("kind-other"));
    }
}
