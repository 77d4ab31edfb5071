//! `Stack::up`: its options, its report, and its steps in the order they run.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::Stack;
use super::repair::{
    CrashedPods, Rescaled, localstack_repair, missing_flux_objects, restore_scaled_down,
};
use super::thread_stack::DeepThreadStack;
use crate::cluster::choice::{self, Choice};
use crate::cluster::{self, Provisioned};
use crate::error::Error;
use crate::gitops::{self, DeliverOptions, DeliverReport};
use crate::health::StatusReport;
use crate::k8s::forward::PortForward;
use crate::k8s::version::KubernetesCheck;
use crate::localstack::{self, LocalStackReport};
use crate::pipeline::{Interrupts, Runner, StepRecord};
use crate::profile::{LocalStackMode, Provider, Settings};
use crate::seed::{self, SeedOptions, SeedReport};
use crate::snapshot::{self, AfterRestore, Snapshot};
use crate::timeline::Span;
use crate::ui::Step;
use crate::verify::{VerifyOptions, VerifyReport};
use crate::{docker, state};

#[derive(Debug, Clone, Copy, Default)]
pub struct UpOptions {
    /// Keep a half-created stack on failure or interrupt, for debugging.
    pub retain: bool,
    /// Run the round trip at the end; `None` = the profile's `verify.onUp`.
    pub verify: Option<bool>,
    /// Roll back when Ctrl-C (SIGINT), SIGTERM or SIGHUP arrives (the CLI
    /// sets this; a library caller usually handles signals itself).
    pub handle_interrupt: bool,
    /// Recreate the cluster when it differs from the profile in what its
    /// provider cannot change in place; LocalStack is kept.
    pub recreate: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpReport {
    pub stack: String,
    /// The provider the stack runs on, and what decided it.
    pub provider: Provider,
    pub choice: Choice,
    /// The Kubernetes version the API server reports, and whether the
    /// stack's components support it (`None`: it did not answer).
    pub kubernetes: Option<KubernetesCheck>,
    /// The stack did not exist before this `up`.
    pub created: bool,
    /// The snapshot the stack was created from (`up --from-snapshot`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_snapshot: Option<String>,
    /// What was found drifted and repaired (empty on a healthy stack).
    pub repaired: Vec<String>,
    /// Host ports the stack uses (LocalStack, API server).
    pub ports: state::Ports,
    pub steps: Vec<StepRecord>,
    /// Every step and the parts it timed (image loads, node Ready, CoreDNS,
    /// chain levels, the operator's pods), start and end in milliseconds
    /// from the start of the run.
    pub timings: Vec<Span>,
    /// The artifacts resolved into the cache (`None` with an offline bundle).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<crate::artifacts::PullReport>,
    pub localstack: LocalStackReport,
    pub cluster: Provisioned,
    pub seed: SeedReport,
    pub gitops: DeliverReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<VerifyReport>,
    /// The round trip ran beside the chain's wait: Flux only re-applied
    /// what it had applied before (a restart, a restore), with ESO serving.
    pub verified_beside_chain: bool,
    /// The stack as `devstack status` sees it when `up` returns.
    pub health: StatusReport,
    pub elapsed_ms: u64,
}

impl Stack {
    /// Brings the whole stack up, or converges an existing one: LocalStack
    /// (then seeding) and the cluster concurrently, the in-cluster LocalStack
    /// route, Flux and the External Secrets chain, then the round trip.
    /// A stack this call created is rolled back on failure (and on Ctrl-C,
    /// SIGTERM or SIGHUP with `handle_interrupt`) unless `retain`.
    ///
    /// A profile that does not pin the provider gets the one the stack's
    /// cluster was made with, else Kind, else K3s when no usable kind CLI
    /// is found (said through the ui, and in the report's `choice`).
    pub async fn up(&self, options: UpOptions) -> Result<UpReport, Error> {
        self.timeline.restart();
        // Flux 2.9 fails a Kustomization on a `${VAR}` no fact provides:
        // found before anything is reached or created.
        crate::gitops::repository::preflight(&self.current())?;
        // Listening from here: settling the provider can fetch kind, and a
        // signal then ends the run as a later one does, not the process.
        let interrupts = Interrupts::watch(options.handle_interrupt);
        let docker = self.engine().await?;
        let current = self.current();
        let settled = tokio::select! {
            settled = DeepThreadStack::new(choice::settle(&docker, &current)) => settled?,
            _ = interrupts.cancel.cancelled() => {
                let err = Error::interrupted().context("nothing was created");
                return Err(interrupts.attribute(err));
            }
        };
        let (run, choice) = self.settled(settled);
        DeepThreadStack::new(run.up_locked(&docker, options, None, choice, &interrupts))
            .await
            .map_err(|e| interrupts.attribute(e))
    }

