//! The whole stack as one object: what `devstack up` and `down` do, and the
//! library API Rust integration test suites use:
//!
//! ```no_run
//! # async fn demo() -> devstack::Result<()> {
//! use devstack::stack::{Stack, UpOptions};
//! let stack = Stack::from_profile(Some("ci"), &Default::default())?;
//! let up = stack.up(UpOptions::default()).await?;
//! let client = stack.kube_client().await?;      // talk to the cluster
//! let env = stack.env();                         // AWS_ENDPOINT_URL, KUBECONFIG, ...
//! stack.verify(Default::default()).await?;
//! stack.down().await?;
//! # Ok(()) }
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cluster::{self, Provisioned};
use crate::error::Error;
use crate::gitops::{self, DeliverOptions, DeliverReport};
use crate::health::StatusReport;
use crate::localstack::{self, Action};
use crate::pipeline::{Interrupts, Runner, StepRecord};
use crate::profile::{Overrides, Settings};
use crate::seed::{self, SeedOptions, SeedReport};
use crate::timeline::{Span, Timeline};
use crate::ui::{Step, Ui};
use crate::verify::{VerifyOptions, VerifyReport};
use crate::{docker, state};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy, Default)]
pub struct UpOptions {
    /// Keep a half-created stack on failure or interrupt, for debugging.
    pub retain: bool,
    /// Run the round trip at the end; `None` = the profile's `verify.onUp`.
    pub verify: Option<bool>,
    /// Roll back when Ctrl-C / SIGINT arrives (the CLI sets this; a library
    /// caller usually handles signals itself).
    pub handle_interrupt: bool,
    /// Recreate the cluster when it differs from the profile in what its
    /// provider cannot change in place; LocalStack is kept.
    pub recreate: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpReport {
    pub stack: String,
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
    pub localstack: localstack::LocalStackReport,
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

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DownReport {
    pub stack: String,
    pub cluster: bool,
    pub localstack: bool,
    pub state: bool,
}

impl DownReport {
    pub fn removed_anything(&self) -> bool {
        self.cluster || self.localstack || self.state
    }
}

pub struct Stack {
    settings: Settings,
    ui: Ui,
    timeline: Timeline,
}

impl Stack {
    pub fn new(settings: Settings) -> Self {
        Stack {
            settings,
            ui: Ui::silent(),
            timeline: Timeline::new(),
        }
    }

    /// The settings with what the stack's record knows now (the ports
    /// `auto` chose), which an `up` of this same object may have just set.
    fn current(&self) -> Settings {
        let mut settings = self.settings.clone();
        state::attach_record(&mut settings);
        settings
    }

    /// A profile file or shipped profile name (`None`: the default profile).
    pub fn from_profile(profile: Option<&str>, overrides: &Overrides) -> Result<Self, Error> {
        Ok(Self::new(crate::profile::select(profile, overrides)?))
    }

    /// Progress output (the CLI's printer; library callers get a silent one).
    pub fn with_ui(mut self, ui: Ui) -> Self {
        self.ui = ui;
        self
    }

    /// Records each `up` on `timeline` (restarted at the start of each),
    /// which the caller keeps to read what ran even when `up` fails.
    pub fn with_timeline(mut self, timeline: Timeline) -> Self {
        self.timeline = timeline;
        self
    }

    /// What the last (or the running) `up` did when.
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// `KUBECONFIG`, `AWS_ENDPOINT_URL`, region and test credentials.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        exports(&self.current())
    }

    pub async fn kube_client(&self) -> Result<kube::Client, Error> {
        crate::k8s::stack_client(&self.settings).await
    }

    /// The health model: every part of the stack, healthy, reconciling,
    /// unhealthy or missing, by the same rules `devstack status` uses.
    pub async fn status(&self) -> StatusReport {
        crate::health::collect(&self.current()).await
    }

    /// Waits until the stack is settled (everything Ready, nothing
    /// reconciling) or `limit` passes; returns the last report either way.
    pub async fn wait_settled(&self, limit: std::time::Duration) -> StatusReport {
        crate::health::wait_settled(&self.current(), limit, &|_| {}).await
    }

    /// Holds this stack's lock for a run that changes it, telling the user
    /// when another run holds it first.
    async fn lock(&self, command: &str) -> Result<state::StackLock, Error> {
        let ui = self.ui.clone();
        state::StackLock::acquire(&self.settings, command, &move |m| ui.info(m)).await
    }

    /// Whether any labelled container of this stack exists.
    pub async fn exists(&self, docker: &bollard::Docker) -> Result<bool, Error> {
        Ok(
            !docker::find_containers(docker, docker::stack_filter(Some(&self.settings.name)))
                .await?
                .is_empty()
                || cluster::exists(&docker::shared(docker), &self.settings).await?,
        )
    }

    /// Brings the whole stack up, or converges an existing one: LocalStack
    /// (then seeding) and the cluster concurrently, the in-cluster LocalStack
    /// route, Flux and the External Secrets chain, then the round trip.
    /// A stack this call created is rolled back on failure (and on Ctrl-C
    /// with `handle_interrupt`) unless `retain`.
    pub async fn up(&self, options: UpOptions) -> Result<UpReport, Error> {
        self.timeline.restart();
        let docker = docker::connect().await?;
        let interrupts = Interrupts::watch(options.handle_interrupt);
        // Boxed, so that what the caller polls is small whatever `up` awaits
        // (a test thread has a 2 MiB stack; debug builds' futures are large).
        Box::pin(self.up_locked(&docker, options, None, &interrupts.cancel, &interrupts.stop)).await
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
        let snapshot = crate::snapshot::open(&self.settings, name)?;
        let docker = docker::connect().await?;
        let interrupts = Interrupts::watch(options.handle_interrupt);
        Box::pin(self.up_locked(
            &docker,
            options,
            Some(&snapshot),
            &interrupts.cancel,
            &interrupts.stop,
        ))
        .await
    }

    /// Saves the stack's cluster as snapshot `name` (default: the stack's
    /// name), replacing one of that name, once the round trip passes on it.
    /// The nodes are paused while their files are read (seconds) and run on.
    pub async fn snapshot_save(
        &self,
        name: Option<&str>,
    ) -> Result<crate::snapshot::SaveReport, Error> {
        let settings = self.current();
        let name = name.unwrap_or(&settings.name).to_string();
        crate::snapshot::check_name(&name)?;
        crate::snapshot::require_k3s(&settings)?;
        let docker = docker::connect().await?;
        let _lock = self.lock("snapshot save").await?;
        let client = self
            .kube_client()
            .await
            .map_err(|e| e.context("the stack is not up, so there is nothing to save"))?;
        self.ui.info("verifying the stack before saving it");
        let report =
            crate::verify::run(&settings, &client, VerifyOptions::default(), &self.ui).await?;
        if let Some(err) = report.to_error(&settings) {
            return Err(err
                .context("the round trip fails on the stack, so it is not saved")
                .with_hint("`devstack up` repairs the stack; save once it is verified"));
        }
        let ui = self.ui.clone();
        crate::snapshot::save(
            docker::shared(&docker).as_ref(),
            &settings,
            &name,
            &move |m| ui.info(m),
        )
        .await
    }

    async fn up_locked(
        &self,
        docker: &bollard::Docker,
        options: UpOptions,
        restore: Option<&crate::snapshot::Snapshot>,
        cancel: &CancellationToken,
        stop: &CancellationToken,
    ) -> Result<UpReport, Error> {
        let _lock = tokio::select! {
            lock = self.lock("up") => lock?,
            _ = cancel.cancelled() => return Err(Error::interrupted()),
        };
        // Only now is what exists this run's to judge: a run that held the
        // lock may just have created (or removed) the stack.
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
        let err = match self
            .converge(docker, existed, restore, options, &runner)
            .await
        {
            Ok(report) => return Ok(report),
            Err(err) => err,
        };
        Err(runner
            .roll_back_after(err, existed, options.retain, stop)
            .await)
    }

    /// The steps of `up`. Each one that creates something tells `runner`
    /// how to remove it, before it starts, so that an error or a Ctrl-C in
    /// the middle of it is undone too.
    async fn converge(
        &self,
        docker: &bollard::Docker,
        existed: bool,
        restore: Option<&crate::snapshot::Snapshot>,
        options: UpOptions,
        runner: &Runner,
    ) -> Result<UpReport, Error> {
        let started = Instant::now();
        let settings = &self.settings;
        let mut repaired = Vec::new();
        let state_dir = state::stack_dir(settings);
        if !state_dir.exists() {
            runner.created(format!("state {}", state_dir.display()), move || {
                Box::pin(async move {
                    match std::fs::remove_dir_all(&state_dir) {
                        Ok(()) => Ok(()),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                        Err(e) => Err(Error::internal(format!(
                            "remove {}: {e}",
                            state_dir.display()
                        ))),
                    }
                })
            });
        }

        let cluster_plan = runner
            .step(
                "Preflight",
                Some((settings.timeouts.preflight.get(), "timeouts.preflight")),
                |_| async {
                    preflight(docker, settings, options.recreate)
                        .await
                        .map(|plan| (plan, String::new()))
                },
            )
            .await?;
        // Online, every artifact is fetched and checked before anything is
        // created, into the cache the rest of `up` reads like a bundle.
        let artifacts = if settings.images.bundle.is_none() {
            Some(
                runner
                    .step("Artifacts", None, |step: Arc<Step>| async move {
                        let report = crate::artifacts::pull(
                            docker,
                            settings,
                            crate::artifacts::PullOptions {
                                dir: settings.artifact_cache(),
                                with_kind: false,
                                progress: &|m| step.progress(m),
                            },
                        )
                        .await?;
                        let summary = report.summary();
                        Ok((report, summary))
                    })
                    .await?,
            )
        } else {
            None
        };
        // Both LocalStack and the nodes join the network: create it once.
        let network = localstack::network_name(settings);
        let addressing = restore.and_then(|s| s.manifest.addressing());
        if docker::ensure_network_in(docker, &settings.name, &network, addressing.as_ref()).await? {
            let docker = docker.clone();
            runner.created(format!("network {network}"), move || {
                Box::pin(async move {
                    docker::remove_network_if_unused(&docker, &network)
                        .await
                        .map(|_| ())
                })
            });
        }
        let container = localstack::container_name(settings);
        if docker::inspect(docker, &container).await?.is_none() {
            let (docker, owned) = (docker.clone(), settings.clone());
            runner.created(format!("LocalStack container {container}"), move || {
                Box::pin(async move { localstack::down(&docker, &owned).await.map(|_| ()) })
            });
        }
        let engine = docker::shared(docker);
        if !cluster_plan.exists || (options.recreate && cluster_plan.needs_recreate()) {
            let (engine, owned) = (engine.clone(), settings.clone());
            runner.created(
                format!("{} cluster", settings.cluster.provider.as_str()),
                move || Box::pin(async move { cluster::remove(&engine, &owned).await.map(|_| ()) }),
            );
        }

        let localstack_and_seed = async {
            let report = runner
                .step(
                    format!("LocalStack {}", settings.localstack.image),
                    None,
                    |step: Arc<Step>| async move {
                        let report =
                            localstack::up(docker, settings, &|m| step.progress(m)).await?;
                        let summary = format!("{} at {}", report.action, report.endpoint.url);
                        Ok((report, summary))
                    },
                )
                .await?;
            // From here on every client uses the port LocalStack was given.
            let bound = settings.with_localstack_port(report.endpoint.host_port);
            // The bucket devstack publishes the GitOps source to exists from
            // the first `up` on, and only a LocalStack that lost its state
            // (community LocalStack keeps none across a restart) lacks it.
            let kept_state = gitops::source::bucket_exists(&bound).await;
            let seeded = runner
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
            Ok::<_, Error>((report, seeded, bound, kept_state))
        };
        let cluster_up = runner.step(
            format!(
                "Cluster ({}, {})",
                settings.cluster.provider.as_str(),
                settings.cluster.image
            ),
            None,
            |step: Arc<Step>| async move {
                let options = cluster::UpOptions {
                    retain: true,
                    rollback_by_caller: true,
                    recreate: options.recreate,
                    // The Flux step waits for it, while Flux installs.
                    coredns_later: true,
                    images_restored: restore.is_some(),
                };
                if let Some(snapshot) = restore {
                    crate::snapshot::restore_nodes(engine.as_ref(), settings, snapshot, &step)
                        .await?;
                }
                let provisioned = cluster::provision(&engine, settings, options, &step).await?;
                let summary = provisioned.info.summary();
                Ok((provisioned, summary))
            },
        );
        let ((localstack, seeded, bound, kept_state), provisioned) =
            tokio::try_join!(localstack_and_seed, cluster_up)?;
        let settings = &bound;

        if existed {
            repaired.extend(localstack_repair(
                &localstack.action,
                kept_state,
                seeded.created,
            ));
            if provisioned.info.created {
                repaired.push("the cluster was missing: created it".into());
            }
            repaired.extend(provisioned.info.repaired.iter().cloned());
        }

        let client = crate::k8s::client_from_kubeconfig(&provisioned.info.kubeconfig).await?;
        let after_restore = match restore {
            Some(_) => {
                let engine = docker::shared(docker);
                Some(crate::snapshot::after_restore(engine.as_ref(), settings, &client).await?)
            }
            None => None,
        };
        // A node that starts again (restored, or its container restarted)
        // crashes its pods the same way; on a node that did not, there is
        // nothing to find. Lives until `up` returns.
        let recreated_pods = Arc::new(std::sync::Mutex::new(Vec::new()));
        let _crashed_pods = (restore.is_some() || existed).then(|| {
            AbortOnDrop(tokio::spawn(recreate_crashed_pods(
                client.clone(),
                recreated_pods.clone(),
            )))
        });
        runner
            .step("LocalStack route for pods", None, |_| async {
                let routed =
                    cluster::route_localstack(docker, settings, &provisioned.info.kubeconfig)
                        .await?;
                if !routed {
                    return Err(Error::internal(
                        "LocalStack has no address on the stack network",
                    ));
                }
                Ok(((), crate::k8s::localstack_in_cluster_url()))
            })
            .await?;

        let missing_before = if provisioned.info.created {
            BTreeSet::new()
        } else {
            missing_flux_objects(&client).await
        };
        let verify_on = options.verify.unwrap_or(settings.verify.on_up);
        // The round trip watches the token itself: interrupted, it still
        // removes its probe objects before it returns.
        let round_trip = || {
            let verify_options = VerifyOptions {
                cancel: Some(runner.cancel_token().clone()),
                ..VerifyOptions::default()
            };
            runner.timed_cooperative(
                "Verify",
                crate::verify::run(settings, &client, verify_options, &self.ui),
            )
        };
        let (reapplying, reapplied) = tokio::sync::oneshot::channel();
        let chain_done = CancellationToken::new();
        let deliver = async {
            let delivered = gitops::deliver(
                &client,
                settings,
                DeliverOptions {
                    reapplying: verify_on.then_some(reapplying),
                    ..DeliverOptions::default()
                },
                runner,
            )
            .await;
            chain_done.cancel();
            delivered
        };
        // Where Flux only re-applies what it applied before (a restart, a
        // restore), ESO serves as it did: the round trip runs beside the
        // chain's wait instead of after it. `up` still returns only once
        // both are done. Otherwise (or should the chain finish first) it
        // runs after the chain, as the only way to know ESO serves.
        let beside = async {
            if !matches!(reapplied.await, Ok(true)) {
                return None;
            }
            let budget = crate::k8s::wait::Budget::new(settings.timeouts.eso.get(), "timeouts.eso");
            // Should ESO not be found serving, the chain's own wait says why.
            tokio::select! {
                serving = gitops::eso_serving(&client, budget) => serving.ok()?,
                () = chain_done.cancelled() => return None,
            }
            Some(round_trip().await)
        };
        let (gitops, verified_beside) = match tokio::join!(deliver, beside) {
            (Ok(gitops), verified_beside) => (gitops, verified_beside),
            // Interrupted while the round trip ran beside the chain: its
            // error says what became of its probe objects.
            (Err(e), Some(Err(verify))) if e.kind() == crate::error::Kind::Interrupted => {
                return Err(verify);
            }
            (Err(e), _) => return Err(e),
        };
        if existed {
            repaired.extend(
                missing_before
                    .into_iter()
                    .map(|o| format!("{o} was missing: restored it")),
            );
        }

        let verified_beside_chain = verified_beside.is_some();
        let verify = if verify_on {
            let report = match verified_beside {
                Some(report) => report?,
                None => round_trip().await?,
            };
            if let Some(err) = report.to_error(settings) {
                return Err(err);
            }
            Some(report)
        } else {
            None
        };
        if existed {
            let recreated = recreated_pods.lock().map(|p| p.clone()).unwrap_or_default();
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
            self.ui.info(format!("  repaired: {repair}"));
        }
        // What `up` leaves, by the health model `status` uses (reported, not
        // judged: with --no-verify the profile's ExternalSecrets may still
        // be syncing).
        let health = crate::health::collect(settings).await;
        Ok(UpReport {
            stack: settings.name.clone(),
            ports: state::StackRecord::load(settings).ports,
            created: !existed,
            from_snapshot: restore.map(|s| s.manifest.name.clone()),
            repaired,
            artifacts,
            steps: runner.records(),
            timings: runner.timeline().spans(),
            localstack,
            cluster: provisioned,
            seed: seeded,
            gitops,
            verify,
            verified_beside_chain,
            health,
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// The round trip against a running stack.
    pub async fn verify(&self, options: VerifyOptions) -> Result<VerifyReport, Error> {
        let client = self.kube_client().await?;
        crate::verify::run(&self.current(), &client, options, &self.ui).await
    }

    /// Removes the stack's cluster, LocalStack, network, volumes, kubeconfig
    /// context and state, by labels. Idempotent.
    pub async fn down(&self) -> Result<DownReport, Error> {
        let docker = docker::connect().await?;
        let _lock = self.lock("down").await?;
        self.remove(&docker).await
    }

    async fn remove(&self, docker: &bollard::Docker) -> Result<DownReport, Error> {
        let settings = &self.settings;
        let engine = docker::shared(docker);
        let cluster = cluster::remove(&engine, settings).await?;
        // A stack restored from a removed or replaced snapshot held its
        // shared volume: free now, unless another stack uses it.
        let _ = crate::snapshot::prune_shared_volumes(engine.as_ref(), settings).await;
        let localstack = localstack::down(docker, settings).await?;
        docker::remove_network_if_unused(docker, &localstack::network_name(settings)).await?;
        let dir = state::stack_dir(settings);
        let state = dir.exists() && std::fs::remove_dir_all(&dir).is_ok();
        Ok(DownReport {
            stack: settings.name.clone(),
            cluster,
            localstack,
            state,
        })
    }
}

/// Variables for using the stack from other tools; no secret values.
pub fn exports(settings: &Settings) -> Vec<(&'static str, String)> {
    let endpoint = settings.localstack.endpoint_url();
    let region = settings.localstack.region.clone();
    let mut vars = vec![
        ("DEVSTACK_STACK", settings.name.clone()),
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_REGION", region.clone()),
        ("AWS_DEFAULT_REGION", region),
        (
            "AWS_ACCESS_KEY_ID",
            crate::aws::TEST_ACCESS_KEY_ID.to_string(),
        ),
        (
            "AWS_SECRET_ACCESS_KEY",
            crate::aws::TEST_SECRET_ACCESS_KEY.to_string(),
        ),
    ];
    let kubeconfig = state::kubeconfig_path(settings);
    if kubeconfig.is_file() {
        vars.push(("KUBECONFIG", kubeconfig.display().to_string()));
    }
    vars
}

/// A stack that is taken down when the guard is dropped, even when the code
/// under test panics: what a Rust test suite holds for the length of a test.
/// `keep()` hands the stack back and leaves it running.
///
/// ```no_run
/// # async fn demo() -> devstack::Result<()> {
/// use devstack::stack::{Stack, StackGuard};
/// let stack = Stack::from_profile(Some("ci"), &Default::default())?;
/// let (guard, report) = StackGuard::up(stack, Default::default()).await?;
/// let client = guard.kube_client().await?;
/// // ... the test; the stack goes down when `guard` is dropped.
/// # Ok(()) }
/// ```
pub struct StackGuard {
    stack: Option<Stack>,
}

impl StackGuard {
    /// Brings the stack up (as [`Stack::up`]) and guards it; a failed `up`
    /// has already rolled back what it created.
    pub async fn up(stack: Stack, options: UpOptions) -> Result<(StackGuard, UpReport), Error> {
        let report = stack.up(options).await?;
        Ok((StackGuard { stack: Some(stack) }, report))
    }

    /// Guards a stack that is already up.
    pub fn new(stack: Stack) -> StackGuard {
        StackGuard { stack: Some(stack) }
    }

    /// Leaves the stack running and gives it back.
    pub fn keep(mut self) -> Stack {
        self.stack
            .take()
            .expect("a guard holds its stack until dropped")
    }
}

impl std::ops::Deref for StackGuard {
    type Target = Stack;
    fn deref(&self) -> &Stack {
        self.stack
            .as_ref()
            .expect("a guard holds its stack until dropped")
    }
}

impl Drop for StackGuard {
    fn drop(&mut self) {
        let Some(stack) = self.stack.take() else {
            return;
        };
        // Drop cannot await, and may run inside the caller's runtime (where
        // blocking on it would deadlock a current-thread one): take the
        // stack down on a thread with a runtime of its own.
        let name = stack.name().to_string();
        // The command that reaches this stack: its profile, and its name
        // when the profile does not give it.
        let mut flags = stack.settings().cli_flags();
        if !flags.contains(" --name ") {
            flags.push_str(&format!(" --name {name}"));
        }
        let outcome = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| Error::internal(format!("runtime for `down`: {e}")))?
                .block_on(stack.down())
        })
        .join();
        match outcome {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!(
                "devstack: taking stack `{name}` down failed: {}; `devstack{flags} down` removes it",
                e.message()
            ),
            Err(_) => eprintln!(
                "devstack: taking stack `{name}` down panicked; `devstack{flags} down` removes it"
            ),
        }
    }
}

/// Names of every stack with a labelled container, network or volume here.
pub async fn all_stack_names(docker: &bollard::Docker) -> Result<BTreeSet<String>, Error> {
    let mut names = BTreeSet::new();
    for container in docker::find_containers(docker, docker::stack_filter(None)).await? {
        if let Some(name) = container
            .labels
            .as_ref()
            .and_then(|l| l.get(docker::LABEL_STACK))
        {
            names.insert(name.clone());
        }
    }
    let options = bollard::query_parameters::ListNetworksOptions {
        filters: Some(std::collections::HashMap::from([(
            "label".to_string(),
            docker::stack_filter(None),
        )])),
    };
    let networks = docker
        .list_networks(Some(options))
        .await
        .map_err(|e| docker::engine_error("list networks", e))?;
    for network in networks {
        if let Some(name) = network
            .labels
            .as_ref()
            .and_then(|l| l.get(docker::LABEL_STACK))
        {
            names.insert(name.clone());
        }
    }
    Ok(names)
}

async fn preflight(
    docker: &bollard::Docker,
    settings: &Settings,
    recreate: bool,
) -> Result<cluster::Plan, Error> {
    docker
        .ping()
        .await
        .map_err(|e| docker::engine_error("ping the Docker engine", e))?;
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

/// What `up` did to an existing stack's LocalStack, as one line: how it
/// found the container, and what it put back into a LocalStack that lost
/// its state (the seeded secrets; the GitOps source, which the GitOps step
/// republishes on every `up`). `kept_state`: the GitOps bucket was there.
fn localstack_repair(action: &Action, kept_state: bool, reseeded: usize) -> Option<String> {
    let mut restored = Vec::new();
    if reseeded > 0 {
        restored.push(format!("re-seeded {reseeded} secret(s)"));
    }
    if !kept_state {
        restored.push("re-published the GitOps source".to_string());
    }
    let restored = restored.join(", ");
    let then = |what: String| {
        if restored.is_empty() {
            what
        } else {
            format!("{what}; {restored}")
        }
    };
    match action {
        Action::Created => Some(then("LocalStack container was missing: created it".into())),
        Action::Restarted => Some(then("LocalStack was stopped: restarted it".into())),
        Action::Recreated(why) => Some(then(format!("LocalStack recreated ({why})"))),
        Action::Reused if !kept_state => Some(format!(
            "LocalStack restarted and lost its state: {restored}"
        )),
        Action::Reused if reseeded > 0 => Some(format!(
            "{reseeded} secret(s) were missing in LocalStack: seeded them"
        )),
        Action::Reused => None,
    }
}

/// The chain's Flux objects that do not exist or are being deleted (drift
/// `up` repairs).
async fn missing_flux_objects(client: &kube::Client) -> BTreeSet<String> {
    let gone = |found: Result<Option<kube::api::DynamicObject>, kube::Error>| match found {
        Ok(None) => true,
        Ok(Some(object)) => object.metadata.deletion_timestamp.is_some(),
        // Flux not installed, or the API unreachable: nothing to say yet.
        Err(_) => false,
    };
    let mut missing = BTreeSet::new();
    let ks = gitops::chain::kustomizations(client);
    for name in std::iter::once(gitops::ROOT_KUSTOMIZATION).chain(gitops::CHAIN) {
        if gone(ks.get_opt(name).await) {
            missing.insert(format!("Kustomization {}/{name}", gitops::FLUX_NAMESPACE));
        }
    }
    let releases = gitops::chain::helm_releases(client);
    if gone(releases.get_opt(gitops::HELM_RELEASE.1).await) {
        missing.insert(format!(
            "HelmRelease {}/{}",
            gitops::HELM_RELEASE.0,
            gitops::HELM_RELEASE.1
        ));
    }
    missing
}

/// Gives the cluster's own pods that crashed while a node that started
/// again (restored, or its container restarted) did not yet serve its API
/// certificate a fresh start (see
/// [`crate::k8s::sandbox::recreate_crashed_pods`]): otherwise the Flux
/// controllers and ESO come back only after kubelet's 10 + 20 s back-off.
async fn recreate_crashed_pods(
    client: kube::Client,
    recreated: Arc<std::sync::Mutex<Vec<String>>>,
) {
    let namespaces = [
        "kube-system",
        crate::gitops::FLUX_NAMESPACE,
        crate::gitops::HELM_RELEASE.0,
    ];
    crate::k8s::sandbox::recreate_crashed_pods(
        client,
        &namespaces,
        Duration::from_secs(120),
        |pod| {
            tracing::info!("recreated pod {pod}: it crashed as its node started");
            if let Ok(mut pods) = recreated.lock() {
                pods.push(pod.to_string());
            }
        },
    )
    .await
}

/// Aborts its task when dropped, as `up` returns or fails.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_localstack_that_lost_its_state_is_one_repair_naming_what_came_back() {
        assert_eq!(
            localstack_repair(&Action::Reused, false, 2).as_deref(),
            Some(
                "LocalStack restarted and lost its state: re-seeded 2 secret(s), re-published the GitOps source"
            )
        );
        assert_eq!(
            localstack_repair(&Action::Restarted, false, 1).as_deref(),
            Some(
                "LocalStack was stopped: restarted it; re-seeded 1 secret(s), re-published the GitOps source"
            )
        );
        assert_eq!(
            localstack_repair(&Action::Created, false, 0).as_deref(),
            Some("LocalStack container was missing: created it; re-published the GitOps source")
        );
        // A secret deleted by hand, LocalStack otherwise as it was.
        assert_eq!(
            localstack_repair(&Action::Reused, true, 1).as_deref(),
            Some("1 secret(s) were missing in LocalStack: seeded them")
        );
        assert_eq!(localstack_repair(&Action::Reused, true, 0), None);
    }
}
