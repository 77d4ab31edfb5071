//! Cluster tier: the Kind provider end to end with the kit's kind CLI and
//! node image, from the offline bundle. The dev profile's shape (one control
//! plane, one worker): `up` -> `verify --push-secret` -> `status` -> warm `up`
//! -> `down`; a foreign kind cluster of the stack's name refused and left
//! alone; Ctrl-C during `kind create` rolled back; kind missing named with
//! its fix. Where the bundle has no kind CLI or node image, each test prints
//! `SKIPPED: <test>: <reason>` (tests/run.sh counts those as skipped).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

/// The bundle's kind CLI, when the kit built the Kind pieces; otherwise the
/// test prints why it skips.
fn kind_kit(test: &str) -> Option<PathBuf> {
    if !require_docker() {
        return None;
    }
    let index = bundle_dir().join("index.json");
    let skip = |why: String| {
        eprintln!("SKIPPED: {test}: {why}");
        None
    };
    let Ok(text) = std::fs::read_to_string(&index) else {
        return skip(format!(
            "no offline bundle at {} (run `make kit`)",
            index.display()
        ));
    };
    let index: serde_json::Value = serde_json::from_str(&text).unwrap();
    let artifacts = index["artifacts"].as_array().cloned().unwrap_or_default();
    let kind = artifacts
        .iter()
        .find(|a| a["kind"] == "binary" && a["name"] == "kind")
        .and_then(|a| a["file"].as_str())
        .map(|f| bundle_dir().join(f));
    let node = artifacts.iter().any(|a| a["role"] == "kind-node");
    match kind {
        Some(kind) if node && kind.is_file() => Some(kind),
        _ => skip(format!(
            "the bundle at {} has no kind CLI or kind-node image (tests/kit/components/kind.sh)",
            bundle_dir().display()
        )),
    }
}

