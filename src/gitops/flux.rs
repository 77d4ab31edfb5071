//! Installs Flux's controllers with server-side apply (no kubectl, no flux
//! CLI needed). The install manifest is an artifact like any other: from
//! the offline bundle or devstack's verified cache, fetched into the cache
//! and checked against its pin when it is not there yet.

use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use crate::error::Error;
use crate::k8s::{Budget, apply};
use crate::profile::{Provider, Settings};
use crate::ui::Step;

pub const NAMESPACE: &str = "flux-system";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ManifestSource {
    Bundle,
    Cache,
    /// Fetched into the cache by this run, checked against its pin.
    Download,
    /// Flux was already in the cluster, installed by someone else: used as
    /// it is.
    AlreadyInstalled,
}

/// Label on Flux's namespace naming the stack that installed Flux, so
/// `down` on an existing cluster removes only a Flux devstack installed.
pub const INSTALLED_BY: &str = "dev.devstack.flux-installed-by";

/// The Flux APIs the stack's objects use, as `(group, plural, version)`.
const NEEDED_APIS: [(&str, &str, &str); 4] = [
    ("kustomize.toolkit.fluxcd.io", "kustomizations", "v1"),
    ("source.toolkit.fluxcd.io", "buckets", "v1"),
    ("source.toolkit.fluxcd.io", "helmcharts", "v1"),
    ("helm.toolkit.fluxcd.io", "helmreleases", "v2"),
];

/// Who installed the Flux in the cluster: `None` without Flux, `Some(None)`
/// for a Flux devstack did not install, `Some(Some(stack))` for one it did.
pub async fn installed_by(client: &kube::Client) -> Result<Option<Option<String>>, Error> {
    use k8s_openapi::api::core::v1::Namespace;
    let namespaces: kube::Api<Namespace> = kube::Api::all(client.clone());
    let namespace = namespaces
        .get_opt(NAMESPACE)
        .await
        .map_err(|e| Error::internal(format!("read Namespace {NAMESPACE}: {e}")))?;
    Ok(namespace.map(|ns| {
        ns.metadata
            .labels
            .and_then(|labels| labels.get(INSTALLED_BY).cloned())
    }))
}

/// A Flux someone else installed, used as it is when it serves the APIs the
/// stack needs and its controllers run; refused, naming what lacks, else.
async fn use_installed(
    client: &kube::Client,
    settings: &Settings,
    budget: Budget,
    step: &Step,
) -> Result<InstallReport, Error> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    step.progress("Flux is already installed: using it as it is");
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    let mut lacking = Vec::new();
    for (group, plural, version) in NEEDED_APIS {
        let name = format!("{plural}.{group}");
        let served: Vec<String> = crds
            .get_opt(&name)
            .await
            .map_err(|e| Error::internal(format!("read CRD {name}: {e}")))?
            .map(|crd| {
                crd.spec
                    .versions
                    .into_iter()
                    .filter(|v| v.served)
                    .map(|v| v.name)
                    .collect()
            })
            .unwrap_or_default();
        if !served.iter().any(|v| v == version) {
            let has = if served.is_empty() {
                "none".to_string()
            } else {
                served.join(", ")
            };
            lacking.push(format!("{group}/{version} {plural} (served: {has})"));
        }
    }
    if !lacking.is_empty() {
        return Err(Error::prerequisite(format!(
            "the Flux already installed in the cluster lacks APIs the stack needs: {}",
            lacking.join("; ")
        ))
        .with_hint(format!(
            "upgrade that Flux to {} or later (devstack never changes a Flux it did not install)",
            settings.flux.version
        )));
    }
    crate::k8s::wait_deployments_available(
        client,
        NAMESPACE,
        &settings.flux.components,
        budget,
        "`kubectl -n flux-system get deployments` shows which of the installed Flux's controllers is missing or not running",
    )
    .await?;
    Ok(InstallReport {
        version: "already installed".into(),
        source: ManifestSource::AlreadyInstalled,
        objects: 0,
        elapsed_ms: 0,
    })
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstallReport {
    pub version: String,
    pub source: ManifestSource,
    pub objects: usize,
    pub elapsed_ms: u64,
}

