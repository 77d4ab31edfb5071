//! `devstack list` (`ls`): the stacks on this machine, as `kind get
//! clusters` lists clusters: those devstack keeps a record of, and those
//! whose containers carry its labels, each with the state of its containers
//! as the Docker engine reports it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::commands::Context;
use crate::docker;
use crate::docker::models::{ContainerSummary, ContainerSummaryStateEnum};
use crate::envvars;
use crate::error::Error;
use crate::profile::Provider;
use crate::state::{Ports, StackRecord};
use crate::ui::Table;

/// A stack on this machine: recorded in the state directory, or found in
/// Docker by its labels.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedStack {
    pub name: String,
    /// What its containers are doing.
    pub state: State,
    /// Whether devstack keeps its record (`false`: found by its labels
    /// alone, its record lost).
    pub recorded: bool,
    /// The provider its cluster was made with (`None`: a record of a
    /// release before Kind became the default, or none at all).
    pub provider: Option<Provider>,
    pub ports: Ports,
    /// The stack's kubeconfig file: its path, never the credentials in it.
    pub kubeconfig: Option<PathBuf>,
}

/// The state of a stack's containers (its LocalStack, its K3s or Kind nodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Every container runs.
    Running,
    /// Some run, some do not.
    Partial,
    /// It has containers, none running.
    Stopped,
    /// Recorded, with no container: removed outside devstack.
    Missing,
    /// The Docker engine did not answer, or the stack is on a cluster
    /// devstack did not create and has no container (its LocalStack runs
    /// in that cluster): `devstack status` asks the cluster.
    Unknown,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Partial => "partial",
            State::Stopped => "stopped",
            State::Missing => "missing",
            State::Unknown => "unknown",
        }
    }

    /// The state of a stack with these containers.
    fn of(containers: &[&ContainerSummary]) -> State {
        let running = containers
            .iter()
            .filter(|c| c.state == Some(ContainerSummaryStateEnum::RUNNING))
            .count();
        match (running, containers.len()) {
            (_, 0) => State::Missing,
            (0, _) => State::Stopped,
            (running, all) if running == all => State::Running,
            _ => State::Partial,
        }
    }
}

pub async fn run(ctx: &Context) -> Result<i32, Error> {
    // From the environment alone: listing needs no profile, and a broken
    // ./devstack.yaml must not hide the stacks.
    let state_dir = crate::profile::resolve::state_dir_from_env();
    let recorded = recorded_stacks(&state_dir)?;
    let containers = match stack_containers().await {
        Ok(containers) => Some(containers),
        Err(err) => {
            ctx.ui
                .warn(format!("the stacks' state is unknown: {}", err.message()));
            None
        }
    };
    let stacks = with_state(recorded, containers.as_ref());
    if ctx.ui.json() {
        ctx.ui.emit_json(&json!({ "stacks": stacks }));
    } else if !stacks.is_empty() {
        ctx.ui.out(table(&stacks));
    }
    if stacks.is_empty() {
        let in_docker = if containers.is_some() {
            ", none in Docker"
        } else {
            ""
        };
        ctx.ui.info(format!(
            "no stacks on this machine (none recorded in {}{in_docker})",
            state_dir.join("stacks").display()
        ));
    }
    Ok(0)
}

fn table(stacks: &[ListedStack]) -> String {
    let mut table = Table::new(&["NAME", "STATE", "PROVIDER", "NOTE"]);
    for stack in stacks {
        let note = match (stack.recorded, stack.state, stack.provider) {
            (false, _, _) => "no record: found by its Docker labels",
            (true, State::Missing, _) => "recorded, no container",
            (true, State::Unknown, Some(Provider::Existing)) => {
                "on an existing cluster: `devstack status` asks it"
            }
            _ => "",
        };
        table.row([
            stack.name.as_str(),
            stack.state.as_str(),
            stack.provider.map_or("-", Provider::as_str),
            note,
        ]);
    }
    table.to_string()
}

