//! The steps of `up` that make the stack's parts: the artifacts, the
//! network, LocalStack (then seeding) and the cluster. LocalStack reports
//! the port it is reached at, and from it the run's settings are derived,
//! once, for every step after.

use std::sync::Arc;

use super::found::Found;
use super::preflight::Preflight;
use super::run::UpRun;
use crate::cluster::{self, Provisioned};
use crate::docker;
use crate::error::Error;
use crate::gitops;
use crate::k8s::forward::PortForward;
use crate::localstack::{self, LocalStackReport};
use crate::profile::{Provider, Settings};
use crate::registry::{self, RegistryReport};
use crate::seed::{self, SeedOptions, SeedReport};
use crate::snapshot;
use crate::ui::Step;

/// LocalStack as the run left it, seeded.
pub(super) struct LocalStackUp {
    pub report: LocalStackReport,
    pub seeded: SeedReport,
    /// What the run found, with the port LocalStack is reached at.
    pub found: Found,
    /// `found.settings(asked)`: the run's settings from LocalStack on,
    /// which every client uses.
    pub settings: Settings,
    /// The GitOps bucket was there: LocalStack kept its state.
    pub kept_state: bool,
    /// The way in to LocalStack in the cluster, open while the run needs it.
    _forward: Option<PortForward>,
}

