//! What was asked apart from what was found. The profile resolves once into
//! [`Settings`], which nothing changes afterwards; what a run finds out
//! that the profile cannot say is one [`Found`] value beside it, the way
//! kind's `ActionContext` keeps its config apart from its cache of what it
//! discovered. Code below the orchestrator reads one `Settings`, so
//! [`Found::settings`] is the one function that puts the two together.

use serde::Serialize;

use crate::cluster::ClusterInfo;
use crate::cluster::choice::{Choice, Reason};
use crate::error::Error;
use crate::profile::{ClusterEso, HostPort, Provider, Settings};
use crate::state::{Ports, StackRecord};

/// What devstack found out about a stack at run time: the provider
/// settled and why, the host ports bound, and what the cluster holds for
/// the stack. (Not the facts, which are the values the GitOps manifests
/// substitute.)
///
/// `up` starts it from the stack's record and the provider it settles,
/// adds what Preflight learns from the cluster and the ports the LocalStack
/// and Cluster steps bind, and writes it to the record once
/// ([`Found::record`]); every other command reads it back from there
/// ([`Found::recorded`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// The provider the stack's cluster runs on, and what settled it:
    /// `None` when no run settled one yet (the profile's is then used).
    pub choice: Option<Choice>,
    /// LocalStack's container port (`auto` chooses it when the container
    /// is created) and the API server's.
    pub ports: Ports,
    /// The local end of this run's port-forward to LocalStack in the
    /// cluster: how this machine reaches it while the run lasts, never
    /// recorded.
    pub forwarded: Option<u16>,
    pub cluster: OnCluster,
}

/// What the stack's cluster holds for it. Only a cluster devstack did not
/// create holds anything (other stacks, an ESO of its own, nodes that are
/// not containers here); on one devstack made this is the default. The
/// profile refuses a LocalStack container beside such a cluster
/// (`profile::resolve::localstack`), so only a stack whose LocalStack runs
/// in the cluster ever finds anything here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OnCluster {
    /// The nodes pull the stack's images themselves: they are not
    /// containers of this machine's Docker engine.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub nodes_pull: bool,
    /// The cluster's own External Secrets Operator serves the stack
    /// (`eso.install`): devstack installs none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_eso: Option<ClusterEso>,
    /// Another stack came first on the cluster: this one names its objects
    /// after itself and uses the first one's ESO CRDs and webhook.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shares_cluster: bool,
}

impl Found {
    /// What the stack's record says. A recorded provider the profile cannot
    /// run on (several servers on K3s) is left out: the profile's is used.
    pub fn recorded(asked: &Settings) -> Found {
        let record = StackRecord::load(asked);
        let choice = record
            .provider
            .filter(|provider| asked.with_provider(*provider).is_ok())
            .map(|provider| Choice {
                provider,
                reason: Reason::Recorded,
            });
        Found {
            choice,
            ports: record.ports,
            forwarded: None,
            cluster: OnCluster {
                nodes_pull: record.nodes_pull,
                cluster_eso: record.cluster_eso,
                shares_cluster: record.shares_cluster,
            },
        }
    }

    /// The provider found: the one a run settled, or the stack's record
    /// names.
    pub fn provider(&self) -> Option<Provider> {
        self.choice.as_ref().map(|choice| choice.provider)
    }

    /// Whether the stack is on a cluster devstack did not create, as its
    /// [`Self::settings`] say: such a stack needs no Docker engine on this
    /// machine ([`crate::docker::connect_or_absent`]).
    pub fn on_existing_cluster(&self, asked: &Settings) -> bool {
        let found = self.provider().filter(|_| !asked.provider_pinned());
        found.unwrap_or(asked.cluster.provider) == Provider::Existing
    }

    /// The settings lower layers read for a run: `asked` on the provider
    /// found (unless the profile pins one), with the LocalStack port this
    /// machine reaches, the cluster's ESO, where the nodes get their images
    /// and the names on a shared cluster. The only place a run's findings
    /// reach `Settings`.
    pub fn settings(&self, asked: &Settings) -> Settings {
        let on_provider = self
            .provider()
            .filter(|_| !asked.provider_pinned())
            .and_then(|provider| asked.with_provider(provider).ok());
        let mut settings = on_provider.unwrap_or_else(|| asked.clone());
        settings.images.nodes_pull = self.cluster.nodes_pull;
        settings.eso.cluster = self.cluster.cluster_eso.clone();
        if self.cluster.shares_cluster && !settings.names.shares_cluster() {
            settings.share_cluster();
        }
        // A fixed port is the profile's; `auto` is the one recorded.
        let recorded = match asked.localstack.port {
            HostPort::Auto => self.ports.localstack,
            HostPort::Fixed(_) => None,
        };
        settings.localstack.bound_port = self.forwarded.or(recorded);
        if asked.registry.port == HostPort::Auto {
            settings.registry.bound_port = self.ports.registry;
        }
        // The nodes pull `localhost:<port>/…` from the registry container,
        // by the mechanism `cluster.registryMirrors` uses.
        if let Some(host) = settings.registry.host() {
            let endpoint = crate::registry::endpoint_for_nodes(&settings);
            settings
                .cluster
                .registry_mirrors
                .entry(host)
                .or_insert_with(|| vec![endpoint]);
        }
        settings
    }

