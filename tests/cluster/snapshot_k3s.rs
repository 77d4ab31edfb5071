//! Cluster tier: snapshots. A verified ci-profile stack is saved, removed
//! and created again from the snapshot (round trip with rotation proven);
//! a second stack is restored from the same snapshot beside the first; the
//! snapshot survives export and import; a damaged file, a damaged snapshot,
//! another profile and a changed profile are refused, and a failed restore
//! leaves nothing behind. Restored stacks share the snapshot's image layers
//! through one volume, and a stack restored from a snapshot can be saved
//! again. How fast a restore is belongs to the bench
//! ("up --from-snapshot" in bench/run.sh), not to a test.

use std::path::{Path, PathBuf};

use crate::common::*;

fn ci_profile(dir: &Path, file: &str, name: &str, extra_cluster: &str) -> PathBuf {
    profile::ci(name)
        .cluster(extra_cluster)
        .write(&dir.join(file))
}

/// `devstack ARGS` in the first stack's directory (one DEVSTACK_HOME, so one
/// snapshot store), for the stack named `name`.
fn run_as(home: &TestStack, profile: &Path, name: &str, args: &[&str]) -> Run {
    let mut all = vec!["--name", name];
    all.extend_from_slice(args);
    home.run(profile, &all)
}

fn assert_refused(run: &Run, what: &str, message: &str) {
    assert_eq!(run.code, 2, "{what}: exit code\n{}", run.all());
    assert!(
        run.stderr.contains(message),
        "{what}: no `{message}` in\n{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("hint:"),
        "{what}: no hint\n{}",
        run.stderr
    );
}

/// The shared volumes of the snapshot store in `home`, removed (with any
/// container of this test still using them) when dropped, whatever failed.
struct SharedVolumes {
    label: String,
}

impl SharedVolumes {
    fn of(home: &TestStack) -> Self {
        let store = home.dir.path().join("state/snapshots");
        SharedVolumes {
            label: format!("label=dev.devstack.snapshot-store={}", store.display()),
        }
    }

    fn names(&self) -> Vec<String> {
        docker_lines(&["volume", "ls", "-q", "--filter", &self.label])
    }

    fn of_snapshot(&self, snapshot: &str) -> Vec<String> {
        let name = format!("label=dev.devstack.snapshot={snapshot}");
        docker_lines(&[
            "volume",
            "ls",
            "-q",
            "--filter",
            &self.label,
            "--filter",
            &name,
        ])
    }
}

impl Drop for SharedVolumes {
    fn drop(&mut self) {
        for volume in self.names() {
            let filter = format!("volume={volume}");
            for container in docker_lines(&["ps", "-aq", "--filter", &filter]) {
                docker(&["rm", "-f", "-v", &container]);
            }
            docker(&["volume", "rm", "-f", &volume]);
        }
    }
}

/// The mounts of a container, by volume name.
fn mounted_volumes(container: &str) -> Vec<String> {
    docker_lines(&[
        "inspect",
        "-f",
        "{{range .Mounts}}{{println .Name}}{{end}}",
        container,
    ])
}

