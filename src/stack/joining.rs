//! A stack on a cluster devstack did not create meets what already runs
//! there: other devstack stacks, whose ExternalSecrets it must not take
//! over and beside which it works under names of its own, and maybe an
//! External Secrets Operator of the cluster's own that serves it. The
//! `existing` provider only reaches the cluster and reports; what the
//! stack makes of it is decided here, in Preflight, before anything is
//! created.

use super::found::{Found, OnCluster};
use crate::cluster::{eso, existing};
use crate::error::Error;
use crate::gitops::census;
use crate::k8s::context::ContextConfig;
use crate::profile::Settings;
use crate::profile::names::base;

/// How the stack joins the cluster, and the context it reached it through.
pub(super) struct Joined {
    /// Without `nodes_pull`, which Preflight asks the provider for.
    pub cluster: OnCluster,
    pub config: ContextConfig,
    pub client: kube::Client,
}

/// The cluster's API server answers and the context's user may do all the
/// stack needs; the stack joins the stacks already there under names of
/// its own when one came first (as `recorded` says it did), provided that
/// one's store names an ESO controller; it takes over none of their
/// ExternalSecrets; and the cluster's own ESO serves it if `eso.install`
/// allows and it reaches the stack's LocalStack. Anything else is refused.
pub(super) async fn join(asked: &Settings, recorded: &OnCluster) -> Result<Joined, Error> {
    let (config, client) = existing::connect(asked).await?;
    existing::check_access(
        &client,
        &config,
        &under_names(asked, recorded.shares_cluster),
    )
    .await?;
    refuse_taking_over_external_secrets(&client, asked, &config).await?;
    let shares_cluster =
        recorded.shares_cluster || joins_another_stack(&client, asked, &config).await?;
    let settings = under_names(asked, shares_cluster);
    if shares_cluster && !recorded.shares_cluster {
        // A stack that joins works in namespaces of its own name.
        existing::check_permissions(&client, &config, &settings).await?;
    }
    let cluster_eso =
        eso::on_cluster(&client, &settings.names, asked.eso.install, &config.context).await?;
    Ok(Joined {
        cluster: OnCluster {
            nodes_pull: false,
            cluster_eso,
            shares_cluster,
        },
        config,
        client,
    })
}

/// A cluster devstack did not create as `up`'s Preflight judges it, for
/// `doctor`: the context's name and API server when the stack may join it.
pub async fn check_existing_cluster(settings: &Settings) -> Result<(String, String), Error> {
    let recorded = OnCluster {
        shares_cluster: settings.names.shares_cluster(),
        ..OnCluster::default()
    };
    let joined = join(settings, &recorded).await?;
    Ok((joined.config.context, joined.config.server))
}

/// `asked` under the names its objects take on the cluster.
fn under_names(asked: &Settings, shares_cluster: bool) -> Settings {
    let found = Found {
        cluster: OnCluster {
            shares_cluster,
            ..OnCluster::default()
        },
        ..Found::default()
    };
    found.settings(asked)
}

/// Whether another devstack stack came first on the cluster, holding the
/// shipped names, which this one then must not use. A stack joins only when
/// the first one's store names an ESO controller class: a store without
/// one is served by every controller, the joining stack's too, which would
/// reach the wrong LocalStack for it.
async fn joins_another_stack(
    client: &kube::Client,
    asked: &Settings,
    config: &ContextConfig,
) -> Result<bool, Error> {
    let stacks = census::stacks_on_cluster(client).await?;
    let Some(first) = census::first_other(&stacks, &asked.name) else {
        return Ok(false);
    };
    let stores =
        crate::k8s::dynamic_api(client, "external-secrets.io/v1", "ClusterSecretStore", None);
    let class = match stores.get_opt(base::STORE).await {
        Ok(Some(store)) => store.data["spec"]["controller"]
            .as_str()
            .filter(|class| !class.is_empty())
            .map(str::to_string),
        _ => None,
    };
    if class.is_none() {
        return Err(Error::user(format!(
            "the cluster of context `{}` runs devstack stack `{}`, whose ClusterSecretStore `{}` names no ESO controller class, so the controller a second stack adds would serve it too",
            config.context, first.name, base::STORE
        ))
        .with_hint(format!(
            "run `devstack --name {0} up` again with this devstack (on a cluster it did not create, devstack now gives its ESO controller and store a class), or give the cluster's ESO that serves it a `--controller-class`; nothing was created",
            first.name
        )));
    }
    Ok(true)
}

/// Stacks on one cluster must not sync the profile's secrets to the same
/// place: the later one's ExternalSecret would take over the other's, and
/// its `down` would delete it.
async fn refuse_taking_over_external_secrets(
    client: &kube::Client,
    asked: &Settings,
    config: &ContextConfig,
) -> Result<(), Error> {
    for secret in asked.secrets.iter().filter(|s| s.sync.is_some()) {
        let (namespace, name) = crate::profile::settings::profile_external_secret_name(secret);
        let api = crate::k8s::dynamic_api(
            client,
            "external-secrets.io/v1",
            "ExternalSecret",
            Some(&namespace),
        );
        // Without ESO's CRDs there is none.
        let Ok(Some(synced)) = api.get_opt(&name).await else {
            continue;
        };
        let labels = synced.metadata.labels.unwrap_or_default();
        let owner = labels.get(crate::docker::LABEL_STACK);
        if let Some(owner) = owner.filter(|owner| **owner != asked.name) {
            return Err(Error::user(format!(
                "secret `{}` syncs to {namespace}/{name} on the cluster of context `{}`, where stack `{owner}` already syncs one",
                secret.name, config.context
            ))
            .with_hint(format!(
                "give this stack's profile another `sync.namespace` or `sync.secretName` for `{}`; nothing was created",
                secret.name
            )));
        }
    }
    Ok(())
}
