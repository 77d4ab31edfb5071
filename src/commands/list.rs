//! `devstack list` (`ls`): the stacks on this machine, one name a line, as
//! `kind get clusters` lists clusters.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::commands::Context;
use crate::envvars;
use crate::error::Error;
use crate::profile::Provider;
use crate::state::{Ports, StackRecord};

/// A stack devstack keeps files for on this machine.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedStack {
    pub name: String,
    /// The provider its cluster was made with (`None`: a record of a
    /// release before Kind became the default, or none at all).
    pub provider: Option<Provider>,
    pub ports: Ports,
    /// The stack's kubeconfig file: its path, never the credentials in it.
    pub kubeconfig: Option<PathBuf>,
}

pub fn run(ctx: &Context) -> Result<i32, Error> {
    // From the environment alone: listing needs no profile, and a broken
    // ./devstack.yaml must not hide the stacks.
    let state_dir = crate::profile::resolve::state_dir_from_env();
    let stacks = recorded_stacks(&state_dir)?;
    if ctx.ui.json() {
        ctx.ui.emit_json(&json!({ "stacks": stacks }));
    } else {
        for stack in &stacks {
            ctx.ui.out(&stack.name);
        }
    }
    if stacks.is_empty() {
        ctx.ui.info(format!(
            "no stacks on this machine (none recorded in {})",
            state_dir.join("stacks").display()
        ));
    }
    Ok(0)
}

/// The files `crate::state` keeps in a stack's directory (its record, and
/// the kubeconfig `state::kubeconfig_path` names).
const RECORD_FILE: &str = "stack.json";
const KUBECONFIG_FILE: &str = "kubeconfig";

/// The stacks recorded under `state_dir`, by name: each directory of
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
                provider: record.provider,
                ports: record.ports,
                kubeconfig: kubeconfig.is_file().then_some(kubeconfig),
            })
        })
        .collect();
    stacks.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(stacks)
}