    /// This stack on the settled provider, with the notice the user should
    /// read before anything else.
    fn settled(&self, (settings, choice): (Settings, Choice)) -> (Stack, Choice) {
        if let Some(notice) = choice.notice() {
            self.ui.warn(notice);
        }
        (self.on(settings), choice)
    }

    /// Creates the stack from snapshot `name` ([`Stack::snapshot_save`]):
    /// the cluster from the snapshot's files, LocalStack new and seeded from
    /// the profile, then what `up` does on an existing stack, so Flux and
    /// ESO reconcile to Ready (and the round trip runs) before it returns.
    /// The snapshot must come from this profile and these versions, and the
    /// stack must not exist; a failed restore is rolled back like `up`.
    pub async fn up_from_snapshot(
        &self,
        name: &str,
        options: UpOptions,
    ) -> Result<UpReport, Error> {
        self.timeline.restart();
        crate::gitops::repository::preflight(&self.current())?;
        let (run, choice) = self.settled(choice::settle_for_restore(&self.current())?);
        let snapshot = snapshot::open(&run.settings, name)?;
        let docker = docker::connect().await?;
        let interrupts = Interrupts::watch(options.handle_interrupt);
        DeepThreadStack::new(run.up_locked(&docker, options, Some(&snapshot), choice, &interrupts))
            .await
            .map_err(|e| interrupts.attribute(e))
    }

    async fn up_locked(
        &self,
        docker: &bollard::Docker,
        options: UpOptions,
        restore: Option<&Snapshot>,
        choice: Choice,
        interrupts: &Interrupts,
    ) -> Result<UpReport, Error> {
        let cancel = &interrupts.cancel;
        let _lock = tokio::select! {
            lock = self.lock("up") => lock?,
            _ = cancel.cancelled() => return Err(Error::interrupted()),
        };
        // Judged once locked: a run that held the lock may just have created
        // (or removed) the stack.
        let existed = self.exists(docker).await?;
        if let (true, Some(snapshot)) = (existed, restore) {
            return Err(Error::user(format!(
                "stack `{}` exists, and a snapshot restores into a new stack only",
                self.settings.name
            ))
            .with_hint(format!(
                "remove it first (`devstack down`), or restore snapshot `{}` beside it under another stack name (--name)",
                snapshot.manifest.name
            )));
        }
        let runner =
            Runner::with_cancel(&self.ui, cancel.clone()).with_timeline(self.timeline.clone());
        let run = UpRun {
            stack: self,
            docker,
            existed,
            restore,
            choice,
            options,
            runner: &runner,
        };
        let err = match run.converge().await {
            Ok(report) => return Ok(report),
            Err(err) => err,
        };
        // Read the causes while the stack is still there to read: the
        // rollback removes the evidence.
        let err = if existed || options.retain {
            err
        } else {
            crate::diagnose::point(&self.current(), err).await
        };
        Err(runner
            .roll_back_after(err, existed, options.retain, &interrupts.received)
            .await)
    }
}

/// One run of `up`: what it was asked, what it found, and the runner that
/// times its steps and rolls back what they created.
struct UpRun<'a> {
    stack: &'a Stack,
    docker: &'a bollard::Docker,
    /// The stack existed before this run.
    existed: bool,
    /// The snapshot the cluster is restored from.
    restore: Option<&'a Snapshot>,
    choice: Choice,
    options: UpOptions,
    runner: &'a Runner,
}

/// LocalStack as the run left it, seeded.
struct LocalStackUp {
    report: LocalStackReport,
    seeded: SeedReport,
    /// The settings with LocalStack's port, which every client uses from here on.
    settings: Settings,
    /// The GitOps bucket was there: LocalStack kept its state.
    kept_state: bool,
    /// The way in to LocalStack in the cluster, open while the run needs it.
    _forward: Option<PortForward>,
}

