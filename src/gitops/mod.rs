//! GitOps: Flux installation, the stack's GitOps source, and the External
//! Secrets stack delivered through the three-level chain.
//!
//! `deliver` is what `up` runs and `sync` what `devstack sync` runs: publish
//! the manifests (and offline ESO artifacts) to the stack's bucket, apply the
//! source, the stack facts and the root Kustomization, then watch the chain
//! until it is Ready, nudging each level as the previous one turns Ready.

pub mod census;
pub mod chain;
pub mod flux;
pub mod manifests;
pub mod repository;
pub mod source;
pub mod substitute;
pub mod uninstall;
pub mod webhook;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use crate::error::Error;
use crate::k8s::{Budget, apply};
use crate::pipeline::Runner;
use crate::profile::{GitopsLayout, GitopsSourceKind, SecretSource, Settings, StackNames};
use crate::ui::Step;

/// Namespace of the Flux sources and Kustomizations devstack manages.
pub const FLUX_NAMESPACE: &str = flux::NAMESPACE;
/// The chain, in dependency order (base names: a stack that shares its
/// cluster suffixes them, see [`StackNames`]).
pub const CHAIN: [&str; 3] = [
    "external-secrets-crds",
    "external-secrets-operator",
    "external-secrets-crs",
];
/// The level that runs LocalStack in the cluster, which the operator level
/// depends on (`localstack.mode: in-cluster`).
pub const LOCALSTACK_LEVEL: &str = "localstack";

/// What of the chain a stack delivers, and under which names.
#[derive(Debug, Clone)]
pub struct ChainPlan {
    pub names: StackNames,
    /// devstack delivers an ESO controller (the operator level and its
    /// HelmRelease); else the cluster's own ESO serves.
    pub installs_eso: bool,
    /// devstack delivers ESO's CRDs, webhook and cert-controller too: not
    /// when the cluster's ESO serves, nor for a stack that shares the
    /// cluster, which uses the first stack's.
    pub installs_eso_shared: bool,
    /// LocalStack runs in the cluster as the level `localstack`.
    pub localstack_level: bool,
    /// The user's apps' Kustomizations, after the chain, dependencies first.
    pub apps: Vec<String>,
}

impl ChainPlan {
    pub fn of(settings: &Settings) -> Self {
        let installs_eso = settings.eso.installs();
        ChainPlan {
            names: settings.names.clone(),
            installs_eso,
            installs_eso_shared: installs_eso && !settings.names.shares_cluster(),
            localstack_level: settings.localstack.in_cluster(),
            apps: repository::app_kustomizations(settings),
        }
    }

    /// The root Kustomization's name.
    pub fn root(&self) -> String {
        self.names.root()
    }

    /// The chain's levels this stack delivers, by name.
    pub fn chain_levels(&self) -> Vec<String> {
        let from = match (self.installs_eso, self.installs_eso_shared) {
            (true, true) => 0,
            (true, false) => 1,
            (false, _) => 2,
        };
        CHAIN[from..]
            .iter()
            .map(|level| self.names.of(level))
            .collect()
    }

    /// The stack's Kustomizations: the root, LocalStack's level when it
    /// runs in the cluster, the chain, then the user's apps.
    pub fn levels(&self) -> Vec<String> {
        let localstack = self
            .localstack_level
            .then(|| self.names.of(LOCALSTACK_LEVEL));
        std::iter::once(self.root())
            .chain(localstack)
            .chain(self.chain_levels())
            .chain(self.apps.iter().cloned())
            .collect()
    }

    /// The operator's HelmRelease (namespace, name), when devstack
    /// delivers one.
    pub fn release(&self) -> Option<(String, String)> {
        self.installs_eso.then(|| self.names.helm_release())
    }

