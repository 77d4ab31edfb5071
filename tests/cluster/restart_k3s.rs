//! Cluster tier: a stack survives restarts. Every container of a running
//! ci-profile stack is restarted (`docker restart`: community LocalStack
//! comes back empty, the K3s node reboots every pod), then stopped (what a
//! Docker daemon restart leaves, their restart policy being `no`); each
//! time one `up` brings the stack back to a verified round trip, lists what
//! it repaired, and `verify` passes afterwards. How fast is the bench's
//! business ("up after restart" in bench/run.sh), not a test's.

use crate::common::*;

fn ci_profile(stack: &TestStack) -> std::path::PathBuf {
    profile::ci(&stack.name)
        .secrets("  - name: app/restart\n    value: kept-across-restarts\n    sync: {namespace: default}\n")
        .write(&stack.dir.path().join("profile.yaml"))
}

fn repaired(report: &serde_json::Value) -> Vec<String> {
    report["repaired"]
        .as_array()
        .unwrap_or_else(|| panic!("no repaired list: {report}"))
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect()
}

/// `up` after the stack's containers went through `disrupt`: verified, with
/// the repairs in `--json` and on stderr; then `verify` on its own passes.
fn up_repairs(
    stack: &TestStack,
    profile: &std::path::Path,
    what: &str,
) -> (Vec<String>, serde_json::Value) {
    let run = stack.run(profile, &["up", "--json"]);
    let report = run.ok().json();
    assert_eq!(report["created"], false, "{what}: {report}");
    assert_eq!(report["verify"]["passed"], true, "{what}: {report}");
    let repairs = repaired(&report);
    for repair in &repairs {
        assert!(
            run.stderr.contains(&format!("repaired: {repair}")),
            "{what}: `{repair}` is not shown to the user:\n{}",
            run.stderr
        );
    }
    let verify = stack.run(profile, &["verify", "--json"]);
    assert_eq!(verify.ok().json()["passed"], true, "{what}");
    let status = stack.run(profile, &["status"]);
    assert_eq!(status.code, 0, "{what}: {}", status.all());
    (repairs, report)
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn up_repairs_a_stack_whose_containers_were_restarted_or_stopped() {
    if !require_cluster_kit() {
        return;
    }
    let stack = TestStack::new("restart");
    let profile = ci_profile(&stack);
    let first = stack.run(&profile, &["up", "--json"]);
    assert_eq!(first.ok().json()["created"], true);
    let containers = stack.containers();
    assert_eq!(
        containers.len(),
        2,
        "a K3s node and LocalStack: {containers:?}"
    );

    // Every container restarted: LocalStack comes back without the seeded
    // secrets and the GitOps bucket; the node restarts every pod.
    let mut args = vec!["restart", "-t", "5"];
    args.extend(containers.iter().map(String::as_str));
    let restarted = std::time::SystemTime::now();
    assert!(docker(&args).status.success());
    let (repairs, report) = up_repairs(&stack, &profile, "after docker restart");
    // The node kept flannel's subnet file: no pod waited out the kubelet's
    // retry for want of it.
    assert_eq!(
        sandbox_failures_without_flannel_subnet(&stack, restarted),
        Vec::<String>::new()
    );
    let localstack = repairs
        .iter()
        .find(|r| r.starts_with("LocalStack restarted and lost its state"))
        .unwrap_or_else(|| panic!("no LocalStack repair: {repairs:?}"));
    // Both profile secrets (ci's generated token and the literal above).
    assert!(localstack.contains("re-seeded 2 secret(s)"), "{localstack}");
    assert!(
        localstack.contains("re-published the GitOps source"),
        "{localstack}"
    );
    assert_eq!(report["seed"]["created"], 2, "{report}");

    // A Docker daemon restart leaves them stopped (restart policy `no`).
    let mut args = vec!["stop", "-t", "5"];
    args.extend(containers.iter().map(String::as_str));
    assert!(docker(&args).status.success());
    let (repairs, _) = up_repairs(&stack, &profile, "after docker stop");
    let node = format!("devstack-{}-server-0", stack.name);
    assert!(
        repairs.contains(&format!("started stopped node {node}")),
        "{repairs:?}"
    );
    assert!(
        repairs
            .iter()
            .any(|r| r.starts_with("LocalStack was stopped: restarted it")
                && r.contains("re-seeded 2 secret(s)")
                && r.contains("re-published the GitOps source")),
        "{repairs:?}"
    );

    // Nothing left to repair.
    let again = stack.run(&profile, &["up", "--json", "--no-verify"]);
    assert_eq!(repaired(&again.ok().json()), Vec::<String>::new());
    stack.run(&profile, &["down"]).ok();
    assert!(stack.containers().is_empty());
}
