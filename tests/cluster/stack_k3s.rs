//! Cluster tier: the main job. `up` -> `verify` -> `status` -> `down` on the
//! ci profile with the kit's images, converge and drift repair, Ctrl-C at
//! several steps, two stacks side by side (the second through the library
//! API), and no secret value in any output.

use std::time::{Duration, Instant};

use crate::common::*;

/// A literal secret whose value must never be printed.
const SECRET_VALUE: &str = "s3cr3t-never-printed-7c1f";

fn ci_profile(stack: &TestStack) -> std::path::PathBuf {
    profile::ci(&stack.name)
        .secrets(&format!(
            "  - name: app/literal\n    value: {SECRET_VALUE}\n    sync: {{namespace: default}}\n"
        ))
        .write(&stack.dir.path().join("profile.yaml"))
}

#[track_caller]
fn assert_no_secret(run: &Run) {
    assert!(
        !run.all().contains(SECRET_VALUE),
        "a secret value was printed:\n{}",
        run.all()
    );
}

fn repaired(report: &serde_json::Value) -> String {
    serde_json::to_string(&report["repaired"]).unwrap()
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn up_verify_status_down_with_drift_repair() {
    if !require_cluster_kit() {
        return;
    }
    let stack = TestStack::new("main");
    let profile = ci_profile(&stack);

    let up = stack.run(&profile, &["up", "--json", "-v"]);
    assert_no_secret(&up);
    let report = up.ok().json();
    assert_eq!(report["created"], true, "{report}");
    assert_eq!(report["verify"]["passed"], true, "{report}");
    // A chain applied for the first time: the round trip waits for it.
    assert_eq!(report["verifiedBesideChain"], false, "{report}");
    assert_eq!(
        report["gitops"]["chain"]["failures"]
            .as_array()
            .unwrap()
            .len(),
        0,
        "{report}"
    );
    assert!(up.stderr.contains("next:"), "{}", up.stderr);
    // New nodes get their images while they boot, and only then: no second
    // pass over every node before Flux.
    let spans: Vec<&str> = report["timings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(
        spans.contains(&"images imported while the nodes boot"),
        "{spans:?}"
    );
    assert!(!spans.contains(&"image loads"), "{spans:?}");
    // The Cluster step's waterfall: K3s runs its control plane and flannel
    // in one process, so its own pods are CoreDNS; and the node's Ready.
    crate::cluster_kind::assert_cluster_step_parts(
        &report,
        &[
            "pod coredns-",
            &format!("node devstack-{}-server-0 registered -> Ready", stack.name),
        ],
    );
    // The chain's step ends with the store ESO has accepted, not only applied.
    assert!(
        spans.contains(&"ClusterSecretStore localstack Ready"),
        "{spans:?}"
    );
    crate::common::assert_webhook_certificate_issued_by_devstack(&stack);
    crate::common::assert_kube_proxy_min_sync_period(
        &format!("devstack-{}-server-0", stack.name),
        "0s",
    );
    crate::common::assert_kubelet_leaves_the_host_disk_alone(&format!(
        "devstack-{}-server-0",
        stack.name
    ));
    for step in [
        "Preflight",
        "LocalStack",
        "Cluster",
        "Seeding",
        "External Secrets chain",
    ] {
        assert!(
            up.stderr.contains(step),
            "progress lacks {step}:\n{}",
            up.stderr
        );
    }

    let status = stack.run(&profile, &["status", "--json"]);
    assert_no_secret(&status);
    assert_eq!(status.code, 0, "{}", status.all());
    let text = stack.run(&profile, &["status"]);
    assert!(
        text.stdout.contains("external-secrets-operator"),
        "{}",
        text.stdout
    );

    // A second up on a healthy stack repairs nothing and is quick.
    let started = Instant::now();
    let again = stack.run(&profile, &["up", "--json", "--no-verify"]);
    let warm = started.elapsed();
    let report = again.ok().json();
    assert_eq!(report["created"], false);
    assert_eq!(report["repaired"].as_array().unwrap().len(), 0, "{report}");
    assert_eq!(report["seed"]["unchanged"], 2, "{report}");
    eprintln!("warm up: {warm:?}");

    // Ctrl-C during the round trip of `up` on an existing stack: the probe
    // cleans up after itself before devstack exits.
    interrupted_verify_leaves_no_probe(&stack, &profile);

    // Drift: LocalStack removed.
    let localstack = format!("devstack-{}-localstack", stack.name);
    assert!(docker(&["rm", "-f", "-v", &localstack]).status.success());
    let fixed = stack.run(&profile, &["up", "--json"]);
    assert_no_secret(&fixed);
    let report = fixed.ok().json();
    assert!(
        repaired(&report).contains("LocalStack container was missing"),
        "{report}"
    );
    assert_eq!(report["verify"]["passed"], true, "{report}");

    // Drift: a Kustomization of the chain deleted.
    let rt = runtime();
    let client = kube_client(&rt, &stack);
    rt.block_on(async {
        devstack::gitops::chain::kustomizations(&client)
            .delete("external-secrets-crs", &Default::default())
            .await
            .unwrap();
    });
    let report = stack
        .run(&profile, &["up", "--json", "--no-verify"])
        .ok()
        .json();
    assert!(
        repaired(&report).contains("Kustomization flux-system/external-secrets-crs was missing"),
        "{report}"
    );

    // Drift: the webhook's certificate Secret emptied and its pod
    // restarted. The new pod finds no certificate and sleeps 10 s before it
    // looks again; `up` fills the Secret, puts the CA into the webhooks and
    // replaces that pod, so the round trip passes at once.
    let waiting = webhook_pod_waiting_for_certificate(&stack);
    let report = stack.run(&profile, &["up", "--json"]).ok().json();
    assert_eq!(report["verify"]["passed"], true, "{report}");
    let pods = webhook_pods(&stack);
    assert!(
        !pods.contains(&waiting),
        "webhook pod {waiting} was left in its wait: {pods:?}"
    );
    crate::common::assert_webhook_certificate_issued_by_devstack(&stack);

    // Drift: the node stopped.
    let node = format!("devstack-{}-server-0", stack.name);
    assert!(docker(&["stop", "-t", "2", &node]).status.success());
    let report = stack.run(&profile, &["up", "--json"]).ok().json();
    assert!(
        report["repaired"]
            .as_array()
            .unwrap()
            .contains(&format!("started stopped node {node}").into()),
        "{report}"
    );
    assert_eq!(report["verify"]["passed"], true, "{report}");

    // The push direction too: a PushSecret writes into LocalStack.
    let pushed = stack.run(&profile, &["verify", "--push-secret", "--json"]);
    assert_no_secret(&pushed);
    let report = pushed.ok().json();
    assert_push_verified(&report);

    // verify with LocalStack stopped: a clear failure, fast, with the exit
    // code of a failed check (4, README's table).
    let port = stack.run(&profile, &["status", "--json"]).json()["ports"]["localstack"]
        .as_u64()
        .expect("LocalStack port");
    assert!(docker(&["stop", "-t", "1", &localstack]).status.success());
    let failed = stack.run(&profile, &["verify"]);
    assert_eq!(failed.code, 4, "{}", failed.all());
    assert!(
        failed.stderr.contains(&format!(
            "LocalStack at http://127.0.0.1:{port} is not reachable ("
        )),
        "{}",
        failed.stderr
    );
    assert!(
        failed.stderr.contains(&format!(
            "hint: start it with {} (or the whole stack with {})",
            quoted_command(&profile, "localstack up"),
            quoted_command(&profile, "up")
        )),
        "{}",
        failed.stderr
    );
    let unhealthy = stack.run(&profile, &["status"]);
    assert_eq!(unhealthy.code, 4, "{}", unhealthy.all());

    let down = stack.run(&profile, &["down"]);
    down.ok();
    assert!(stack.containers().is_empty(), "{:?}", stack.containers());
    assert!(stack.networks().is_empty());
    stack.run(&profile, &["down"]).ok();
}

/// Ctrl-C at different points: without --retain nothing is left; with
/// --retain the next `up` completes the stack.
#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn interrupted_up_rolls_back_or_is_retained() {
    if !require_cluster_kit() {
        return;
    }
    let stack = TestStack::new("sigint");
    let profile = ci_profile(&stack);
    for after in [Duration::from_secs(2), Duration::from_secs(15)] {
        let run = interrupt_after(&stack, &profile, &["up"], after);
        assert_eq!(run.code, 130, "interrupt after {after:?}: {}", run.all());
        assert!(run.stderr.contains("rolled back"), "{}", run.stderr);
        assert!(
            stack.containers().is_empty(),
            "interrupt after {after:?} left {:?}",
            stack.containers()
        );
    }
    let run = interrupt_after(
        &stack,
        &profile,
        &["up", "--retain"],
        Duration::from_secs(15),
    );
    assert_eq!(run.code, 130, "{}", run.all());
    assert!(run.stderr.contains("retained"), "{}", run.stderr);
    assert!(
        !stack.containers().is_empty(),
        "--retain keeps the half-created stack"
    );
    let report = stack
        .run(&profile, &["up", "--json", "--no-verify"])
        .ok()
        .json();
    assert_eq!(report["created"], false, "{report}");
    stack.run(&profile, &["down"]).ok();
    assert!(stack.containers().is_empty());
}

