//! Cluster tier: one test body, two providers. The cluster's shape drifting
//! from the profile (node count, node image, stopped nodes) and signals while
//! the cluster is created run on K3s and on Kind alike; only what each
//! provider can change in place differs, and the provider says so.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::kind::{KindGuard, kind_kit, kind_nodes};
use crate::common::*;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

/// What differs between the providers, as far as these tests care.
pub(crate) enum Provider {
    K3s,
    Kind(PathBuf),
}

impl Provider {
    pub(crate) fn k3s() -> Option<Provider> {
        require_cluster_kit().then_some(Provider::K3s)
    }

    pub(crate) fn kind(test: &str) -> Option<Provider> {
        kind_kit(test).map(Provider::Kind)
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Provider::K3s => "k3s",
            Provider::Kind(_) => "kind",
        }
    }

    fn default_image(&self) -> &'static str {
        match self {
            Provider::K3s => devstack::versions::K3S_IMAGE,
            Provider::Kind(_) => devstack::versions::KIND_NODE_IMAGE,
        }
    }

    /// K3s adds and removes agents in a running cluster; kind fixes a
    /// cluster's nodes when it creates it.
    fn scales_in_place(&self) -> bool {
        matches!(self, Provider::K3s)
    }

    /// A profile for `stack` on this provider with `agents` worker nodes and
    /// `extra` cluster keys (indented under `cluster:`).
    pub(crate) fn profile(&self, stack: &TestStack, agents: u8, extra: &str) -> PathBuf {
        stack.profile(&format!(
            "cluster:\n  provider: {}\n  agents: {agents}\n  kubeconfig: {{merge: false}}\n{extra}images:\n  bundle: {}\n",
            self.name(),
            bundle_dir().display()
        ))
    }

    /// The stack's node containers, running or not.
    pub(crate) fn node_containers(&self, stack: &TestStack) -> Vec<String> {
        match self {
            Provider::Kind(_) => kind_nodes(stack),
            Provider::K3s => docker_lines(&[
                "ps",
                "-a",
                "--format",
                "{{.Names}}",
                "--filter",
                &format!("label=dev.devstack.stack={}", stack.name),
            ])
            .into_iter()
            .filter(|n| n.contains("-server-") || n.contains("-agent-"))
            .collect(),
        }
    }

    /// Deletes a kind cluster the test leaves behind; K3s nodes carry
    /// devstack's labels, so `TestStack` already removes them.
    pub(crate) fn guard(&self, stack: &TestStack) -> Option<KindGuard> {
        match self {
            Provider::Kind(kind) => Some(KindGuard::new(kind.clone(), stack)),
            Provider::K3s => None,
        }
    }
}

/// Node names the API server lists.
fn kube_nodes(rt: &tokio::runtime::Runtime, stack: &TestStack) -> Vec<String> {
    let client = kube_client(rt, stack);
    let list = rt
        .block_on(Api::<Node>::all(client).list(&ListParams::default()))
        .unwrap();
    let mut names: Vec<String> = list
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    names
}

/// `up` refuses a change only a recreate applies, naming it, with the
/// command that applies it (its flags included), before anything starts.
fn refused_with_the_recreate_hint(stack: &TestStack, profile: &std::path::Path, change: &str) {
    let before = stack.containers();
    let refused = stack.run(profile, &["up", "--no-verify"]);
    assert_eq!(refused.code, 2, "{}", refused.all());
    assert!(
        refused.stderr.contains(change),
        "{change}: {}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("`devstack -p ") && refused.stderr.contains(" up --recreate`"),
        "the hint names the command with its flags: {}",
        refused.stderr
    );
    assert_eq!(
        stack.containers(),
        before,
        "nothing was started before the refusal"
    );
}

