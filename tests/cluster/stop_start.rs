//! Cluster tier: `devstack stop` and `start`, one body for K3s and Kind. A
//! verified stack is stopped (no container of it runs; `status` and `list`
//! say `stopped`; stopping it again changes nothing; a `stop` while an `up`
//! works on the stack is refused and stops nothing), then started back to a
//! verified round trip; its containers stopped by hand, as a machine restart
//! leaves them, are started the same way; with its nodes removed by hand,
//! `start` refuses and starts or creates nothing; `down` leaves nothing. How
//! fast is the bench's business (bench/stopstart.sh), not a test's.

use std::path::Path;
use std::time::Instant;

use crate::common::*;
use crate::providers::Provider;

/// The stack's containers that run: its labelled ones and its Kind nodes.
fn running(provider: &Provider, stack: &TestStack) -> Vec<String> {
    let mut names = docker_lines(&[
        "ps",
        "--format",
        "{{.Names}}",
        "--filter",
        &format!("label=dev.devstack.stack={}", stack.name),
    ]);
    if matches!(provider, Provider::Kind(_)) {
        names.extend(docker_lines(&[
            "ps",
            "--format",
            "{{.Names}}",
            "--filter",
            &format!("label=io.x-k8s.kind.cluster=devstack-{}", stack.name),
        ]));
    }
    names.sort();
    names
}

/// `status` and `list` say the stack is stopped, and `status` names `start`.
#[track_caller]
fn says_stopped(stack: &TestStack, profile: &Path, what: &str) {
    let status = stack.run(profile, &["status", "--json"]);
    assert_eq!(status.code, 4, "{what}: {}", status.all());
    let report = status.json();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows[0]["component"], "cluster", "{what}: {report}");
    assert!(
        rows.iter().all(|r| r["state"] == "stopped"),
        "{what}: {report}"
    );
    assert!(
        status.stderr.contains(&format!(
            "{} starts it again",
            quoted_command(profile, "start")
        )),
        "{what}: {}",
        status.stderr
    );
    let list = stack.run(profile, &["list", "--json"]);
    let stacks = list.ok().json()["stacks"].clone();
    let listed = stacks
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == stack.name.as_str())
        .unwrap_or_else(|| panic!("{what}: not listed: {stacks}"));
    assert_eq!(listed["state"], "stopped", "{what}: {listed}");
}

/// `start` brings the stack back to a verified round trip, starting every
/// node again and saying so.
#[track_caller]
fn starts_verified(stack: &TestStack, profile: &Path, nodes: &[String], what: &str) {
    let started = Instant::now();
    let start = stack.run(profile, &["start", "--json"]);
    eprintln!("{what}: start took {:?}", started.elapsed());
    let report = start.ok().json();
    assert_eq!(report["created"], false, "{what}: {report}");
    assert_eq!(report["verify"]["passed"], true, "{what}: {report}");
    let repaired = report["repaired"].to_string();
    for node in nodes {
        assert!(
            repaired.contains(&format!("started stopped node {node}")),
            "{what}: {node}: {repaired}"
        );
    }
    assert!(
        start.stderr.contains("is up (started)"),
        "{what}: {}",
        start.stderr
    );
    let status = stack.run(profile, &["status"]);
    assert_eq!(status.code, 0, "{what}: {}", status.all());
}