/// The install manifest text and where it came from: the bundle's, else
/// the verified cache's, fetched into it (pinned, checked) when it lacks
/// the profile's version. Nothing unpinned is ever applied.
pub async fn manifests(settings: &Settings) -> Result<(String, ManifestSource), Error> {
    let version = &settings.flux.version;
    if let Some(bundle) = crate::bundle::open(settings)? {
        // Without a bundle of the user's, this is devstack's artifact cache.
        let users = settings.images.bundle.is_some();
        match bundle.artifact_version("flux-install", version) {
            Some(artifact) => {
                let path = bundle.path_of(artifact);
                let bytes = crate::artifacts::read_checked(settings, &bundle, artifact)?;
                let text = String::from_utf8(bytes).map_err(|e| {
                    Error::user(format!("cannot read {}: {e}", path.display()))
                        .with_hint("rebuild the bundle with `make kit`")
                })?;
                let source = if users {
                    ManifestSource::Bundle
                } else {
                    ManifestSource::Cache
                };
                return Ok((text, source));
            }
            None if users && bundle.artifact("flux-install").is_some() => {
                let held = bundle.versions_of("flux-install");
                return Err(Error::user(format!(
                    "the offline bundle holds Flux {} but the profile asks for {version}",
                    held.join(", ")
                ))
                .with_hint(format!(
                    "set `flux.version: {}` or rebuild the bundle",
                    held.first().map(String::as_str).unwrap_or("?")
                )));
            }
            None => {}
        }
    }
    let path = crate::artifacts::fetch_flux_install(settings).await?;
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::internal(format!("cannot read {}: {e}", path.display())))?;
    Ok((text, ManifestSource::Download))
}

/// Drops the Deployments (and their Services) of controllers the profile
/// does not ask for; CRDs stay, they are harmless and shared.
pub(super) fn select_components(docs: Vec<Value>, components: &[String]) -> Vec<Value> {
    let all = crate::profile::settings::FLUX_COMPONENTS;
    docs.into_iter()
        .filter(|d| {
            let kind = d["kind"].as_str().unwrap_or_default();
            let name = d["metadata"]["name"].as_str().unwrap_or_default();
            let is_controller_workload = matches!(kind, "Deployment" | "Service")
                && all.iter().any(|c| {
                    name == *c
                        || name.starts_with(&format!("{}-", c.trim_end_matches("-controller")))
                });
            !is_controller_workload
                || components.iter().any(|c| {
                    name == c
                        || (kind == "Service"
                            && name.starts_with(c.trim_end_matches("-controller")))
                })
        })
        .collect()
}

/// The argument that makes a Flux controller wait for a leader lease.
const LEADER_ELECTION_ARG: &str = "--enable-leader-election";

/// Where the nodes pull the images themselves, the controllers' images from
/// their registries' mirrors ([`crate::artifacts::mirrors::node_reference`]).
fn pull_through_mirrors(docs: &mut [Value], images: &crate::profile::ImageSettings) {
    for doc in docs.iter_mut().filter(|d| d["kind"] == "Deployment") {
        let containers = doc["spec"]["template"]["spec"]["containers"].as_array_mut();
        for container in containers.into_iter().flatten() {
            if let Some(image) = container["image"].as_str() {
                let pulled = crate::artifacts::mirrors::node_reference(images, image);
                container["image"] = Value::String(pulled);
            }
        }
    }
}

