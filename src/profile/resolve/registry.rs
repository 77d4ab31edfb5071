//! The `registry` section: the stack's own image registry.

use super::Resolver;
use crate::profile::load::Provenance;
use crate::profile::schema::{HostPort, Provider, RegistrySpec};
use crate::profile::settings::{ClusterSettings, LocalStackSettings, RegistrySettings};
use crate::versions;

pub(super) fn resolve(
    r: &mut Resolver,
    spec: Option<RegistrySpec>,
    cluster: &ClusterSettings,
    localstack: &LocalStackSettings,
) -> RegistrySettings {
    let mut enabled = spec.as_ref().and_then(|s| s.enabled).unwrap_or(false);
    // A shipped profile run on an existing cluster (`-p dev --context x`)
    // loses its registry as it loses its node shape: said, not refused.
    if enabled
        && cluster.provider == Provider::Existing
        && let Provenance::Shipped(name) = r.provenance
    {
        r.notices.push(format!(
            "ignoring registry.enabled of the shipped profile {name}: the nodes of a cluster devstack did not create cannot pull from a registry on this machine"
        ));
        enabled = false;
    }
    let port = spec.as_ref().and_then(|s| s.port).unwrap_or(HostPort::Auto);
    let image = spec
        .as_ref()
        .and_then(|s| s.image.clone())
        .unwrap_or_else(|| versions::REGISTRY_IMAGE.to_string());
    if enabled && cluster.provider == Provider::Existing {
        r.problems.at_path(
            "registry.enabled",
            "`registry.enabled` runs a registry on this machine, which the nodes of an existing cluster cannot pull from".into(),
            Some("push to a registry the cluster already pulls from, or remove `registry` from the profile".into()),
        );
    }
    if let Some(fixed) = port.fixed().filter(|_| enabled) {
        let taken = [
            (
                "localstack.port",
                localstack.port.fixed().filter(|_| !localstack.in_cluster()),
            ),
            ("cluster.apiServerPort", cluster.api_server_port.fixed()),
        ]
        .into_iter()
        .chain(
            cluster
                .ports
                .iter()
                .map(|p| ("cluster.ports", Some(p.host_port))),
        )
        .find(|(_, other)| *other == Some(fixed));
        if let Some((key, _)) = taken {
            r.problems.at_path(
                "registry.port",
                format!("`registry.port` {fixed} is also `{key}`'s host port"),
                Some("give the registry another port, or `port: auto` for a free one".into()),
            );
        }
    }
    RegistrySettings {
        enabled,
        image,
        port,
        bound_port: None,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::profile::HostPort;
    use crate::profile::settings::{Overrides, Settings};

    const HEADER: &str = "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: x\n";

    fn resolved(body: &str) -> crate::Result<Settings> {
        let text = format!("{HEADER}{body}");
        let loaded = crate::profile::load::parse_recovering("test.yaml", &text, PathBuf::from("."))
            .map_err(crate::profile::ProfileErrors::into_error)?;
        super::super::resolve_with_env(loaded, &Overrides::default(), &|_| None)
    }

    #[test]
    fn the_registry_is_off_unless_asked_and_auto_by_default() {
        let off = resolved("").unwrap();
        assert!(!off.registry.enabled);
        assert_eq!(off.registry.host(), None);
        let on = resolved("registry: {enabled: true}\n").unwrap();
        assert!(on.registry.enabled);
        assert_eq!(on.registry.port, HostPort::Auto);
        assert_eq!(on.registry.image, crate::versions::REGISTRY_IMAGE);
        assert_eq!(on.registry.host(), None, "no port before the stack is made");
        let fixed = resolved("registry: {enabled: true, port: 5111}\n").unwrap();
        assert_eq!(fixed.registry.host().as_deref(), Some("localhost:5111"));
    }

    #[test]
    fn registry_mistakes_are_reported_at_their_key_with_a_hint() {
        let err = resolved("registry: {enabled: yes-please}\n").unwrap_err();
        assert!(err.message().contains("test.yaml:4:"), "{}", err.message());
        let err = resolved("registry:\n  enabled: true\n  prot: 5000\n").unwrap_err();
        assert!(
            err.message()
                .contains("test.yaml:6:3: unknown key `prot` in `registry`"),
            "{}",
            err.message()
        );
        let err = resolved("localstack: {port: 4566}\nregistry:\n  enabled: true\n  port: 4566\n")
            .unwrap_err();
        assert_eq!(err.kind(), crate::Kind::User);
        assert!(
            err.message().contains(
                "test.yaml:7:9: `registry.port` 4566 is also `localstack.port`'s host port"
            ),
            "{}",
            err.message()
        );
        let said = format!("{}\n{}", err.message(), err.hint().unwrap_or_default());
        assert!(said.contains("give the registry another port"), "{said}");
        let err =
            resolved("cluster:\n  provider: existing\nregistry:\n  enabled: true\n").unwrap_err();
        assert!(
            err.message()
                .contains("`registry.enabled` runs a registry on this machine"),
            "{}",
            err.message()
        );
    }
}
