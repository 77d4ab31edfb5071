//! The interface every kind of cluster implements, and the plan that says
//! how a running cluster differs from the profile.
//!
//! Nothing here assumes nodes are Docker containers: a provider holds
//! whatever client it needs (the K3s and Kind providers hold the container
//! engine), so a provider for an existing cluster fits the same shape.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;

use super::{ClusterInfo, UpOptions};
use crate::docker::Engine;
use crate::error::Error;
use crate::profile::{Provider, Settings};
use crate::ui::Step;

/// One difference between the running cluster and the profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// `agents 0 -> 1`, `image rancher/k3s:a -> rancher/k3s:b`.
    pub what: String,
    /// The provider applies it to the running cluster; otherwise only
    /// recreating the cluster does.
    pub in_place: bool,
}

/// What `up` would change on the running cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// A cluster of this stack exists (running or not).
    pub exists: bool,
    pub changes: Vec<Change>,
}

impl Plan {
    pub fn needs_recreate(&self) -> bool {
        self.changes.iter().any(|c| !c.in_place)
    }

    /// Refuses, before anything happens, a change only a recreate applies,
    /// unless the caller asked for the recreate.
    pub fn check(&self, recreate: bool, settings: &Settings) -> Result<(), Error> {
        if !self.needs_recreate() || recreate {
            return Ok(());
        }
        let changes: Vec<&str> = self
            .changes
            .iter()
            .filter(|c| !c.in_place)
            .map(|c| c.what.as_str())
            .collect();
        Err(Error::user(format!(
            "the running {} cluster of stack `{}` differs from the profile in what it cannot change in place: {}",
            settings.cluster.provider.as_str(),
            settings.name,
            changes.join(", ")
        ))
        .with_hint(
            "`devstack up --recreate` recreates the cluster (LocalStack and its secrets are kept); or change the profile back",
        ))
    }
}

/// The change of `cluster.ports` when a cluster publishes `have` (port in
/// the node, port on the host) besides its API server. Published ports are
/// fixed when a node container is created, so only a recreate changes them.
pub(crate) fn ports_change(mut have: Vec<(u16, u16)>, settings: &Settings) -> Option<Change> {
    let mut want: Vec<(u16, u16)> = settings
        .cluster
        .ports
        .iter()
        .map(|p| (p.container_port, p.host_port))
        .collect();
    have.sort_unstable();
    have.dedup();
    want.sort_unstable();
    want.dedup();
    let list = |ports: &[(u16, u16)]| {
        ports
            .iter()
            .map(|(inside, host)| format!("{host}:{inside}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    (have != want).then(|| Change {
        what: format!("ports [{}] -> [{}]", list(&have), list(&want)),
        in_place: false,
    })
}

/// A kind of Kubernetes cluster devstack can run a stack on.
pub trait ClusterProvider: Send + Sync {
    fn provider(&self) -> Provider;

    /// Whether the stack has a cluster of this provider, running or not.
    fn exists<'a>(&'a self, settings: &'a Settings) -> BoxFuture<'a, Result<bool, Error>>;

    /// How the running cluster differs from `settings` (empty when none runs).
    fn plan<'a>(&'a self, settings: &'a Settings) -> BoxFuture<'a, Result<Plan, Error>>;

    /// Creates the cluster, or converges the running one (starting stopped
    /// nodes, applying in-place changes), and waits until its nodes are
    /// Ready. Images are [`ClusterProvider::load_images`]' business.
    fn up<'a>(
        &'a self,
        settings: &'a Settings,
        options: UpOptions,
        step: &'a Step,
    ) -> BoxFuture<'a, Result<ClusterInfo, Error>>;

    /// The running cluster's kubeconfig (YAML), its context, cluster and
    /// user named `devstack-<stack>`.
    fn kubeconfig<'a>(&'a self, settings: &'a Settings) -> BoxFuture<'a, Result<String, Error>>;

    /// Makes every image the stack preloads (offline bundle,
    /// `images.preload`) present on every node, importing what a node
    /// lacks, within `timeouts.preload`. Returns how many imports it did.
    fn load_images<'a>(
        &'a self,
        settings: &'a Settings,
        step: &'a Step,
    ) -> BoxFuture<'a, Result<usize, Error>>;

    /// Removes the cluster and its state; absent is fine. Returns whether
    /// anything was removed.
    fn delete<'a>(&'a self, settings: &'a Settings) -> BoxFuture<'a, Result<bool, Error>>;
}