    /// Writes what the run found to the stack's record, for the commands
    /// and runs after it: the one writer of the record in a run.
    pub fn record(&self, settings: &Settings) -> Result<(), Error> {
        StackRecord::update(settings, |record| {
            record.ports = self.ports;
            if let Some(provider) = self.provider() {
                record.provider = Some(provider);
            }
            record.nodes_pull = self.cluster.nodes_pull;
            record.cluster_eso = self.cluster.cluster_eso.clone();
            record.shares_cluster = self.cluster.shares_cluster;
        })
    }
}

/// `asked` with what the stack's record knows: the settings of a command
/// that acts on a stack an `up` made.
pub fn recorded_settings(asked: &Settings) -> Settings {
    Found::recorded(asked).settings(asked)
}

/// Records what `devstack localstack up` found: the port its container
/// publishes.
pub fn record_localstack_port(settings: &Settings, port: u16) -> Result<(), Error> {
    let mut found = Found::recorded(settings);
    found.ports.localstack = Some(port);
    found.record(settings)
}

/// Records what `devstack cluster up` found: the provider the cluster was
/// made with and its API server's port.
pub fn record_cluster(settings: &Settings, info: &ClusterInfo) -> Result<(), Error> {
    let mut found = Found::recorded(settings);
    found.choice = Some(Choice {
        provider: settings.cluster.provider,
        reason: Reason::Recorded,
    });
    found.ports.api_server = info.api_port();
    found.record(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(dir: &std::path::Path) -> Settings {
        let mut settings = Settings::builtin(&Default::default()).unwrap();
        settings.state_dir = dir.to_path_buf();
        settings
    }

    #[test]
    fn a_recorded_provider_is_kept_unless_the_profile_pins_one() {
        let dir = tempfile::tempdir().unwrap();
        let settings = asked(dir.path());
        StackRecord::update(&settings, |r| r.provider = Some(Provider::K3s)).unwrap();
        let unpinned = recorded_settings(&settings);
        assert_eq!(unpinned.cluster.provider, Provider::K3s);
        assert_eq!(unpinned.cluster.image, crate::versions::K3S_IMAGE);

        let mut pinned = settings.clone();
        pinned.origins.insert(
            "cluster.provider".into(),
            crate::profile::settings::Origin::Flag,
        );
        assert_eq!(recorded_settings(&pinned).cluster.provider, Provider::Kind);
    }

    #[test]
    fn what_a_run_found_goes_through_the_record_to_the_next_command() {
        let dir = tempfile::tempdir().unwrap();
        let settings = asked(dir.path());
        assert_eq!(Found::recorded(&settings), Found::default());
        let eso = ClusterEso {
            namespace: "platform".into(),
            deployment: "external-secrets".into(),
            controller_class: Some("dev".into()),
        };
        let found = Found {
            choice: Some(Choice {
                provider: Provider::K3s,
                reason: Reason::KindMissing("no kind".into()),
            }),
            ports: Ports {
                localstack: Some(4711),
                api_server: Some(6443),
                registry: Some(5111),
            },
            forwarded: Some(40123),
            cluster: OnCluster {
                nodes_pull: true,
                cluster_eso: Some(eso.clone()),
                shares_cluster: true,
            },
        };
        let run = found.settings(&settings);
        assert_eq!(run.localstack.host_port(), Some(40123), "the forward's");
        found.record(&run).unwrap();

        let later = Found::recorded(&settings);
        assert_eq!(later.forwarded, None, "a port-forward ends with its run");
        assert_eq!(later.ports, found.ports);
        assert_eq!(later.cluster, found.cluster);
        assert_eq!(later.provider(), Some(Provider::K3s));
        let next = later.settings(&settings);
        assert_eq!(next.localstack.host_port(), Some(4711));
        assert_eq!(next.eso.cluster, Some(eso));
        assert!(next.images.nodes_pull);
        assert!(next.names.shares_cluster());
        assert_eq!(
            next.verify.namespace, run.verify.namespace,
            "shared names once, however often derived"
        );
        assert_eq!(
            later.settings(&next).verify.namespace,
            next.verify.namespace
        );
    }
}
