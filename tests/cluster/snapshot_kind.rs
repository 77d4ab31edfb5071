//! Cluster tier: Kind snapshots. A verified dev-shaped Kind stack (one
//! control plane, one worker) is saved, removed and created again under
//! another stack name from the snapshot, verified (round trip with
//! rotation); kind lists the restored cluster as its own, its nodes keep
//! their old hostnames (the control plane's answered on the stack's
//! network), and `down` leaves nothing. Export and import carry it; another
//! kind release, another build of the node image, a stack name in use and
//! a damaged archive are refused with a hint, leaving nothing behind. How
//! fast a restore is belongs to the bench (bench/snapshots.sh), not to a
//! test.

use std::path::{Path, PathBuf};

use crate::common::kind::{KindGuard, kind_cluster, kind_kit, kind_nodes};
use crate::common::*;

/// profiles/dev.yaml for the test's stacks (the stack name comes with
/// `--name`): the bundle, no merge into the user's kubeconfig, a free host
/// port instead of 8080, busybox preloaded.
fn dev_profile(dir: &Path, name: &str, host_port: u16) -> PathBuf {
    let dev =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/dev.yaml"))
            .unwrap();
    let text = dev
        .replace("name: dev\n", &format!("name: {name}\n"))
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
        text.contains("provider: kind") && text.contains("agents: 1"),
        "profiles/dev.yaml changed shape:\n{text}"
    );
    let path = dir.join("profile.yaml");
    std::fs::write(&path, text).unwrap();
    path
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
/// container still using them) when dropped, whatever failed.
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

