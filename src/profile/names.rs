//! The names a stack's objects take on its cluster.
//!
//! A stack alone on its cluster uses the names of the shipped manifests
//! (namespace `localstack`, root Kustomization `devstack`, store
//! `localstack`), the layout users copy into their GitOps repositories.
//! A stack that joins a cluster where another devstack stack already runs
//! shares that cluster's Flux and ESO CRDs and webhook, and names
//! everything of its own after itself, so neither stack's objects take
//! over the other's.

use serde::Serialize;

/// The base names of a stack's objects, as the shipped manifests spell them.
pub mod base {
    pub const ROOT: &str = "devstack";
    pub const LOCALSTACK_NAMESPACE: &str = "localstack";
    pub const LOCALSTACK_SERVICE: &str = "localstack";
    pub const ESO_NAMESPACE: &str = "external-secrets";
    pub const ESO_RELEASE: &str = "external-secrets";
    pub const STORE: &str = "localstack";
    /// The SSM Parameter Store's store, made only for a profile with `parameters`.
    pub const PARAMETER_STORE: &str = "localstack-parameters";
    pub const FACTS: &str = "devstack-stack-facts";
    pub const SOURCE: &str = "devstack";
    pub const SOURCE_CREDENTIALS: &str = "devstack-localstack-s3";
    pub const ESO_VALUES: &str = "devstack-eso-values";
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StackNames {
    /// Set when the stack shares its cluster with a stack that came first:
    /// the suffix (the stack's name) of every name of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    shares_cluster_as: Option<String>,
}

impl StackNames {
    /// The shipped names: a stack alone on its cluster.
    pub fn alone() -> Self {
        Self::default()
    }

    /// Names suffixed with `stack`: a stack that joined a cluster another
    /// stack runs on.
    pub fn sharing(stack: &str) -> Self {
        StackNames {
            shares_cluster_as: Some(stack.to_string()),
        }
    }

    pub fn shares_cluster(&self) -> bool {
        self.shares_cluster_as.is_some()
    }

    /// `base` as this stack spells it.
    pub fn of(&self, base: &str) -> String {
        match &self.shares_cluster_as {
            None => base.to_string(),
            Some(stack) => format!("{base}-{stack}"),
        }
    }

    pub fn root(&self) -> String {
        self.of(base::ROOT)
    }
    pub fn localstack_namespace(&self) -> String {
        self.of(base::LOCALSTACK_NAMESPACE)
    }
    /// The Service keeps its name; its namespace tells stacks apart.
    pub fn localstack_service(&self) -> &'static str {
        base::LOCALSTACK_SERVICE
    }
    pub fn eso_namespace(&self) -> String {
        self.of(base::ESO_NAMESPACE)
    }
    /// The operator's HelmRelease (namespace, name). A stack that shares
    /// the cluster gets a release of its own name, so the chart's cluster
    /// roles do not collide with the first stack's.
    pub fn helm_release(&self) -> (String, String) {
        (self.eso_namespace(), self.of(base::ESO_RELEASE))
    }
    pub fn store(&self) -> String {
        self.of(base::STORE)
    }
    pub fn parameter_store(&self) -> String {
        self.of(base::PARAMETER_STORE)
    }
    pub fn facts(&self) -> String {
        self.of(base::FACTS)
    }
    pub fn source(&self) -> String {
        self.of(base::SOURCE)
    }
    pub fn source_credentials(&self) -> String {
        self.of(base::SOURCE_CREDENTIALS)
    }
    pub fn eso_values(&self) -> String {
        self.of(base::ESO_VALUES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_alone_uses_the_shipped_names_and_a_sharing_one_its_own() {
        let alone = StackNames::alone();
        assert_eq!(alone.root(), "devstack");
        assert_eq!(alone.store(), "localstack");
        assert_eq!(
            alone.helm_release(),
            ("external-secrets".into(), "external-secrets".into())
        );
        let b = StackNames::sharing("b");
        assert_eq!(b.root(), "devstack-b");
        assert_eq!(b.localstack_namespace(), "localstack-b");
        assert_eq!(b.store(), "localstack-b");
        assert_eq!(b.facts(), "devstack-stack-facts-b");
        assert_eq!(
            b.helm_release(),
            ("external-secrets-b".into(), "external-secrets-b".into())
        );
    }
}
