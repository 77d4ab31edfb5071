//! Cluster tier: `gitops.source: git` against a real git server (git's
//! `http-backend` from the kit's `devstack-kit/gitserver:1`) on the stack's
//! network. `up` from a repository holding the in-cluster layout, a pushed
//! commit delivered by `sync`, a commit that does not build failing `sync`
//! and reported by `status` with Flux's message, and the fixing commit
//! delivered by Flux's own interval, `status --wait` settling on it.

use std::path::Path;

use crate::common::gitserver::{GitServer, WorkTree, gitserver_kit};
use crate::common::*;

const REPO: &str = "platform.git";
/// Where the layout sits in the repository, as a platform repository nests it.
const LAYOUT: &str = "clusters/dev/external-secrets";
/// A ConfigMap the commits after the first add and change.
const PROBE_FILE: &str = "probe.yaml";
/// The interval Flux fetches the repository (and re-applies each level) at:
/// short, so the fixing commit arrives without devstack, yet not so short
/// that `status --wait` must catch a moment between constant re-applies.
const INTERVAL: &str = "1m";

fn probe(commit: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: git-probe\n  namespace: external-secrets\ndata:\n  commit: {commit}\n"
    )
}

/// The root Kustomization's Flux object.
fn root_kustomization(rt: &tokio::runtime::Runtime, client: &kube::Client) -> serde_json::Value {
    get_json(
        rt,
        client,
        "kustomize.toolkit.fluxcd.io/v1",
        "Kustomization",
        Some("flux-system"),
        "devstack",
    )
    .expect("the root Kustomization exists")
}

/// The `data.commit` of the probe ConfigMap, when it exists.
fn probe_commit(rt: &tokio::runtime::Runtime, client: &kube::Client) -> Option<String> {
    get_json(
        rt,
        client,
        "v1",
        "ConfigMap",
        Some("external-secrets"),
        "git-probe",
    )
    .map(|cm| {
        cm["data"]["commit"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    })
}

/// The root Kustomization's row of a `status --json` report.
fn root_row(report: &serde_json::Value) -> serde_json::Value {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["component"] == "kustomization" && r["name"] == "flux-system/devstack")
        .unwrap_or_else(|| panic!("no row of the root Kustomization:\n{report:#}"))
        .clone()
}

/// Flux's revision of commit `sha` on `main`.
fn revision(sha: &str) -> String {
    format!("main@sha1:{sha}")
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn git_source_delivers_pushed_commits_and_reports_one_that_does_not_build() {
    if !require_cluster_kit() || !gitserver_kit() {
        return;
    }
    let stack = TestStack::new("git");
    let server = GitServer::start(&stack);
    let repo = WorkTree::init(&stack.dir.path().join("repo"), &server.host_url(REPO));
    repo.copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/external-secrets"),
        LAYOUT,
    );
    let first = repo.commit_and_push("the External Secrets stack, LocalStack in the cluster");
    let profile = profile::ci(&stack.name)
        .localstack("  mode: in-cluster\n")
        .git_source(&server.cluster_url(REPO), &format!("./{LAYOUT}"), INTERVAL)
        .write(&stack.dir.path().join("profile.yaml"));

    let up = stack.run(&profile, &["up", "--json"]);
    let report = up.ok().json();
    assert_eq!(report["created"], true, "{report}");
    assert_eq!(report["verify"]["passed"], true, "{report}");
    assert_eq!(
        report["gitops"]["source"],
        format!("{} (main)", server.cluster_url(REPO)),
        "{report}"
    );
    // Only Flux fetches (upload-pack); the host only pushes.
    assert!(
        server
            .log()
            .contains(&format!("POST /{REPO}/git-upload-pack 200")),
        "source-controller fetched from the git server:\n{}",
        server.log()
    );
    let rt = runtime();
    let client = kube_client(&rt, &stack);
    let git_repository = get_json(
        &rt,
        &client,
        "source.toolkit.fluxcd.io/v1",
        "GitRepository",
        Some("flux-system"),
        "devstack",
    )
    .expect("the GitRepository exists");
    assert_eq!(
        git_repository["status"]["artifact"]["revision"],
        revision(&first),
        "{git_repository}"
    );
    let root = root_kustomization(&rt, &client);
    assert_eq!(
        root["status"]["lastAppliedRevision"],
        revision(&first),
        "{root}"
    );
    assert_eq!(root["spec"]["path"], format!("./{LAYOUT}"), "{root}");

    a_pushed_commit_reaches_the_cluster_by_sync(&stack, &profile, &repo, &rt, &client);
    let broken = a_commit_that_does_not_build_is_reported(&stack, &profile, &repo);
    the_next_commit_fixes_it_by_flux_interval(&stack, &profile, &repo, &rt, &client, &broken);

    stack.run(&profile, &["down"]).ok();
    assert_eq!(
        stack.containers(),
        docker_lines(&[
            "ps",
            "-aq",
            "--filter",
            &format!("name={}", server.container)
        ]),
        "`down` removes the stack and leaves the git server it did not create alone"
    );
    remove_stack_resources(&stack.name);
    assert!(stack.containers().is_empty(), "{:?}", stack.containers());
    assert!(stack.networks().is_empty(), "{:?}", stack.networks());
}

