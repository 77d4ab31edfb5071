//! Looking inside a test stack's cluster: kube clients, probe pods and the
//! assertions several cluster tests share.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::*;

/// A runtime for the async library calls a test makes.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A kube client for a test stack's cluster, from the kubeconfig `devstack`
/// wrote under the stack's DEVSTACK_HOME.
pub fn kube_client(rt: &tokio::runtime::Runtime, stack: &TestStack) -> kube::Client {
    let path = stack
        .dir
        .path()
        .join("state/stacks")
        .join(&stack.name)
        .join("kubeconfig");
    let config =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    rt.block_on(devstack::k8s::client_from_kubeconfig(&config))
        .unwrap()
}

/// An object of the test stack's cluster as JSON, `None` when absent.
pub fn get_json(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    ns: Option<&str>,
    name: &str,
) -> Option<serde_json::Value> {
    rt.block_on(async {
        devstack::k8s::dynamic_api(client, api_version, kind, ns)
            .get_opt(name)
            .await
            .unwrap()
            .map(|o| serde_json::to_value(o).unwrap())
    })
}

/// Copies a directory tree (manifests, an example repository) for a test.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The names of the levels an `up --json` or `sync --json` report followed.
pub fn chain_level_names(gitops: &serde_json::Value) -> Vec<String> {
    gitops["chain"]["levels"]
        .as_array()
        .unwrap_or_else(|| panic!("no chain levels in {gitops}"))
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_string())
        .collect()
}

/// A tiny image with the tools pod probes use, made from the host's
/// busybox, preloaded into test clusters.
pub const BUSYBOX: &str = "devstack-test/busybox:1";

pub fn ensure_busybox_image() {
    if docker(&["image", "inspect", BUSYBOX]).status.success() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root/bin");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy("/bin/busybox", root.join("busybox"))
        .expect("busybox-static is installed by scripts/setup-docker.sh");
    // busybox-static's wget segfaults in pods; nc speaks HTTP well enough
    // (stdin is held open so nc reads the whole response).
    for tool in ["sh", "nc", "printf", "sleep", "nslookup", "cat", "grep"] {
        std::os::unix::fs::symlink("busybox", root.join(tool)).unwrap();
    }
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar -C {} -c . | docker import - {BUSYBOX}",
            dir.path().join("root").display()
        ))
        .status()
        .unwrap();
    assert!(status.success());
}

/// A `verify --push-secret --json` report passed, push check included.
#[track_caller]
pub fn assert_push_verified(report: &serde_json::Value) {
    assert_eq!(report["passed"], true, "{report}");
    assert!(
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "push" && c["passed"] == true),
        "{report}"
    );
}

/// A pod (pinned to `node`, when given) fetches LocalStack's health through
/// the in-cluster Service name; returns what it printed.
pub async fn probe_localstack(client: &kube::Client, name: &str, node: Option<&str>) -> String {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, DeleteParams, LogParams, PostParams};
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut spec = serde_json::json!({"restartPolicy": "Never", "containers": [{
        "name": "probe", "image": BUSYBOX, "imagePullPolicy": "Never",
        "command": ["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do (printf 'GET /_localstack/health HTTP/1.0\\r\\nHost: localstack\\r\\n\\r\\n'; sleep 3) | nc -w 10 localstack.localstack.svc.cluster.local 4566 | grep services && exit 0; sleep 1; done; exit 1"],
    }]});
    if let Some(node) = node {
        spec["nodeName"] = node.into();
        spec["tolerations"] = serde_json::json!([{"operator": "Exists"}]);
    }
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let mut phase = String::new();
    for _ in 0..240 {
        let p = pods.get(name).await.unwrap();
        phase = p.status.and_then(|s| s.phase).unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let logs = pods
        .logs(name, &LogParams::default())
        .await
        .unwrap_or_default();
    let _ = pods.delete(name, &DeleteParams::default()).await;
    assert_eq!(phase, "Succeeded", "probe pod {name} on {node:?}: {logs}");
    logs
}

