//! Kind provider end to end. Runs only where a working `kind` CLI and the
//! profile's node image exist (no registry is reachable on the build
//! machines, so kindest/node cannot be pulled there); otherwise it says so.

mod common;

use common::*;

fn kind_available() -> Option<String> {
    let kind = which::which("kind").ok()?;
    let works = std::process::Command::new(kind)
        .arg("version")
        .output()
        .ok()?
        .status
        .success();
    let image = devstack::versions::KIND_NODE_IMAGE;
    let has_image = docker(&["image", "inspect", image]).status.success();
    (works && has_image).then(|| image.to_string())
}

#[test]
fn kind_cluster_end_to_end_or_skipped_loudly() {
    if !require_docker() {
        return;
    }
    let Some(image) = kind_available() else {
        eprintln!(
            "SKIPPED: the Kind end-to-end test needs the `kind` CLI and the {} image on this machine",
            devstack::versions::KIND_NODE_IMAGE
        );
        return;
    };
    let stack = TestStack::new("kind");
    let profile = stack.profile(&format!(
        "cluster:\n  provider: kind\n  image: {image}\n  kubeconfig: {{merge: false}}\n"
    ));
    stack.run(&profile, &["localstack", "up"]).ok();
    let up = stack.run(&profile, &["cluster", "up", "--json"]);
    let report = up.ok().json();
    assert_eq!(report["cluster"]["created"], true, "{report}");
    assert_eq!(report["localstackRouted"], true, "{report}");
    let again = stack.run(&profile, &["cluster", "up", "--json"]);
    assert_eq!(again.ok().json()["cluster"]["created"], false);
    stack.run(&profile, &["cluster", "down"]).ok();
    stack.run(&profile, &["localstack", "down"]).ok();
    let kind_nodes = docker_lines(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=io.x-k8s.kind.cluster=devstack-{}", stack.name),
    ]);
    assert!(kind_nodes.is_empty(), "kind nodes left: {kind_nodes:?}");
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
    // hides only the kind CLI.
    let run = stack.run_env(
        &profile,
        &["cluster", "up"],
        &[("PATH", empty.path().to_str().unwrap())],
    );
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr.contains("`kind` not found on PATH"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("hint:") && run.stderr.contains("--provider k3s"),
        "{}",
        run.stderr
    );
    assert!(stack.containers().is_empty());
}
