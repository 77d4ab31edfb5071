//! `devstack doctor` without a Docker engine: what `up` refuses before it
//! reaches anything fails doctor with `up`'s exit class, and the report
//! names the stack, profile and provider it assessed.

use std::path::Path;

use crate::cli::{devstack_in_home, outcome};

/// Where no engine answers: doctor's engine checks fail, the rest run.
const NO_ENGINE: &str = "unix:///nonexistent/docker.sock";
/// A download mirror on a port nothing listens on: the kind download
/// doctor looks for is refused at once, without leaving the machine.
const NO_MIRROR: &str = "http://127.0.0.1:9";

/// `devstack ARGS` in `home` without an engine or network, with `env` set;
/// exit code, stdout and stderr.
fn doctor(home: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut command = devstack_in_home(home, args);
    command
        .env("DOCKER_HOST", NO_ENGINE)
        .env("DEVSTACK_DOWNLOAD_MIRROR", NO_MIRROR);
    for name in [
        "DEVSTACK_BUNDLE",
        "DEVSTACK_PINS",
        "DEVSTACK_KIND",
        "DEVSTACK_PROVIDER",
        "DEVSTACK_CONTEXT",
    ] {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    outcome(command.output().unwrap())
}

/// A run: its arguments, its environment, then what it is expected to say
/// (a check's name and detail, or the provider's and the last line).
type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str, &'a str);

fn check<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check `{name}` in {report:#}"))
}

#[test]
fn doctor_fails_with_ups_exit_class_on_what_up_refuses_before_reaching_anything() {
    let home = tempfile::tempdir().unwrap();
    let unpinned = home.path().join("v1.33.yaml");
    std::fs::write(
        &unpinned,
        "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: old\ncluster:\n  provider: kind\n  version: v1.33.5\n",
    )
    .unwrap();
    let unpinned = unpinned.to_str().unwrap();
    let cases: [Case; 3] = [
        (
            &["--provider", "k3s", "doctor", "--json"],
            &[("DEVSTACK_BUNDLE", "/nonexistent")],
            "bundle",
            "cannot read offline bundle index /nonexistent/index.json",
        ),
        (
            &["--provider", "k3s", "doctor", "--json"],
            &[("DEVSTACK_PINS", "/nonexistent")],
            "pins",
            "the pins file /nonexistent (DEVSTACK_PINS) cannot be read",
        ),
        (
            &["-p", unpinned, "doctor", "--json"],
            &[],
            "cluster version",
            "`cluster.version: v1.33.5` has no published kind node image",
        ),
    ];
    for (args, env, name, message) in cases {
        let (code, stdout, stderr) = doctor(home.path(), args, env);
        assert_eq!(code, 2, "{args:?} {env:?}: {stdout}{stderr}");
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(report["exitCode"], 2, "{report:#}");
        assert_eq!(report["ok"], false);
        let failed = check(&report, name);
        assert_eq!(failed["status"], "fail", "{failed}");
        assert!(
            failed["detail"].as_str().unwrap().contains(message),
            "{failed}"
        );
        assert!(failed["hint"].as_str().is_some_and(|h| !h.is_empty()));
    }

    // The same in text: the provider first, the stack and its profile last.
    let (code, stdout, stderr) = doctor(home.path(), &["-p", unpinned, "doctor"], &[]);
    assert_eq!(code, 2, "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("✓ provider") && lines[0].ends_with("kind, named by the profile"),
        "{stdout}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("✗ cluster version")),
        "{stdout}"
    );
    assert!(
        lines.last().unwrap().starts_with(&format!(
            "stack `old` (profile {unpinned}, provider kind) cannot run here:"
        )),
        "{stdout}"
    );
    // Refused input is told once, as a check, not as an error besides it.
    assert!(!stderr.contains("error:"), "{stderr}");
}

#[test]
fn doctor_names_the_stack_profile_and_provider_it_assessed() {
    let home = tempfile::tempdir().unwrap();
    let kubeconfig = home.path().join("kubeconfig");
    std::fs::write(&kubeconfig, "apiVersion: v1\nkind: Config\n").unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap();
    let runs: [Case; 4] = [
        (
            &["--provider", "k3s", "doctor"],
            &[],
            "k3s, named by --provider",
            "stack `devstack` (the built-in default profile, provider k3s)",
        ),
        (
            &["doctor"],
            &[("DEVSTACK_PROVIDER", "k3s")],
            "k3s, named by DEVSTACK_PROVIDER",
            "stack `devstack` (the built-in default profile, provider k3s)",
        ),
        (
            &["-p", "ci", "--name", "mine", "doctor"],
            &[],
            "k3s, named by the profile",
            "stack `mine` (the shipped profile ci, provider k3s)",
        ),
        (
            &["--context", "nowhere", "doctor"],
            &[("KUBECONFIG", kubeconfig)],
            "existing, implied by --context",
            "stack `devstack` (the built-in default profile, provider existing)",
        ),
    ];
    for (args, env, provider, subject) in runs {
        let (code, stdout, stderr) = doctor(home.path(), args, env);
        // No engine (or no cluster) answers: a machine problem, 3.
        assert_eq!(code, 3, "{args:?}: {stdout}{stderr}");
        let first = stdout.lines().next().unwrap_or_default();
        assert!(first.ends_with(provider), "{args:?}: {stdout}");
        let last = stdout.lines().last().unwrap_or_default();
        assert!(
            last.starts_with(&format!("{subject} cannot run here")),
            "{args:?}: {stdout}"
        );
    }
    let (_, stdout, _) = doctor(home.path(), &["doctor", "--json"], &[]);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["exitCode"], 3, "{report:#}");
    assert_eq!(report["profile"], "<built-in default>");
    assert_eq!(report["stack"], "devstack");
}

/// N-U3: a DEVSTACK_KIND that names no usable file says so, with the fix.
#[test]
fn a_devstack_kind_that_is_no_executable_file_is_told_as_such() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let plain = home.path().join("kind");
    std::fs::write(&plain, "#!/bin/sh\necho kind v0.33.0\n").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let plain = plain.to_str().unwrap().to_string();
    let dir = home.path().to_str().unwrap().to_string();
    for (kind, why, fix) in [
        (
            "/nonexistent".to_string(),
            "does not exist",
            "point DEVSTACK_KIND at a kind binary",
        ),
        (plain.clone(), "is not executable", "`chmod +x "),
        (
            dir,
            "is a directory",
            "point DEVSTACK_KIND at a kind binary",
        ),
    ] {
        let (code, stdout, stderr) = doctor(
            home.path(),
            &["--provider", "kind", "doctor", "--json"],
            &[("DEVSTACK_KIND", &kind)],
        );
        assert_eq!(code, 3, "{stdout}{stderr}");
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let check = check(&report, "kind");
        assert_eq!(check["status"], "fail", "{check}");
        assert_eq!(
            check["detail"],
            format!("the kind binary {kind} (DEVSTACK_KIND) {why}"),
            "{check}"
        );
        assert!(check["hint"].as_str().unwrap().contains(fix), "{check}");
    }
}