/// Ctrl-C during the round trip of `up` on an existing stack, whatever its
/// provider: the run exits 130 after removing its probes, so no probe
/// ExternalSecret, no probe Secret and no probe secret in LocalStack is left,
/// not even a probe Secret written again once its ExternalSecret is gone
/// (as an ESO reconcile still in flight does; a stand-in writes it here).
pub fn interrupted_verify_leaves_no_probe(stack: &TestStack, profile: &std::path::Path) {
    use kube::api::Api;
    use std::io::BufRead;
    let port = stack.run(profile, &["status", "--json"]).json()["ports"]["localstack"]
        .as_u64()
        .expect("LocalStack port") as u16;
    let late_writer = late_probe_secret_writer(stack, profile);
    let mut child = stack.spawn(profile, &["up"]);
    let stderr = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    for line in std::io::BufReader::new(stderr).lines() {
        let line = line.unwrap();
        let started = line.contains("ExternalSecret syncs a new secret");
        seen.push(line);
        if started {
            // SAFETY: signalling the child this test spawned.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGINT);
            }
        }
    }
    let status = child.wait().unwrap();
    let log = seen.join("\n");
    let rewritten = late_writer.join().expect("late writer");
    assert_eq!(status.code(), Some(130), "{log}");
    assert!(log.contains("probe objects were removed"), "{log}");
    assert!(
        rewritten.is_some(),
        "the stand-in never saw the probe ExternalSecret come and go:\n{log}"
    );

    let rt = runtime();
    let client = kube_client(&rt, stack);
    let settings = settings(profile).with_localstack_port(port);
    rt.block_on(async {
        let namespace = &settings.verify.namespace;
        let external_secrets = devstack::k8s::dynamic_api(
            &client,
            "external-secrets.io/v1",
            "ExternalSecret",
            Some(namespace),
        );
        let probes = |names: Vec<String>| -> Vec<String> {
            names
                .into_iter()
                .filter(|n| n.contains(devstack::verify::PROBE_PREFIX))
                .collect()
        };
        let listed = external_secrets.list(&Default::default()).await.unwrap();
        let left = probes(
            listed
                .items
                .into_iter()
                .filter_map(|o| o.metadata.name)
                .collect(),
        );
        assert!(left.is_empty(), "probe ExternalSecrets left: {left:?}");
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(client.clone(), namespace);
        let names = secrets.list(&Default::default()).await.unwrap().items;
        let left = probes(names.into_iter().filter_map(|o| o.metadata.name).collect());
        assert!(left.is_empty(), "probe Secrets left: {left:?}");
        let left = probes(secret_names(&settings).await);
        assert!(
            left.is_empty(),
            "probe secrets left in LocalStack: {left:?}"
        );
    });
}

/// Watches (on its own thread) for the round trip's probe ExternalSecret
/// to be created and removed, then writes a Secret of its name at once, as
/// a reconcile of ESO's still in flight would; returns that name. Returns
/// once its watch is established, so it sees an ExternalSecret that lives
/// for milliseconds.
fn late_probe_secret_writer(
    stack: &TestStack,
    profile: &std::path::Path,
) -> std::thread::JoinHandle<Option<String>> {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, PostParams};
    use kube::runtime::watcher::{self, Event};
    let rt = runtime();
    let client = kube_client(&rt, stack);
    let namespace = settings(profile).verify.namespace.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let writer = std::thread::spawn(move || {
        rt.block_on(async move {
            let external_secrets = devstack::k8s::dynamic_api(
                &client,
                "external-secrets.io/v1",
                "ExternalSecret",
                Some(&namespace),
            );
            let mut events = watcher::watcher(external_secrets, watcher::Config::default()).boxed();
            let is_probe = |o: &kube::api::DynamicObject| {
                o.metadata
                    .name
                    .clone()
                    .filter(|n| n.contains(devstack::verify::PROBE_PREFIX))
            };
            let mut created = None;
            let watching = async {
                while let Some(event) = events.next().await {
                    match event {
                        Ok(Event::InitDone) => {
                            let _ = ready_tx.send(());
                        }
                        Ok(Event::Apply(o)) if created.is_none() => created = is_probe(&o),
                        Ok(Event::Delete(o)) if created.is_some() && is_probe(&o) == created => {
                            return created.clone();
                        }
                        _ => {}
                    }
                }
                None
            };
            let name = tokio::time::timeout(std::time::Duration::from_secs(120), watching)
                .await
                .ok()
                .flatten()?;
            let secrets: Api<Secret> = Api::namespaced(client, &namespace);
            let late: Secret = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": namespace},
                "stringData": {"value": "written-late"},
            }))
            .unwrap();
            // Already there (ESO's own late write) serves as well.
            let _ = secrets.create(&PostParams::default(), &late).await;
            Some(name)
        })
    });
    ready_rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the stand-in's watch of ExternalSecrets");
    writer
}

