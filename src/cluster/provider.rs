//! The interface every kind of cluster implements, and the K3s and Kind
//! providers that implement it with their modules' functions.
//!
//! Nothing here assumes nodes are Docker containers: a provider holds
//! whatever client it needs (the K3s and Kind providers hold the container
//! engine), so a provider for an existing cluster fits the same shape.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::{ClusterInfo, Plan, ProvisionOptions, k3s, kind};
use crate::docker::Engine;
use crate::error::Error;
use crate::profile::{Provider, Settings};
use crate::ui::Step;

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
        options: ProvisionOptions,
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
/// implements [`ClusterProvider`] for it from a module's free functions
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
            engine: Arc<dyn Engine>,
        }

        impl $ty {
            pub fn new(engine: Arc<dyn Engine>) -> Self {
                $ty { engine }
            }
        }

        impl ClusterProvider for $ty {
            fn provider(&self) -> Provider {
                $provider
            }
            fn exists<'a>(
                &'a self,
                settings: &'a Settings,
            ) -> BoxFuture<'a, Result<bool, Error>> {
                Box::pin($exists(self.engine.as_ref(), settings))
            }
            fn plan<'a>(
                &'a self,
                settings: &'a Settings,
            ) -> BoxFuture<'a, Result<Plan, Error>> {
                Box::pin($plan(self.engine.as_ref(), settings))
            }
            fn up<'a>(
                &'a self,
                settings: &'a Settings,
                options: ProvisionOptions,
                step: &'a Step,
            ) -> BoxFuture<'a, Result<ClusterInfo, Error>> {
                Box::pin($up(self.engine.as_ref(), settings, options, step))
            }
            fn kubeconfig<'a>(
                &'a self,
                settings: &'a Settings,
            ) -> BoxFuture<'a, Result<String, Error>> {
                Box::pin($kubeconfig(self.engine.as_ref(), settings))
            }
            fn load_images<'a>(
                &'a self,
                settings: &'a Settings,
                step: &'a Step,
            ) -> BoxFuture<'a, Result<usize, Error>> {
                Box::pin($load_images(self.engine.as_ref(), settings, step))
            }
            fn delete<'a>(
                &'a self,
                settings: &'a Settings,
            ) -> BoxFuture<'a, Result<bool, Error>> {
                Box::pin($delete(self.engine.as_ref(), settings))
            }
        }
    };
}

engine_provider!(
    /// K3s nodes as containers of the engine it is given.
    K3s,
    Provider::K3s,
    exists: k3s::any_node,
    plan: k3s::plan,
    up: k3s::up,
    kubeconfig: k3s::kubeconfig,
    load_images: k3s::load_images,
    delete: k3s::delete
);

engine_provider!(
    /// Kind clusters, created with the `kind` CLI and deleted through the
    /// engine it is given, which runs their node containers.
    Kind,
    Provider::Kind,
    exists: kind::any_node,
    plan: kind::plan,
    up: kind::up,
    kubeconfig: kind::kubeconfig,
    load_images: kind::load_images,
    delete: kind::delete
);
