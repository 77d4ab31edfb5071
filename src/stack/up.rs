//! `Stack::up`: its options, its report, and the run: the provider
//! settled, the lock, Preflight, then the steps that converge the stack
//! ([`UpRun::converge`], in the order they run).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::Stack;
use super::found::{Found, OnCluster};
use super::localstack_and_cluster::LocalStackUp;
use super::preflight::Preflight;
use super::repair::{
    CrashedPods, Rescaled, localstack_repair, missing_flux_objects, restore_scaled_down,
};
use super::run::UpRun;
use super::thread_stack::DeepThreadStack;
use crate::cluster::Provisioned;
use crate::cluster::choice::{self, Choice};
use crate::docker::{self, Engine};
use crate::error::Error;
use crate::gitops::{self, DeliverOptions, DeliverReport};
use crate::health::StatusReport;
use crate::k8s::version::KubernetesCheck;
use crate::localstack::{self, LocalStackReport};
use crate::pipeline::{Interrupts, Runner, StepRecord};
use crate::profile::{Provider, Settings};
use crate::seed::SeedReport;
use crate::snapshot::{self, AfterRestore, Snapshot};
use crate::state;
use crate::timeline::Span;
use crate::verify::{VerifyOptions, VerifyReport};

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
    /// The stack's image registry (`registry.enabled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry: Option<crate::registry::RegistryReport>,
    pub cluster: ClusterReport,
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