/// Each controller runs as one replica that works from the moment it
/// starts: without leader election, and replaced rather than rolled; its
/// readiness probed every second, its name lookups retried every second.
///
/// With leader election, a controller whose node (or pod) was killed
/// leaves its Lease behind, and its successor waits the Lease out (35 s)
/// before it reconciles anything; the source-controller does not even
/// serve artifacts, so nothing downstream moves. One replica needs no
/// election, as long as two never run at once: hence `Recreate`, which
/// stops the old pod before the new one starts (the source-controller's
/// own manifest already asks for it).
fn tuned_controllers(docs: Vec<Value>) -> Vec<Value> {
    docs.into_iter()
        .map(|mut doc| {
            if doc["kind"] != "Deployment" {
                return doc;
            }
            doc["spec"]["strategy"] = serde_json::json!({"type": "Recreate"});
            let is_kustomize_controller = doc["metadata"]["name"] == "kustomize-controller";
            let downloads_artifacts =
                is_kustomize_controller || doc["metadata"]["name"] == "helm-controller";
            retry_name_lookups_every_second(&mut doc["spec"]["template"]["spec"]);
            if let Some(containers) = doc["spec"]["template"]["spec"]["containers"].as_array_mut() {
                for container in containers {
                    if let Some(args) = container["args"].as_array_mut() {
                        args.retain(|a| {
                            a.as_str()
                                .is_none_or(|a| a.split('=').next() != Some(LEADER_ELECTION_ARG))
                        });
                    }
                    probe_readiness_every_second(container);
                    if is_kustomize_controller {
                        cancel_health_checks_on_requeue(container);
                    }
                    if downloads_artifacts {
                        download_artifacts_once(container);
                        requeue_dependencies_soon(container);
                    }
                }
            }
            doc
        })
        .collect()
}

/// A controller that starts before CoreDNS serves (a node that started
/// again, a restored snapshot) sends its first lookups (the LocalStack
/// bucket, the source-controller's artifacts) to a DNS pod that is not
/// there yet; with the resolver's default 5 s time-out each, the source was
/// fetched 5 s after CoreDNS served. One second per try keeps that to one.
fn retry_name_lookups_every_second(pod_spec: &mut Value) {
    if let Some(pod_spec) = pod_spec.as_object_mut() {
        pod_spec.insert(
            "dnsConfig".into(),
            serde_json::json!({"options": [{"name": "timeout", "value": "1"}]}),
        );
    }
}

/// Flux's readiness probes keep the kubelet's default period, 10 s. A
/// kubelet that started less than a period ago (a new node, a restarted
/// one) also delays each probe's first run by a random part of the period,
/// so a controller that serves within a second of starting was reported
/// Ready up to 10 s later, and nothing downstream (the source-controller's
/// artifact Service, the install's wait) moved before. Probing every second
/// costs an HTTP GET per controller per second.
fn probe_readiness_every_second(container: &mut Value) {
    if let Some(probe) = container
        .get_mut("readinessProbe")
        .and_then(Value::as_object_mut)
    {
        probe.insert("periodSeconds".into(), serde_json::json!(1));
    }
}

/// kustomize-controller checks a level's health every 5 s until it passes.
/// With this gate, a reconcile request (or a new source revision) cancels
/// the running check and starts a new one, which polls at once: the chain's
/// wait asks for one as soon as what a level checks is healthy (see
/// `chain::judge::checking_health`). Upstream's purpose, a fix applied without
/// waiting out a failing check, comes with it.
fn cancel_health_checks_on_requeue(container: &mut Value) {
    const GATE: &str = "CancelHealthCheckOnNewRevision=true";
    let Some(args) = container["args"].as_array_mut() else {
        return;
    };
    match args.iter_mut().find(|a| {
        a.as_str()
            .is_some_and(|a| a.starts_with("--feature-gates="))
    }) {
        Some(gates) => {
            let listed = gates.as_str().unwrap_or_default().to_string();
            if !listed.contains("CancelHealthCheckOnNewRevision") {
                *gates = Value::String(format!("{listed},{GATE}"));
            }
        }
        None => args.push(Value::String(format!("--feature-gates={GATE}"))),
    }
}

/// One download per attempt. Flux's fetchers wait 5 s (then 10 s, 20 s,
/// ...) before trying a refused download again; after a restart the first
/// downloads race the artifact server that starts beside them and all of
/// them paid that wait. Failed at once, a level is asked again by the
/// chain within a moment (`chain::retry::artifact_server_not_serving`; without
/// devstack Flux tries again at the level's `retryInterval`), and
/// helm-controller retries the HelmRelease itself within a second (its
/// failure back-off starts at 750 ms).
fn download_artifacts_once(container: &mut Value) {
    const FLAG: &str = "--http-retry";
    let Some(args) = container["args"].as_array_mut() else {
        return;
    };
    args.retain(|a| a.as_str().is_none_or(|a| a.split('=').next() != Some(FLAG)));
    args.push(Value::String(format!("{FLAG}=0")));
}

