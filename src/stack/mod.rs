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

use serde::Serialize;

use crate::cluster;
use crate::docker::{self, Engine};
use crate::error::Error;
use crate::health::StatusReport;
use crate::localstack;
use crate::profile::{Overrides, Provider, Settings};
use crate::state;
use crate::timeline::Timeline;
use crate::ui::Ui;
use crate::verify::{VerifyOptions, VerifyReport};

mod found;
mod guard;
mod joining;
mod localstack_and_cluster;
mod preflight;
mod repair;
mod run;
mod stop;
mod thread_stack;
mod up;

pub use found::{Found, OnCluster, record_cluster, record_localstack_port, recorded_settings};
pub use guard::StackGuard;
pub use joining::check_existing_cluster;
pub use stop::{STOP_GRACE, StopReport};
pub use up::{ClusterReport, UpOptions, UpReport};

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DownReport {
    pub stack: String,
    pub cluster: bool,
    pub localstack: bool,
    /// The registry container and its volume (what was pushed).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub registry: bool,
    pub state: bool,
    /// On an existing cluster, what devstack had put there and removed
    /// (the cluster itself stays).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub uninstalled: Vec<String>,
}

impl DownReport {
    pub fn removed_anything(&self) -> bool {
        self.cluster
            || self.localstack
            || self.registry
            || self.state
            || !self.uninstalled.is_empty()
    }
}

pub struct Stack {
    /// What the profile asks for, which no run changes; what runs find is
    /// [`Found`], kept in the stack's record.
    asked: Settings,
    ui: Ui,
    timeline: Timeline,
}

impl Stack {
    /// The stack `asked` describes: a profile resolved with its overrides
    /// ([`crate::profile::select`]).
    pub fn new(asked: Settings) -> Self {
        Stack {
            asked,
            ui: Ui::silent(),
            timeline: Timeline::new(),
        }
    }

    /// The settings with what the stack's record knows, read now: an `up`
    /// of this same object may just have written it.
    fn as_recorded(&self) -> Settings {
        recorded_settings(&self.asked)
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

    /// What the profile asks for.
    pub fn settings(&self) -> &Settings {
        &self.asked
    }

    pub fn name(&self) -> &str {
        &self.asked.name
    }

    /// `KUBECONFIG`, `AWS_ENDPOINT_URL`, region and test credentials.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        exports(&self.as_recorded())
    }

    pub async fn kube_client(&self) -> Result<kube::Client, Error> {
        crate::k8s::stack_client(&self.as_recorded()).await
    }

    /// The health model: every part of the stack, healthy, reconciling,
    /// unhealthy or missing, by the same rules `devstack status` uses.
    pub async fn status(&self) -> StatusReport {
        crate::health::collect(&self.as_recorded()).await
    }

    /// Waits until the stack is settled (everything Ready, nothing
    /// reconciling) or `limit` passes; returns the last report either way.
    pub async fn wait_settled(&self, limit: std::time::Duration) -> StatusReport {
        crate::health::wait_settled(&self.as_recorded(), limit, &|_| {}).await
    }

    /// Holds this stack's lock for a run that changes it, telling the user
    /// when another run holds it first.
    async fn lock(&self, command: &str) -> Result<state::StackLock, Error> {
        let ui = self.ui.clone();
        state::StackLock::acquire(&self.asked, command, &move |m| ui.info(m)).await
    }

    /// Whether any labelled container of this stack exists, or its cluster.
    /// A stack on an existing cluster has no container (LocalStack runs in
    /// the cluster), and the machine may have no Docker engine to ask.
    async fn exists(&self, docker: &Arc<dyn Engine>, settings: &Settings) -> Result<bool, Error> {
        if settings.cluster.provider != Provider::Existing
            && !docker::find_containers(docker.as_ref(), docker::stack_filter(Some(&settings.name)))
                .await?
                .is_empty()
        {
            return Ok(true);
        }
        cluster::exists(docker, settings).await
    }

    /// The Docker engine for a run on this stack ([`docker::connect_or_absent`]).
    async fn engine(&self, found: &Found) -> Result<Arc<dyn Engine>, Error> {
        docker::connect_or_absent(found.on_existing_cluster(&self.asked)).await
    }

    /// [`recorded_on_its_provider`]: what a command that acts on the
    /// stack's containers or cluster reads.
    async fn on_its_provider(&self, docker: &Arc<dyn Engine>) -> Result<Settings, Error> {
        recorded_on_its_provider(docker, &self.asked).await
    }