/// profiles/dev.yaml for a test stack: its name, the bundle, no merge into
/// the user's kubeconfig, a free host port instead of 8080, busybox preloaded
/// from the local image store to probe from pods.
fn dev_profile(stack: &TestStack, host_port: u16) -> PathBuf {
    let dev =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/dev.yaml"))
            .unwrap();
    let text = dev
        .replace("name: dev\n", &format!("name: {}\n", stack.name))
        .replace("hostPort: 8080", &format!("hostPort: {host_port}"))
        .replace("    merge: true", "    merge: false")
        .replace(
            "secrets:\n",
            &format!(
                "images:\n  bundle: {}\n  preload: [{BUSYBOX}]\nsecrets:\n",
                bundle_dir().display()
            ),
        );
    assert!(
        text.contains(&stack.name)
            && text.contains("merge: false")
            && text.contains(&format!("hostPort: {host_port}"))
            && text.contains("provider: kind")
            && text.contains("agents: 1"),
        "profiles/dev.yaml changed shape:\n{text}"
    );
    let path = stack.dir.path().join("profile.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn kind_cluster(stack: &TestStack) -> String {
    format!("devstack-{}", stack.name)
}

/// Node containers of the stack's kind cluster, by kind's label.
fn kind_nodes(stack: &TestStack) -> Vec<String> {
    docker_lines(&[
        "ps",
        "-a",
        "--format",
        "{{.Names}}",
        "--filter",
        &format!("label=io.x-k8s.kind.cluster={}", kind_cluster(stack)),
    ])
}

/// Deletes the test's own kind cluster (never another) when the test ends,
/// even when it fails: `devstack down` is what is under test, so this is
/// the backstop. DEVSTACK_TEST_KEEP=1 keeps it.
struct KindGuard {
    kind: PathBuf,
    cluster: String,
}

impl Drop for KindGuard {
    fn drop(&mut self) {
        if std::env::var_os("DEVSTACK_TEST_KEEP").is_some() {
            eprintln!("keeping kind cluster {} (DEVSTACK_TEST_KEEP)", self.cluster);
            return;
        }
        let filter = format!("label=io.x-k8s.kind.cluster={}", self.cluster);
        if docker_lines(&["ps", "-aq", "--filter", &filter]).is_empty() {
            return;
        }
        let scratch = tempfile::tempdir().unwrap();
        let _ = std::process::Command::new(&self.kind)
            .args(["delete", "cluster", "--name", &self.cluster, "--kubeconfig"])
            .arg(scratch.path().join("kubeconfig"))
            .output();
    }
}

#[test]
fn kind_dev_profile_up_verify_status_warm_up_down() {
    const TEST: &str = "kind_dev_profile_up_verify_status_warm_up_down";
    let Some(kind) = kind_kit(TEST) else {
        return;
    };
    ensure_busybox_image();
    let stack = TestStack::new("kind");
    let _guard = KindGuard {
        kind,
        cluster: kind_cluster(&stack),
    };
    let host_port = free_port();
    let profile = dev_profile(&stack, host_port);

    let started = Instant::now();
    let up = stack.run(&profile, &["up", "--json"]);
    let cold = started.elapsed();
    let report = up.ok().json();
    eprintln!("kind: cold up to a verified round trip: {cold:?}");
    for step in report["steps"].as_array().unwrap() {
        eprintln!("  {} {}ms", step["name"], step["elapsedMs"]);
    }
    assert_eq!(report["created"], true, "{report}");
    assert_eq!(report["verify"]["passed"], true, "{report}");
    let cluster = &report["cluster"];
    assert_eq!(cluster["provider"], "kind", "{report}");
    let nodes: Vec<String> = cluster["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    let name = kind_cluster(&stack);
    assert_eq!(
        nodes,
        [format!("{name}-control-plane"), format!("{name}-worker")],
        "{report}"
    );
    assert!(
        cluster["apiServer"]
            .as_str()
            .unwrap()
            .starts_with("https://127.0.0.1:"),
        "{report}"
    );

    // The kubeconfig: devstack's state, 0600, context devstack-<name>.
    let path = PathBuf::from(cluster["kubeconfigPath"].as_str().unwrap());
    assert!(path.starts_with(stack.dir.path().join("state")), "{path:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{path:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains(&format!("current-context: devstack-{}", stack.name)),
        "{text}"
    );
    assert!(cluster["mergedInto"].is_null(), "{report}");

    // Every node is on the stack network and has the stack's images.
    for node in &nodes {
        let networks = docker(&[
            "inspect",
            "-f",
            "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}",
            node,
        ]);
        let networks = String::from_utf8_lossy(&networks.stdout).to_string();
        assert!(networks.contains(&name), "{node}: {networks}");
        let images = docker(&["exec", node, "ctr", "-n", "k8s.io", "images", "ls", "-q"]);
        let images = String::from_utf8_lossy(&images.stdout).to_string();
        for wanted in [
            "ghcr.io/fluxcd/source-controller:v1.9.5",
            devstack::versions::ESO_IMAGE,
            "docker.io/devstack-test/busybox:1",
        ] {
            assert!(images.contains(wanted), "{node} lacks {wanted}:\n{images}");
        }
    }
    // The profile's port mapping, on a free port.
    let published = docker(&["port", &nodes[0], "30080/tcp"]);
    assert!(
        String::from_utf8_lossy(&published.stdout).contains(&format!("127.0.0.1:{host_port}")),
        "{}",
        String::from_utf8_lossy(&published.stdout)
    );

    // Pods on every node reach LocalStack by its in-cluster name.
    let rt = runtime();
    let client = kube_client(&rt, &stack);
    for node in &nodes {
        let logs = rt.block_on(probe_localstack(
            &client,
            &format!("probe-{}", node.rsplit('-').next().unwrap()),
            Some(node),
        ));
        assert!(logs.contains("secretsmanager"), "{node}: {logs}");
    }

    let pushed = stack.run(&profile, &["verify", "--push-secret", "--json"]);
    let report = pushed.ok().json();
    assert_push_verified(&report);

    let status = stack.run(&profile, &["status", "--json"]);
    assert_eq!(status.code, 0, "{}", status.all());
    assert_eq!(status.json()["healthy"], true);

    let started = Instant::now();
    let again = stack.run(&profile, &["up", "--json"]);
    let warm = started.elapsed();
    let report = again.ok().json();
    eprintln!("kind: warm up (with verify): {warm:?}");
    assert_eq!(report["created"], false, "{report}");
    assert_eq!(report["repaired"].as_array().unwrap().len(), 0, "{report}");
    assert_eq!(report["verify"]["passed"], true, "{report}");

    // A shape kind cannot change in place is refused before anything runs.
    let two_workers = stack.dir.path().join("two-workers.yaml");
    std::fs::write(
        &two_workers,
        std::fs::read_to_string(&profile)
            .unwrap()
            .replace("agents: 1", "agents: 2"),
    )
    .unwrap();
    let refused = stack.run(&two_workers, &["up"]);
    assert_eq!(refused.code, 2, "{}", refused.all());
    assert!(
        refused.stderr.contains("agents 1 -> 2"),
        "{}",
        refused.stderr
    );
    assert!(refused.stderr.contains("--recreate"), "{}", refused.stderr);

    let started = Instant::now();
    stack.run(&profile, &["down"]).ok();
    eprintln!("kind: down: {:?}", started.elapsed());
    assert!(kind_nodes(&stack).is_empty(), "{:?}", kind_nodes(&stack));
    assert!(stack.containers().is_empty(), "{:?}", stack.containers());
    assert!(stack.networks().is_empty(), "{:?}", stack.networks());
    assert!(!path.exists(), "the kubeconfig outlived down");
    stack.run(&profile, &["down"]).ok();
}

/// A kind cluster named like the stack's that devstack did not create: `up`
/// refuses before touching anything, `down` leaves it alone.
#[test]
fn a_foreign_kind_cluster_of_the_stack_name_is_refused_and_left_alone() {
    const TEST: &str = "a_foreign_kind_cluster_of_the_stack_name_is_refused_and_left_alone";
    if kind_kit(TEST).is_none() {
        return;
    }
    let stack = TestStack::new("kforeign");
    let cluster = kind_cluster(&stack);
    let profile = dev_profile(&stack, free_port());
    // What kind makes, minus devstack's marker: a node container with kind's
    // labels (created, not started; nothing here needs it to run). Removed by
    // its id when the test ends.
    let created = docker(&[
        "create",
        "--name",
        &format!("{cluster}-control-plane"),
        "--label",
        &format!("io.x-k8s.kind.cluster={cluster}"),
        "--label",
        "io.x-k8s.kind.role=control-plane",
        devstack::versions::KIND_NODE_IMAGE,
    ]);
    assert!(created.status.success(), "{created:?}");
    let id = String::from_utf8_lossy(&created.stdout).trim().to_string();
    struct RemoveOnDrop(String);
    impl Drop for RemoveOnDrop {
        fn drop(&mut self) {
            let _ = docker(&["rm", "-f", &self.0]);
        }
    }
    let _foreign = RemoveOnDrop(id.clone());

    let up = stack.run(&profile, &["up"]);
    assert_eq!(up.code, 3, "{}", up.all());
    assert!(
        up.stderr.contains("devstack did not create it"),
        "{}",
        up.stderr
    );
    assert!(up.stderr.contains("hint:"), "{}", up.stderr);
    assert!(
        stack.containers().is_empty(),
        "up created {:?} before refusing",
        stack.containers()
    );

    for args in [&["down"][..], &["cluster", "down"][..]] {
        let down = stack.run(&profile, args);
        assert_eq!(down.code, 0, "{args:?}: {}", down.all());
        assert!(
            down.stderr.contains("left untouched"),
            "{args:?}: {}",
            down.stderr
        );
        assert!(
            docker(&["inspect", &id]).status.success(),
            "{args:?} removed the foreign node"
        );
    }
}

/// SIGINT while `kind create` runs: the run exits 130 and rolls back, leaving
/// no kind node, no devstack container and no network.
#[test]
fn interrupted_kind_up_rolls_back() {
    const TEST: &str = "interrupted_kind_up_rolls_back";
    let Some(kind) = kind_kit(TEST) else {
        return;
    };
    let stack = TestStack::new("ksigint");
    let _guard = KindGuard {
        kind,
        cluster: kind_cluster(&stack),
    };
    let profile = dev_profile(&stack, free_port());
    let child = stack.spawn(&profile, &["up"]);
    // Until the node containers exist: kind is mid-create then.
    let deadline = Instant::now() + Duration::from_secs(60);
    while kind_nodes(&stack).len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(kind_nodes(&stack).len(), 2, "kind never created the nodes");
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: signalling the child this test spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("rolled back"), "{stderr}");
    assert!(
        kind_nodes(&stack).is_empty(),
        "left {:?}",
        kind_nodes(&stack)
    );
    assert!(
        stack.containers().is_empty(),
        "left {:?}",
        stack.containers()
    );
    assert!(stack.networks().is_empty(), "left {:?}", stack.networks());
}

#[test]
fn kind_missing_is_a_prerequisite_error_with_a_hint() {
    if !require_docker() {
        return;
    }
    let stack = TestStack::new("nokind");
    let profile = stack.profile("cluster:\n  provider: kind\n  kubeconfig: {merge: false}\n");
    let empty = tempfile::tempdir().unwrap();
    // devstack reaches the engine through its socket, so an empty PATH
    // hides only the kind CLI; no DEVSTACK_KIND, no bundle.
    let env = [
        ("PATH", empty.path().to_str().unwrap()),
        ("DEVSTACK_KIND", ""),
        ("DEVSTACK_BUNDLE", ""),
    ];
    let run = stack.run_env(&profile, &["cluster", "up"], &env);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr.contains("`kind` not found on PATH"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("hint:")
            && run.stderr.contains("DEVSTACK_KIND")
            && run.stderr.contains("--provider k3s"),
        "{}",
        run.stderr
    );
    assert!(stack.containers().is_empty());

    let doctor = stack.run_env(&profile, &["doctor", "--json"], &env);
    assert_eq!(doctor.code, 3, "{}", doctor.all());
    let report = doctor.json();
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "kind")
        .cloned()
        .unwrap();
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        check["hint"]
            .as_str()
            .unwrap()
            .contains("go install sigs.k8s.io/kind@"),
        "{check}"
    );
}