/// A Kustomization or HelmRelease whose dependency is not Ready is looked
/// at again after `--requeue-dependency`, 30 s by default. The chain asks a
/// level again the moment its dependency turns Ready, but a request the
/// controller handles before its cache shows the dependency Ready ends in
/// that requeue, and the level then waited out the 30 s (one restore sat
/// ~28 s so). At 5 s a missed request costs seconds, for one look at a
/// handful of waiting objects every 5 s.
fn requeue_dependencies_soon(container: &mut Value) {
    const FLAG: &str = "--requeue-dependency";
    let Some(args) = container["args"].as_array_mut() else {
        return;
    };
    args.retain(|a| a.as_str().is_none_or(|a| a.split('=').next() != Some(FLAG)));
    args.push(Value::String(format!("{FLAG}=5s")));
}

const SOURCE_CONTROLLER: &str = "source-controller";

/// The objects the source-controller's Service needs to exist: itself and
/// its Namespace.
fn is_artifact_service_or_namespace(doc: &Value) -> bool {
    match doc["kind"].as_str() {
        Some("Namespace") => doc["metadata"]["name"] == NAMESPACE,
        Some("Service") => {
            doc["metadata"]["name"] == SOURCE_CONTROLLER
                && doc["metadata"]["namespace"] == NAMESPACE
        }
        _ => false,
    }
}

/// The source-controller advertises its artifacts at its Service's DNS
/// name, so every download by kustomize-controller and helm-controller
/// first asks CoreDNS. On a node that starts again (a restart, a restore)
/// every pod starts at once: their first downloads met a CoreDNS not yet
/// serving ("connection refused"), and Flux's fetcher waits 5 s before it
/// tries again (fluxcd/pkg/http/fetch). Its cluster IP needs no DNS and
/// lasts as long as the Service.
fn advertise_artifacts_at(docs: &mut [Value], host: &str) {
    const FLAG: &str = "--storage-adv-addr";
    let wanted = Value::String(format!("{FLAG}={host}"));
    for doc in docs
        .iter_mut()
        .filter(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == SOURCE_CONTROLLER)
    {
        let Some(containers) = doc["spec"]["template"]["spec"]["containers"].as_array_mut() else {
            continue;
        };
        for args in containers
            .iter_mut()
            .filter(|c| c["name"] == "manager")
            .filter_map(|c| c["args"].as_array_mut())
        {
            match args.iter_mut().find(|a| {
                a.as_str()
                    .is_some_and(|a| a.split('=').next() == Some(FLAG))
            }) {
                Some(arg) => *arg = wanted.clone(),
                None => args.push(wanted.clone()),
            }
        }
    }
}

/// A Deployment made by an earlier install rolls its pods (both run for a
/// while); switching it to `Recreate` must drop the rolling-update
/// parameters in the same change, which server-side apply cannot do (it
/// leaves fields it does not own), so a merge patch does it first. Absent
/// Deployments are left to the apply.
async fn switch_to_recreate(client: &kube::Client, docs: &[Value]) -> Result<(), Error> {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Patch, PatchParams};
    let api: kube::Api<Deployment> = kube::Api::namespaced(client.clone(), NAMESPACE);
    let patch =
        serde_json::json!({"spec": {"strategy": {"type": "Recreate", "rollingUpdate": null}}});
    for doc in docs.iter().filter(|d| d["kind"] == "Deployment") {
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        let Some(live) = api
            .get_opt(name)
            .await
            .map_err(|e| Error::internal(format!("read Deployment {NAMESPACE}/{name}: {e}")))?
        else {
            continue;
        };
        let strategy = live.spec.strategy.and_then(|s| s.type_);
        if strategy.as_deref() == Some("Recreate") {
            continue;
        }
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| {
                Error::internal(format!(
                    "switch Deployment {NAMESPACE}/{name} to Recreate: {e}"
                ))
            })?;
    }
    Ok(())
}