fn k3s_token(container: &str) -> String {
    docker_lines(&[
        "inspect",
        "-f",
        "{{range .Config.Env}}{{println .}}{{end}}",
        container,
    ])
    .into_iter()
    .find_map(|e| e.strip_prefix("K3S_TOKEN=").map(String::from))
    .expect("the server has a K3S_TOKEN")
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn a_saved_stack_comes_back_verified_beside_itself_and_damage_is_refused() {
    if !require_cluster_kit() {
        return;
    }
    let first = TestStack::new("snap");
    let beside = TestStack::new("snapb");
    let failed = TestStack::new("snapx");
    let profile = ci_profile(first.dir.path(), "profile.yaml", &first.name, "");
    // Declared after the stacks, so dropped before them: it removes their
    // containers that still hold a shared volume itself.
    let shared = SharedVolumes::of(&first);

    let up = first.run(&profile, &["up", "--json"]);
    assert_eq!(up.ok().json()["created"], true);
    let server = format!("devstack-{}-server-0", first.name);
    let token = k3s_token(&server);

    // Save: verified first, the nodes paused, one archive per saved path.
    let save = first.run(&profile, &["snapshot", "save", "base", "--json"]);
    let saved = save.ok().json();
    assert!(
        save.stderr.contains("verifying the stack before saving it"),
        "{}",
        save.stderr
    );
    assert_eq!(saved["replaced"], false, "{saved}");
    assert_eq!(saved["snapshot"]["name"], "base");
    assert!(
        saved["snapshot"]["bytes"].as_u64().unwrap() > 100 << 20,
        "{saved}"
    );
    assert!(
        !save.all().contains(&token),
        "the cluster token must not be shown"
    );
    let store = first.dir.path().join("state/snapshots/base");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&store).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700, "the snapshot holds credentials");
    let base_volumes = shared.of_snapshot("base");
    assert_eq!(base_volumes.len(), 1, "one shared volume per node");
    let shared_archives = std::fs::read_dir(&store)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with("-shared.tar")
        })
        .count();
    assert_eq!(shared_archives, 1, "the layers are kept apart");
    let running = docker_lines(&["inspect", "-f", "{{.State.Status}}", &server]);
    assert_eq!(running, ["running"], "save unpauses the nodes");
    let list = first
        .run(&profile, &["snapshot", "list", "--json"])
        .ok()
        .json();
    assert_eq!(list["snapshots"][0]["name"], "base", "{list}");
    assert!(!list.to_string().contains(&token));

    // Save -> down -> restore -> verify (the round trip includes rotation).
    first.run(&profile, &["down"]).ok();
    assert!(first.containers().is_empty());
    let restoring = std::time::SystemTime::now();
    let restored = first.run(&profile, &["up", "--from-snapshot", "base", "--json"]);
    let report = restored.ok().json();
    assert_eq!(report["created"], true, "{report}");
    // The restored node has flannel's subnet file from its first sandbox on.
    assert_eq!(
        sandbox_failures_without_flannel_subnet(&first, restoring),
        Vec::<String>::new()
    );
    assert_eq!(report["fromSnapshot"], "base", "{report}");
    assert_eq!(report["verify"]["passed"], true, "{report}");
    // Flux only re-applied what the snapshot holds: the round trip ran
    // beside it, and `up` still returned with every level Ready, each on
    // the waterfall.
    assert_eq!(report["verifiedBesideChain"], true, "{report}");
    let levels = report["gitops"]["chain"]["levels"].as_array().unwrap();
    let names: Vec<&str> = levels.iter().filter_map(|l| l["name"].as_str()).collect();
    let chain: Vec<&str> = std::iter::once("devstack")
        .chain(devstack::gitops::CHAIN)
        .collect();
    assert_eq!(names, chain, "the restored chain's levels: {report}");
    for level in levels {
        let span = format!("level {} Ready", level["name"].as_str().unwrap());
        assert!(
            report["timings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["name"] == span.as_str() && s["endMs"].is_u64()),
            "{span} missing: {report}"
        );
    }
    assert!(
        restored.stderr.contains("created from snapshot `base`"),
        "{}",
        restored.stderr
    );
    assert_eq!(
        first.run(&profile, &["status"]).code,
        0,
        "status right after a restore"
    );
    assert_eq!(
        first.run(&profile, &["verify", "--json"]).ok().json()["passed"],
        true
    );
    // The node links to the shared layers rather than holding a copy.
    let snapshots_dir =
        "/var/lib/rancher/k3s/agent/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots";
    let links = docker_lines(&[
        "exec",
        &server,
        "sh",
        "-c",
        &format!("find {snapshots_dir} -maxdepth 1 -type l | wc -l"),
    ]);
    assert!(
        links[0].parse::<u32>().unwrap() > 5,
        "layer links: {links:?}"
    );
    let own = docker_lines(&["exec", &server, "du", "-sm", "/var/lib/rancher/k3s"]);
    let own_mib: u64 = own[0].split_whitespace().next().unwrap().parse().unwrap();
    assert!(own_mib < 300, "the node's own state is {own_mib} MiB");
    assert!(mounted_volumes(&server).contains(&base_volumes[0]));
    // A warm `up` on the restored stack finds nothing to repair.
    let warm = first.run(&profile, &["up", "--json"]).ok().json();
    assert_eq!(warm["repaired"], serde_json::json!([]), "{warm}");

    // Restoring over a stack that exists is refused, and changes nothing.
    let over = first.run(&profile, &["up", "--from-snapshot", "base"]);
    assert_refused(&over, "restore over an existing stack", "exists");

    // A second stack from the same snapshot, beside the first: both verified,
    // and the API server reaches the new node's kubelet (`kubectl logs`).
    let second = run_as(
        &first,
        &profile,
        &beside.name,
        &["up", "--from-snapshot", "base", "--json"],
    );
    assert_eq!(second.ok().json()["verify"]["passed"], true);
    let logs = docker(&[
        "exec",
        &format!("devstack-{}-server-0", beside.name),
        "kubectl",
        "logs",
        "-n",
        "flux-system",
        "deploy/source-controller",
        "--tail=1",
    ]);
    assert!(
        logs.status.success(),
        "kubectl logs on the restored stack: {}",
        String::from_utf8_lossy(&logs.stderr)
    );
    for name in [&first.name, &beside.name] {
        let verify = run_as(&first, &profile, name, &["verify", "--json"]);
        assert_eq!(verify.ok().json()["passed"], true, "{name}");
    }
    let beside_server = format!("devstack-{}-server-0", beside.name);
    assert!(mounted_volumes(&beside_server).contains(&base_volumes[0]));
    assert_eq!(
        shared.of_snapshot("base"),
        base_volumes,
        "one volume for both"
    );

    // A restored stack saved again: its snapshot holds the layers it shares
    // too, and a stack restored from that one verifies.
    run_as(
        &first,
        &profile,
        &beside.name,
        &["snapshot", "save", "chained"],
    )
    .ok();
    run_as(&first, &profile, &beside.name, &["down"]).ok();
    let chained = run_as(
        &first,
        &profile,
        &beside.name,
        &["up", "--from-snapshot", "chained", "--json"],
    );
    assert_eq!(chained.ok().json()["verify"]["passed"], true);
    run_as(&first, &profile, &beside.name, &["down"]).ok();
    // Through the library, as a Rust suite would remove it: its volume goes
    // with it, no stack using it any more.
    let mut settings = crate::common::settings(&profile);
    settings.state_dir = first.dir.path().join("state");
    let removal = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(devstack::snapshot::remove(&settings, "chained"))
        .unwrap();
    assert_eq!(removal, devstack::snapshot::Removal::default());
    assert!(
        shared.of_snapshot("chained").is_empty(),
        "removing a snapshot removes its volume"
    );

    // Export and import: one file, every archive checked.
    let file = first.dir.path().join("base.devstack-snapshot");
    let file_arg = file.to_str().unwrap();
    first
        .run(&profile, &["snapshot", "export", "base", file_arg])
        .ok();
    let imported = first
        .run(
            &profile,
            &["snapshot", "import", file_arg, "copy", "--json"],
        )
        .ok()
        .json();
    assert_eq!(imported["snapshot"]["name"], "copy", "{imported}");
    let again = first.run(&profile, &["snapshot", "import", file_arg, "copy"]);
    assert_refused(&again, "import over an existing name", "exists already");

    // A damaged file: a flipped byte in an archive, and a cut-off file.
    let size = std::fs::metadata(&file).unwrap().len();
    flip_byte(&file, size / 2);
    let damaged = first.run(&profile, &["snapshot", "import", file_arg, "bad"]);
    assert_refused(&damaged, "a damaged file", "does not match its checksum");
    let cut = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    cut.set_len(size / 3).unwrap();
    let truncated = first.run(&profile, &["snapshot", "import", file_arg, "bad"]);
    assert_refused(&truncated, "a cut-off file", "is cut off");
    std::fs::remove_file(&file).unwrap();
    let names: Vec<String> = first
        .run(&profile, &["snapshot", "list", "--json"])
        .ok()
        .json()["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["base", "copy"], "a refused import adds nothing");

    // Another profile, and this profile changed: refused before anything exists.
    let other = ci_profile(first.dir.path(), "other.yaml", &failed.name, "");
    let refused = first.run(&other, &["up", "--from-snapshot", "base"]);
    assert_refused(
        &refused,
        "another profile",
        "made from profile `profile`, not `other`",
    );
    let changed = ci_profile(
        &first.dir.path().join("changed"),
        "profile.yaml",
        &failed.name,
        "  k3sArgs: [\"--disable-network-policy\"]\n",
    );
    let refused = first.run(&changed, &["up", "--from-snapshot", "base"]);
    assert_refused(
        &refused,
        "a changed profile",
        "changed since snapshot `base` was made, in: cluster",
    );
    assert!(failed.containers().is_empty() && failed.networks().is_empty());

    // A damaged snapshot in the store: the restore fails on the checksum and
    // is rolled back, leaving no container, volume or network.
    let archive = std::fs::read_dir(first.dir.path().join("state/snapshots/copy"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    flip_byte(&archive, std::fs::metadata(&archive).unwrap().len() / 2);
    let broken = run_as(
        &first,
        &profile,
        &failed.name,
        &["up", "--from-snapshot", "copy"],
    );
    // A damaged input file: exit 2, as README's table gives for one.
    assert_eq!(broken.code, 2, "{}", broken.all());
    assert!(
        broken.stderr.contains("snapshot `copy` is damaged: ")
            && broken.stderr.contains("does not match its checksum")
            && broken.stderr.contains("rolled back"),
        "{}",
        broken.stderr
    );
    assert!(failed.containers().is_empty(), "{:?}", failed.containers());
    assert!(failed.networks().is_empty());
    let volumes = docker_lines(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label=dev.devstack.stack={}", failed.name),
    ]);
    assert!(volumes.is_empty(), "{volumes:?}");
    assert!(
        shared.of_snapshot("copy").is_empty(),
        "a volume that failed to fill is removed"
    );

    first.run(&profile, &["snapshot", "rm", "copy"]).ok();
    // The stack restored from `base` still uses its volume: it stays until
    // that stack is down.
    let removed = first.run(&profile, &["snapshot", "rm", "base"]);
    assert!(
        removed.ok().stderr.contains("stay until"),
        "{}",
        removed.stderr
    );
    assert_eq!(shared.of_snapshot("base"), base_volumes);
    first.run(&profile, &["down"]).ok();
    assert!(shared.names().is_empty(), "{:?}", shared.names());
    let gone = first.run(&profile, &["snapshot", "rm", "base"]);
    assert_refused(
        &gone,
        "removing a missing snapshot",
        "there is no snapshot `base`",
    );
}

fn flip_byte(path: &Path, at: u64) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8];
    file.seek(SeekFrom::Start(at)).unwrap();
    file.read_exact(&mut byte).unwrap();
    byte[0] ^= 0xff;
    file.seek(SeekFrom::Start(at)).unwrap();
    file.write_all(&byte).unwrap();
}