fn kind_clusters(kind: &Path) -> Vec<String> {
    let out = std::process::Command::new(kind)
        .args(["get", "clusters"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect()
}

/// Edits snapshot `name`'s manifest in `home` with `edit`, returning the
/// text it had.
fn edit_manifest(
    home: &TestStack,
    name: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) -> String {
    let path = home
        .dir
        .path()
        .join(format!("state/snapshots/{name}/manifest.json"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut value);
    std::fs::write(&path, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
    text
}

fn restore_manifest(home: &TestStack, name: &str, text: &str) {
    let path = home
        .dir
        .path()
        .join(format!("state/snapshots/{name}/manifest.json"));
    std::fs::write(path, text).unwrap();
}

/// Nothing of stack `stack` exists: no kind node, container, network.
fn assert_nothing_left(stack: &TestStack, what: &str) {
    assert!(
        kind_nodes(stack).is_empty(),
        "{what}: {:?}",
        kind_nodes(stack)
    );
    assert!(
        stack.containers().is_empty(),
        "{what}: {:?}",
        stack.containers()
    );
    assert!(
        stack.networks().is_empty(),
        "{what}: {:?}",
        stack.networks()
    );
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn a_saved_kind_stack_comes_back_verified_under_another_name() {
    const TEST: &str = "a_saved_kind_stack_comes_back_verified_under_another_name";
    let Some(kind) = kind_kit(TEST) else {
        return;
    };
    ensure_busybox_image();
    let first = TestStack::new("ksnap");
    let second = TestStack::new("ksnapb");
    let failed = TestStack::new("ksnapx");
    let _guards = [
        KindGuard::new(kind.clone(), &first),
        KindGuard::new(kind.clone(), &second),
        KindGuard::new(kind.clone(), &failed),
    ];
    let profile = dev_profile(first.dir.path(), &first.name, free_port());
    // Declared after the stacks and guards, so dropped before them: it
    // removes their containers that still hold a shared volume itself.
    let shared = SharedVolumes::of(&first);

    let up = first.run(&profile, &["up", "--json"]);
    assert_eq!(up.ok().json()["verify"]["passed"], true);
    let old_control_plane = format!("{}-control-plane", kind_cluster(&first));
    let old_worker = format!("{}-worker", kind_cluster(&first));

    // Save: verified first, the nodes paused, the layers kept apart.
    let save = first.run(&profile, &["snapshot", "save", "base", "--json"]);
    let saved = save.ok().json();
    assert_eq!(saved["snapshot"]["nodes"].as_array().unwrap().len(), 2);
    let versions = &saved["snapshot"]["versions"];
    assert_eq!(versions["provider"], "kind", "{saved}");
    assert_eq!(
        versions["kind"].as_str().map(|v| v.starts_with('v')),
        Some(true),
        "{saved}"
    );
    assert!(
        versions["nodeImageId"]
            .as_str()
            .is_some_and(|id| id.starts_with("sha256:")),
        "{saved}"
    );
    assert_eq!(shared.names().len(), 2, "one shared volume per node");
    let running = docker_lines(&["inspect", "-f", "{{.State.Status}}", &old_control_plane]);
    assert_eq!(running, ["running"], "save unpauses the nodes");

    // Save -> down -> restore under another name -> verified.
    first.run(&profile, &["down"]).ok();
    assert_nothing_left(&first, "down of the saved stack");
    let started = std::time::Instant::now();
    let restored = run_as(
        &first,
        &profile,
        &second.name,
        &["up", "--from-snapshot", "base", "--json"],
    );
    let report = restored.ok().json();
    eprintln!(
        "kind: restore to a verified round trip: {:?}",
        started.elapsed()
    );
    assert_eq!(report["created"], true, "{report}");
    assert_eq!(report["fromSnapshot"], "base", "{report}");
    assert_eq!(report["provider"], "kind", "{report}");
    assert_eq!(report["verify"]["passed"], true, "{report}");
    let new_cluster = kind_cluster(&second);
    let control_plane = format!("{new_cluster}-control-plane");
    let worker = format!("{new_cluster}-worker");
    assert_eq!(
        report["cluster"]["nodes"],
        serde_json::json!([control_plane, worker]),
        "{report}"
    );

    // kind takes it for its own, and the nodes keep their Kubernetes names.
    assert!(
        kind_clusters(&kind).contains(&new_cluster),
        "{:?}",
        kind_clusters(&kind)
    );
    for (node, hostname) in [(&control_plane, &old_control_plane), (&worker, &old_worker)] {
        let found = docker_lines(&["inspect", "-f", "{{.Config.Hostname}}", node]);
        assert_eq!(found, [hostname.as_str()], "{node}");
    }
    let aliases = docker_lines(&[
        "inspect",
        "-f",
        &format!(
            "{{{{range (index .NetworkSettings.Networks \"{}\").Aliases}}}}{{{{println .}}}}{{{{end}}}}",
            new_cluster
        ),
        &control_plane,
    ]);
    assert!(aliases.contains(&old_control_plane), "{aliases:?}");
    assert_eq!(
        run_as(&first, &profile, &second.name, &["status"]).code,
        0,
        "status right after a restore"
    );
    let verify = run_as(&first, &profile, &second.name, &["verify", "--json"]);
    assert_eq!(verify.ok().json()["passed"], true);
    let warm = run_as(&first, &profile, &second.name, &["up", "--json"]);
    assert_eq!(warm.ok().json()["repaired"], serde_json::json!([]));

    // Restoring over a stack that exists is refused.
    let over = run_as(
        &first,
        &profile,
        &second.name,
        &["up", "--from-snapshot", "base"],
    );
    assert_refused(&over, "restore over an existing stack", "exists");

    // Export and import carry it.
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
    assert_eq!(imported["snapshot"]["versions"], *versions, "{imported}");
    std::fs::remove_file(&file).unwrap();
    first.run(&profile, &["snapshot", "rm", "copy"]).ok();

    // Another kind release, another build of the node image: refused before
    // anything exists.
    let original = edit_manifest(&first, "base", |m| m["versions"]["kind"] = "v0.1.0".into());
    let refused = run_as(
        &first,
        &profile,
        &failed.name,
        &["up", "--from-snapshot", "base"],
    );
    assert_refused(&refused, "another kind", "was made with kind v0.1.0");
    restore_manifest(&first, "base", &original);
    edit_manifest(&first, "base", |m| {
        m["versions"]["nodeImageId"] = "sha256:0000".into()
    });
    let refused = run_as(
        &first,
        &profile,
        &failed.name,
        &["up", "--from-snapshot", "base"],
    );
    assert_refused(
        &refused,
        "another node image",
        "another build of node image",
    );
    restore_manifest(&first, "base", &original);
    assert_nothing_left(&failed, "refused restores");

    // A damaged archive: the restore fails on its checksum and is rolled
    // back, leaving no node, container or network.
    let manifest: serde_json::Value = serde_json::from_str(&original).unwrap();
    let own = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["shared"] != true)
        .max_by_key(|f| f["bytes"].as_u64().unwrap())
        .unwrap()["file"]
        .as_str()
        .unwrap()
        .to_string();
    let archive = first.dir.path().join("state/snapshots/base").join(own);
    flip_byte(&archive, std::fs::metadata(&archive).unwrap().len() / 2);
    let broken = run_as(
        &first,
        &profile,
        &failed.name,
        &["up", "--from-snapshot", "base"],
    );
    assert_eq!(broken.code, 2, "{}", broken.all());
    assert!(
        broken.stderr.contains("snapshot `base` is damaged: ")
            && broken.stderr.contains("does not match its checksum")
            && broken.stderr.contains("rolled back"),
        "{}",
        broken.stderr
    );
    assert_nothing_left(&failed, "a rolled-back restore");

    // `down` leaves nothing, and kind no longer lists the cluster.
    run_as(&first, &profile, &second.name, &["down"]).ok();
    assert_nothing_left(&second, "down of the restored stack");
    assert!(!kind_clusters(&kind).contains(&new_cluster));
    first.run(&profile, &["snapshot", "rm", "base"]).ok();
    assert!(shared.names().is_empty(), "{:?}", shared.names());
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
