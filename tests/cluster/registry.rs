//! Cluster tier: the stack's image registry and `devstack load`, on K3s and
//! on Kind. An image built on this machine with `docker build`, pushed to
//! `localhost:<port>`, runs in the cluster under that same reference; an
//! image put in with `devstack load` runs without a registry; the KEP-1755
//! ConfigMap names the registry; `load` of a missing image is refused; a
//! registry container removed by hand comes back with the next `up`, its
//! volume (what was pushed) kept, and `down` removes both.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, PostParams};

use crate::common::*;
use crate::providers::Provider;

/// Built images this test made, removed again even when it fails.
struct Images(Vec<String>);

impl Drop for Images {
    fn drop(&mut self) {
        for image in &self.0 {
            let _ = docker(&["rmi", "-f", image]);
        }
    }
}

/// `docker build` of a tiny image on the kit's offline busybox, tagged `tag`
/// (and labelled with it: each image its own content, since on Kind's
/// containerd 2.2 the CRI does not see a name `ctr import` adds to content
/// it already pulled under another name).
fn build(tag: &str, _stack: &TestStack) {
    ensure_busybox_image();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        format!("FROM {BUSYBOX}\nLABEL dev.devstack.test={tag}\nCMD [\"sleep\", \"3600\"]\n"),
    )
    .unwrap();
    let out = std::process::Command::new("docker")
        .args(["build", "-q", "-t", tag])
        .arg(dir.path())
        .env("DOCKER_BUILDKIT", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "docker build {tag}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Creates a pod running `image` and waits until it runs; how long that took.
fn run_pod(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    name: &str,
    image: &str,
    pull_policy: &str,
) -> Duration {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "app", "image": image, "imagePullPolicy": pull_policy}],
            "terminationGracePeriodSeconds": 0,
        },
    }))
    .unwrap();
    let started = Instant::now();
    rt.block_on(pods.create(&PostParams::default(), &pod))
        .unwrap();
    loop {
        let now = rt.block_on(pods.get(name)).unwrap();
        let status = now.status.clone().unwrap_or_default();
        if status.phase.as_deref() == Some("Running") {
            return started.elapsed();
        }
        let waiting: Vec<String> = status
            .container_statuses
            .unwrap_or_default()
            .iter()
            .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
            .map(|w| format!("{:?}: {:?}", w.reason, w.message))
            .collect();
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "pod {name} ({image}) not Running after 180 s: {waiting:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn registry_builds_pushes_loads_and_repairs(provider: Provider) {
    let stack = TestStack::new(&format!("reg-{}", provider.name()));
    let _kind = provider.guard(&stack);
    let rt = runtime();
    let port = free_port();
    let host = format!("localhost:{port}");
    let profile = stack.profile(&format!(
        "cluster:\n  provider: {}\n  kubeconfig: {{merge: false}}\nimages:\n  bundle: {}\nregistry:\n  enabled: true\n  port: {port}\n",
        provider.name(),
        bundle_dir().display()
    ));
    let pushed = format!("{host}/app-{}:1", stack.name);
    let loaded = format!("devstack-test/load-{}:1", stack.name);
    let _images = Images(vec![pushed.clone(), loaded.clone()]);

    let up = stack.run(&profile, &["up", "--no-verify", "--json"]);
    up.ok();
    let report = up.json();
    assert_eq!(report["registry"]["host"], host.as_str(), "{report}");
    assert_eq!(report["ports"]["registry"], port);
    assert!(
        up.stderr
            .contains(&format!("allow_k8s_contexts('devstack-{}')", stack.name)),
        "the closing lines give Tilt's setting: {}",
        up.stderr
    );
    let env = stack.run(&profile, &["env", "--json"]);
    env.ok();
    assert_eq!(env.json()["DEVSTACK_REGISTRY"], host.as_str());

    // KEP-1755: the registry advertised where Tilt looks for it.
    let client = kube_client(&rt, &stack);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-public");
    let map = rt.block_on(maps.get("local-registry-hosting")).unwrap();
    let hosting = &map.data.unwrap()["localRegistryHosting.v1"];
    let hosting: serde_json::Value = serde_saphyr::from_str(hosting).unwrap();
    assert_eq!(hosting["host"], host.as_str(), "{hosting}");
    assert_eq!(hosting["hostFromContainerRuntime"], host.as_str());
    let from_network = hosting["hostFromClusterNetwork"].as_str().unwrap();
    assert!(from_network.ends_with(":5000"), "{hosting}");
    assert!(!hosting["help"].as_str().unwrap().is_empty());

    // Build, push, run: the reference of the push is the pod's.
    build(&pushed, &stack);
    let push_started = Instant::now();
    let push = docker(&["push", &pushed]);
    assert!(
        push.status.success(),
        "docker push: {}",
        String::from_utf8_lossy(&push.stderr)
    );
    let ran = run_pod(&rt, &client, "pushed", &pushed, "Always");
    eprintln!(
        "FIGURE {}: push -> Running {:.1} s (push {:.1} s, pod {:.1} s)",
        provider.name(),
        push_started.elapsed().as_secs_f64(),
        (push_started.elapsed() - ran).as_secs_f64(),
        ran.as_secs_f64()
    );
    let container = format!("devstack-{}-registry", stack.name);
    let stats = docker_lines(&[
        "stats",
        "--no-stream",
        "--format",
        "{{.MemUsage}}",
        &container,
    ]);
    eprintln!("FIGURE {}: registry memory {stats:?}", provider.name());

    // `load`: no registry involved, the pod never pulls.
    build(&loaded, &stack);
    let missing = format!("devstack-test/missing-{}:1", stack.name);
    let refused = stack.run(&profile, &["load", &loaded, &missing]);
    assert_eq!(refused.code, 2, "{}", refused.all());
    assert!(
        refused.stderr.contains(&format!(
            "`{missing}` is not in this machine's Docker image store; nothing was loaded"
        )) && refused.stderr.contains("hint:"),
        "{}",
        refused.stderr
    );
    stack.run(&profile, &["load", &loaded]).ok();
    run_pod(&rt, &client, "loaded", &loaded, "Never");

    // A registry container removed by hand: the next `up` puts it back,
    // with what was pushed.
    assert!(docker(&["rm", "-f", &container]).status.success());
    let repaired = stack.run(&profile, &["up", "--no-verify"]);
    repaired.ok();
    assert!(
        repaired
            .all()
            .contains("repaired: the registry container was missing: created it again"),
        "{}",
        repaired.all()
    );
    let tags = std::process::Command::new("curl")
        .args([
            "-fsS",
            &format!("http://127.0.0.1:{port}/v2/app-{}/tags/list", stack.name),
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&tags.stdout).contains("\"1\""),
        "the pushed image survived: {}",
        String::from_utf8_lossy(&tags.stdout)
    );

    stack.run(&profile, &["down"]).ok();
    let volumes = docker_lines(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label=dev.devstack.stack={}", stack.name),
    ]);
    assert!(
        volumes.is_empty(),
        "down removes the registry's volume: {volumes:?}"
    );
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn k3s_registry_builds_pushes_loads_and_repairs() {
    if let Some(provider) = Provider::k3s() {
        registry_builds_pushes_loads_and_repairs(provider);
    }
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn kind_registry_builds_pushes_loads_and_repairs() {
    if let Some(provider) = Provider::kind("kind_registry_builds_pushes_loads_and_repairs") {
        registry_builds_pushes_loads_and_repairs(provider);
    }
}