impl UpRun<'_> {
    /// The steps of `up`. Each one that creates something tells the runner
    /// how to remove it, before it starts, so that an error or a Ctrl-C in
    /// the middle of it is undone too.
    async fn converge(&self) -> Result<UpReport, Error> {
        let started = Instant::now();
        self.record_new_state_dir();
        let cluster_plan = self.preflight().await?;
        let artifacts = self.pull_artifacts().await?;
        if self.stack.settings.cluster.provider != Provider::Existing {
            self.create_network().await?;
        }
        let in_cluster = self.stack.settings.localstack.mode == LocalStackMode::InCluster;
        if !in_cluster {
            self.record_new_localstack().await?;
        }
        self.record_new_cluster(&cluster_plan);
        let (localstack, provisioned, client) = if in_cluster {
            // LocalStack runs on the cluster, so it comes after it.
            let provisioned = self.provision_cluster().await?;
            let client = crate::k8s::client_from_kubeconfig(&provisioned.info.kubeconfig).await?;
            let settings = self.what_the_cluster_decides(&provisioned.info)?;
            let localstack = self
                .in_cluster_localstack_and_seed(&settings, &client)
                .await?;
            (localstack, provisioned, client)
        } else {
            let (localstack, provisioned) =
                tokio::try_join!(self.localstack_and_seed(), self.provision_cluster())?;
            let client = crate::k8s::client_from_kubeconfig(&provisioned.info.kubeconfig).await?;
            (localstack, provisioned, client)
        };
        let settings = &localstack.settings;
        let mut repaired = self.localstack_and_cluster_repairs(&localstack, &provisioned);

        let after_restore = self.fix_up_restored_cluster(settings, &client).await?;
        // Only a node that started again (restored, or its container restarted) crashes pods.
        let crashed_pods =
            (self.restore.is_some() || self.existed).then(|| CrashedPods::watch(&client));
        if !in_cluster {
            self.route_localstack(settings, &provisioned).await?;
        }
        let missing_before = self
            .missing_flux_objects(settings, &provisioned, &client)
            .await;
        // The cluster's own ESO is its owners' to scale.
        let rescaled = if self.existed && settings.eso.installs() {
            restore_scaled_down(&client, &settings.names).await
        } else {
            Rescaled::default()
        };
        let verify_on = self.options.verify.unwrap_or(settings.verify.on_up);
        let (gitops, verified_beside) = self.deliver_gitops(settings, &client, verify_on).await?;
        rescaled.wait_available(&client, settings).await?;
        let verified_beside_chain = verified_beside.is_some();
        let verify = self
            .verified(settings, &client, verify_on, verified_beside)
            .await?;

        if self.existed {
            repaired.extend(rescaled.repairs());
            repaired.extend(
                missing_before
                    .into_iter()
                    .map(|o| format!("{o} was missing: restored it")),
            );
            let recreated = crashed_pods.map(|p| p.recreated()).unwrap_or_default();
            repaired.extend(
                recreated
                    .into_iter()
                    .map(|pod| format!("pod {pod} crashed as its node started: recreated it")),
            );
        }
        if let Some(after_restore) = after_restore {
            after_restore.finish().await;
        }
        for repair in &repaired {
            self.stack.ui.info(format!("  repaired: {repair}"));
        }
        // Reported, not judged: with --no-verify ExternalSecrets may still be syncing.
        let health = crate::health::collect(settings).await;
        Ok(UpReport {
            stack: settings.name.clone(),
            provider: settings.cluster.provider,
            choice: self.choice.clone(),
            kubernetes: crate::k8s::version::check(settings).await,
            ports: state::StackRecord::load(settings).ports,
            created: !self.existed,
            from_snapshot: self.restore.map(|s| s.manifest.name.clone()),
            repaired,
            artifacts,
            steps: self.runner.records(),
            timings: self.runner.timeline().spans(),
            localstack: localstack.report,
            cluster: provisioned,
            seed: localstack.seeded,
            gitops,
            verify,
            verified_beside_chain,
            health,
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    fn record_new_state_dir(&self) {
        super::record_new_state_dir(self.runner, &self.stack.settings);
    }

    /// The Preflight step: what the cluster's provider will do.
    async fn preflight(&self) -> Result<cluster::Plan, Error> {
        let settings = &self.stack.settings;
        self.runner
            .step(
                "Preflight",
                Some((settings.timeouts.preflight.get(), "timeouts.preflight")),
                |_| async {
                    preflight(self.docker, settings, self.options.recreate)
                        .await
                        .map(|plan| (plan, String::new()))
                },
            )
            .await
    }

    /// Online, every artifact is fetched and checked before anything is
    /// created, into the cache the rest of `up` reads like a bundle.
    async fn pull_artifacts(&self) -> Result<Option<crate::artifacts::PullReport>, Error> {
        let settings = &self.stack.settings;
        if settings.images.bundle.is_some() {
            return Ok(None);
        }
        let docker = self.docker;
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
    async fn create_network(&self) -> Result<(), Error> {
        let settings = &self.stack.settings;
        let network = localstack::network_name(settings);
        let addressing = self.restore.and_then(|s| s.manifest.addressing());
        if docker::ensure_network_in(self.docker, &settings.name, &network, addressing.as_ref())
            .await?
        {
            let docker = self.docker.clone();
            self.runner.created(format!("network {network}"), move || {
                Box::pin(async move {
                    docker::remove_network_if_unused(&docker, &network)
                        .await
                        .map(|_| ())
                })
            });
        }
        Ok(())
    }

    /// Records the LocalStack container for removal when this run makes it.
    async fn record_new_localstack(&self) -> Result<(), Error> {
        let settings = &self.stack.settings;
        let container = localstack::container_name(settings);
        if docker::inspect(self.docker, &container).await?.is_none() {
            let (docker, owned) = (self.docker.clone(), settings.clone());
            self.runner
                .created(format!("LocalStack container {container}"), move || {
                    Box::pin(async move { localstack::down(&docker, &owned).await.map(|_| ()) })
                });
        }
        Ok(())
    }

    /// Records the cluster for removal when this run makes (or remakes) it.
    fn record_new_cluster(&self, plan: &cluster::Plan) {
        if !plan.creates(self.options.recreate) {
            return;
        }
        let settings = &self.stack.settings;
        let (engine, owned) = (docker::shared(self.docker), settings.clone());
        let ui = self.stack.ui.clone();
        let what = match settings.cluster.provider {
            Provider::Existing => "what the stack put in the existing cluster".to_string(),
            provider => format!("{} cluster", provider.as_str()),
        };
        self.runner.created(what, move || {
            Box::pin(async move {
                super::uninstall_from_existing(&owned, &ui).await?;
                cluster::remove(&engine, &owned).await.map(|_| ())
            })
        });
    }

    /// The LocalStack step, then the Seeding step.
    async fn localstack_and_seed(&self) -> Result<LocalStackUp, Error> {
        let (docker, settings) = (self.docker, &self.stack.settings);
        let report = self
            .runner
            .step(
                format!("LocalStack {}", settings.localstack.image),
                None,
                |step: Arc<Step>| async move {
                    let report = localstack::up(docker, settings, &|m| step.progress(m)).await?;
                    let summary = format!("{} at {}", report.action, report.endpoint.url);
                    Ok((report, summary))
                },
            )
            .await?;
        let bound = settings.with_localstack_port(report.endpoint.host_port);
        self.seeded(report, bound, None).await
    }

    /// The settings with what only the cluster tells, which the stack's
    /// record keeps for later commands: whether its nodes pull the images
    /// themselves (the manifests then name the images in their registries'
    /// mirrors), the cluster's own ESO that serves the stack, and whether
    /// it shares the cluster with a stack that came first.
    fn what_the_cluster_decides(&self, info: &cluster::ClusterInfo) -> Result<Settings, Error> {
        state::StackRecord::update(&self.stack.settings, |r| {
            r.nodes_pull = info.nodes_pull;
            r.cluster_eso = info.cluster_eso.clone();
            r.shares_cluster = info.shares_cluster;
        })?;
        let mut settings = self.stack.settings.clone();
        state::attach_record(&mut settings);
        Ok(settings)
    }

    /// The LocalStack step with LocalStack in the cluster, reached through
    /// a port-forward that lives as long as the run, then the Seeding step.
    async fn in_cluster_localstack_and_seed(
        &self,
        settings: &Settings,
        client: &kube::Client,
    ) -> Result<LocalStackUp, Error> {
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
        let bound = settings.with_localstack_port(forward.local_addr().port());
        self.seeded(report, bound, Some(forward)).await
    }

    /// The Seeding step, on LocalStack as the LocalStack step left it.
    async fn seeded(
        &self,
        report: LocalStackReport,
        bound: Settings,
        forward: Option<PortForward>,
    ) -> Result<LocalStackUp, Error> {
        let settings = &self.stack.settings;
        // Only a LocalStack that lost its state lacks the bucket: community
        // LocalStack keeps none across a restart.
        let kept_state = gitops::source::bucket_exists(&bound).await;
        let seeded = self
            .runner
            .step(
                format!("Seeding {} secret(s)", settings.secrets.len()),
                Some((seed::default_timeout(settings), "timeouts.seed")),
                |_| async {
                    let client = crate::aws::secrets_manager(&bound);
                    let report = seed::seed(&bound, &client, SeedOptions::default()).await?;
                    let summary = seed::summary(&report);
                    Ok((report, summary))
                },
            )
            .await?;
        Ok(LocalStackUp {
            report,
            seeded,
            settings: bound,
            kept_state,
            _forward: forward,
        })
    }

    /// The Cluster step: the nodes restored from the snapshot first, if any.
    async fn provision_cluster(&self) -> Result<Provisioned, Error> {
        let settings = &self.stack.settings;
        let engine = docker::shared(self.docker);
        let (restore, recreate) = (self.restore, self.options.recreate);
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
                    let provisioned = cluster::provision(&engine, settings, options, &step).await?;
                    let summary = provisioned.info.summary();
                    Ok((provisioned, summary))
                },
            )
            .await
    }

    /// What the LocalStack and Cluster steps found drifted on an existing
    /// stack and repaired.
    fn localstack_and_cluster_repairs(
        &self,
        localstack: &LocalStackUp,
        provisioned: &Provisioned,
    ) -> Vec<String> {
        let mut repaired = Vec::new();
        if !self.existed {
            return repaired;
        }
        repaired.extend(localstack_repair(
            &localstack.report.action,
            localstack.kept_state,
            localstack.seeded.created,
        ));
        if provisioned.info.created {
            repaired.push("the cluster was missing: created it".into());
        }
        repaired.extend(provisioned.info.repaired.iter().cloned());
        repaired
    }

    /// On a cluster restored from a snapshot, what it needs once it answers
    /// ([`snapshot::after_restore`]).
    async fn fix_up_restored_cluster(
        &self,
        settings: &Settings,
        client: &kube::Client,
    ) -> Result<Option<AfterRestore>, Error> {
        if self.restore.is_none() {
            return Ok(None);
        }
        let engine = docker::shared(self.docker);
        Ok(Some(
            snapshot::after_restore(engine.as_ref(), settings, client).await?,
        ))
    }

    /// The LocalStack route for pods step: the in-cluster Service that points
    /// at the container.
    async fn route_localstack(
        &self,
        settings: &Settings,
        provisioned: &Provisioned,
    ) -> Result<(), Error> {
        self.runner
            .step("LocalStack route for pods", None, |_| async {
                let routed = localstack::route_localstack(
                    self.docker,
                    settings,
                    &provisioned.info.kubeconfig,
                )
                .await?;
                if !routed {
                    return Err(Error::internal(
                        "LocalStack has no address on the stack network",
                    ));
                }
                Ok(((), crate::k8s::localstack_in_cluster_url(&settings.names)))
            })
            .await
    }

    /// The chain's Flux objects missing before the GitOps steps restore them
    /// (a new cluster has none to miss).
    async fn missing_flux_objects(
        &self,
        settings: &Settings,
        provisioned: &Provisioned,
        client: &kube::Client,
    ) -> BTreeSet<String> {
        if provisioned.info.created {
            BTreeSet::new()
        } else {
            // This run's settings: what the cluster decided (its own ESO) is in them.
            missing_flux_objects(client, &gitops::ChainPlan::of(settings)).await
        }
    }

    /// The Flux, GitOps source and chain steps. Where Flux only re-applies
    /// what it applied before (a restart, a restore), ESO serves as it did,
    /// so the round trip runs beside the chain's wait and its result comes
    /// back too; otherwise (or should the chain finish first) it does not run.
    async fn deliver_gitops(
        &self,
        settings: &Settings,
        client: &kube::Client,
        verify_on: bool,
    ) -> Result<(DeliverReport, Option<Result<VerifyReport, Error>>), Error> {
        let (reapplying, reapplied) = tokio::sync::oneshot::channel();
        let chain_done = CancellationToken::new();
        let deliver = async {
            let delivered = gitops::deliver(
                client,
                settings,
                DeliverOptions {
                    reapplying: verify_on.then_some(reapplying),
                    ..DeliverOptions::default()
                },
                self.runner,
            )
            .await;
            chain_done.cancel();
            delivered
        };
        let beside = async {
            if !matches!(reapplied.await, Ok(true)) {
                return None;
            }
            let budget = crate::k8s::wait::Budget::new(settings.timeouts.eso.get(), "timeouts.eso");
            // Should ESO not be found serving, the chain's own wait says why.
            tokio::select! {
                serving = gitops::eso_serving(client, settings, budget) => serving.ok()?,
                () = chain_done.cancelled() => return None,
            }
            Some(self.round_trip(settings, client).await)
        };
        match tokio::join!(deliver, beside) {
            (Ok(gitops), verified_beside) => Ok((gitops, verified_beside)),
            // Interrupted beside the chain, the round trip's error says what
            // became of its probe objects.
            (Err(e), Some(Err(verify))) if e.kind() == crate::error::Kind::Interrupted => {
                Err(verify)
            }
            (Err(e), _) => Err(e),
        }
    }

    /// The round trip's report with `verify_on`: the one that ran beside the
    /// chain, or one run now. A failed round trip fails `up`.
    async fn verified(
        &self,
        settings: &Settings,
        client: &kube::Client,
        verify_on: bool,
        verified_beside: Option<Result<VerifyReport, Error>>,
    ) -> Result<Option<VerifyReport>, Error> {
        if !verify_on {
            return Ok(None);
        }
        let report = match verified_beside {
            Some(report) => report?,
            None => self.round_trip(settings, client).await?,
        };
        if let Some(err) = report.to_error(settings) {
            return Err(err);
        }
        Ok(Some(report))
    }

    /// The round trip as the Verify step. It watches the cancel token itself
    /// so that, interrupted, it still removes its probe objects.
    async fn round_trip(
        &self,
        settings: &Settings,
        client: &kube::Client,
    ) -> Result<VerifyReport, Error> {
        let verify_options = VerifyOptions {
            cancel: Some(self.runner.cancel_token().clone()),
            ..VerifyOptions::default()
        };
        self.runner
            .timed_cooperative(
                "Verify",
                crate::verify::run(settings, client, verify_options, &self.stack.ui),
            )
            .await
    }
}

/// Docker answers (an existing cluster needs none), the kubeconfig files are
/// writable, the pins and bundle hold what the profile asks for, and the
/// cluster's plan is allowed.
async fn preflight(
    docker: &bollard::Docker,
    settings: &Settings,
    recreate: bool,
) -> Result<cluster::Plan, Error> {
    // An existing cluster's nodes may be anywhere: no engine is needed here.
    if settings.cluster.provider != Provider::Existing {
        docker::ping(docker)
            .await
            .map_err(|e| docker::engine_error("ping the Docker engine", e))?;
    }
    // A change the cluster cannot take in place is refused before anything
    // (LocalStack included) is touched.
    let plan = cluster::plan(&docker::shared(docker), settings).await?;
    plan.check(recreate, settings)?;
    crate::cluster::kubeconfig::check_writable(&state::kubeconfig_path(settings))?;
    if settings.cluster.merge_kubeconfig {
        crate::cluster::kubeconfig::check_writable(&settings.user_kubeconfig)?;
    }
    // A pinned version the offline bundle lacks fails here, not minutes
    // later when Flux or the chart is reached.
    crate::artifacts::check_version(
        settings,
        &crate::artifacts::Pins::load(settings.images.pins_file.as_deref())?,
    )?;
    // The artifact cache is filled and checked by the next step.
    if settings.images.bundle.is_some() {
        crate::bundle::open_checked(settings, docker::shared(docker).as_ref()).await?;
    }
    Ok(plan)
}