/// `cluster up` converges a cluster whose shape drifted from the profile:
/// a node count the provider can change in place is applied, one it cannot
/// is refused before anything happens with the `--recreate` hint; stopped
/// nodes are started; a new node image always needs `--recreate`, which
/// applies it.
fn shape_drift_is_applied_or_refused_with_the_fix(provider: Provider) {
    let stack = TestStack::new(&format!("shape-{}", provider.name()));
    let _kind = provider.guard(&stack);
    let rt = runtime();

    stack
        .run(&provider.profile(&stack, 0, ""), &["cluster", "up"])
        .ok();
    assert_eq!(kube_nodes(&rt, &stack).len(), 1);

    // One node more.
    let profile = provider.profile(&stack, 1, "");
    if provider.scales_in_place() {
        let up = stack.run(&profile, &["cluster", "up", "--json"]);
        up.ok();
        assert!(up.all().contains("added agent node"), "{}", up.all());
    } else {
        refused_with_the_recreate_hint(&stack, &profile, "agents 0 -> 1");
        assert_eq!(
            provider.node_containers(&stack).len(),
            1,
            "nothing changed before the refusal"
        );
        stack.run(&profile, &["cluster", "up", "--recreate"]).ok();
    }
    let names = kube_nodes(&rt, &stack);
    assert_eq!(names.len(), 2, "{names:?}");

    // Back to one node where that is cheap (in place); kind keeps two, which
    // the rest of the test is as happy with.
    let agents = if provider.scales_in_place() {
        let profile = provider.profile(&stack, 0, "");
        let up = stack.run(&profile, &["cluster", "up", "--json"]);
        up.ok();
        assert!(up.all().contains("removed agent node"), "{}", up.all());
        assert_eq!(
            kube_nodes(&rt, &stack).len(),
            1,
            "the agent's Node object is gone too"
        );
        0
    } else {
        1
    };
    let nodes = provider.node_containers(&stack);
    assert_eq!(nodes.len(), usize::from(agents) + 1, "{nodes:?}");

    // Every node stopped, as after a reboot: `cluster up` starts them and
    // says so.
    for node in &nodes {
        assert!(docker(&["stop", "-t", "2", node]).status.success());
    }
    let profile = provider.profile(&stack, agents, "");
    let restarted = stack.run(&profile, &["cluster", "up"]);
    restarted.ok();
    for node in &nodes {
        assert!(
            restarted
                .all()
                .contains(&format!("repaired: started stopped node {node}")),
            "{node}: {}",
            restarted.all()
        );
    }
    assert_eq!(kube_nodes(&rt, &stack).len(), nodes.len());

    // The same image under another name is, to devstack, another image.
    let image = provider.default_image();
    let retagged = format!("devstack-test/{}-node:{}", provider.name(), stack.name);
    assert!(docker(&["tag", image, &retagged]).status.success());
    struct Untag(String);
    impl Drop for Untag {
        fn drop(&mut self) {
            let _ = docker(&["rmi", &self.0]);
        }
    }
    let _untag = Untag(retagged.clone());
    let profile = provider.profile(&stack, agents, &format!("  image: {retagged}\n"));
    refused_with_the_recreate_hint(&stack, &profile, &format!("image {image} -> {retagged}"));
    stack.run(&profile, &["cluster", "up", "--recreate"]).ok();
    let nodes = provider.node_containers(&stack);
    assert_eq!(nodes.len(), usize::from(agents) + 1, "{nodes:?}");
    for node in &nodes {
        let running = docker(&["inspect", "-f", "{{.Config.Image}}", node]);
        assert_eq!(
            String::from_utf8_lossy(&running.stdout).trim(),
            retagged,
            "{node}"
        );
    }
    assert_eq!(kube_nodes(&rt, &stack).len(), nodes.len());

    stack.run(&profile, &["cluster", "down"]).ok();
    assert!(
        provider.node_containers(&stack).is_empty(),
        "{:?}",
        provider.node_containers(&stack)
    );
    assert!(stack.containers().is_empty(), "{:?}", stack.containers());
}

