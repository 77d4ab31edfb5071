//! `devstack list` / `ls`: the stacks recorded in the state directory,
//! whatever the profile, with their state; nothing when there is none. Run
//! with no Docker engine to ask, the state is unknown and said so
//! (tests/docker/localstack.rs lists a stack's real containers).

use std::path::Path;

use devstack::profile::Provider;
use devstack::state::{self, StackRecord};

use crate::cli::{devstack_in_home, outcome};
use crate::pipes::stack_at;

/// No engine answers at this socket: the listing cannot depend on what
/// else runs in the machine's Docker.
const NO_ENGINE: &str = "unix:///nonexistent/docker.sock";

fn devstack_in(home: &Path, args: &[&str]) -> (i32, String, String) {
    outcome(
        devstack_in_home(home, args)
            .env("DOCKER_HOST", NO_ENGINE)
            .output()
            .unwrap(),
    )
}

#[test]
fn list_names_every_recorded_stack_and_nothing_else() {
    let home = tempfile::tempdir().unwrap();
    let state_dir = home.path().join("state");
    let dev = stack_at(&state_dir, "dev");
    StackRecord::update(&dev, |r| {
        r.provider = Some(Provider::Kind);
        r.ports.localstack = Some(4566);
        r.ports.api_server = Some(6443);
    })
    .unwrap();
    std::fs::write(state::kubeconfig_path(&dev), "apiVersion: v1\n").unwrap();
    // A stack on an existing cluster: a record, no kubeconfig of its own.
    let shared = stack_at(&state_dir, "shared");
    StackRecord::update(&shared, |r| r.provider = Some(Provider::Existing)).unwrap();
    // A stack of a release that wrote only the kubeconfig.
    let old = stack_at(&state_dir, "old");
    std::fs::create_dir_all(state::stack_dir(&old)).unwrap();
    std::fs::write(state::kubeconfig_path(&old), "apiVersion: v1\n").unwrap();
    // No stack: an empty directory, a name no stack can have, a file.
    let stacks = state_dir.join("stacks");
    std::fs::create_dir_all(stacks.join("leftover")).unwrap();
    std::fs::create_dir_all(stacks.join("Not_A_Stack")).unwrap();
    std::fs::write(stacks.join("Not_A_Stack/stack.json"), "{}").unwrap();
    std::fs::write(stacks.join("notes.txt"), "x").unwrap();
    // Listing reads no profile: a broken one in the directory does not matter.
    std::fs::write(home.path().join("devstack.yaml"), "not: [a profile\n").unwrap();

    for command in ["list", "ls"] {
        let (code, stdout, stderr) = devstack_in(home.path(), &[command]);
        assert_eq!(code, 0, "{command}: {stderr}");
        insta::allow_duplicates! { insta::assert_snapshot!(stdout, @r"
        NAME    STATE    PROVIDER  NOTE
        dev     unknown  kind
        old     unknown  -
        shared  unknown  existing  on an existing cluster: `devstack status` asks it
        "); }
        let warning = format!(
            "warning: the stacks' state is unknown: cannot reach the Docker engine at {NO_ENGINE}"
        );
        assert!(stderr.starts_with(&warning), "{command}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{command}: {stderr}");
    }

    let (code, stdout, stderr) = devstack_in(home.path(), &["list", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let listed = json["stacks"].as_array().unwrap();
    assert_eq!(listed.len(), 3, "{json}");
    assert_eq!(
        listed[0],
        serde_json::json!({
            "name": "dev",
            "state": "unknown",
            "recorded": true,
            "provider": "kind",
            "ports": {"localstack": 4566, "apiServer": 6443},
            "kubeconfig": state::kubeconfig_path(&dev),
        })
    );
    assert_eq!(listed[1]["name"], "old");
    assert_eq!(listed[1]["provider"], serde_json::Value::Null);
    assert_eq!(listed[2]["name"], "shared");
    assert_eq!(listed[2]["provider"], "existing");
    assert_eq!(listed[2]["kubeconfig"], serde_json::Value::Null);
    assert!(!stdout.contains("apiVersion"), "no kubeconfig contents");

    // `down` removes a stack's directory: it is listed no more.
    std::fs::remove_dir_all(state::stack_dir(&dev)).unwrap();
    let (_, stdout, _) = devstack_in(home.path(), &["ls", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let names: Vec<&str> = json["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["old", "shared"]);
}

#[test]
fn list_without_stacks_prints_nothing_and_exits_0() {
    let home = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = devstack_in(home.path(), &["list"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "");
    let stacks = home.path().join("state/stacks");
    assert!(
        stderr.ends_with(&format!(
            "no stacks on this machine (none recorded in {})\n",
            stacks.display()
        )),
        "{stderr}"
    );
    let (code, stdout, stderr) = devstack_in(home.path(), &["-q", "ls"]);
    assert_eq!((code, stdout.as_str()), (0, ""));
    assert!(!stderr.contains("no stacks"), "-q hides the note: {stderr}");
    let (code, stdout, _) = devstack_in(home.path(), &["ls", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&stdout).unwrap(),
        serde_json::json!({"stacks": []})
    );
}
