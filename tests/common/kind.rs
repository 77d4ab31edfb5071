//! Kind helpers shared by the cluster-tier tests: the kit's kind CLI and
//! node image, the nodes of a test stack's kind cluster, and a guard that
//! deletes that cluster (never another) when a test ends.

use std::path::{Path, PathBuf};

use super::*;

/// The bundle's kind CLI, when the kit built the Kind pieces; otherwise the
/// test prints why it skips (and fails where the cluster tier is required:
/// the kit that CI built always has them).
pub fn kind_kit(test: &str) -> Option<PathBuf> {
    if !require_docker() {
        return None;
    }
    let index = bundle_dir().join("index.json");
    let skip = |why: String| {
        assert!(
            std::env::var_os("DEVSTACK_TEST_REQUIRE_CLUSTER").is_none(),
            "{test}: {why}"
        );
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
            "the bundle at {} has no kind CLI or kind-node image (kit/components/kind.sh)",
            bundle_dir().display()
        )),
    }
}

/// `kind create cluster` with the kit's CLI and the default node image, its
/// kubeconfig in `kubeconfig`: a cluster made outside devstack, whose
/// context is `kind-<name>`.
pub fn create_kind_cluster(kind: &Path, name: &str, kubeconfig: &Path) {
    let out = std::process::Command::new(kind)
        .args(["create", "cluster", "--name", name, "--image"])
        .arg(devstack::versions::KIND_NODE_IMAGE)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--wait", "3m"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kind create cluster:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn kind_cluster(stack: &TestStack) -> String {
    format!("devstack-{}", stack.name)
}

/// Node containers of the stack's kind cluster, by kind's label.
pub fn kind_nodes(stack: &TestStack) -> Vec<String> {
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
pub struct KindGuard {
    pub kind: PathBuf,
    pub cluster: String,
}

impl KindGuard {
    pub fn new(kind: PathBuf, stack: &TestStack) -> Self {
        KindGuard {
            kind,
            cluster: kind_cluster(stack),
        }
    }
}

impl Drop for KindGuard {
    fn drop(&mut self) {
        if std::env::var_os("DEVSTACK_TEST_KEEP").is_some() {
            eprintln!("keeping kind cluster {} (DEVSTACK_TEST_KEEP)", self.cluster);
            return;
        }
        let filter = format!("label=io.x-k8s.kind.cluster={}", self.cluster);
        let nodes = docker_lines(&["ps", "-aq", "--no-trunc", "--filter", &filter]);
        if nodes.is_empty() {
            return;
        }
        // A node with a frozen process in it cannot be removed (the test
        // that freezes one checks that `down` copes): thawed from the host
        // when the test runs as root with cgroup v1 and the cgroupfs driver.
        for id in &nodes {
            thaw_below(&Path::new("/sys/fs/cgroup/freezer/docker").join(id));
        }
        let scratch = tempfile::tempdir().unwrap();
        let _ = std::process::Command::new(&self.kind)
            .args(["delete", "cluster", "--name", &self.cluster, "--kubeconfig"])
            .arg(scratch.path().join("kubeconfig"))
            .output();
    }
}

fn thaw_below(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let state = dir.join("freezer.state");
    if std::fs::read_to_string(&state).is_ok_and(|s| s.trim() != "THAWED") {
        let _ = std::fs::write(&state, "THAWED");
    }
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            thaw_below(&entry.path());
        }
    }
}