/// Signals while the cluster is being created, by `up` (SIGTERM: exit 143)
/// and by `cluster up` (Ctrl-C: 130); on K3s also while `up` installs Flux
/// (SIGHUP: 129) and while it applies the External Secrets chain (SIGTERM,
/// then Ctrl-C during the rollback, which says it is finishing and does).
/// Every run rolls back, leaving no node, no devstack container, network or
/// volume and no state directory, and the next run creates the cluster anew.
fn interrupted_runs_roll_back(provider: Provider) {
    let stack = TestStack::new(&format!("sig-{}", provider.name()));
    let _kind = provider.guard(&stack);
    let profile = provider.profile(&stack, 1, "");
    for (command, signal) in [
        (&["up"][..], libc::SIGTERM),
        (&["cluster", "up"][..], libc::SIGINT),
    ] {
        let child = stack.spawn(&profile, command);
        // Until every node container exists: the provider is mid-create then.
        let deadline = Instant::now() + Duration::from_secs(60);
        while provider.node_containers(&stack).len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(
            provider.node_containers(&stack).len(),
            2,
            "{command:?}: the nodes were never created"
        );
        std::thread::sleep(Duration::from_secs(3));
        // SAFETY: signalling the child this test spawned.
        unsafe {
            libc::kill(child.id() as i32, signal);
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(128 + signal),
            "{command:?}: {stderr}"
        );
        assert!(stderr.contains("rolled back"), "{command:?}: {stderr}");
        assert_nothing_left(&provider, &stack, &format!("{command:?}"), &stderr);
    }
    if !matches!(provider, Provider::K3s) {
        return;
    }
    let stderr = signal_up_at(&stack, &profile, "• Flux ", libc::SIGHUP, None);
    assert!(
        stderr.contains("): created, 2 node(s)"),
        "the run after an interrupted one starts clean: {stderr}"
    );
    assert!(stderr.contains("error: SIGHUP: "), "{stderr}");
    assert_nothing_left(&provider, &stack, "up at Flux", &stderr);
    let stderr = signal_up_at(
        &stack,
        &profile,
        "• External Secrets chain",
        libc::SIGTERM,
        Some(libc::SIGINT),
    );
    assert!(
        stderr
            .contains("SIGINT ignored: finishing the rollback so that nothing is left; removing "),
        "{stderr}"
    );
    assert!(stderr.contains("error: SIGTERM: rolled back"), "{stderr}");
    assert_nothing_left(&provider, &stack, "up at the ESO chain", &stderr);
}

/// Runs `up`, sends `signal` when a line of its progress contains `at` and
/// `again` when its rollback starts; checks its exit code (128 + `signal`)
/// and returns its stderr.
fn signal_up_at(
    stack: &TestStack,
    profile: &std::path::Path,
    at: &str,
    signal: i32,
    again: Option<i32>,
) -> String {
    use std::io::BufRead;
    let mut child = stack.spawn(profile, &["up"]);
    let pid = child.id() as i32;
    let stderr = child.stderr.take().unwrap();
    let (mut seen, mut sent) = (Vec::new(), false);
    for line in std::io::BufReader::new(stderr).lines() {
        let line = line.unwrap();
        let send = if !sent && line.contains(at) {
            sent = true;
            Some(signal)
        } else if sent && line.contains("• Rolling back") {
            again
        } else {
            None
        };
        if let Some(send) = send {
            // SAFETY: signalling the child this test spawned.
            unsafe {
                libc::kill(pid, send);
            }
        }
        seen.push(line);
    }
    let status = child.wait().unwrap();
    let stderr = seen.join("\n");
    assert!(sent, "`up` never printed `{at}`: {stderr}");
    assert_eq!(status.code(), Some(128 + signal), "{stderr}");
    stderr
}

#[track_caller]
fn assert_nothing_left(provider: &Provider, stack: &TestStack, what: &str, stderr: &str) {
    assert_eq!(
        provider.node_containers(stack),
        Vec::<String>::new(),
        "{what} left nodes: {stderr}"
    );
    assert_eq!(
        stack.leftovers(),
        Vec::<String>::new(),
        "{what} left: {stderr}"
    );
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn k3s_shape_drift_is_applied_or_refused_with_the_fix() {
    if let Some(provider) = Provider::k3s() {
        shape_drift_is_applied_or_refused_with_the_fix(provider);
    }
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn kind_shape_drift_is_applied_or_refused_with_the_fix() {
    if let Some(provider) = Provider::kind("kind_shape_drift_is_applied_or_refused_with_the_fix") {
        shape_drift_is_applied_or_refused_with_the_fix(provider);
    }
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn k3s_interrupted_runs_roll_back() {
    if let Some(provider) = Provider::k3s() {
        interrupted_runs_roll_back(provider);
    }
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn kind_interrupted_runs_roll_back() {
    if let Some(provider) = Provider::kind("kind_interrupted_runs_roll_back") {
        interrupted_runs_roll_back(provider);
    }
}
