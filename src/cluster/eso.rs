//! An External Secrets Operator that a cluster devstack did not create
//! already runs (`eso.install`): whether the stack may use it, or must
//! install its own, or neither. The orchestrator asks when the stack joins
//! the cluster (`stack::joining`).
//!
//! ESO's AWS provider takes a custom endpoint only from its controller's
//! environment (`AWS_SECRETSMANAGER_ENDPOINT`), so an ESO serves the stack
//! only when that variable names the stack's LocalStack in the cluster, as
//! on a platform that runs LocalStack in namespace `localstack`.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::ListParams;

use crate::error::Error;
use crate::profile::{ClusterEso, EsoInstall, StackNames};

/// The CRD every External Secrets Operator installs.
const ESO_CRD: &str = "externalsecrets.external-secrets.io";
/// The environment variable ESO's AWS provider reads its Secrets Manager
/// endpoint from.
pub const ENDPOINT_VARIABLE: &str = "AWS_SECRETSMANAGER_ENDPOINT";
/// The label the ESO chart gives the controller's Deployment (its webhook
/// and cert-controller carry `external-secrets-webhook` and
/// `external-secrets-cert-controller`).
pub const CONTROLLER_LABEL: &str = "app.kubernetes.io/name=external-secrets";

/// The ESO the stack uses: `None` when devstack delivers its own (the
/// cluster has none, or runs the one this stack's chain applied), the
/// cluster's when `eso.install` allows it and its controller serves the
/// stack. Anything else is refused before anything is created.
pub async fn on_cluster(
    client: &kube::Client,
    names: &StackNames,
    install: EsoInstall,
    context: &str,
) -> Result<Option<ClusterEso>, Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds
        .get_opt(ESO_CRD)
        .await
        .map_err(|e| Error::internal(format!("read CRD {ESO_CRD}: {e}")))?;
    let endpoint = crate::k8s::localstack_in_cluster_url(names);
    let ours = crd.as_ref().is_some_and(applied_by_the_chain);
    let foreign = crd.filter(|_| !ours);
    match (install, foreign) {
        (EsoInstall::Never, None) if ours => Err(Error::user(format!(
            "`eso.install: never`, and the External Secrets Operator on the cluster of context `{context}` is one that devstack installed"
        ))
        .with_hint(
            "remove `eso.install: never` to keep using it, or take the stack down first and install ESO for the cluster; nothing was changed",
        )),
        (EsoInstall::Never, None) => Err(Error::user(format!(
            "`eso.install: never`, and the cluster of context `{context}` runs no External Secrets Operator (no CRD {ESO_CRD})"
        ))
        .with_hint(format!(
            "install ESO with its controller's {ENDPOINT_VARIABLE}={endpoint}, or remove `eso.install` so that devstack installs its own; nothing was created"
        ))),
        (_, None) => Ok(None),
        (EsoInstall::Always, Some(crd)) => Err(Error::user(format!(
            "the cluster of context `{context}` already has an External Secrets Operator that devstack did not install ({}), and `eso.install: always` would take its CRDs over: removing the stack would delete them with every ExternalSecret of the cluster",
            describe(&crd)
        ))
        .with_hint(format!(
            "remove `eso.install: always` to use that ESO (its controller's {ENDPOINT_VARIABLE} must be {endpoint}), or use a cluster without ESO; nothing was created"
        ))),
        (_, Some(crd)) => usable(client, &crd, context, &endpoint).await.map(Some),
    }
}

/// The chain's CRD level applied it: the stack's own ESO from an earlier `up`.
fn applied_by_the_chain(crd: &CustomResourceDefinition) -> bool {
    let labels = crd.metadata.labels.clone().unwrap_or_default();
    // The chain's CRD level (gitops::CHAIN[0]), named here as gitops uses cluster.
    labels
        .get("kustomize.toolkit.fluxcd.io/namespace")
        .is_some_and(|ns| ns == "flux-system")
        && labels
            .get("kustomize.toolkit.fluxcd.io/name")
            .is_some_and(|name| name == "external-secrets-crds")
}

/// `CRD <name>, managed by <who>, versions <v, ...>`.
fn describe(crd: &CustomResourceDefinition) -> String {
    let by = crd
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/managed-by"))
        .map(|m| format!(", managed by {m}"))
        .unwrap_or_default();
    let versions: Vec<&str> = crd.spec.versions.iter().map(|v| v.name.as_str()).collect();
    format!("CRD {ESO_CRD}{by}, versions {}", versions.join(", "))
}

/// The cluster's ESO when it serves the API the stack's manifests use and
/// one of its controllers reaches the stack's LocalStack; else a refusal
/// that names what each controller lacks.
async fn usable(
    client: &kube::Client,
    crd: &CustomResourceDefinition,
    context: &str,
    endpoint: &str,
) -> Result<ClusterEso, Error> {
    let refused = |why: String, hint: String| {
        Err(Error::user(format!(
            "the cluster of context `{context}` runs an External Secrets Operator that devstack did not install ({}), which the stack cannot use: {why}",
            describe(crd)
        ))
        .with_hint(format!("{hint}; nothing was created")))
    };
    let serves_v1 = crd.spec.versions.iter().any(|v| v.name == "v1" && v.served);
    if !serves_v1 {
        return refused(
            "it does not serve external-secrets.io/v1, which the stack's store and ExternalSecrets use".into(),
            "upgrade that ESO to 0.17 or later, or use a cluster without ESO (devstack then installs its own)".into(),
        );
    }
    let deployments: Api<Deployment> = Api::all(client.clone());
    let controllers = deployments
        .list(&ListParams::default().labels(CONTROLLER_LABEL))
        .await
        .map_err(|e| Error::internal(format!("list ESO's controller Deployments: {e}")))?;
    let mut problems = Vec::new();
    for deployment in &controllers.items {
        match Controller::of(deployment).judge(endpoint) {
            Ok(eso) => return Ok(eso),
            Err(why) => problems.push(why),
        }
    }
    let fix = format!(
        "set {ENDPOINT_VARIABLE}={endpoint} on its controller (the chart's `extraEnv`), or set `eso.install: always` on a cluster without ESO"
    );
    if problems.is_empty() {
        return refused(
            format!("no controller Deployment labelled {CONTROLLER_LABEL} runs"),
            fix,
        );
    }
    refused(problems.join("; "), fix)
}

