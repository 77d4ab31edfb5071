//! Cluster tier: the Kind provider end to end with the kit's kind CLI and
//! node image, from the offline bundle. The dev profile's shape (one control
//! plane, one worker): `up` -> `verify --push-secret` -> `status` -> warm `up`
//! (merging its context) -> Ctrl-C during the round trip -> `down` (with a
//! process frozen in a node, as a killed `runc create` leaves one, and from a
//! shell without the bundle, kind or network); a foreign kind cluster of the
//! stack's name refused and left alone; a failed `kind create` rolled back by
//! devstack alone, or kept with `--retain`; kind missing named with its fix.
//! Shape drift and Ctrl-C during create are in providers.rs, one body
//! for both providers. Where the bundle has no kind CLI or node image, each test prints
//! `SKIPPED: <test>: <reason>` (tests/run.sh counts those as skipped).

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::common::kind::{KindGuard, kind_cluster, kind_kit, kind_nodes};
use crate::common::*;

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

/// Asserts that `up --json`'s timings show, under the Cluster step (at any
/// depth), a span ended ok whose name starts with each of `parts` (or with
/// one of its `|`-separated alternatives): the waterfall says where the
/// cluster's seconds went.
#[track_caller]
pub(crate) fn assert_cluster_step_parts(report: &serde_json::Value, parts: &[&str]) {
    let spans = report["timings"].as_array().expect("timings");
    let by_id = |id: &serde_json::Value| spans.iter().find(|s| s["id"] == *id);
    let under_cluster = |span: &serde_json::Value| {
        let mut parent = by_id(&span["parent"]);
        while let Some(p) = parent {
            if p["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("Cluster ("))
            {
                return true;
            }
            parent = by_id(&p["parent"]);
        }
        false
    };
    let names: Vec<String> = spans
        .iter()
        .filter(|s| under_cluster(s))
        .map(|s| {
            format!(
                "{} {}..{} ok={}",
                s["name"], s["startMs"], s["endMs"], s["ok"]
            )
        })
        .collect();
    for part in parts {
        assert!(
            spans.iter().any(|s| {
                s["name"]
                    .as_str()
                    .is_some_and(|n| part.split('|').any(|p| n.starts_with(p)))
                    && s["endMs"].is_u64()
                    && s["ok"] == true
                    && under_cluster(s)
            }),
            "no span `{part}...` ended ok under the Cluster step; its parts:\n{}",
            names.join("\n")
        );
    }
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn kind_dev_profile_up_verify_status_warm_up_down() {
    const TEST: &str = "kind_dev_profile_up_verify_status_warm_up_down";
    let Some(kind) = kind_kit(TEST) else {
        return;
    };
    ensure_busybox_image();
    let stack = TestStack::new("kind");
    let _guard = KindGuard::new(kind, &stack);
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
    // The Cluster step's waterfall: kind's phases, the cluster's own pods
    // from creation to Ready, each node's Ready.
    let control_plane_node = format!("node {name}-control-plane registered -> Ready");
    let worker_node = format!("node {name}-worker registered -> Ready");
    assert_cluster_step_parts(
        &report,
        &[
            "kind create cluster",
            "kind: Ensuring node image",
            "kind: Preparing nodes",
            "kind: Writing configuration",
            "kind: Starting control-plane",
            "kind: Installing CNI",
            "kind: Installing StorageClass",
            "kind: Joining worker nodes",
            "pod etcd-",
            "pod kube-apiserver-",
            "pod kube-controller-manager-",
            "pod kube-scheduler-",
            "pod kube-proxy-",
            // The CNI: kind's kindnet, or the kit's flannel when the
            // profile's kind config installs it.
            "pod kindnet-|pod kube-flannel-ds-",
            "pod coredns-",
            "pod local-path-provisioner-",
            &control_plane_node,
            &worker_node,
        ],
    );
    assert!(
        cluster["apiServer"]
            .as_str()
            .unwrap()
            .starts_with("https://127.0.0.1:"),
        "{report}"
    );

    assert_running_versions_match_the_matrix(&stack, devstack::versions::KIND_NODE_IMAGE);
    crate::common::assert_webhook_certificate_issued_by_devstack(&stack);
    for node in &nodes {
        crate::common::assert_kube_proxy_min_sync_period(node, "100ms");
    }

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

    // Every node is on the stack network and has the profile's preloaded
    // image; the stack's images (the source-controller at the version the
    // bundle holds) are on the worker alone, the tainted control plane never
    // runs them.
    let bundle = devstack::bundle::Bundle::open(&bundle_dir()).unwrap();
    let held = bundle.images_for("flux-source-controller");
    assert_eq!(
        held.len(),
        1,
        "the bundle's source-controller images: {held:?}"
    );
    let source_controller = held[0].clone();
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
        assert!(
            images.contains("docker.io/devstack-test/busybox:1"),
            "{node} lacks the profile's busybox:\n{images}"
        );
        let worker = node.ends_with("-worker");
        for stack_image in [source_controller.as_str(), devstack::versions::ESO_IMAGE] {
            assert_eq!(
                images.contains(stack_image),
                worker,
                "{node} and {stack_image}:\n{images}"
            );
        }
    }
    // kubeadm made ECDSA keys (the node image's kubeadm writes v1beta4).
    let apiserver_cert = docker(&[
        "exec",
        &nodes[0],
        "openssl",
        "x509",
        "-in",
        "/etc/kubernetes/pki/apiserver.crt",
        "-noout",
        "-text",
    ]);
    let apiserver_cert = String::from_utf8_lossy(&apiserver_cert.stdout).to_string();
    assert!(
        apiserver_cert.contains("id-ecPublicKey"),
        "the API server's key:\n{apiserver_cert}"
    );
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

    // CoreDNS, created by kubeadm, one replica probed every second (see
    // `one_coredns_probed_every_second`).
    let coredns: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client.clone(), "kube-system");
    let coredns = rt.block_on(coredns.get("coredns")).unwrap();
    assert_eq!(coredns.spec.replicas, Some(1), "CoreDNS's replicas");
    let period = coredns
        .spec
        .template
        .spec
        .and_then(|s| s.containers.into_iter().find(|c| c.name == "coredns"))
        .and_then(|c| c.readiness_probe)
        .and_then(|p| p.period_seconds);
    assert_eq!(period, Some(1), "CoreDNS's readiness period");

    let pushed = stack.run(&profile, &["verify", "--push-secret", "--json"]);
    let report = pushed.ok().json();
    assert_push_verified(&report);

    let status = stack.run(&profile, &["status", "--json"]);
    assert_eq!(status.code, 0, "{}", status.all());
    assert_eq!(status.json()["healthy"], true);

    // The warm `up` merges the stack's context into a kubeconfig of the
    // test's own (standing in for the user's), for `down` to remove.
    let user_kubeconfig = stack.dir.path().join("user-kubeconfig");
    let user_env = [("KUBECONFIG", user_kubeconfig.to_str().unwrap())];
    let profile_text = std::fs::read_to_string(&profile).unwrap();
    let merging = stack.dir.path().join("merging.yaml");
    std::fs::write(
        &merging,
        profile_text.replace("    merge: false", "    merge: true"),
    )
    .unwrap();
    let started = Instant::now();
    let again = stack.run_env(&merging, &["up", "--json"], &user_env);
    let warm = started.elapsed();
    let report = again.ok().json();
    eprintln!("kind: warm up (with verify): {warm:?}");
    let context = format!("devstack-{}", stack.name);
    assert!(
        std::fs::read_to_string(&user_kubeconfig)
            .unwrap_or_default()
            .contains(&context),
        "{report}"
    );
    assert_eq!(report["created"], false, "{report}");
    assert_eq!(report["repaired"].as_array().unwrap().len(), 0, "{report}");
    assert_eq!(report["verify"]["passed"], true, "{report}");

    // Ctrl-C during the round trip of `up` on an existing stack (the same
    // body as the K3s stack test's).
    interrupted_verify_leaves_no_probe(&stack, &profile);

    // A process frozen in a node, as a `runc create` killed mid-way leaves
    // its `runc init` (cgroup v1, runc's systemd driver; seen in a bench
    // run): a frozen process cannot die, so neither could its node. `down`
    // thaws it from inside the node.
    let cluster = kind_cluster(&stack);
    freeze_a_process_in(&format!("{cluster}-control-plane"));
    // The same in a node already killed, as when the freeze comes with the
    // kill (seen in CI: a node deleted while its kubelet started pods after
    // a restart): nothing enters a dying node, so `down` thaws it from the
    // host. Docker gives up the kill after ~10 s, the node left running.
    let worker = format!("{cluster}-worker");
    freeze_a_process_in(&worker);
    let killed = docker(&["kill", &worker]);
    assert!(
        !killed.status.success(),
        "a node with a frozen process died when killed: {}",
        String::from_utf8_lossy(&killed.stdout)
    );
    assert_ne!(
        docker(&["exec", &worker, "true"]).status.code(),
        Some(0),
        "the dying node still runs commands"
    );

    // The nodes' volumes (kind's anonymous `/var`), which `down` removes too.
    let mut volumes = Vec::new();
    for node in kind_nodes(&stack) {
        let out = docker(&[
            "inspect",
            "-f",
            "{{range .Mounts}}{{if eq .Type \"volume\"}}{{.Name}} {{end}}{{end}}",
            &node,
        ]);
        volumes.extend(
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(String::from),
        );
    }
    assert!(!volumes.is_empty(), "the nodes have no volume to check");

    // `down` as a new shell runs it: the profile without the bundle `up`
    // took kind from, no kind on PATH, no DEVSTACK_KIND, and no network to
    // fetch kind from (the download mirror is a closed port). It needs none.
    let bare = stack.dir.path().join("bare.yaml");
    let without_bundle: String = profile_text
        .lines()
        .filter(|l| !l.trim_start().starts_with("bundle:"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(!without_bundle.contains("bundle:"), "{without_bundle}");
    std::fs::write(
        &bare,
        without_bundle.replace("    merge: false", "    merge: true"),
    )
    .unwrap();
    let path_without_kind = path_without_kind();
    let new_shell = [
        ("PATH", path_without_kind.as_str()),
        ("DEVSTACK_KIND", ""),
        ("DEVSTACK_BUNDLE", ""),
        ("DEVSTACK_DOWNLOAD_MIRROR", "http://127.0.0.1:9"),
        user_env[0],
    ];
    let started = Instant::now();
    stack.run_env(&bare, &["down"], &new_shell).ok();
    eprintln!("kind: down: {:?}", started.elapsed());
    assert!(kind_nodes(&stack).is_empty(), "{:?}", kind_nodes(&stack));
    assert!(stack.containers().is_empty(), "{:?}", stack.containers());
    assert!(stack.networks().is_empty(), "{:?}", stack.networks());
    for volume in &volumes {
        assert!(
            !docker(&["volume", "inspect", volume]).status.success(),
            "volume {volume} outlived down"
        );
    }
    assert!(!path.exists(), "the kubeconfig outlived down");
    let stack_dir = path.parent().unwrap();
    assert!(!stack_dir.exists(), "{stack_dir:?} outlived down");
    let user = std::fs::read_to_string(&user_kubeconfig).unwrap_or_default();
    assert!(!user.contains(&context), "{context} outlived down:\n{user}");
    stack.run_env(&bare, &["down"], &new_shell).ok();
}

/// Starts a process in its own cgroup in `node` and freezes that cgroup
/// (cgroup v1's freezer, or v2's `cgroup.freeze`).
fn freeze_a_process_in(node: &str) {
    let script = r#"set -e
if [ -d /sys/fs/cgroup/freezer ]; then
  d=/sys/fs/cgroup/freezer/devstack-test-frozen; state=freezer.state; frozen=FROZEN
else
  d=/sys/fs/cgroup/devstack-test-frozen; state=cgroup.freeze; frozen=1
fi
mkdir -p "$d"
sh -c "echo \$\$ >$d/cgroup.procs && exec sleep 3600" </dev/null >/dev/null 2>&1 &
sleep 0.5
echo $frozen >"$d/$state"
sleep 0.5
if [ -f "$d/cgroup.events" ]; then grep -q '^frozen 1' "$d/cgroup.events"; else grep -qx FROZEN "$d/freezer.state"; fi
echo frozen"#;
    let out = docker(&["exec", node, "sh", "-c", script]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "frozen",
        "freezing a process in {node}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A kind cluster named like the stack's that devstack did not create: `up`
/// refuses before touching anything, `down` leaves it alone.
#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
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
            let _ = docker(&["rm", "-f", "-v", &self.0]);
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

/// `kind create` fails half-way (the control plane's `cluster.ports` host
/// port is taken, so its container is created but cannot start) and leaves
/// its nodes, as devstack runs it with `--retain`: `up` rolls them back
/// itself, and `up --retain` keeps them, saying how to remove them, which
/// `down` then does.
#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn a_failed_kind_create_is_rolled_back_by_devstack_or_kept_with_retain() {
    const TEST: &str = "a_failed_kind_create_is_rolled_back_by_devstack_or_kept_with_retain";
    let Some(kind) = kind_kit(TEST) else {
        return;
    };
    ensure_busybox_image();
    let stack = TestStack::new("kfail");
    let _guard = KindGuard::new(kind, &stack);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let profile = dev_profile(&stack, taken.local_addr().unwrap().port());
    let cluster = kind_cluster(&stack);

    let up = stack.run(&profile, &["up"]);
    assert_eq!(up.code, 3, "{}", up.all());
    assert!(
        up.stderr
            .contains(&format!("kind cluster `{cluster}` creation failed")),
        "{}",
        up.stderr
    );
    assert!(up.stderr.contains("rolled back"), "{}", up.stderr);
    assert_eq!(kind_nodes(&stack), Vec::<String>::new(), "{}", up.stderr);
    assert_eq!(stack.leftovers(), Vec::<String>::new(), "{}", up.stderr);

    let kept = stack.run(&profile, &["up", "--retain"]);
    assert_eq!(kept.code, 3, "{}", kept.all());
    assert!(
        kept.stderr.contains("is retained (--retain: ")
            && kept.stderr.contains(" down` removes it"),
        "{}",
        kept.stderr
    );
    let nodes = kind_nodes(&stack);
    assert!(
        nodes.contains(&format!("{cluster}-control-plane")),
        "the failed create's nodes are kept: {nodes:?}\n{}",
        kept.stderr
    );

    let down = stack.run(&profile, &["down"]);
    assert_eq!(down.code, 0, "{}", down.all());
    assert_eq!(kind_nodes(&stack), Vec::<String>::new(), "{}", down.stderr);
    assert_eq!(stack.leftovers(), Vec::<String>::new(), "{}", down.stderr);
    drop(taken);
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
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
    let check = doctor_check(&report, "kind");
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        check["hint"]
            .as_str()
            .unwrap()
            .contains("go install sigs.k8s.io/kind@"),
        "{check}"
    );
}