/// The image the stack's ESO operator Deployment runs.
pub fn eso_operator_image(rt: &tokio::runtime::Runtime, stack: &TestStack) -> String {
    use k8s_openapi::api::apps::v1::Deployment;
    let client = kube_client(rt, stack);
    let deployment = rt
        .block_on(
            kube::api::Api::<Deployment>::namespaced(client, "external-secrets")
                .get("external-secrets"),
        )
        .unwrap();
    deployment.spec.template.spec.unwrap().containers[0]
        .image
        .clone()
        .unwrap()
}

/// The versions a running stack actually runs equal devstack's version
/// matrix: every node's kubelet, the ESO operator's image, and the
/// LocalStack container's image.
pub fn assert_running_versions_match_the_matrix(stack: &TestStack, node_image: &str) {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::Api;
    let (major, minor, patch) = devstack::versions::kubernetes_of_image(node_image)
        .unwrap_or_else(|| panic!("no Kubernetes version in {node_image}"));
    let rt = runtime();
    let client = kube_client(&rt, stack);
    let nodes = rt
        .block_on(Api::<Node>::all(client).list(&Default::default()))
        .unwrap();
    assert!(!nodes.items.is_empty());
    for node in nodes.items {
        let kubelet = node.status.unwrap().node_info.unwrap().kubelet_version;
        assert!(
            kubelet == format!("v{major}.{minor}.{patch}")
                || kubelet.starts_with(&format!("v{major}.{minor}.{patch}+")),
            "kubelet {kubelet} is not the matrix's {node_image}"
        );
    }
    let image = eso_operator_image(&rt, stack);
    assert_eq!(image, devstack::versions::ESO_IMAGE, "ESO operator image");
    let localstack = docker(&[
        "inspect",
        "-f",
        "{{.Config.Image}}",
        &format!("devstack-{}-localstack", stack.name),
    ]);
    assert_eq!(
        String::from_utf8_lossy(&localstack.stdout).trim(),
        devstack::versions::LOCALSTACK_IMAGE
    );
}

/// The kube-proxy running in `node` (a node container) syncs its rules
/// with `min_sync_period` between them, as read from its own `/configz`:
/// devstack's setting reached the running process, not only its config.
pub fn assert_kube_proxy_min_sync_period(node: &str, min_sync_period: &str) {
    let script = r#"exec 3<>/dev/tcp/127.0.0.1/10249 && printf 'GET /configz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 && cat <&3"#;
    let out = docker(&["exec", node, "bash", "-c", script]);
    let text = String::from_utf8_lossy(&out.stdout);
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no /configz answer from kube-proxy in {node}: {text}"));
    let config: serde_json::Value = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("kube-proxy's /configz in {node} is not JSON ({e}): {body}"));
    // Its internal form up to Kubernetes 1.32 (K3s), the v1alpha1 form after.
    let config = &config["kubeproxy.config.k8s.io"];
    let effective = config["MinSyncPeriod"]
        .as_str()
        .or(config["iptables"]["minSyncPeriod"].as_str());
    assert_eq!(
        effective,
        Some(min_sync_period),
        "kube-proxy in {node}: {config}"
    );
}