fn interrupt_after(
    stack: &TestStack,
    profile: &std::path::Path,
    args: &[&str],
    after: Duration,
) -> Run {
    let child = stack.spawn(profile, args);
    std::thread::sleep(after);
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The library API, and two stacks side by side: one from the CLI, one
/// from `Stack`, each unaffected by the other's `down`.
#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn two_stacks_side_by_side_through_the_library() {
    if !require_cluster_kit() {
        return;
    }
    let first = TestStack::new("side1");
    let first_profile = ci_profile(&first);
    first.run(&first_profile, &["up", "--no-verify"]).ok();

    let second = TestStack::new("side2");
    let second_profile = ci_profile(&second);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // The library reads its state directory from the environment.
        let _home = ScopedEnv::set("DEVSTACK_HOME", second.dir.path().join("state"));
        let stack = devstack::stack::Stack::from_profile(
            Some(second_profile.to_str().unwrap()),
            &Default::default(),
        )
        .unwrap();
        let report = stack.up(Default::default()).await.unwrap();
        assert!(report.created);
        assert!(report.verify.as_ref().is_some_and(|v| v.passed));
        // Both stacks come from one profile (`port: auto`): each got its
        // own LocalStack port, and the library reports the one it chose.
        let port = report.ports.localstack.expect("LocalStack port recorded");
        let env = stack.env();
        assert!(
            env.iter()
                .any(|(k, v)| *k == "AWS_ENDPOINT_URL" && v.ends_with(&format!(":{port}"))),
            "{env:?}"
        );
        let first_port =
            first.run(&first_profile, &["status", "--json"]).json()["ports"]["localstack"]
                .as_u64()
                .expect("status reports the first stack's port");
        assert_ne!(first_port, u64::from(port), "parallel stacks share no port");
        let status = stack.status().await;
        assert!(status.healthy && status.settled, "{status:?}");
        assert!(stack.kube_client().await.is_ok());

        // The other stack is untouched by this one, and still verifies.
        let other = first.run(&first_profile, &["verify", "--json"]);
        assert_eq!(other.ok().json()["passed"], true);

        let down = stack.down().await.unwrap();
        assert!(down.cluster && down.localstack, "{down:?}");
    });
    drop(rt);
    // SAFETY: the runtime and its threads are gone.
    unsafe { std::env::remove_var("DEVSTACK_HOME") };
    assert!(second.containers().is_empty());
    assert!(
        !first.containers().is_empty(),
        "the first stack survives the second's down"
    );
    first.run(&first_profile, &["status"]).ok();
    first.run(&first_profile, &["down"]).ok();
}