/// The cluster as `up` left it, and what the run found it holds for the
/// stack.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterReport {
    #[serde(flatten)]
    pub provisioned: Provisioned,
    #[serde(flatten)]
    pub found: OnCluster,
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
        // What the runs before this one found: read once.
        let recorded = Found::recorded(&self.asked);
        // Flux 2.9 fails a Kustomization on a `${VAR}` no fact provides:
        // found before anything is reached or created.
        crate::gitops::repository::check_substitution(&recorded.settings(&self.asked))?;
        // Listening from here: settling the provider can fetch kind, and a
        // signal then ends the run as a later one does, not the process.
        let interrupts = Interrupts::watch(options.handle_interrupt);
        let docker = self.engine(&recorded).await?;
        let settle = choice::settle(&docker, &self.asked, recorded.provider());
        let (_, choice) = tokio::select! {
            settled = DeepThreadStack::new(settle) => settled?,
            _ = interrupts.cancel.cancelled() => {
                let err = Error::interrupted().context("nothing was created");
                return Err(interrupts.attribute(err));
            }
        };
        let found = self.settled(recorded, &choice);
        DeepThreadStack::new(self.up_locked(&docker, options, None, found, choice, &interrupts))
            .await
            .map_err(|e| interrupts.attribute(e))
    }

    /// What was found with the provider settled, after the notice the user
    /// should read before anything else.
    fn settled(&self, recorded: Found, choice: &Choice) -> Found {
        if let Some(notice) = choice.notice() {
            self.ui.warn(notice);
        }
        Found {
            choice: Some(choice.clone()),
            ..recorded
        }
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
        let recorded = Found::recorded(&self.asked);
        crate::gitops::repository::check_substitution(&recorded.settings(&self.asked))?;
        let saved = snapshot::saved_provider(&self.asked, name);
        let (_, choice) = choice::settle_for_restore(&self.asked, saved)?;
        let found = self.settled(recorded, &choice);
        let snapshot = snapshot::open(&found.settings(&self.asked), name)?;
        let docker = docker::connect().await?;
        snapshot::check_restorable(docker.as_ref(), &found.settings(&self.asked), &snapshot)
            .await?;
        let interrupts = Interrupts::watch(options.handle_interrupt);
        let up = self.up_locked(
            &docker,
            options,
            Some(&snapshot),
            found,
            choice,
            &interrupts,
        );
        DeepThreadStack::new(up)
            .await
            .map_err(|e| interrupts.attribute(e))
    }

    /// The run, once the provider is settled: under the stack's lock,
    /// Preflight, then [`UpRun::converge`]; on failure the causes read
    /// while the stack is there, then the rollback.
    async fn up_locked(
        &self,
        docker: &Arc<dyn Engine>,
        options: UpOptions,
        restore: Option<&Snapshot>,
        found: Found,
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
        let existed = self.exists(docker, &found.settings(&self.asked)).await?;
        if let (true, Some(snapshot)) = (existed, restore) {
            return Err(Error::user(format!(
                "stack `{}` exists, and a snapshot restores into a new stack only",
                self.asked.name
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
            recreate: options.recreate,
            verify: options.verify,
            runner: &runner,
            started: Instant::now(),
        };
        super::record_new_state_dir(&runner, &self.asked);
        let (err, settings) = match run.preflight(&found).await {
            Ok(preflight) => match run.converge(&preflight).await {
                Ok(report) => return Ok(report),
                Err(err) => (err, preflight.settings),
            },
            Err(err) => (err, found.settings(&self.asked)),
        };
        // Read the causes while the stack is still there to read: the
        // rollback removes the evidence.
        let err = crate::diagnose::point(&settings, err).await;
        Err(runner
            .roll_back_after(err, existed, options.retain, &interrupts.received)
            .await)
    }
}

impl UpRun<'_> {
    /// The steps after Preflight. Each one that creates something tells the
    /// runner how to remove it, before it starts, so that an error or a
    /// Ctrl-C in the middle of it is undone too. What LocalStack and the
    /// cluster report completes what the run found: it goes to the stack's
    /// record once, and its settings are what every later step reads.
    async fn converge(&self, preflight: &Preflight) -> Result<UpReport, Error> {
        let artifacts = self.pull_artifacts(&preflight.settings).await?;
        if preflight.settings.cluster.provider != Provider::Existing {
            self.create_network(&preflight.settings).await?;
        }
        self.record_new_cluster(preflight);
        let (localstack, provisioned, client, registry) =
            self.localstack_and_cluster(preflight).await?;
        let mut found = localstack.found.clone();
        found.ports.api_server = provisioned.info.api_port();
        found.record(&localstack.settings)?;
        let settings = &localstack.settings;
        let mut repaired = self.localstack_and_cluster_repairs(&localstack, &provisioned);

        let after_restore = self.fix_up_restored_cluster(settings, &client).await?;
        // Only a node that started again (restored, or its container restarted) crashes pods.
        let crashed_pods =
            (self.restore.is_some() || self.existed).then(|| CrashedPods::watch(&client));
        if !settings.localstack.in_cluster() {
            self.localstack_route_for_pods(settings, &client).await?;
        }
        if registry.is_some() {
            self.advertise_registry(settings, &client).await?;
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
        let verify_on = self.verify.unwrap_or(settings.verify.on_up);
        let (gitops, verified_beside) = self.deliver_gitops(settings, &client, verify_on).await?;
        rescaled.wait_available(&client, settings).await?;
        let verified_beside_chain = verified_beside.is_some();
        let verify = self
            .verified(settings, &client, verify_on, verified_beside)
            .await?;

        if registry
            .as_ref()
            .is_some_and(|r| r.action == crate::registry::Action::Repaired)
        {
            repaired.push("the registry container was missing: created it again".into());
        }
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
            ports: found.ports,
            created: !self.existed,
            from_snapshot: self.restore.map(|s| s.manifest.name.clone()),
            repaired,
            artifacts,
            steps: self.runner.records(),
            timings: self.runner.timeline().spans(),
            localstack: localstack.report,
            registry,
            cluster: ClusterReport {
                provisioned,
                found: found.cluster,
            },
            seed: localstack.seeded,
            gitops,
            verify,
            verified_beside_chain,
            health,
            elapsed_ms: self.started.elapsed().as_millis() as u64,
        })
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
        Ok(Some(
            snapshot::after_restore(self.docker.as_ref(), settings, client).await?,
        ))
    }

    /// The LocalStack route for pods step: the in-cluster Service that points
    /// at the container.
    async fn localstack_route_for_pods(
        &self,
        settings: &Settings,
        client: &kube::Client,
    ) -> Result<(), Error> {
        self.runner
            .step("LocalStack route for pods", None, |_| async {
                let routed =
                    localstack::route_for_pods(self.docker.as_ref(), settings, client).await?;
                if !routed {
                    return Err(Error::internal(
                        "LocalStack has no address on the stack network",
                    ));
                }
                Ok(((), crate::k8s::localstack_in_cluster_url(&settings.names)))
            })
            .await
    }

    /// The Registry advertised step: KEP-1755's ConfigMap, which tools
    /// such as Tilt read to find the registry.
    async fn advertise_registry(
        &self,
        settings: &Settings,
        client: &kube::Client,
    ) -> Result<(), Error> {
        self.runner
            .step("Registry advertised", None, |_| async {
                let host =
                    crate::registry::advertise(self.docker.as_ref(), settings, client).await?;
                Ok((
                    (),
                    format!(
                        "{}/{} names {host}",
                        crate::registry::CONFIGMAP_NAMESPACE,
                        crate::registry::CONFIGMAP_NAME
                    ),
                ))
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