/// Applies Flux and waits for its CRDs Established and controllers Available.
pub async fn install(
    client: &kube::Client,
    settings: &Settings,
    step: &Step,
) -> Result<InstallReport, Error> {
    let started = Instant::now();
    let budget = Budget::since(started, settings.timeouts.flux.get(), "timeouts.flux");
    let installer = match installed_by(client).await? {
        None => settings.name.clone(),
        Some(Some(stack)) => stack,
        // Only on a cluster devstack did not create can Flux be someone else's.
        Some(None) if settings.cluster.provider == Provider::Existing => {
            return use_installed(client, settings, budget, step).await;
        }
        Some(None) => settings.name.clone(),
    };
    let (text, source) = manifests(settings).await?;
    let mut docs = tuned_controllers(select_components(
        apply::parse_documents(&text, "Flux install manifests")?,
        &settings.flux.components,
    ));
    pull_through_mirrors(&mut docs, &settings.images);
    for doc in docs.iter_mut().filter(|d| d["kind"] == "Namespace") {
        doc["metadata"]["labels"][INSTALLED_BY] = Value::String(installer.clone());
    }
    let span = step.span(format!("{} install objects applied", docs.len()));
    let applied = async {
        let mut docs = docs;
        switch_to_recreate(client, &docs).await?;
        // The source-controller's arguments need the cluster IP its Service
        // is given: an existing cluster has it; a new one gets the Service
        // (and its Namespace) first, applied alone.
        let host = match crate::k8s::service_host(client, NAMESPACE, SOURCE_CONTROLLER).await? {
            Some(host) => Some(host),
            None => {
                for doc in docs.iter().filter(|d| is_artifact_service_or_namespace(d)) {
                    crate::k8s::apply(client, doc).await?;
                }
                crate::k8s::service_host(client, NAMESPACE, SOURCE_CONTROLLER).await?
            }
        };
        if let Some(host) = host {
            advertise_artifacts_at(&mut docs, &host);
        }
        apply::apply_all(client, &docs, budget).await
    };
    let objects = span.finish(applied.await)?;
    let span = step.span("controllers Available");
    let available = crate::k8s::wait_deployments_available(
        client,
        NAMESPACE,
        &settings.flux.components,
        budget,
        "`kubectl -n flux-system describe pods` shows why a controller is not running",
    );
    // On a new K3s node flannel leases the pod subnet seconds after the node
    // is Ready: controllers scheduled before that would sit out kubelet's
    // back-off.
    let available = crate::k8s::sandbox::wait_recreating_failed_sandboxes(
        available,
        client,
        NAMESPACE,
        "",
        |pod| {
            step.progress(format!("recreated Flux pod {pod}: its sandbox failed"));
            let _ = step
                .span(format!("Flux pod {pod} recreated"))
                .finish(Ok::<(), ()>(()));
        },
    );
    span.finish(available.await)?;
    Ok(InstallReport {
        version: settings.flux.version.clone(),
        source,
        objects,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A download mirror on this machine that answers every request with `body`.
    async fn mirror_serving(body: &'static [u8]) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.ends_with(b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(body).await;
            }
        });
        url
    }

    #[tokio::test]
    async fn the_install_manifest_is_applied_only_as_pinned_and_checked() {
        const SERVED: &[u8] = b"apiVersion: v1\nkind: Namespace\nmetadata: {name: flux-system}\n";
        let state = tempfile::tempdir().unwrap();
        let text = "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: t\n";
        let loaded = crate::profile::load::parse("t.yaml", text, ".".into()).unwrap();
        let mut settings = Settings::resolve(loaded, &Default::default()).unwrap();
        settings.state_dir = state.path().to_path_buf();
        settings.images.bundle = None;
        settings.images.download_mirror = Some(mirror_serving(SERVED).await);

        // Other bytes than the pin's: refused, and nothing cached.
        let err = manifests(&settings).await.unwrap_err();
        assert!(
            err.message().contains("does not match its pin"),
            "{}",
            err.message()
        );
        assert!(settings.bundle_dir().is_none());

        // Pinned to what is served (a pins file, as for a private rebuild):
        // fetched into the verified cache once, then read from there.
        use sha2::Digest;
        let pins = state.path().join("pins.json");
        let url = crate::artifacts::flux_install_url(&settings.flux.version);
        let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(SERVED)));
        std::fs::write(
            &pins,
            json!({"apiVersion": "devstack.dev/v1alpha1", "kind": "Pins", "files": {url: digest}})
                .to_string(),
        )
        .unwrap();
        settings.images.pins_file = Some(pins);
        let (text, source) = manifests(&settings).await.unwrap();
        assert_eq!(text.as_bytes(), SERVED);
        assert_eq!(source, ManifestSource::Download);
        let (_, source) = manifests(&settings).await.unwrap();
        assert_eq!(source, ManifestSource::Cache);
    }

    #[test]
    fn nodes_that_pull_run_the_controllers_from_the_mirror() {
        let reference = crate::versions::FLUX_IMAGES[0].reference;
        let mut docs = vec![json!({"kind": "Deployment", "spec": {"template": {"spec": {
            "containers": [{"name": "manager", "image": reference}]}}}})];
        let mut images = crate::profile::ImageSettings {
            bundle: None,
            preload: Vec::new(),
            mirrors: [(
                "ghcr.io".to_string(),
                "https://mirror.example/gh".to_string(),
            )]
            .into(),
            download_mirror: None,
            pins_file: None,
            nodes_pull: false,
        };
        pull_through_mirrors(&mut docs, &images);
        let image =
            |docs: &[Value]| docs[0]["spec"]["template"]["spec"]["containers"][0]["image"].clone();
        assert_eq!(image(&docs), json!(reference));
        images.nodes_pull = true;
        pull_through_mirrors(&mut docs, &images);
        let pulled = image(&docs);
        let pulled = pulled.as_str().unwrap();
        assert!(pulled.starts_with("mirror.example/gh/fluxcd/"), "{pulled}");
        assert!(pulled.contains("@sha256:"), "{pulled}");
    }

    #[test]
    fn controllers_run_without_leader_election_and_are_replaced_not_rolled() {
        let docs = vec![
            json!({"kind": "Deployment", "metadata": {"name": "helm-controller"}, "spec": {"template": {"spec": {"containers": [
                {"name": "manager", "args": ["--watch-all-namespaces", "--enable-leader-election", "--log-level=info"],
                 "readinessProbe": {"httpGet": {"path": "/readyz", "port": "healthz"}}}]}}}}),
            json!({"kind": "Service", "metadata": {"name": "source-controller"}, "spec": {}}),
        ];
        let tuned = tuned_controllers(docs);
        assert_eq!(
            tuned[0]["spec"]["template"]["spec"]["containers"][0]["args"],
            json!([
                "--watch-all-namespaces",
                "--log-level=info",
                "--http-retry=0",
                "--requeue-dependency=5s"
            ])
        );
        assert_eq!(tuned[0]["spec"]["strategy"], json!({"type": "Recreate"}));
        assert_eq!(
            tuned[0]["spec"]["template"]["spec"]["containers"][0]["readinessProbe"],
            json!({"httpGet": {"path": "/readyz", "port": "healthz"}, "periodSeconds": 1})
        );
        assert_eq!(
            tuned[0]["spec"]["template"]["spec"]["dnsConfig"],
            json!({"options": [{"name": "timeout", "value": "1"}]})
        );
        assert_eq!(tuned[1]["spec"], json!({}));
    }

    #[test]
    fn only_kustomize_controller_cancels_health_checks_on_requeue_and_flux_downloads_once() {
        let deployment = |name: &str, args: Value| {
            json!({"kind": "Deployment", "metadata": {"name": name}, "spec": {"template": {"spec": {"containers": [
                {"name": "manager", "args": args}]}}}})
        };
        let tuned = tuned_controllers(vec![
            deployment("kustomize-controller", json!(["--log-level=info"])),
            deployment(
                "kustomize-controller",
                json!([
                    "--feature-gates=StrictPostBuildSubstitutions=true",
                    "--http-retry=9"
                ]),
            ),
            deployment(
                "kustomize-controller",
                json!(["--feature-gates=CancelHealthCheckOnNewRevision=false"]),
            ),
            deployment("helm-controller", json!(["--log-level=info"])),
        ]);
        let args = |i: usize| tuned[i]["spec"]["template"]["spec"]["containers"][0]["args"].clone();
        assert_eq!(
            args(0),
            json!([
                "--log-level=info",
                "--feature-gates=CancelHealthCheckOnNewRevision=true",
                "--http-retry=0",
                "--requeue-dependency=5s"
            ])
        );
        assert_eq!(
            args(1),
            json!([
                "--feature-gates=StrictPostBuildSubstitutions=true,CancelHealthCheckOnNewRevision=true",
                "--http-retry=0",
                "--requeue-dependency=5s"
            ])
        );
        // A gate the install sets on purpose is left as it is.
        assert_eq!(
            args(2),
            json!([
                "--feature-gates=CancelHealthCheckOnNewRevision=false",
                "--http-retry=0",
                "--requeue-dependency=5s"
            ])
        );
        assert_eq!(
            args(3),
            json!([
                "--log-level=info",
                "--http-retry=0",
                "--requeue-dependency=5s"
            ])
        );
    }

    #[test]
    fn the_source_controller_advertises_artifacts_at_its_cluster_ip() {
        let deployment = |name: &str, args: Value| {
            json!({"kind": "Deployment", "metadata": {"name": name}, "spec": {"template": {"spec": {"containers": [
                {"name": "manager", "args": args}]}}}})
        };
        let mut docs = vec![
            deployment(
                "source-controller",
                json!([
                    "--events-addr=",
                    "--storage-adv-addr=source-controller.$(RUNTIME_NAMESPACE).svc.cluster.local.",
                    "--storage-path=/data"
                ]),
            ),
            deployment("source-controller", json!(["--log-level=info"])),
            deployment("kustomize-controller", json!(["--log-level=info"])),
            json!({"kind": "Service", "metadata": {"name": "source-controller"}, "spec": {}}),
        ];
        advertise_artifacts_at(&mut docs, "10.43.7.9");
        let args = |i: usize| docs[i]["spec"]["template"]["spec"]["containers"][0]["args"].clone();
        assert_eq!(
            args(0),
            json!([
                "--events-addr=",
                "--storage-adv-addr=10.43.7.9",
                "--storage-path=/data"
            ])
        );
        assert_eq!(
            args(1),
            json!(["--log-level=info", "--storage-adv-addr=10.43.7.9"])
        );
        assert_eq!(args(2), json!(["--log-level=info"]));
        assert_eq!(docs[3]["spec"], json!({}));
    }

    #[test]
    fn a_new_cluster_gets_the_artifact_service_and_its_namespace_first() {
        let docs = [
            json!({"kind": "Namespace", "metadata": {"name": "flux-system"}}),
            json!({"kind": "Namespace", "metadata": {"name": "other"}}),
            json!({"kind": "Service", "metadata": {"name": "source-controller", "namespace": "flux-system"}}),
            json!({"kind": "Service", "metadata": {"name": "webhook-receiver", "namespace": "flux-system"}}),
            json!({"kind": "Deployment", "metadata": {"name": "source-controller", "namespace": "flux-system"}}),
        ];
        let first: Vec<bool> = docs.iter().map(is_artifact_service_or_namespace).collect();
        assert_eq!(first, [true, false, true, false, false]);
    }

    #[test]
    fn drops_unrequested_controllers_but_keeps_crds() {
        let docs = vec![
            json!({"kind": "CustomResourceDefinition", "metadata": {"name": "alerts.notification.toolkit.fluxcd.io"}}),
            json!({"kind": "Deployment", "metadata": {"name": "notification-controller"}}),
            json!({"kind": "Service", "metadata": {"name": "notification-controller"}}),
            json!({"kind": "Deployment", "metadata": {"name": "source-controller"}}),
            json!({"kind": "Service", "metadata": {"name": "source-controller"}}),
        ];
        let kept = select_components(docs, &["source-controller".to_string()]);
        let names: Vec<_> = kept
            .iter()
            .map(|d| {
                format!(
                    "{}/{}",
                    d["kind"].as_str().unwrap(),
                    d["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                "CustomResourceDefinition/alerts.notification.toolkit.fluxcd.io",
                "Deployment/source-controller",
                "Service/source-controller"
            ]
        );
    }
}
