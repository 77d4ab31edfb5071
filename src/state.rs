//! Per-stack files on the host (kubeconfig), under the state directory.

use std::path::PathBuf;

use crate::envvars;

/// `$DEVSTACK_HOME`, else `$XDG_STATE_HOME/devstack`, else `~/.local/state/devstack`.
pub fn home() -> PathBuf {
    if let Some(dir) = envvars::get(envvars::DEVSTACK_HOME) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = envvars::get(envvars::XDG_STATE_HOME) {
        return PathBuf::from(dir).join("devstack");
    }
    let home = envvars::get(envvars::HOME).unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".local/state/devstack")
}

pub fn stack_dir(stack: &str) -> PathBuf {
    home().join("stacks").join(stack)
}

/// The stack's own kubeconfig file (mode 0600).
pub fn kubeconfig_path(stack: &str) -> PathBuf {
    stack_dir(stack).join("kubeconfig")
}