/// The K3s node's kubelet neither evicts for nor garbage-collects on the
/// host's disk, which it shares with everything else there (its /configz).
pub fn assert_kubelet_leaves_the_host_disk_alone(node: &str) {
    let path = format!("/api/v1/nodes/{node}/proxy/configz");
    let out = docker(&["exec", node, "k3s", "kubectl", "get", "--raw", &path]);
    let body = String::from_utf8_lossy(&out.stdout);
    let config: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| {
        panic!(
            "the kubelet's /configz in {node} is not JSON ({e}): {body}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let kubelet = &config["kubeletconfig"];
    for signal in ["imagefs.available", "nodefs.available", "nodefs.inodesFree"] {
        assert_eq!(
            kubelet["evictionHard"][signal].as_str(),
            Some("0%"),
            "kubelet in {node}: {signal} in {}",
            kubelet["evictionHard"]
        );
    }
    assert_eq!(
        kubelet["imageGCHighThresholdPercent"].as_i64(),
        Some(100),
        "kubelet in {node}"
    );
}

/// The ESO webhook serves with the certificate devstack issued at install
/// (its CA's fingerprint is on the Secret), and the cert-controller, instead
/// of replacing it, injected that CA into every webhook configuration and
/// conversion webhook that calls ESO's webhook Service.
pub fn assert_webhook_certificate_issued_by_devstack(stack: &TestStack) {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use k8s_openapi::api::core::v1::{Pod, Secret};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::Api;
    use sha2::Digest;
    let rt = runtime();
    let client = kube_client(&rt, stack);
    let secret = rt
        .block_on(
            Api::<Secret>::namespaced(client.clone(), "external-secrets")
                .get("external-secrets-webhook"),
        )
        .unwrap();
    let ca = secret.data.as_ref().unwrap()["ca.crt"].0.clone();
    let issued = secret.metadata.annotations.unwrap_or_default()
        [devstack::gitops::webhook::ISSUED_CA_ANNOTATION]
        .clone();
    assert_eq!(
        hex::encode(sha2::Sha256::digest(&ca)),
        issued,
        "the webhook's CA is not the one devstack issued"
    );
    let configurations = rt
        .block_on(
            Api::<ValidatingWebhookConfiguration>::all(client.clone()).list(&Default::default()),
        )
        .unwrap();
    let mut injected = 0;
    for configuration in configurations.items {
        for webhook in configuration.webhooks.unwrap_or_default() {
            let config = webhook.client_config;
            if config.service.as_ref().map(|s| s.namespace.as_str()) == Some("external-secrets") {
                assert_eq!(
                    config.ca_bundle.map(|b| b.0).as_ref(),
                    Some(&ca),
                    "webhook {} lacks devstack's CA",
                    webhook.name
                );
                injected += 1;
            }
        }
    }
    assert!(injected >= 2, "no ESO validating webhook found");
    // A webhook process that found no certificate sleeps 10 s before it
    // looks again; devstack either fills the Secret before the pod mounts
    // it or replaces the pod.
    let pods = rt
        .block_on(
            Api::<Pod>::namespaced(client.clone(), "external-secrets").list(
                &kube::api::ListParams::default()
                    .labels("app.kubernetes.io/name=external-secrets-webhook"),
            ),
        )
        .unwrap();
    // A pod devstack replaced may still be terminating: it serves nothing.
    let serving: Vec<Pod> = pods
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    assert!(!serving.is_empty(), "no ESO webhook pod");
    for pod in serving {
        let name = pod.metadata.name.unwrap();
        let log = rt
            .block_on(
                Api::<Pod>::namespaced(client.clone(), "external-secrets")
                    .logs(&name, &Default::default()),
            )
            .unwrap();
        assert!(
            !log.contains("invalid certs"),
            "webhook pod {name} started without its certificate:\n{log}"
        );
    }
    let crd = rt
        .block_on(
            Api::<CustomResourceDefinition>::all(client).get("externalsecrets.external-secrets.io"),
        )
        .unwrap();
    // ESO 2.x serves one version and converts nothing; a CRD that does
    // convert through the webhook must trust the same CA.
    if let Some(conversion) = crd.spec.conversion.filter(|c| c.strategy == "Webhook") {
        let config = conversion.webhook.and_then(|w| w.client_config);
        assert_eq!(
            config.and_then(|c| c.ca_bundle).map(|b| b.0).as_ref(),
            Some(&ca),
            "the ExternalSecret CRD's conversion webhook lacks devstack's CA"
        );
    }
}

/// Pod sandboxes the kubelet failed to create after `since` because
/// flannel's subnet file was missing: what a node that starts again (a
/// restart, a restore) must not wait out. Each as `pod: message`.
pub fn sandbox_failures_without_flannel_subnet(
    stack: &TestStack,
    since: std::time::SystemTime,
) -> Vec<String> {
    use k8s_openapi::api::core::v1::Event;
    let rt = runtime();
    let client = kube_client(&rt, stack);
    let events: kube::Api<Event> = kube::Api::all(client);
    let list = rt
        .block_on(
            events.list(&kube::api::ListParams::default().fields("reason=FailedCreatePodSandBox")),
        )
        .unwrap();
    list.items
        .into_iter()
        .filter(|e| {
            let last = e
                .last_timestamp
                .as_ref()
                .map(|t| std::time::SystemTime::from(t.0))
                .or_else(|| {
                    e.event_time
                        .as_ref()
                        .map(|t| std::time::SystemTime::from(t.0))
                });
            last.is_some_and(|t| t >= since)
                && e.message
                    .as_deref()
                    .unwrap_or_default()
                    .contains("subnet.env")
        })
        .map(|e| {
            format!(
                "{}: {}",
                e.involved_object.name.unwrap_or_default(),
                e.message.unwrap_or_default()
            )
        })
        .collect()
}