/// A commit adding a ConfigMap to the layout is in the cluster when `sync`
/// returns.
fn a_pushed_commit_reaches_the_cluster_by_sync(
    stack: &TestStack,
    profile: &Path,
    repo: &WorkTree,
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
) {
    assert_eq!(probe_commit(rt, client), None, "no probe before its commit");
    let root_file = format!("{LAYOUT}/kustomization.yaml");
    let root = repo.read(&root_file);
    repo.write(&root_file, &format!("{root}  - {PROBE_FILE}\n"));
    repo.write(&format!("{LAYOUT}/{PROBE_FILE}"), &probe("second"));
    let second = repo.commit_and_push("a probe ConfigMap");

    let sync = stack.run(profile, &["sync", "--json"]);
    let report = sync.ok().json();
    assert_eq!(
        report["chain"]["failures"].as_array().map(Vec::len),
        Some(0),
        "{report}"
    );
    assert_eq!(probe_commit(rt, client).as_deref(), Some("second"));
    let root = root_kustomization(rt, client);
    assert_eq!(
        root["status"]["lastAppliedRevision"],
        revision(&second),
        "{root}"
    );
}

/// A commit whose root kustomization.yaml names a file the repository does
/// not hold: `sync` fails naming the root Kustomization and Flux's message,
/// and `status` reports it unhealthy (exit 4) with that message. Returns
/// the commit.
fn a_commit_that_does_not_build_is_reported(
    stack: &TestStack,
    profile: &Path,
    repo: &WorkTree,
) -> String {
    let root_file = format!("{LAYOUT}/kustomization.yaml");
    let root = repo.read(&root_file);
    repo.write(&root_file, &format!("{root}  - missing.yaml\n"));
    let broken = repo.commit_and_push("names a file that is not there");

    let sync = stack.run(profile, &["sync"]);
    assert_eq!(sync.code, 2, "{}", sync.all());
    assert!(
        sync.stderr.contains(
            "error: Kustomization flux-system/devstack failed (BuildFailed): kustomize build failed: accumulating resources"
        ),
        "{}",
        sync.stderr
    );
    assert!(
        sync.stderr
            .contains(&format!("{LAYOUT}/missing.yaml: no such file or directory")),
        "{}",
        sync.stderr
    );
    assert!(
        sync.stderr.contains(&format!(
            "hint: fix the manifest and run {}",
            quoted_command(profile, "sync")
        )),
        "{}",
        sync.stderr
    );

    // Flux retries the failed build; a status read during a retry sees it in progress.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (status, row) = loop {
        let status = stack.run(profile, &["status", "--json"]);
        let row = root_row(&status.json());
        if row["state"] != "Progressing" || std::time::Instant::now() > deadline {
            break (status, row);
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    };
    assert_eq!(status.code, 4, "{}", status.all());
    assert_eq!(row["health"], "unhealthy", "{row}");
    assert_eq!(row["state"], "BuildFailed", "{row}");
    let message = row["detail"].as_str().unwrap_or_default();
    assert!(
        message.contains("accumulating resources") && message.contains("missing.yaml"),
        "status shows Flux's message: {row}"
    );
    assert!(
        status.stderr.contains("flux-system/devstack BuildFailed"),
        "{}",
        status.stderr
    );
    broken
}

/// The commit that drops the missing file and changes the probe reaches the
/// cluster by Flux's interval alone: `status --wait` settles on it.
fn the_next_commit_fixes_it_by_flux_interval(
    stack: &TestStack,
    profile: &Path,
    repo: &WorkTree,
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    broken: &str,
) {
    let root_file = format!("{LAYOUT}/kustomization.yaml");
    let root = repo.read(&root_file);
    repo.write(&root_file, &root.replace("  - missing.yaml\n", ""));
    repo.write(&format!("{LAYOUT}/{PROBE_FILE}"), &probe("fixed"));
    let fixed = repo.commit_and_push("drops the missing file");
    assert_ne!(fixed, broken);

    let wait = stack.run(profile, &["status", "--wait", "5m", "--json"]);
    let report = wait.ok().json();
    assert_eq!(report["settled"], true, "{report}");
    assert_eq!(probe_commit(rt, client).as_deref(), Some("fixed"));
    let root = root_kustomization(rt, client);
    assert_eq!(
        root["status"]["lastAppliedRevision"],
        revision(&fixed),
        "{root}"
    );
}