impl UpRun<'_> {
    /// Online, every artifact is fetched and checked before anything is
    /// created, into the cache the rest of `up` reads like a bundle.
    pub(super) async fn pull_artifacts(
        &self,
        settings: &Settings,
    ) -> Result<Option<crate::artifacts::PullReport>, Error> {
        if settings.images.bundle.is_some() {
            return Ok(None);
        }
        let docker = self.docker.as_ref();
        // Nodes that are not containers here pull the images themselves.
        let images =
            settings.cluster.provider != Provider::Existing || docker::answers(docker).await;
        let report = self
            .runner
            .step("Artifacts", None, |step: Arc<Step>| async move {
                let report = crate::artifacts::pull(
                    docker,
                    settings,
                    crate::artifacts::PullOptions {
                        dir: settings.artifact_cache(),
                        with_kind: false,
                        images,
                        progress: &|m| step.progress(m),
                    },
                )
                .await?;
                let mut summary = report.summary();
                if !images {
                    summary.push_str(
                        "; no Docker engine on this machine: the cluster's nodes pull the images",
                    );
                }
                Ok((report, summary))
            })
            .await?;
        Ok(Some(report))
    }

    /// The stack network, created once for LocalStack and the nodes to join
    /// (on the snapshot's addressing when restoring).
    pub(super) async fn create_network(&self, settings: &Settings) -> Result<(), Error> {
        let network = localstack::network_name(settings);
        let addressing = self.restore.and_then(|s| s.manifest.addressing());
        if docker::ensure_network_in(
            self.docker.as_ref(),
            &settings.name,
            &network,
            addressing.as_ref(),
        )
        .await?
        {
            let docker = self.docker.clone();
            self.runner.created(format!("network {network}"), move || {
                Box::pin(async move {
                    docker::remove_network_if_unused(docker.as_ref(), &network)
                        .await
                        .map(|_| ())
                })
            });
        }
        Ok(())
    }

    /// Records the cluster for removal when this run makes (or remakes) it.
    pub(super) fn record_new_cluster(&self, preflight: &Preflight) {
        if !preflight.plan.creates(self.recreate) {
            return;
        }
        let settings = &preflight.settings;
        let engine = self.docker.clone();
        let (asked, found) = (self.stack.asked.clone(), preflight.found.clone());
        let owned = settings.clone();
        let ui = self.stack.ui.clone();
        let what = match settings.cluster.provider {
            Provider::Existing => "what the stack put in the existing cluster".to_string(),
            provider => format!("{} cluster", provider.as_str()),
        };
        self.runner.created(what, move || {
            Box::pin(async move {
                super::uninstall_from_existing(&asked, &found, &ui).await?;
                cluster::delete(&engine, &owned).await.map(|_| ())
            })
        });
    }

    /// LocalStack (then seeding), the cluster and the registry: side by
    /// side with the LocalStack container, and LocalStack after the cluster
    /// when it runs in it. Returns them with a client of the cluster.
    pub(super) async fn localstack_and_cluster(
        &self,
        preflight: &Preflight,
    ) -> Result<
        (
            LocalStackUp,
            Provisioned,
            kube::Client,
            Option<RegistryReport>,
        ),
        Error,
    > {
        if preflight.settings.localstack.in_cluster() {
            let (provisioned, registry) =
                tokio::try_join!(self.provision_cluster(preflight), self.registry(preflight))?;
            let client = crate::k8s::client_from_kubeconfig(&provisioned.info.kubeconfig).await?;
            let localstack = self
                .in_cluster_localstack_and_seed(preflight, &client)
                .await?;
            return Ok((localstack, provisioned, client, registry));
        }
        let (localstack, provisioned, registry) = tokio::try_join!(
            self.localstack_and_seed(preflight),
            self.provision_cluster(preflight),
            self.registry(preflight)
        )?;
        let client = crate::k8s::client_from_kubeconfig(&provisioned.info.kubeconfig).await?;
        Ok((localstack, provisioned, client, registry))
    }

    /// The Registry step (`registry.enabled`), beside the cluster: neither
    /// waits for the other, since the nodes reach the registry only when a
    /// pod pulls from it.
    async fn registry(&self, preflight: &Preflight) -> Result<Option<RegistryReport>, Error> {
        let settings = &preflight.settings;
        if !settings.registry.enabled {
            return Ok(None);
        }
        let (docker, runner, existed) = (self.docker, self.runner, self.existed);
        self.runner
            .step(
                format!("Registry {}", settings.registry.image),
                None,
                |step: Arc<Step>| async move {
                    let report =
                        registry::up(docker, settings, runner, existed, &|m| step.progress(m))
                            .await?;
                    let summary = format!("{} at {}", report.action, report.host);
                    Ok((report, summary))
                },
            )
            .await
            .map(Some)
    }

    /// The LocalStack step (which records the container for removal when
    /// this run makes it), then the Seeding step.
    async fn localstack_and_seed(&self, preflight: &Preflight) -> Result<LocalStackUp, Error> {
        let (docker, settings, runner) = (self.docker, &preflight.settings, self.runner);
        let report = self
            .runner
            .step(
                format!("LocalStack {}", settings.localstack.image),
                None,
                |step: Arc<Step>| async move {
                    let report =
                        localstack::up(docker, settings, runner, &|m| step.progress(m)).await?;
                    let summary = format!("{} at {}", report.action, report.endpoint.url);
                    Ok((report, summary))
                },
            )
            .await?;
        let mut found = preflight.found.clone();
        found.ports.localstack = Some(report.endpoint.host_port);
        self.seeded(report, found, None).await
    }

    /// The LocalStack step with LocalStack in the cluster, reached through
    /// a port-forward that lives as long as the run, then the Seeding step.
    async fn in_cluster_localstack_and_seed(
        &self,
        preflight: &Preflight,
        client: &kube::Client,
    ) -> Result<LocalStackUp, Error> {
        let settings = &preflight.settings;
        let (report, forward) = self
            .runner
            .step(
                format!("LocalStack {} in the cluster", settings.localstack.image),
                None,
                |step: Arc<Step>| async move {
                    let (report, forward) =
                        localstack::in_cluster::up(client, settings, &|m| step.progress(m)).await?;
                    let summary = format!(
                        "{} at {} (a port-forward to {})",
                        report.action, report.endpoint.url, report.endpoint.container
                    );
                    Ok(((report, forward), summary))
                },
            )
            .await?;
        let mut found = preflight.found.clone();
        found.forwarded = Some(forward.local_addr().port());
        self.seeded(report, found, Some(forward)).await
    }

    /// The Seeding step, on LocalStack as the LocalStack step left it, at
    /// the port `found` holds.
    async fn seeded(
        &self,
        report: LocalStackReport,
        found: Found,
        forward: Option<PortForward>,
    ) -> Result<LocalStackUp, Error> {
        let settings = found.settings(&self.stack.asked);
        // Only a LocalStack that lost its state lacks the bucket: community
        // LocalStack keeps none across a restart.
        let kept_state = gitops::source::bucket_exists(&settings).await;
        let seeded = self
            .runner
            .step(
                seed::step_title(&settings),
                Some((seed::default_timeout(&settings), "timeouts.seed")),
                |_| async {
                    let client = crate::aws::secrets_manager(&settings);
                    let report = seed::seed(&settings, &client, SeedOptions::default()).await?;
                    let summary = seed::summary(&report);
                    Ok((report, summary))
                },
            )
            .await?;
        Ok(LocalStackUp {
            report,
            seeded,
            found,
            settings,
            kept_state,
            _forward: forward,
        })
    }

    /// The Cluster step: the nodes restored from the snapshot first, if any.
    async fn provision_cluster(&self, preflight: &Preflight) -> Result<Provisioned, Error> {
        let (settings, plan) = (&preflight.settings, &preflight.plan);
        let engine = self.docker;
        let (restore, recreate) = (self.restore, self.recreate);
        self.runner
            .step(
                match settings.cluster.provider {
                    Provider::Existing => format!(
                        "Cluster (existing, context {})",
                        settings.cluster.context.as_deref().unwrap_or("current")
                    ),
                    provider => format!(
                        "Cluster ({}, {})",
                        provider.as_str(),
                        settings.cluster.image
                    ),
                },
                None,
                |step: Arc<Step>| async move {
                    let options = cluster::ProvisionOptions {
                        recreate,
                        // The Flux step waits for it, while Flux installs.
                        coredns_later: true,
                        images_restored: restore.is_some(),
                    };
                    if let Some(snapshot) = restore {
                        snapshot::restore_nodes(engine.as_ref(), settings, snapshot, &step).await?;
                    }
                    let provisioned =
                        cluster::provision(engine, settings, plan, options, &step).await?;
                    let summary = provisioned.info.summary();
                    Ok((provisioned, summary))
                },
            )
            .await
    }
}