fn webhook_pods(stack: &TestStack) -> Vec<String> {
    use k8s_openapi::api::core::v1::Pod;
    let rt = runtime();
    let client = kube_client(&rt, stack);
    let pods = rt
        .block_on(
            kube::Api::<Pod>::namespaced(client, "external-secrets").list(
                &kube::api::ListParams::default()
                    .labels("app.kubernetes.io/name=external-secrets-webhook"),
            ),
        )
        .unwrap();
    pods.items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// Empties the webhook's certificate Secret and deletes its pods; returns
/// the replacement once its log shows it found no certificate.
fn webhook_pod_waiting_for_certificate(stack: &TestStack) -> String {
    use k8s_openapi::api::core::v1::{Pod, Secret};
    use kube::api::{DeleteParams, Patch, PatchParams};
    let rt = runtime();
    let client = kube_client(&rt, stack);
    let pods = kube::Api::<Pod>::namespaced(client.clone(), "external-secrets");
    let before = webhook_pods(stack);
    rt.block_on(async {
        kube::Api::<Secret>::namespaced(client.clone(), "external-secrets")
            .patch(
                "external-secrets-webhook",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"data": null})),
            )
            .await
            .unwrap();
        for pod in &before {
            pods.delete(pod, &DeleteParams::default()).await.unwrap();
        }
    });
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    loop {
        for pod in webhook_pods(stack).iter().filter(|p| !before.contains(p)) {
            let log = rt
                .block_on(pods.logs(pod, &Default::default()))
                .unwrap_or_default();
            if log.contains("invalid certs") {
                return pod.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no new webhook pod waiting for its certificate within 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}