/// A `stop` while an `up` holds the stack is refused at once, naming that
/// run, and stops nothing; the `up` ends as it would have.
fn stop_during_up_is_refused(provider: &Provider, stack: &TestStack, profile: &Path) {
    use std::io::BufRead;
    let before = running(provider, stack);
    let mut up = stack.spawn(profile, &["up", "--no-verify"]);
    let pid = up.id();
    let mut lines = std::io::BufReader::new(up.stderr.take().unwrap()).lines();
    // The run prints its first step once it holds the stack's lock.
    let held = lines
        .by_ref()
        .map(Result::unwrap)
        .any(|line| line.contains("Preflight"));
    assert!(held, "`up` never reached its first step");
    let stop = stack.run(profile, &["stop"]);
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let status = up.wait().unwrap();
    assert!(status.success(), "{}", rest.join("\n"));
    assert_eq!(stop.code, 3, "{}", stop.all());
    assert!(
        stop.stderr.contains(&format!(
            "stack `{}` is busy: {}, pid {pid} is working on it",
            stack.name,
            quoted_command(profile, "up")
        )),
        "{}",
        stop.stderr
    );
    assert!(stop.stderr.contains("hint: "), "{}", stop.stderr);
    assert_eq!(running(provider, stack), before, "nothing was stopped");
}

fn stop_and_start(provider: Provider, agents: u8) {
    let stack = TestStack::new(&format!("stop-{}", provider.name()));
    let _kind = provider.guard(&stack);
    let profile = provider.profile(&stack, agents, "");
    let up = stack.run(&profile, &["up", "--json"]);
    assert_eq!(up.ok().json()["created"], true);
    let nodes = provider.node_containers(&stack);
    assert_eq!(nodes.len(), usize::from(agents) + 1, "{nodes:?}");
    let mut all = nodes.clone();
    all.push(format!("devstack-{}-localstack", stack.name));
    all.sort();
    assert_eq!(running(&provider, &stack), all);

    stop_during_up_is_refused(&provider, &stack, &profile);

    let started = Instant::now();
    let stop = stack.run(&profile, &["stop", "--json"]);
    eprintln!("{}: stop took {:?}", provider.name(), started.elapsed());
    let mut stopped: Vec<String> = stop.ok().json()["stopped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    stopped.sort();
    assert_eq!(stopped, all);
    assert_eq!(running(&provider, &stack), Vec::<String>::new());
    says_stopped(&stack, &profile, "after stop");
    let again = stack.run(&profile, &["stop"]);
    assert!(
        again.ok().stderr.contains("was stopped already"),
        "{}",
        again.stderr
    );
    starts_verified(&stack, &profile, &nodes, "after stop");

    // A machine restart: the containers exited, not by devstack.
    let mut args = vec!["stop", "-t", "2"];
    args.extend(all.iter().map(String::as_str));
    assert!(docker(&args).status.success());
    says_stopped(&stack, &profile, "after docker stop");
    starts_verified(&stack, &profile, &nodes, "after docker stop");

    // The nodes removed by hand: `start` refuses, and starts LocalStack no
    // more than it creates a cluster.
    stack.run(&profile, &["stop"]).ok();
    let mut args = vec!["rm", "-f", "-v"];
    args.extend(nodes.iter().map(String::as_str));
    assert!(docker(&args).status.success());
    let before = stack.leftovers();
    let start = stack.run(&profile, &["start"]);
    assert_eq!(start.code, 4, "{}", start.all());
    assert!(
        start
            .stderr
            .contains("its containers were removed outside devstack"),
        "{}",
        start.stderr
    );
    assert!(
        start.stderr.contains(&quoted_command(&profile, "up")),
        "{}",
        start.stderr
    );
    assert_eq!(stack.leftovers(), before, "{}", start.stderr);
    assert_eq!(running(&provider, &stack), Vec::<String>::new());
    assert_eq!(provider.node_containers(&stack), Vec::<String>::new());

    stack.run(&profile, &["down"]).ok();
    assert_eq!(stack.leftovers(), Vec::<String>::new());
    assert_eq!(provider.node_containers(&stack), Vec::<String>::new());
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn k3s_stop_and_start() {
    if let Some(provider) = Provider::k3s() {
        stop_and_start(provider, 0);
    }
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn kind_stop_and_start_with_a_worker() {
    if let Some(provider) = Provider::kind("kind_stop_and_start_with_a_worker") {
        stop_and_start(provider, 1);
    }
}