    /// The Deployments of the stack's ESO release: the controller, and its
    /// webhook and cert-controller when the stack installs those.
    pub fn release_deployments(&self) -> Vec<String> {
        let (_, release) = self.names.helm_release();
        let all = chain::eso_deployments(&release);
        let parts = if self.installs_eso_shared { 3 } else { 1 };
        all[..parts].to_vec()
    }
}

/// The stack's Kustomizations: the root, LocalStack's level when it runs
/// in the cluster, the chain, then the user's apps.
pub fn levels(settings: &Settings) -> Vec<String> {
    ChainPlan::of(settings).levels()
}
/// The ESO release (namespace, name) of the cluster's first stack, under
/// the shipped names: its webhook and cert-controller serve every stack on
/// the cluster.
pub const SHARED_ESO_RELEASE: (&str, &str) = (
    crate::profile::names::base::ESO_NAMESPACE,
    crate::profile::names::base::ESO_RELEASE,
);
/// ESO's API group; ExternalSecrets and stores are served at `v1`.
pub const ESO_GROUP: &str = "external-secrets.io";
pub const ESO_VERSION: &str = "v1";
/// The cluster's ClusterSecretStores (cluster-scoped).
pub fn cluster_secret_stores(client: &kube::Client) -> kube::Api<kube::api::DynamicObject> {
    crate::k8s::dynamic_api(
        client,
        &format!("{ESO_GROUP}/{ESO_VERSION}"),
        "ClusterSecretStore",
        None,
    )
}

#[derive(Debug)]
pub struct DeliverOptions {
    /// Request reconciles as levels turn Ready (the default; off only to
    /// measure what Flux does alone).
    pub nudge: bool,
    /// Told, once the source is fetched, whether the chain only re-applies
    /// what it applied before ([`chain::applied_before`], with the stack
    /// facts unchanged): a restart or a restore, where ESO serves as it did
    /// while Flux re-applies, so the round trip need not wait for the chain.
    pub reapplying: Option<tokio::sync::oneshot::Sender<bool>>,
}

