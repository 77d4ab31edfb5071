//! Cluster tier: a real K3s node from the offline kit, driven through
//! bollard, with LocalStack reached from pods by its in-cluster name.

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Endpoints, Node};
use kube::api::{Api, ListParams};

fn k3s_profile(stack: &TestStack, extra: &str) -> std::path::PathBuf {
    stack.profile(&format!(
        "cluster:\n  provider: k3s\n  kubeconfig: {{merge: false}}\nimages:\n  bundle: {}\n  preload: [{BUSYBOX}]\n{extra}",
        bundle_dir().display()
    ))
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn k3s_cluster_end_to_end() {
    if !require_cluster_kit() {
        return;
    }
    ensure_busybox_image();
    let stack = TestStack::new("k3s");
    let profile = k3s_profile(&stack, "");
    let similar = format!("devstack-{}-server-0-lookalike", stack.name);
    assert!(
        docker(&["create", "--name", &similar, BUSYBOX, "sleep", "1"])
            .status
            .success()
    );

    stack.run(&profile, &["localstack", "up"]).ok();
    let up = stack.run(&profile, &["cluster", "up", "--json"]);
    let report = up.ok().json();
    assert_eq!(report["cluster"]["created"], true, "{report}");
    assert_eq!(report["localstackRouted"], true, "{report}");
    let kubeconfig_path = report["kubeconfig"].as_str().unwrap().to_string();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&kubeconfig_path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let env = stack.run(&profile, &["env"]);
    assert!(
        env.ok()
            .stdout
            .contains(&format!("export KUBECONFIG='{kubeconfig_path}'")),
        "{}",
        env.stdout
    );

    let again = stack.run(&profile, &["cluster", "up", "--json"]);
    assert_eq!(
        again.ok().json()["cluster"]["created"],
        false,
        "a second up reuses the cluster"
    );

    let server = format!("devstack-{}-server-0", stack.name);
    let images = docker(&["exec", &server, "crictl", "images"]);
    let images = String::from_utf8_lossy(&images.stdout);
    assert!(
        images.contains("mirrored-pause"),
        "pause preloaded from the bundle: {images}"
    );
    assert!(
        images.contains("devstack-test/busybox"),
        "busybox preloaded from the local image store: {images}"
    );

    let rt = runtime();
    rt.block_on(async {
        let config = std::fs::read_to_string(&kubeconfig_path).unwrap();
        let client = devstack::k8s::client_from_kubeconfig(&config)
            .await
            .unwrap();
        let nodes: Api<Node> = Api::all(client.clone());
        assert_eq!(
            nodes
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len(),
            1
        );
        // CoreDNS's Deployment reads Available with no pod at all (K3s
        // allows 1 of 1 unavailable); `up` returns once one serves.
        let coredns: Api<Deployment> = Api::namespaced(client.clone(), "kube-system");
        let coredns = coredns.get("coredns").await.unwrap();
        let available = coredns.status.and_then(|s| s.available_replicas);
        assert!(
            available >= Some(1),
            "CoreDNS pods available: {available:?}"
        );
        let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "kube-system");
        let serving = endpoints
            .get("kube-dns")
            .await
            .unwrap()
            .subsets
            .unwrap_or_default()
            .iter()
            .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
            .sum::<usize>();
        assert!(serving >= 1, "the DNS Service has no ready endpoint");
        let health = probe_localstack(&client, "probe-1", None).await;
        assert!(health.contains("secretsmanager"), "{health}");
    });

    // LocalStack comes back with a new address: devstack re-points the route.
    let localstack = format!("devstack-{}-localstack", stack.name);
    let network = format!("devstack-{}", stack.name);
    let old_ip = String::from_utf8_lossy(
        &docker(&[
            "inspect",
            "-f",
            &format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}"),
            &localstack,
        ])
        .stdout,
    )
    .trim()
    .to_string();
    assert!(docker(&["stop", "-t", "1", &localstack]).status.success());
    let squatter = format!("devstack-{}-ip-squatter", stack.name);
    // The first free address is the one LocalStack just released: a squatter
    // takes it, so the restarted container gets another.
    assert!(
        docker(&[
            "run",
            "-d",
            "--name",
            &squatter,
            "--network",
            &network,
            BUSYBOX,
            "sleep",
            "600"
        ])
        .status
        .success()
    );
    let restarted = stack.run(&profile, &["localstack", "up", "--json"]);
    let _ = docker(&["rm", "-f", "-v", &squatter]);
    assert_eq!(restarted.ok().json()["action"]["action"], "restarted");
    let new_ip = String::from_utf8_lossy(
        &docker(&[
            "inspect",
            "-f",
            &format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}"),
            &localstack,
        ])
        .stdout,
    )
    .trim()
    .to_string();
    assert_ne!(
        new_ip, old_ip,
        "LocalStack should have a new address after the restart"
    );
    assert!(
        restarted
            .stderr
            .contains("pods reach it at http://localstack.localstack.svc.cluster.local:4566"),
        "{}",
        restarted.stderr
    );
    rt.block_on(async {
        let config = std::fs::read_to_string(&kubeconfig_path).unwrap();
        let client = devstack::k8s::client_from_kubeconfig(&config)
            .await
            .unwrap();
        let health = probe_localstack(&client, "probe-2", None).await;
        assert!(health.contains("secretsmanager"), "{health}");
    });

    stack.run(&profile, &["cluster", "down"]).ok();
    stack.run(&profile, &["localstack", "down"]).ok();
    assert!(
        stack.containers().is_empty(),
        "labelled containers left: {:?}",
        stack.containers()
    );
    assert!(stack.networks().is_empty());
    assert!(
        docker_lines(&[
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("label=dev.devstack.stack={}", stack.name)
        ])
        .is_empty()
    );
    assert!(!std::path::Path::new(&kubeconfig_path).exists());
    let lookalike_survives = docker(&["inspect", &similar]).status.success();
    let _ = docker(&["rm", "-f", "-v", &similar]);
    assert!(
        lookalike_survives,
        "an unlabelled container with a similar name must be left alone"
    );
    stack.run(&profile, &["cluster", "down"]).ok();
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn k3s_bad_input_is_clear_and_leaves_nothing() {
    if !require_cluster_kit() {
        return;
    }
    let stack = TestStack::new("k3sbad");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let profile = k3s_profile(&stack, "");
    let text = std::fs::read_to_string(&profile).unwrap().replace(
        "  provider: k3s\n",
        &format!("  provider: k3s\n  apiServerPort: {port}\n"),
    );
    std::fs::write(&profile, text).unwrap();
    let run = stack.run(&profile, &["cluster", "up"]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("127.0.0.1:{port} is already in use")),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("hint:"));
    assert!(stack.containers().is_empty());
    drop(taken);

    let profile = k3s_profile(&stack, "");
    let run = stack.run_env(
        &profile,
        &["cluster", "up"],
        &[("DEVSTACK_HOME", "/proc/devstack-unwritable")],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("cannot write kubeconfig /proc/devstack-unwritable"),
        "{}",
        run.stderr
    );
    assert!(
        stack.containers().is_empty(),
        "nothing is created when the kubeconfig cannot be written"
    );

    // An argument K3s refuses makes the server exit at once: `up` says so
    // within seconds, with its exit code and log, not at `timeouts.cluster`.
    let profile = k3s_profile(&stack, "");
    let text = std::fs::read_to_string(&profile).unwrap().replace(
        "  provider: k3s\n",
        "  provider: k3s\n  k3sArgs: [--kubelet-arg=v=2]\n",
    );
    std::fs::write(&profile, text).unwrap();
    let run = stack.run(&profile, &["cluster", "up"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "node devstack-{}-server-0 exited with code 1",
            stack.name
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("hint: a K3s argument it refuses (`cluster.k3sArgs`"),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("did not become Ready"),
        "the exit was noticed only at the cluster timeout: {}",
        run.stderr
    );
    assert!(
        stack.containers().is_empty(),
        "the failed create is rolled back"
    );
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn k3s_engine_going_away_mid_create_is_reported_and_the_next_run_converges() {
    if !require_cluster_kit() {
        return;
    }
    // The profile preloads it: without it the run fails on the missing
    // image before the engine goes away (as it did when this test ran first).
    ensure_busybox_image();
    let stack = TestStack::new("k3sgone");
    let socket = stack.dir.path().join("docker.sock");
    let mut proxy = std::process::Command::new("socat")
        .arg(format!("UNIX-LISTEN:{},fork", socket.display()))
        .arg("UNIX-CONNECT:/var/run/docker.sock")
        .spawn()
        .expect("socat is installed by scripts/setup-docker.sh");
    std::thread::sleep(Duration::from_millis(300));
    let profile = k3s_profile(&stack, "");
    let host = format!("unix://{}", socket.display());
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(4));
        let _ = proxy.kill();
        let _ = proxy.wait();
    });
    let run = stack.run_env(&profile, &["cluster", "up"], &[("DOCKER_HOST", &host)]);
    killer.join().unwrap();
    // The engine is gone for the rollback too: what was left, and how to
    // remove it once the engine is back. The runner alone tried to remove
    // it, once, and kept the state that finds it and holds what its node
    // mounts.
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("error: rollback also failed; left behind: k3s cluster, state "),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!(
            "could not remove k3s cluster: cannot reach the Docker engine at {host}: "
        )),
        "{}",
        run.stderr
    );
    assert_eq!(
        run.stderr.matches("rollback also failed").count(),
        1,
        "the cluster was deleted by more than the runner: {}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!(
            "\nhint: {} removes the rest",
            quoted_command(&profile, "down")
        )),
        "{}",
        run.stderr
    );
    // With the engine back, the next run converges whatever the cut-off run
    // left into a working cluster...
    let next = stack.run(&profile, &["cluster", "up", "--json"]);
    let report = next.ok().json();
    assert_eq!(
        report["cluster"]["nodes"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    let rt = runtime();
    let client = kube_client(&rt, &stack);
    let nodes = rt
        .block_on(
            kube::Api::<k8s_openapi::api::core::v1::Node>::all(client).list(&Default::default()),
        )
        .unwrap();
    assert_eq!(nodes.items.len(), 1, "one node answers");
    // ...and `down` removes it all.
    stack.run(&profile, &["cluster", "down"]).ok();
    assert!(stack.containers().is_empty(), "{:?}", stack.containers());
}
/// An image added to `images.preload` after the cluster was created is
/// imported into the running nodes by the next `up`, which no mount made at
/// creation carries; `timeouts.preload` is short so that waiting for an
/// import that never comes fails the test instead of only slowing it.
#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn k3s_a_preload_image_added_later_is_imported_into_running_nodes() {
    if !require_cluster_kit() {
        return;
    }
    ensure_busybox_image();
    let stack = TestStack::new("addimg");
    let with = |extra: &str| {
        stack.profile(&format!(
            "cluster:\n  provider: k3s\n  kubeconfig: {{merge: false}}\nimages:\n  bundle: {}\n{extra}",
            bundle_dir().display()
        ))
    };
    stack.run(&with(""), &["cluster", "up"]).ok();
    let server = format!("devstack-{}-server-0", stack.name);
    let images = || {
        String::from_utf8_lossy(&docker(&["exec", &server, "crictl", "images"]).stdout).into_owned()
    };
    assert!(!images().contains("devstack-test/busybox"), "{}", images());

    let profile = with(&format!("  preload: [{BUSYBOX}]\n"));
    let text = std::fs::read_to_string(&profile).unwrap();
    std::fs::write(
        &profile,
        text.replace("timeouts:\n", "timeouts:\n  preload: 45s\n"),
    )
    .unwrap();
    // `-v` shows each import devstack makes (`importing IMAGE into NODE`).
    let imports = |run: &Run| -> Vec<String> {
        run.stderr
            .lines()
            .filter(|l| l.contains(": importing "))
            .map(str::to_string)
            .collect()
    };
    let up = stack.run(&profile, &["cluster", "up", "--json", "-v"]);
    up.ok();
    assert_eq!(up.json()["cluster"]["created"], false, "{}", up.all());
    assert!(
        images().contains("devstack-test/busybox"),
        "the added image is in the node: {}",
        images()
    );
    assert_eq!(
        imports(&up).len(),
        1,
        "one import, of the added image: {:?}",
        imports(&up)
    );
    assert!(
        imports(&up)[0].ends_with(&format!(": importing {BUSYBOX} into {server}")),
        "{:?}",
        imports(&up)
    );
    // A second run finds it there and imports nothing again.
    let again = stack.run(&profile, &["cluster", "up", "-v"]);
    again.ok();
    assert_eq!(imports(&again), Vec::<String>::new(), "{}", again.stderr);
    stack.run(&profile, &["cluster", "down"]).ok();
    assert!(stack.containers().is_empty(), "{:?}", stack.containers());
}
