//! The Preflight step of `up`: what the run finds out before it changes
//! anything, and what it refuses then, so that nothing is created for a
//! run that cannot succeed.

use std::sync::Arc;

use super::found::{Found, OnCluster};
use super::joining;
use super::run::UpRun;
use crate::cluster::{self, existing};
use crate::docker;
use crate::error::Error;
use crate::profile::Settings;
use crate::ui::Step;

/// What Preflight hands the steps after it.
pub(super) struct Preflight {
    /// How the running cluster differs from the profile: allowed, since
    /// Preflight checked it.
    pub plan: cluster::Plan,
    /// What the stack's record kept and the provider settled, with what
    /// the cluster holds for the stack.
    pub found: Found,
    /// The settings the steps read until LocalStack answers:
    /// `found.settings(asked)`.
    pub settings: Settings,
}

impl UpRun<'_> {
    /// The Preflight step, on what the run found so far (`found`).
    pub(super) async fn preflight(&self, found: &Found) -> Result<Preflight, Error> {
        let timeout = self.stack.asked.timeouts.preflight.get();
        self.runner
            .step(
                "Preflight",
                Some((timeout, "timeouts.preflight")),
                |step: Arc<Step>| async move {
                    let preflight = self.check(found.clone(), &step).await?;
                    Ok((preflight, String::new()))
                },
            )
            .await
    }

    /// Docker answers (a cluster devstack did not create needs none here,
    /// and the stack joins it instead), the cluster's plan is allowed, the
    /// kubeconfig files are writable, and the pins and bundle hold what the
    /// profile asks for.
    async fn check(&self, mut found: Found, step: &Step) -> Result<Preflight, Error> {
        let asked = &self.stack.asked;
        if found.on_existing_cluster(asked) {
            found.cluster = self.join(&found.cluster, step).await?;
        } else {
            self.docker
                .ping()
                .await
                .map_err(|e| docker::engine_error("ping the Docker engine", e))?;
        }
        // Chosen once, before the nodes are made: they know the registry by it.
        if asked.registry.enabled {
            if let Some(fixed) = asked.registry.port.fixed() {
                found.ports.registry = Some(fixed);
            } else if found.ports.registry.is_none() {
                let port = crate::hostinfo::free_port().map_err(|e| {
                    Error::internal(format!("pick a free port for the registry: {e}"))
                })?;
                found.ports.registry = Some(port);
            }
        }
        let settings = found.settings(asked);
        crate::registry::check_port(self.docker.as_ref(), &settings).await?;
        // A change the cluster cannot take in place is refused before anything
        // (LocalStack included) is touched.
        let plan = cluster::plan(self.docker, &settings).await?;
        plan.check(self.recreate, &settings)?;
        cluster::check_kubeconfig_writable(&settings)?;
        // A pinned version the offline bundle lacks fails here, not minutes
        // later when Flux or the chart is reached.
        crate::artifacts::check_version(
            &settings,
            &crate::artifacts::Pins::load(settings.images.pins_file.as_deref())?,
        )?;
        // The artifact cache is filled and checked by the next step.
        if settings.images.bundle.is_some() {
            crate::bundle::open_checked(&settings, self.docker.as_ref()).await?;
        }
        Ok(Preflight {
            plan,
            found,
            settings,
        })
    }

    /// How the stack joins the cluster devstack did not create
    /// ([`joining::join`]), and whether its nodes pull the stack's images
    /// themselves, which the provider tells.
    async fn join(&self, recorded: &OnCluster, step: &Step) -> Result<OnCluster, Error> {
        let asked = &self.stack.asked;
        let joined = joining::join(asked, recorded).await?;
        let nodes_pull =
            existing::nodes_pull(self.docker.as_ref(), &joined.client, &joined.config).await?;
        if joined.cluster.shares_cluster {
            step.progress(format!(
                "another stack runs on the cluster: this one's objects are named `*-{}`",
                asked.name
            ));
        }
        if let Some(eso) = &joined.cluster.cluster_eso {
            step.progress(format!(
                "the External Secrets Operator of the cluster serves the stack (Deployment {}/{})",
                eso.namespace, eso.deployment
            ));
        }
        Ok(OnCluster {
            nodes_pull,
            ..joined.cluster
        })
    }
}
