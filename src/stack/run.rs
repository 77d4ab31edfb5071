//! One run of `up` once it holds the stack's lock: what its steps, in
//! `preflight.rs`, `localstack_and_cluster.rs` and `up.rs`, all read.

use std::sync::Arc;
use std::time::Instant;

use super::Stack;
use crate::cluster::choice::Choice;
use crate::docker::Engine;
use crate::pipeline::Runner;
use crate::snapshot::Snapshot;

/// One run of `up`: the stack (what was asked), what the run was told, and
/// the runner that times its steps and rolls back what they created. What
/// the run finds goes from step to step as a [`super::Found`].
pub(super) struct UpRun<'a> {
    pub stack: &'a Stack,
    pub docker: &'a Arc<dyn Engine>,
    /// The stack existed before this run.
    pub existed: bool,
    /// The snapshot the cluster is restored from.
    pub restore: Option<&'a Snapshot>,
    /// The provider settled, and why, for the report.
    pub choice: Choice,
    /// Recreate a cluster whose differences from the profile its provider
    /// cannot apply in place (`--recreate`).
    pub recreate: bool,
    /// Run the round trip at the end; `None`: the profile's `verify.onUp`.
    pub verify: Option<bool>,
    pub runner: &'a Runner,
    pub started: Instant,
}
