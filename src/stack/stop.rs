//! `Stack::stop` and `Stack::start`: a stack's containers stopped with
//! everything else kept (volumes, network, record, kubeconfig), so that it
//! holds no memory and no CPU; then started again through `up` on the
//! existing stack, whose repairs are the ones a machine restart needs (the
//! stopped nodes and LocalStack started, LocalStack's lost secrets and
//! GitOps source put back, the pods that crashed as their node started
//! recreated), ending in the round trip.

use std::time::{Duration, Instant};

use futures::FutureExt;
use serde::Serialize;

use super::{Stack, UpOptions, UpReport};
use crate::cluster;
use crate::docker::{self, Engine};
use crate::error::Error;
use crate::health::{self, StackContainer};
use crate::profile::{Provider, Settings};
use crate::state;

/// How long a container has to end on its own stop signal before the engine
/// kills it. K3s and LocalStack end within it (about a second each); a Kind
/// node's systemd does not finish its shutdown in 30 s on this project's
/// machines, so it is killed, as a machine that loses power would be: etcd,
/// K3s's SQLite and containerd keep what they committed, and what they
/// wrote is in the host's page cache, which a process kill does not lose.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StopReport {
    pub stack: String,
    /// The containers this run stopped.
    pub stopped: Vec<String>,
    /// The containers that were stopped already.
    pub already_stopped: Vec<String>,
    pub elapsed_ms: u64,
}

impl Stack {
    /// Stops every container of the stack (its K3s or Kind nodes and its
    /// LocalStack) at once, each given [`STOP_GRACE`] to end on its stop
    /// signal; volumes, network, record and kubeconfig stay. Refused while
    /// another run holds the stack, rather than stopping what it works on.
    pub async fn stop(&self) -> Result<StopReport, Error> {
        let started = Instant::now();
        let docker = docker::connect().await?;
        let settings = self.on_its_provider(&docker).await?;
        refuse_on_existing(&settings, "stop")?;
        let _lock = self.lock_unless_busy("stop")?;
        let containers = health::stack_containers(&docker, &settings).await?;
        if containers.is_empty() {
            return Err(no_containers(&settings, "nothing to stop"));
        }
        let (running, stopped): (Vec<StackContainer>, Vec<StackContainer>) =
            containers.into_iter().partition(|c| c.running);
        if !running.is_empty() {
            self.ui.info(format!(
                "stopping {}",
                names(&running).collect::<Vec<_>>().join(", ")
            ));
        }
        let stops = running
            .iter()
            .map(|c| stop_container(docker.as_ref(), &c.name));
        for stopped in futures::future::join_all(stops).await {
            stopped?;
        }
        Ok(StopReport {
            stack: settings.name.clone(),
            stopped: names(&running).map(String::from).collect(),
            already_stopped: names(&stopped).map(String::from).collect(),
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// Starts a stopped stack and brings it back to a verified round trip:
    /// `up` on the existing stack, which starts its stopped nodes (Kind's
    /// control planes first) beside its LocalStack and repairs what the stop
    /// left, as after a machine restart. On a running stack it converges as
    /// `up` does. A stack whose cluster is gone (its nodes removed outside
    /// devstack) is refused before anything is touched: `up` recreates it.
    pub async fn start(&self, options: UpOptions) -> Result<UpReport, Error> {
        let docker = docker::connect().await?;
        let settings = self.on_its_provider(&docker).await?;
        refuse_on_existing(&settings, "start")?;
        let provider = cluster::provider_for(docker.clone(), &settings);
        if !provider.exists(&settings).await? {
            return Err(no_containers(&settings, "nothing to start"));
        }
        self.up(options).await
    }

    /// The stack's lock, when no other run holds it: `stop` refuses to stop
    /// the containers an `up` is creating or converging.
    fn lock_unless_busy(&self, command: &str) -> Result<state::StackLock, Error> {
        // The first poll takes a free lock; a held one leaves it waiting.
        let acquire = state::StackLock::acquire(&self.asked, command, &|_| {});
        if let Some(lock) = acquire.now_or_never() {
            return lock;
        }
        let holder =
            std::fs::read_to_string(state::StackLock::path(&self.asked)).unwrap_or_default();
        let holder = match holder.trim() {
            "" => "another devstack run".to_string(),
            holder => holder.to_string(),
        };
        Err(Error::prerequisite(format!(
            "stack `{}` is busy: {holder} is working on it, so nothing was stopped",
            self.asked.name
        ))
        .with_hint(format!(
            "wait for that run to end (or interrupt it), then run `devstack {command}` again"
        )))
    }
}

/// Stops one container; one that stopped or went away meanwhile is fine.
async fn stop_container(engine: &dyn Engine, name: &str) -> Result<(), Error> {
    let Err(e) = engine.stop_container(name, STOP_GRACE).await else {
        return Ok(());
    };
    let still_running = docker::inspect(engine, name)
        .await?
        .and_then(|c| c.state)
        .and_then(|s| s.running)
        .unwrap_or(false);
    if still_running {
        return Err(
            docker::engine_error(format!("stop container {name}"), e).with_hint(
                "`devstack stop` again stops what is left; `devstack start` starts the stack again",
            ),
        );
    }
    Ok(())
}

fn names(containers: &[StackContainer]) -> impl Iterator<Item = &str> {
    containers.iter().map(|c| c.name.as_str())
}

/// A stack on a cluster devstack did not create has no containers of its
/// own: its cluster is another tool's to stop and start.
fn refuse_on_existing(settings: &Settings, command: &str) -> Result<(), Error> {
    if settings.cluster.provider != Provider::Existing {
        return Ok(());
    }
    Err(Error::user(format!(
        "stack `{}` runs on a cluster devstack did not create, which `devstack {command}` leaves to the tool that made it",
        settings.name
    ))
    .with_hint("stop or start that cluster with its own tool; `devstack down` removes what the stack put there"))
}

/// The stack has no containers (or no cluster) to stop or start: it does
/// not exist, or they were removed outside devstack (exit 4, as every
/// command that reads a stack that does not exist).
fn no_containers(settings: &Settings, nothing: &str) -> Error {
    if state::stack_dir(settings).exists() {
        Error::unhealthy(format!(
            "stack `{}` has no {} cluster: its containers were removed outside devstack, so there is {nothing}",
            settings.name,
            settings.cluster.provider.as_str()
        ))
        .with_hint("`devstack up` creates it again; `devstack down` removes what is left of it")
    } else {
        Error::unhealthy(format!(
            "stack `{}` does not exist: there is {nothing}",
            settings.name
        ))
        .with_hint("`devstack up` creates it")
    }
}
