//! `devstack list` / `ls`: the stacks recorded in the state directory, one
//! name a line, whatever the profile; nothing when there is none.

use std::path::Path;

use devstack::profile::Provider;
use devstack::state::{self, StackRecord};

use crate::cli::{devstack_in_home, outcome};
use crate::pipes::stack_at;

fn devstack_in(home: &Path, args: &[&str]) -> (i32, String, String) {
    outcome(devstack_in_home(home, args).output().unwrap())
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
        assert_eq!(stdout, "dev\nold\nshared\n", "{command}");
        assert_eq!(stderr, "", "{command}");
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
    let (_, stdout, _) = devstack_in(home.path(), &["ls"]);
    assert_eq!(stdout, "old\nshared\n");
}

#[test]
fn list_without_stacks_prints_nothing_and_exits_0() {
    let home = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = devstack_in(home.path(), &["list"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "");
    let stacks = home.path().join("state/stacks");
    assert_eq!(
        stderr,
        format!(
            "no stacks on this machine (none recorded in {})\n",
            stacks.display()
        )
    );
    let (code, stdout, stderr) = devstack_in(home.path(), &["-q", "ls"]);
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "", ""));
    let (code, stdout, _) = devstack_in(home.path(), &["ls", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&stdout).unwrap(),
        serde_json::json!({"stacks": []})
    );
}
