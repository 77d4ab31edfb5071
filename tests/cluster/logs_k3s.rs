//! Cluster tier: `devstack logs` of ESO, Flux and the node, followed and
//! ended by Ctrl-C, and `devstack kubeconfig`, on a K3s stack from the kit.

use std::io::BufRead;
use std::time::Duration;

use crate::common::*;

/// The sources a labelled output names, from `source | line` lines.
fn labels(stdout: &str) -> std::collections::BTreeSet<String> {
    stdout
        .lines()
        .filter_map(|l| l.split_once(" | "))
        .map(|(label, _)| label.trim().to_string())
        .collect()
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn logs_of_each_component_and_the_kubeconfig_of_a_running_stack() {
    if !require_cluster_kit() {
        return;
    }
    let stack = TestStack::new("logs");
    let profile = profile::ci(&stack.name).write(&stack.dir.path().join("profile.yaml"));
    stack.run(&profile, &["up", "--no-verify"]).ok();

    let path = stack.run(&profile, &["kubeconfig", "--path"]);
    let path = path.ok().stdout.trim().to_string();
    assert_eq!(
        std::path::PathBuf::from(&path),
        stack
            .dir
            .path()
            .join("state/stacks")
            .join(&stack.name)
            .join("kubeconfig")
    );
    let printed = stack.run(&profile, &["kubeconfig"]);
    assert_eq!(printed.ok().stdout, std::fs::read_to_string(&path).unwrap());
    assert!(printed.stdout.contains(&format!("devstack-{}", stack.name)));
    // `cluster up` points at it with the flags that reach this stack.
    let cluster = stack.run(&profile, &["cluster", "up"]);
    assert!(
        cluster
            .ok()
            .stderr
            .contains(&format!("-p {} kubeconfig --path)\"", profile.display())),
        "{}",
        cluster.stderr
    );

    let eso = stack.run(&profile, &["logs", "eso", "--tail", "20"]);
    assert_eq!(
        labels(&eso.ok().stdout),
        ["eso/cert-controller", "eso/controller", "eso/webhook"]
            .map(String::from)
            .into(),
        "{}",
        eso.stdout
    );
    let flux = stack.run(&profile, &["logs", "flux", "--since", "1h"]);
    assert_eq!(
        labels(&flux.ok().stdout),
        [
            "flux/helm-controller",
            "flux/kustomize-controller",
            "flux/source-controller"
        ]
        .map(String::from)
        .into(),
        "{}",
        flux.stdout
    );
    // One node: its lines bare.
    let node = stack.run(&profile, &["logs", "node", "--tail", "5"]);
    assert!(!node.ok().stdout.trim().is_empty());
    assert!(labels(&node.stdout).is_empty(), "{}", node.stdout);

    // Every component, followed: each source's tail, then Ctrl-C ends it.
    let mut child = stack.spawn(&profile, &["logs", "-f", "--tail", "1"]);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    let mut seen = std::collections::BTreeSet::new();
    while !(seen.contains("localstack")
        && seen.contains("eso/webhook")
        && seen.contains("node/server-0"))
    {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no line of every source; seen {seen:?}"));
        seen.extend(labels(&line));
    }
    // SAFETY: signalling the child this test spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    reader.join().unwrap();
    assert_eq!(status.code(), Some(0), "Ctrl-C ends a followed log");

    stack.run(&profile, &["down"]).ok();
    let gone = stack.run(&profile, &["kubeconfig"]);
    assert_eq!(gone.code, 4, "{}", gone.all());
    assert!(gone.stderr.contains("hint:"), "{}", gone.stderr);
}