    /// Saves the stack's cluster as snapshot `name` (default: the stack's
    /// name), replacing one of that name, once the round trip passes on it.
    /// The nodes are paused while their files are read (seconds) and run on.
    pub async fn snapshot_save(
        &self,
        name: Option<&str>,
    ) -> Result<crate::snapshot::SaveReport, Error> {
        // The name is the user's input: judged before any engine is reached.
        let name = name.unwrap_or(&self.asked.name).to_string();
        crate::snapshot::check_name(&name)?;
        let docker = docker::connect().await?;
        let settings = self.on_its_provider(&docker).await?;
        // Before the provider check: a stack that is not there has none yet.
        if !self.exists(&docker, &settings).await? {
            return Err(crate::snapshot::nothing_to_save(&settings));
        }
        crate::snapshot::require_supported(&settings)?;
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
        crate::snapshot::save(docker.as_ref(), &settings, &name, &move |m| ui.info(m)).await
    }

    /// The round trip against a running stack.
    pub async fn verify(&self, options: VerifyOptions) -> Result<VerifyReport, Error> {
        let client = self.kube_client().await?;
        let reached = self.localstack().await?;
        crate::verify::run(&reached.settings, &client, options, &self.ui).await
    }

    /// The stack's LocalStack as this machine reaches it: with
    /// `localstack.mode: in-cluster`, through a port-forward open while the
    /// returned value lives; [`exports`] of its settings are the variables
    /// that reach it.
    pub async fn localstack(&self) -> Result<localstack::in_cluster::Reached, Error> {
        localstack::in_cluster::reach(&self.as_recorded()).await
    }

    /// Removes the stack's cluster, LocalStack, network, volumes, kubeconfig
    /// context and state, by labels. Idempotent.
    ///
    /// A profile that does not pin the provider removes the cluster of the
    /// provider it was made with.
    pub async fn down(&self) -> Result<DownReport, Error> {
        let docker = self.engine(&Found::recorded(&self.asked)).await?;
        let _lock = self.lock("down").await?;
        let found = on_its_provider(&docker, &self.asked, Found::recorded(&self.asked)).await?;
        self.remove(&docker, &found).await
    }

    async fn remove(&self, docker: &Arc<dyn Engine>, found: &Found) -> Result<DownReport, Error> {
        let settings = &found.settings(&self.asked);
        let uninstalled = uninstall_from_existing(&self.asked, found, &self.ui).await?;
        let cluster = cluster::delete(docker, settings).await?;
        if settings.cluster.provider == Provider::Existing {
            // LocalStack ran in the cluster, which `uninstalled` emptied.
            let state = remove_state_dir(settings);
            return Ok(DownReport {
                stack: settings.name.clone(),
                cluster,
                localstack: false,
                registry: false,
                state,
                uninstalled,
            });
        }
        // A stack restored from a removed or replaced snapshot held its
        // shared volume: free now, unless another stack uses it.
        let _ = crate::snapshot::prune_shared_volumes(docker.as_ref(), settings).await;
        let registry = crate::registry::down(docker.as_ref(), settings).await?;
        let localstack = localstack::down(docker.as_ref(), settings).await?;
        docker::remove_network_if_unused(docker.as_ref(), &localstack::network_name(settings))
            .await?;
        let state = remove_state_dir(settings);
        Ok(DownReport {
            stack: settings.name.clone(),
            cluster,
            localstack,
            registry,
            state,
            uninstalled,
        })
    }
}

/// Removes the stack's directory; whether there was one.
fn remove_state_dir(settings: &Settings) -> bool {
    let dir = state::stack_dir(settings);
    dir.exists() && std::fs::remove_dir_all(&dir).is_ok()
}

/// On a cluster devstack did not create, what the stack put there; the
/// cluster stays. Nothing when the stack never reached it.
async fn uninstall_from_existing(
    asked: &Settings,
    found: &Found,
    ui: &Ui,
) -> Result<Vec<String>, Error> {
    if !found.on_existing_cluster(asked) || !state::kubeconfig_path(asked).is_file() {
        return Ok(Vec::new());
    }
    let client = crate::k8s::stack_client(asked).await?;
    let stacks = crate::gitops::census::stacks_on_cluster(&client).await?;
    // The record says whether the stack shares the cluster, but a run
    // interrupted before it wrote the record (or a record removed by hand)
    // says "alone": the shipped names are then this stack's only if no
    // other stack holds them, so `down` never removes another stack's
    // objects.
    let mut found = found.clone();
    found.cluster.shares_cluster |=
        crate::gitops::census::first_other(&stacks, &asked.name).is_some();
    let settings = found.settings(asked);
    let ui = ui.clone();
    crate::gitops::uninstall::uninstall(&client, &settings, &stacks, &move |m| ui.info(m))
        .await
        .map_err(|e| e.context("removing the stack from the existing cluster"))
}