/// What devstack reads of an ESO controller's Deployment.
#[derive(Debug, Default)]
struct Controller {
    namespace: String,
    name: String,
    endpoint: Option<String>,
    args: Vec<String>,
}

impl Controller {
    fn of(deployment: &Deployment) -> Self {
        let containers = deployment
            .spec
            .template
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or_default();
        let endpoint = containers
            .iter()
            .flat_map(|c| c.env.iter().flatten())
            .find(|e| e.name == ENDPOINT_VARIABLE)
            .map(|e| e.value.clone().unwrap_or_default());
        let args = containers
            .iter()
            .flat_map(|c| c.command.iter().flatten().chain(c.args.iter().flatten()))
            .cloned()
            .collect();
        Controller {
            namespace: deployment.metadata.namespace.clone().unwrap_or_default(),
            name: deployment.metadata.name.clone().unwrap_or_default(),
            endpoint,
            args,
        }
    }

    /// The value of flag `--name` (`--name=v` or `--name v`).
    fn flag(&self, name: &str) -> Option<&str> {
        let long = format!("--{name}");
        self.args.iter().enumerate().find_map(|(i, arg)| {
            if let Some(value) = arg.strip_prefix(&format!("{long}=")) {
                Some(value)
            } else if *arg == long {
                self.args.get(i + 1).map(String::as_str)
            } else {
                None
            }
        })
    }

    /// This controller as the stack's ESO, or why it cannot be.
    fn judge(&self, endpoint: &str) -> Result<ClusterEso, String> {
        let at = format!("Deployment {}/{}", self.namespace, self.name);
        match self.endpoint.as_deref() {
            None => return Err(format!("{at} sets no {ENDPOINT_VARIABLE}, so it reads AWS")),
            Some(value) if value.trim_end_matches('/') != endpoint => {
                return Err(format!(
                    "{at} has {ENDPOINT_VARIABLE}={value}, not the stack's LocalStack {endpoint}"
                ));
            }
            Some(_) => {}
        }
        if self.flag("enable-cluster-store-reconciler") == Some("false") {
            return Err(format!(
                "{at} runs with --enable-cluster-store-reconciler=false, and the stack's store is a ClusterSecretStore"
            ));
        }
        if let Some(namespace) = self.flag("namespace").filter(|n| !n.is_empty()) {
            return Err(format!(
                "{at} watches namespace {namespace} only (--namespace), and the stack's store is a ClusterSecretStore"
            ));
        }
        Ok(ClusterEso {
            namespace: self.namespace.clone(),
            deployment: self.name.clone(),
            controller_class: self
                .flag("controller-class")
                .filter(|c| !c.is_empty())
                .map(String::from),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENDPOINT: &str = "http://localstack.localstack.svc.cluster.local:4566";

    fn controller(endpoint: Option<&str>, args: &[&str]) -> Controller {
        Controller {
            namespace: "platform".into(),
            name: "external-secrets".into(),
            endpoint: endpoint.map(String::from),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    #[test]
    fn a_controller_serves_the_stack_only_when_it_reaches_its_localstack() {
        let eso = controller(Some(ENDPOINT), &["--concurrent=1"]).judge(ENDPOINT);
        assert_eq!(
            eso,
            Ok(ClusterEso {
                namespace: "platform".into(),
                deployment: "external-secrets".into(),
                controller_class: None,
            })
        );
        let why = controller(None, &[]).judge(ENDPOINT).unwrap_err();
        assert!(why.contains("sets no AWS_SECRETSMANAGER_ENDPOINT"), "{why}");
        let why = controller(Some("https://vpce.example"), &[])
            .judge(ENDPOINT)
            .unwrap_err();
        assert!(
            why.contains("=https://vpce.example, not the stack's LocalStack"),
            "{why}"
        );
        assert!(
            controller(Some(&format!("{ENDPOINT}/")), &[])
                .judge(ENDPOINT)
                .is_ok()
        );
    }

    #[test]
    fn a_controller_that_skips_cluster_stores_is_refused_and_a_class_is_kept() {
        for args in [
            &["--enable-cluster-store-reconciler=false"][..],
            &["--namespace", "team-a"],
        ] {
            assert!(
                controller(Some(ENDPOINT), args).judge(ENDPOINT).is_err(),
                "{args:?}"
            );
        }
        let eso = controller(
            Some(ENDPOINT),
            &["--namespace=", "--controller-class", "dev"],
        )
        .judge(ENDPOINT)
        .unwrap();
        assert_eq!(eso.controller_class.as_deref(), Some("dev"));
    }
}