/// Declares a provider struct holding an `engine: Arc<dyn Engine>` and
/// implements [`ClusterProvider`] for it from its module's free functions
/// `(engine, settings, ...)`.
macro_rules! engine_provider {
    (
        $(#[$doc:meta])*
        $ty:ident,
        $provider:expr,
        exists: $exists:path,
        plan: $plan:path,
        up: $up:path,
        kubeconfig: $kubeconfig:path,
        load_images: $load_images:path,
        delete: $delete:path
    ) => {
        $(#[$doc])*
        pub struct $ty {
            engine: std::sync::Arc<dyn $crate::docker::Engine>,
        }

        impl $ty {
            pub fn new(engine: std::sync::Arc<dyn $crate::docker::Engine>) -> Self {
                $ty { engine }
            }
        }

        impl $crate::cluster::ClusterProvider for $ty {
            fn provider(&self) -> $crate::profile::Provider {
                $provider
            }
            fn exists<'a>(
                &'a self,
                settings: &'a Settings,
            ) -> futures::future::BoxFuture<'a, Result<bool, Error>> {
                Box::pin($exists(self.engine.as_ref(), settings))
            }
            fn plan<'a>(
                &'a self,
                settings: &'a Settings,
            ) -> futures::future::BoxFuture<'a, Result<$crate::cluster::Plan, Error>> {
                Box::pin($plan(self.engine.as_ref(), settings))
            }
            fn up<'a>(
                &'a self,
                settings: &'a Settings,
                options: $crate::cluster::UpOptions,
                step: &'a $crate::ui::Step,
            ) -> futures::future::BoxFuture<'a, Result<$crate::cluster::ClusterInfo, Error>> {
                Box::pin($up(self.engine.as_ref(), settings, options, step))
            }
            fn kubeconfig<'a>(
                &'a self,
                settings: &'a Settings,
            ) -> futures::future::BoxFuture<'a, Result<String, Error>> {
                Box::pin($kubeconfig(self.engine.as_ref(), settings))
            }
            fn load_images<'a>(
                &'a self,
                settings: &'a Settings,
                step: &'a $crate::ui::Step,
            ) -> futures::future::BoxFuture<'a, Result<usize, Error>> {
                Box::pin($load_images(self.engine.as_ref(), settings, step))
            }
            fn delete<'a>(
                &'a self,
                settings: &'a Settings,
            ) -> futures::future::BoxFuture<'a, Result<bool, Error>> {
                Box::pin($delete(self.engine.as_ref(), settings))
            }
        }
    };
}
pub(crate) use engine_provider;

/// The provider the settings name, on `engine`.
pub fn for_settings(engine: Arc<dyn Engine>, settings: &Settings) -> Box<dyn ClusterProvider> {
    match settings.cluster.provider {
        Provider::K3s => Box::new(super::k3s::K3s::new(engine)),
        Provider::Kind => Box::new(super::kind::Kind::new(engine)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_changes_that_need_a_recreate_are_refused() {
        let settings = crate::profile::Settings::builtin(&Default::default()).unwrap();
        let change = |what: &str, in_place| Change {
            what: what.into(),
            in_place,
        };
        let in_place = Plan {
            exists: true,
            changes: vec![change("agents 0 -> 1", true)],
        };
        assert!(in_place.check(false, &settings).is_ok());
        let image = Plan {
            exists: true,
            changes: vec![change("agents 0 -> 1", true), change("image a -> b", false)],
        };
        let err = image.check(false, &settings).unwrap_err();
        assert_eq!(err.kind(), crate::error::Kind::User);
        assert!(
            err.message().ends_with(": image a -> b"),
            "{}",
            err.message()
        );
        assert!(err.hint().unwrap().contains("`devstack up --recreate`"));
        assert!(image.check(true, &settings).is_ok());
    }
}