/// Every container of a stack, by stack name: those carrying devstack's
/// labels (LocalStack, K3s nodes) and Kind's nodes, whose cluster is named
/// after the stack.
async fn stack_containers() -> Result<BTreeMap<String, Vec<ContainerSummary>>, Error> {
    let docker = docker::connect().await?;
    let mut by_stack: BTreeMap<String, Vec<ContainerSummary>> = BTreeMap::new();
    for container in docker::find_containers(docker.as_ref(), docker::stack_filter(None)).await? {
        let stack = container
            .labels
            .as_ref()
            .and_then(|l| l.get(docker::LABEL_STACK))
            .cloned();
        if let Some(stack) = stack {
            by_stack.entry(stack).or_default().push(container);
        }
    }
    let kind = crate::cluster::kind::LABEL_CLUSTER;
    for container in docker::find_containers(docker.as_ref(), vec![kind.to_string()]).await? {
        let stack = container
            .labels
            .as_ref()
            .and_then(|l| l.get(kind))
            .and_then(|cluster| cluster.strip_prefix("devstack-"))
            .map(String::from);
        if let Some(stack) = stack {
            by_stack.entry(stack).or_default().push(container);
        }
    }
    Ok(by_stack)
}

/// The recorded stacks with their state (`containers`: `None` when the
/// engine did not answer), and the stacks Docker has containers of that
/// carry devstack's labels but have no record. A Kind cluster named like
/// a stack devstack has no record of is not devstack's to list.
fn with_state(
    recorded: Vec<ListedStack>,
    containers: Option<&BTreeMap<String, Vec<ContainerSummary>>>,
) -> Vec<ListedStack> {
    let Some(containers) = containers else {
        return recorded;
    };
    let of = |name: &str, labelled_only: bool| -> Vec<&ContainerSummary> {
        containers.get(name).map_or(Vec::new(), |all| {
            all.iter()
                .filter(|c| {
                    !labelled_only
                        || c.labels
                            .as_ref()
                            .is_some_and(|l| l.contains_key(docker::LABEL_STACK))
                })
                .collect()
        })
    };
    let mut stacks: Vec<ListedStack> = recorded
        .into_iter()
        .map(|stack| {
            let state = match State::of(&of(&stack.name, false)) {
                State::Missing if stack.provider == Some(Provider::Existing) => State::Unknown,
                state => state,
            };
            ListedStack { state, ..stack }
        })
        .collect();
    for name in containers.keys() {
        let labelled = of(name, true);
        if labelled.is_empty() || stacks.iter().any(|s| &s.name == name) {
            continue;
        }
        stacks.push(ListedStack {
            name: name.clone(),
            state: State::of(&of(name, false)),
            recorded: false,
            provider: None,
            ports: Ports::default(),
            kubeconfig: None,
        });
    }
    stacks.sort_by(|a, b| a.name.cmp(&b.name));
    stacks
}

/// The files `crate::state` keeps in a stack's directory (its record, and
/// the kubeconfig `state::kubeconfig_path` names).
const RECORD_FILE: &str = "stack.json";
const KUBECONFIG_FILE: &str = "kubeconfig";

/// The stacks recorded under `state_dir` (their state unknown), by name: each directory of
/// `stacks/` named as a stack can be that holds the stack's record or its
/// kubeconfig (releases before the record wrote only the kubeconfig).
/// `down` removes the directory, so what is left is on this machine.
pub fn recorded_stacks(state_dir: &Path) -> Result<Vec<ListedStack>, Error> {
    let dir = state_dir.join("stacks");
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(
                Error::internal(format!("cannot read {}: {e}", dir.display())).with_hint(format!(
                    "check that {} is readable (or set {})",
                    state_dir.display(),
                    envvars::DEVSTACK_HOME
                )),
            );
        }
    };
    let mut stacks: Vec<ListedStack> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            crate::profile::resolve::validate_stack_name(&name).ok()?;
            let record_file = entry.path().join(RECORD_FILE);
            let kubeconfig = entry.path().join(KUBECONFIG_FILE);
            let record = std::fs::read(&record_file).ok();
            if record.is_none() && !kubeconfig.is_file() {
                return None;
            }
            // A record that does not parse still says the stack exists.
            let record: StackRecord = record
                .and_then(|bytes| serde_json::from_slice(&bytes).ok())
                .unwrap_or_default();
            Some(ListedStack {
                name,
                state: State::Unknown,
                recorded: true,
                provider: record.provider,
                ports: record.ports,
                kubeconfig: kubeconfig.is_file().then_some(kubeconfig),
            })
        })
        .collect();
    stacks.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(stacks)
}