impl Default for DeliverOptions {
    fn default() -> Self {
        DeliverOptions {
            nudge: true,
            reapplying: None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliverReport {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flux: Option<flux::InstallReport>,
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published: Option<source::PublishReport>,
    pub offline_eso: bool,
    pub chain: chain::ChainReport,
    pub profile_external_secrets: usize,
    pub elapsed_ms: u64,
}

/// Installs Flux, then publishes and reconciles the chain until Ready: the
/// steps Flux, GitOps source and the chain, each one of `runner`'s.
pub async fn deliver(
    client: &kube::Client,
    settings: &Settings,
    options: DeliverOptions,
    runner: &Runner,
) -> Result<DeliverReport, Error> {
    let started = Instant::now();
    let flux = runner
        .step(
            format!("Flux {}", settings.flux.version),
            None,
            |step| async move {
                // Flux's controllers start without DNS; fetching the GitOps
                // source is the first thing that needs it. So CoreDNS, which
                // takes seconds to start in a new cluster, is awaited here,
                // beside the install, rather than before it.
                // A cluster devstack did not create runs its DNS its own way
                // (kube-dns on some clouds) and has long been serving.
                let existing = settings.cluster.provider == crate::profile::Provider::Existing;
                let dns = async {
                    if existing {
                        return Ok(());
                    }
                    crate::k8s::wait_coredns(
                        client,
                        Budget::new(settings.timeouts.cluster.get(), "timeouts.cluster"),
                        &step,
                    )
                    .await
                };
                let (report, ()) = tokio::try_join!(flux::install(client, settings, &step), dns)?;
                record_pod_starts(client, FLUX_NAMESPACE, &step).await;
                let summary = format!(
                    "{} objects from {}",
                    report.objects,
                    serde_json::to_value(report.source)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default()
                );
                Ok((report, summary))
            },
        )
        .await?;
    let mut report = sync(client, settings, options, runner).await?;
    report.flux = Some(flux);
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// Republishes the manifests, reconciles, and returns when the chain is
/// Ready again, or names the object that failed.
async fn sync(
    client: &kube::Client,
    settings: &Settings,
    mut options: DeliverOptions,
    runner: &Runner,
) -> Result<DeliverReport, Error> {
    let started = Instant::now();
    let timeout = settings.timeouts.eso.get();
    let budget = Budget::since(started, timeout, "timeouts.eso");
    let offline = source::offline_eso(settings)?;
    let local = settings.gitops.source == GitopsSourceKind::Local;
    let objects = bucket_objects(settings, offline.as_ref(), local)?;
    let chain_manifests: manifests::Tree = objects
        .iter()
        .filter(|(key, _)| key.starts_with(&format!("{}/", source::MANIFESTS_PREFIX)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let source_desc = source_description(settings);

    let source_step = SourceStep {
        client,
        settings,
        description: &source_desc,
        offline: offline.as_ref(),
        objects: &objects,
        chain_manifests: &chain_manifests,
        local,
        budget,
    };
    let applied = runner
        .step("GitOps source", None, |step| source_step.run(step))
        .await?;

    if let Some(tell) = options.reapplying.take() {
        tell_reapplying(client, tell, applied.facts_changed, ChainPlan::of(settings));
    }
    let wait = chain_wait_options(
        settings,
        options.nudge,
        budget,
        applied.facts_changed,
        &applied.apps_to_nudge,
    );
    let chain_report = runner
        .step(chain_title(settings), None, |step| {
            wait_chain(client, wait, applied.root_request, step)
        })
        .await?;
    for failure in &chain_report.failures {
        runner.ui().detail(format!(
            "{} {}: {}",
            failure.object, failure.reason, failure.message
        ));
    }

    let external_secrets = apply_profile_external_secrets(client, settings, timeout).await?;
    Ok(DeliverReport {
        flux: None,
        source: source_desc,
        published: local.then_some(applied.published),
        offline_eso: offline.is_some(),
        chain: chain_report,
        profile_external_secrets: external_secrets,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// What the bucket holds: the offline ESO artifacts and, with a local
/// source, the prepared manifests.
fn bucket_objects(
    settings: &Settings,
    offline: Option<&source::OfflineEso>,
    local: bool,
) -> Result<manifests::Tree, Error> {
    let mut objects = offline.map(|o| o.objects.clone()).unwrap_or_default();
    let (tree, origin) = match &settings.gitops.path {
        Some(dir) => (manifests::read_dir(dir)?, dir.display().to_string()),
        None => (
            manifests::embedded(),
            "manifests/external-secrets".to_string(),
        ),
    };
    for (path, bytes) in repository::repository_files(settings)? {
        objects.insert(path, bytes);
    }
    if local {
        let tree = manifests::prepare(tree, &origin, settings.gitops.layout, offline.is_some())?;
        let tree = manifests::for_localstack_mode(tree, settings.localstack.mode)?;
        let mut tree = manifests::with_parameter_store(tree, !settings.parameters.is_empty());
        if settings.eso.cluster.is_some() {
            tree = manifests::for_cluster_eso(tree)?;
        }
        if let Some(class) = settings.controller_class() {
            tree = manifests::with_controller_class(tree, &class)?;
        }
        if settings.names.shares_cluster() {
            tree = manifests::for_shared_cluster(tree, &settings.names)?;
        }
        if settings.eso.auth == crate::profile::parameters::EsoAuth::ServiceAccount {
            if let Some(eso) = &settings.eso.cluster {
                return Err(Error::user(format!(
                    "`eso.auth: serviceAccount` annotates the ServiceAccount of the ESO devstack installs, and this stack uses the cluster's own ESO ({}/{})",
                    eso.namespace, eso.deployment
                ))
                .with_hint("remove `eso.auth` (static keys), or `eso.install: always` for devstack's own ESO"));
            }
            let (namespace, account) = crate::seed::role::service_account(settings);
            tree = manifests::for_service_account_auth(
                tree,
                (&namespace, &account),
                &crate::seed::role::role_arn(settings),
            )?;
        }
        for (path, bytes) in tree {
            objects.insert(format!("{}/{path}", source::MANIFESTS_PREFIX), bytes);
        }
    }
    Ok(objects)
}

/// The GitOps source as the report and the step's summary name it.
fn source_description(settings: &Settings) -> String {
    match settings.gitops.source {
        GitopsSourceKind::Local => format!("s3://{}", source::BUCKET),
        GitopsSourceKind::Git => format!(
            "{} ({})",
            settings.gitops.git_url.as_deref().unwrap_or_default(),
            settings.gitops.git_branch
        ),
    }
}

/// The GitOps source step: publish the bucket, apply the source, facts and
/// root Kustomization, fetch the source and request the root's reconcile.
struct SourceStep<'a> {
    client: &'a kube::Client,
    settings: &'a Settings,
    description: &'a str,
    offline: Option<&'a source::OfflineEso>,
    objects: &'a manifests::Tree,
    /// The chain's own manifests in `objects`, which decide whether a
    /// changed fact concerns the chain.
    chain_manifests: &'a manifests::Tree,
    local: bool,
    budget: Budget,
}

/// What the GitOps source step leaves for the chain's wait and the report.
struct SourceApplied {
    published: source::PublishReport,
    root_request: String,
    /// A fact the chain's manifests substitute changed.
    facts_changed: bool,
    /// The apps' Kustomizations that substitute a fact that changed.
    apps_to_nudge: std::collections::BTreeSet<String>,
}

impl SourceStep<'_> {
    async fn run(self, step: Arc<Step>) -> Result<(SourceApplied, String), Error> {
        // A fetch of a half-filled new bucket would let the root Kustomization prune all of ESO.
        let refill = !source::bucket_exists(self.settings).await;
        let bucket = self.settings.names.source();
        if refill {
            chain::suspend_source(self.client, "Bucket", &bucket, true).await?;
        }
        let span = step.span(format!("{} objects published", self.objects.len()));
        let published = span.finish(source::publish(self.settings, self.objects).await)?;
        let (facts_changed, apps_to_nudge) = self.apply_flux_objects(&step).await?;
        if refill {
            chain::suspend_source(self.client, "Bucket", &bucket, false).await?;
        }
        self.fetch_sources(&step).await?;
        let root_request = chain::request_reconcile(
            &chain::kustomizations(self.client),
            &self.settings.names.root(),
        )
        .await?;
        let summary = self.summary(&published);
        let applied = SourceApplied {
            published,
            root_request,
            facts_changed,
            apps_to_nudge,
        };
        Ok((applied, summary))
    }

    /// Applies the source, the facts, the Helm values, the root
    /// Kustomization and the apps, and removes what the profile no longer
    /// publishes; returns whether a fact the chain's manifests use changed,
    /// and which apps use a fact that changed.
    async fn apply_flux_objects(
        &self,
        step: &Step,
    ) -> Result<(bool, std::collections::BTreeSet<String>), Error> {
        let (client, settings) = (self.client, self.settings);
        let arns = source::secret_arns(settings).await;
        let own = source::facts(settings, self.offline, &arns);
        let facts = repository::plain_facts(settings, &own);
        let values = repository::render_helm_values(settings, &facts)?;
        let changed = repository::changed_facts(client, settings, &facts).await;
        // devstack does not see a git source's manifests: any fact may be substituted there.
        let chain_uses = |key: &str| !self.local || source::substitutes(self.chain_manifests, key);
        let facts_changed = match &changed {
            None => true,
            Some(keys) => keys.iter().any(|k| chain_uses(k)),
        };
        let apps_to_nudge = repository::apps_using(settings, changed.as_ref());
        let bucket_endpoint =
            crate::k8s::localstack_in_cluster_address(client, &settings.names).await;
        let mut flux_objects = source::flux_objects(settings, &facts, &bucket_endpoint);
        let namespaces = repository::missing_namespaces(client, settings).await;
        let published = repository::flux_objects(settings, &facts, &values, &namespaces);
        flux_objects.extend(published.iter().cloned());
        let span = step.span("source, facts and Kustomizations applied");
        span.finish(apply::apply_all(client, &flux_objects, self.budget).await)?;
        if settings.eso.auth == crate::profile::parameters::EsoAuth::ServiceAccount {
            // The static keys an earlier `up` in the other mode left.
            source::remove_source_credentials(client, settings).await?;
        }
        for removed in repository::prune_stale(client, settings, &published).await? {
            step.progress(format!(
                "{removed} removed: the profile no longer publishes it"
            ));
        }
        Ok((facts_changed, apps_to_nudge))
    }

    /// Fetches the profile's source, then the bucket too when that source is not it.
    async fn fetch_sources(&self, step: &Step) -> Result<(), Error> {
        let (client, budget) = (self.client, self.budget);
        let src = source::source_ref(self.settings);
        let span = step.span(format!("{} {} fetched", src.kind, src.name));
        span.finish(chain::refresh_source(client, src.kind, &src.name, budget).await)?;
        if src.kind != "Bucket" {
            let bucket = self.settings.names.source();
            let span = step.span(format!("Bucket {bucket} fetched"));
            span.finish(chain::refresh_source(client, "Bucket", &bucket, budget).await)?;
        }
        Ok(())
    }

    fn summary(&self, published: &source::PublishReport) -> String {
        format!(
            "{}, {} objects{}",
            self.description,
            published.objects,
            match (
                self.offline.is_some(),
                self.settings.images.bundle.is_some()
            ) {
                (true, true) => ", ESO from the offline bundle",
                (true, false) => ", ESO from the artifact cache",
                (false, _) => "",
            }
        )
    }
}

/// Tells `tell` whether the chain only re-applies what it applied before,
/// off the critical path so the chain's wait starts meanwhile.
fn tell_reapplying(
    client: &kube::Client,
    tell: tokio::sync::oneshot::Sender<bool>,
    facts_changed: bool,
    plan: ChainPlan,
) {
    let client = client.clone();
    tokio::spawn(async move {
        let only = !facts_changed && chain::applied_before(&client, &plan).await;
        let _ = tell.send(only);
    });
}

fn chain_title(settings: &Settings) -> String {
    let apps = match settings.gitops.apps.len() {
        0 => String::new(),
        1 => ", then 1 app".to_string(),
        n => format!(", then {n} apps"),
    };
    format!(
        "External Secrets chain ({}{apps})",
        match (settings.gitops.layout, &settings.eso.cluster) {
            (GitopsLayout::Naive, _) => "naive layout".to_string(),
            (GitopsLayout::Chain, None) if settings.names.shares_cluster() => {
                "operator -> crs, beside the cluster's first stack".to_string()
            }
            (GitopsLayout::Chain, None) => "crds -> operator -> crs".to_string(),
            (GitopsLayout::Chain, Some(eso)) => format!(
                "crs, served by the cluster's ESO {}/{}",
                eso.namespace, eso.deployment
            ),
        }
    )
}

fn chain_wait_options(
    settings: &Settings,
    nudge: bool,
    budget: Budget,
    facts_changed: bool,
    apps_to_nudge: &std::collections::BTreeSet<String>,
) -> chain::WaitOptions {
    let chain_layout = settings.gitops.layout == GitopsLayout::Chain;
    let plan = ChainPlan::of(settings);
    let mut nudge_settled = apps_to_nudge.clone();
    if facts_changed {
        nudge_settled.extend(plan.levels().into_iter().filter(|l| !plan.apps.contains(l)));
    }
    chain::WaitOptions {
        plan,
        budget,
        // The naive layout shows what Flux does alone, races included.
        nudge: nudge && chain_layout,
        fail_fast: chain_layout,
        nudge_settled,
    }
}

/// The chain step: waits for the chain and the ClusterSecretStore to be
/// Ready; the summary gives each level's time to Ready.
async fn wait_chain(
    client: &kube::Client,
    wait: chain::WaitOptions,
    root_request: String,
    step: Arc<Step>,
) -> Result<(chain::ChainReport, String), Error> {
    // Boxed: the chain's watches make a future too large for a test thread's 2 MiB stack.
    let names = wait.plan.names.clone();
    let release = wait.plan.release();
    let budget = wait.budget;
    let report = Box::pin(chain::wait_ready(client, wait, Some(root_request), &step)).await?;
    let span = step.span(format!("ClusterSecretStore {} Ready", names.store()));
    span.finish(wait_store_ready(client, &names, budget).await)?;
    if let Some((namespace, _)) = release {
        record_pod_starts(client, &namespace, &step).await;
    }
    let timings: Vec<String> = report
        .levels
        .iter()
        .map(|l| {
            format!(
                "{} {}",
                l.name,
                crate::ui::format_duration(Duration::from_millis(l.ready_after_ms))
            )
        })
        .collect();
    let summary = format!(
        "{}; {} failed reconciliation(s)",
        timings.join(", "),
        report.failed_reconciliations()
    );
    Ok((report, summary))
}

/// Applies the profile's ExternalSecrets; returns how many objects that was.
async fn apply_profile_external_secrets(
    client: &kube::Client,
    settings: &Settings,
    timeout: Duration,
) -> Result<usize, Error> {
    let mut external_secrets = profile_external_secrets(settings);
    // A namespace that is there stays as it is; one devstack makes is the stack's.
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    let mut kept = Vec::new();
    for mut object in external_secrets.drain(..) {
        if object["kind"] == "Namespace" {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            if matches!(namespaces.get_opt(name).await, Ok(Some(_))) {
                continue;
            }
            object["metadata"]["labels"] = json!({
                "app.kubernetes.io/managed-by": "devstack",
                crate::docker::LABEL_STACK: settings.name,
            });
        }
        kept.push(object);
    }
    let external_secrets = kept;
    if !external_secrets.is_empty() {
        // Its own limit: the chain's wait may have spent the budget, and the CRDs are Established.
        apply::apply_all(
            client,
            &external_secrets,
            Budget::new(timeout, "timeouts.eso"),
        )
        .await?;
    }
    Ok(external_secrets.len())
}

/// Waits until ESO serves what the round trip uses: its webhook answering
/// (devstack's own ESO; the cluster's serves as its owners run it) and the
/// stack's ClusterSecretStore Ready.
pub async fn eso_serving(
    client: &kube::Client,
    settings: &Settings,
    budget: Budget,
) -> Result<(), Error> {
    if settings.eso.installs() {
        webhook::wait_serving(client, budget).await?;
    }
    wait_store_ready(client, &settings.names, budget).await
}

/// Waits for the stack's ClusterSecretStore, if the chain created it, to be
/// Ready. Flux counts the custom resources' level Ready once they are
/// applied: kstatus takes an object without status for current, and the
/// store has none until ESO validates it, a moment later. Checked here by
/// watch (a CEL health check in the manifests would cost a 5 s poll of
/// kustomize-controller on nearly every run), so what `sync` returns to is
/// usable. Manifests from git that name no such store are not waited on.
async fn wait_store_ready(
    client: &kube::Client,
    names: &StackNames,
    budget: Budget,
) -> Result<(), Error> {
    let api = cluster_secret_stores(client);
    let store = names.store();
    let exists = api
        .get_opt(&store)
        .await
        .map_err(|e| Error::internal(format!("read ClusterSecretStore {store}: {e}")))?;
    if exists.is_none() {
        return Ok(());
    }
    crate::k8s::Wait::new(format!("ClusterSecretStore {store}"), "Ready", budget)
        .advice(format!(
            "`kubectl describe clustersecretstore {store}` shows why ESO does not accept it"
        ))
        .object(api, &store, |store| match store {
            Some(store) => crate::k8s::wait::ready_verdict(&store.data),
            None => crate::k8s::Verdict::Waiting("deleted".into()),
        })
        .await
        .map(|_| ())
}

/// Puts each pod of `namespace` on the step's timeline, from its creation
/// to Ready, as the pod's own conditions tell (second precision). Best
/// effort: a pod list that fails leaves the timeline without them.
async fn record_pod_starts(client: &kube::Client, namespace: &str, step: &crate::ui::Step) {
    use k8s_openapi::api::core::v1::Pod;
    let Some((timeline, parent)) = step.timeline() else {
        return;
    };
    let api: kube::Api<Pod> = kube::Api::namespaced(client.clone(), namespace);
    let Ok(pods) = api.list(&Default::default()).await else {
        return;
    };
    let at = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| {
        timeline.ms_at_wall(std::time::SystemTime::from(t.0))
    };
    for pod in pods.items {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(created) = pod.metadata.creation_timestamp.as_ref() else {
            continue;
        };
        let conditions = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let ready = conditions
            .iter()
            .find(|c| c.type_ == "Ready" && c.status == "True")
            .and_then(|c| c.last_transition_time.as_ref());
        timeline.record(
            format!("pod {name} created -> Ready"),
            Some(parent),
            at(created),
            ready.map(at),
            Some(ready.is_some()),
        );
    }
}

/// Pushes the namespace and the stack-labelled ExternalSecret `name` in it.
fn push_external_secret(
    out: &mut Vec<Value>,
    settings: &Settings,
    namespace: &str,
    name: &str,
    spec: Value,
) {
    out.push(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": namespace},
    }));
    out.push(json!({
        "apiVersion": "external-secrets.io/v1", "kind": "ExternalSecret",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/managed-by": "devstack", "dev.devstack.stack": settings.name}},
        "spec": spec,
    }));
}

/// ExternalSecrets for the profile's secrets that ask to be synced: JSON
/// secrets become one key per field, others a single `value` key.
pub fn profile_external_secrets(settings: &Settings) -> Vec<Value> {
    let mut out = Vec::new();
    for secret in &settings.secrets {
        let Some(sync) = &secret.sync else {
            continue;
        };
        let (namespace, name) = crate::profile::settings::profile_external_secret_name(secret);
        let json_object = matches!(secret.source, SecretSource::Json(_))
            || secret.format == crate::profile::schema::SecretFormat::Json;
        let data = if json_object {
            json!({"dataFrom": [{"extract": {"key": secret.name}}]})
        } else {
            json!({"data": [{"secretKey": "value", "remoteRef": {"key": secret.name}}]})
        };
        let mut spec = json!({
            "refreshInterval": sync.refresh_interval.map(|d| d.to_string()).unwrap_or_else(|| "1h".into()),
            "secretStoreRef": {"kind": "ClusterSecretStore", "name": settings.names.store()},
            "target": {"name": name, "creationPolicy": "Owner"},
        });
        if let (Some(spec), Some(data)) = (spec.as_object_mut(), data.as_object()) {
            spec.extend(data.clone());
        }
        push_external_secret(&mut out, settings, &namespace, &name, spec);
    }
    out.extend(parameter_external_secrets(settings));
    out
}

/// ExternalSecrets for the profile's parameters that ask to be synced,
/// through the Parameter Store's store: a `json` parameter becomes one key
/// per field, others a single `value` key.
fn parameter_external_secrets(settings: &Settings) -> Vec<Value> {
    let mut out = Vec::new();
    for parameter in &settings.parameters {
        let Some(sync) = &parameter.sync else {
            continue;
        };
        let (namespace, name) = crate::profile::parameter_external_secret_name(parameter);
        let mut spec = json!({
            "refreshInterval": sync.refresh_interval.map(|d| d.to_string()).unwrap_or_else(|| "1h".into()),
            "secretStoreRef": {"kind": "ClusterSecretStore", "name": settings.names.parameter_store()},
            "target": {"name": name, "creationPolicy": "Owner"},
        });
        if matches!(parameter.source, SecretSource::Json(_)) {
            spec["dataFrom"] = json!([{"extract": {"key": parameter.name}}]);
        } else {
            spec["data"] = json!([{"secretKey": "value", "remoteRef": {"key": parameter.name}}]);
        }
        push_external_secret(&mut out, settings, &namespace, &name, spec);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The profile's settings and the ExternalSecrets
    /// `profile_external_secrets` makes of them.
    fn external_secrets_of(profile: &str) -> (crate::profile::Settings, Vec<Value>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.yaml");
        std::fs::write(&path, profile).unwrap();
        let settings =
            crate::profile::select(Some(path.to_str().unwrap()), &Default::default()).unwrap();
        let es = profile_external_secrets(&settings)
            .into_iter()
            .filter(|o| o["kind"] == "ExternalSecret")
            .collect();
        (settings, es)
    }

    #[test]
    fn profile_secrets_become_external_secrets() {
        let profile = "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: t\nsecrets:\n  - name: app/db\n    json: {user: a, password: b}\n    sync: {namespace: apps}\n  - name: app/token\n    value: x\n    sync: {secretName: tok, refreshInterval: 5m}\n  - name: unsynced\n    value: y\n";
        let (_, es) = external_secrets_of(profile);
        assert_eq!(es.len(), 2);
        assert_eq!(es[0]["metadata"]["namespace"], "apps");
        assert_eq!(es[0]["metadata"]["name"], "app-db");
        assert_eq!(es[0]["spec"]["dataFrom"][0]["extract"]["key"], "app/db");
        assert_eq!(es[1]["metadata"]["name"], "tok");
        assert_eq!(es[1]["spec"]["refreshInterval"], "5m");
        assert_eq!(es[1]["spec"]["data"][0]["remoteRef"]["key"], "app/token");
        assert_eq!(es[1]["spec"]["secretStoreRef"]["name"], "localstack");
    }

    #[test]
    fn profile_parameters_become_external_secrets_of_the_parameter_store() {
        let profile = "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: t\nsecrets:\n  - {name: app/db, value: x, sync: {}}\nparameters:\n  - name: /dev/app/db-url\n    value: postgres://db\n    sync: {namespace: apps}\n  - name: /dev/app/config\n    json: {a: b}\n    sync: {secretName: config}\n  - name: /dev/unsynced\n    value: y\n";
        let (settings, es) = external_secrets_of(profile);
        assert_eq!(es.len(), 3);
        assert_eq!(es[0]["spec"]["secretStoreRef"]["name"], "localstack");
        assert_eq!(es[1]["metadata"]["namespace"], "apps");
        assert_eq!(es[1]["metadata"]["name"], "dev-app-db-url");
        assert_eq!(
            es[1]["spec"]["secretStoreRef"]["name"],
            "localstack-parameters"
        );
        assert_eq!(
            es[1]["spec"]["data"][0]["remoteRef"]["key"],
            "/dev/app/db-url"
        );
        assert_eq!(es[2]["metadata"]["name"], "config");
        assert_eq!(
            es[2]["spec"]["dataFrom"][0]["extract"]["key"],
            "/dev/app/config"
        );
        let facts = source::facts(&settings, None, &Default::default());
        assert_eq!(
            facts["SEEDED_PARAMETERS"],
            "/dev/app/db-url,/dev/app/config,/dev/unsynced"
        );
        assert_eq!(
            facts["PARAMETER_DEV_APP_DB_URL_ARN"],
            "arn:aws:ssm:us-east-1:000000000000:parameter/dev/app/db-url"
        );
        assert!(!facts.contains_key("DEVSTACK_ESO_ROLE_ARN"));
    }
}