/// `found` on the provider of the stack's cluster when the profile does
/// not pin one: the recorded one, else (a stack made before its record
/// kept the provider) the one whose cluster runs.
async fn on_its_provider(
    docker: &Arc<dyn Engine>,
    asked: &Settings,
    mut found: Found,
) -> Result<Found, Error> {
    if found.choice.is_none()
        && !asked.provider_pinned()
        && let Some(provider) = cluster::found_provider(docker, asked).await?
    {
        // The profile may not run on it (several servers on K3s).
        asked.with_provider(provider)?;
        found.choice = Some(cluster::choice::Choice {
            provider,
            reason: cluster::choice::Reason::Recorded,
        });
    }
    Ok(found)
}

/// `asked` with what the stack's record knows, on the provider of the
/// stack's cluster ([`on_its_provider`]): what removing or stopping the
/// stack's cluster acts on.
pub async fn recorded_on_its_provider(
    docker: &Arc<dyn Engine>,
    asked: &Settings,
) -> Result<Settings, Error> {
    let found = on_its_provider(docker, asked, Found::recorded(asked)).await?;
    Ok(found.settings(asked))
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
    if let Some(host) = settings.registry.host() {
        vars.push(("DEVSTACK_REGISTRY", host));
    }
    vars
}

/// Removes every devstack stack on this machine (found by its labels) and
/// nothing else, each on the profile `profile` with `overrides` and its
/// own name. A Kind cluster carries kind's labels, not devstack's: both
/// providers' removal runs, so a stack whose record is gone goes whole.
/// A stack on a cluster devstack did not create is found by its record and
/// removed from that cluster as its own `down` would, whatever provider
/// `profile` names.
pub async fn down_all(
    profile: Option<&str>,
    overrides: &Overrides,
    ui: &Ui,
) -> Result<Vec<DownReport>, Error> {
    let engine = docker::connect().await;
    let mut reports = Vec::new();
    let state_dir = crate::profile::select(profile, overrides)?.state_dir;
    for name in state::stacks_on_existing_clusters(&state_dir) {
        let named = Overrides {
            name: Some(name),
            ..overrides.clone()
        };
        let settings =
            crate::profile::select(profile, &named)?.with_provider(Provider::Existing)?;
        reports.push(Stack::new(settings).with_ui(ui.clone()).down().await?);
    }
    let docker = match engine {
        Ok(docker) => docker,
        // Stacks on existing clusters need no engine; others have containers.
        Err(e) if !reports.is_empty() => {
            ui.warn(format!(
                "{}: stacks in containers on this machine were not looked for",
                e.message()
            ));
            return Ok(reports);
        }
        Err(e) => return Err(e),
    };
    for name in all_stack_names(docker.as_ref()).await? {
        let named = Overrides {
            name: Some(name.clone()),
            ..overrides.clone()
        };
        let settings = crate::profile::select(profile, &named)?;
        let mut report = Stack::new(settings.clone())
            .with_ui(ui.clone())
            .down()
            .await?;
        let other = match settings.cluster.provider {
            Provider::K3s => Provider::Kind,
            Provider::Kind => Provider::K3s,
            Provider::Existing => {
                reports.push(report);
                continue;
            }
        };
        let on_other = Overrides {
            provider: Some(other),
            ..named
        };
        if let Ok(settings) = crate::profile::select(profile, &on_other)
            && let Ok(again) = Stack::new(settings).with_ui(ui.clone()).down().await
        {
            report.cluster |= again.cluster;
        }
        reports.push(report);
    }
    Ok(reports)
}

/// Names of every stack with a labelled container, network or volume here.
pub async fn all_stack_names(docker: &dyn Engine) -> Result<BTreeSet<String>, Error> {
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
    let networks = docker
        .list_networks(docker::stack_filter(None))
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

/// Records the stack's state directory with `runner` for removal when this
/// run makes it (`up`, `cluster up`).
pub fn record_new_state_dir(runner: &crate::pipeline::Runner, settings: &Settings) {
    let state_dir = state::stack_dir(settings);
    if state_dir.exists() {
        return;
    }
    runner.created_record(format!("state {}", state_dir.display()), move || {
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
