//! Cluster tier: what a CI script relies on. `status` right after `up`
//! (warm or cold) is settled; two `up` of one stack at once end in one
//! healthy stack; three stacks of one profile run side by side on free
//! ports; the `next:` lines an `up --name X` prints reach stack X.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::common::*;

/// The shipped ci profile (ports `auto`) under a name that is NOT the
/// stack's: every command must carry `--name` to reach the test's stack.
fn ci_profile(dir: &Path) -> PathBuf {
    let profile = profile::ci("not-the-test-stack");
    assert!(
        profile.text().contains("  port: auto"),
        "the ci profile picks free ports"
    );
    profile.write(&dir.join("ci.yaml"))
}

fn devstack(stack: &TestStack, profile: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_devstack"));
    cmd.current_dir(stack.dir.path())
        .arg("-p")
        .arg(profile)
        .args(["--name", &stack.name])
        .args(args)
        .env("DEVSTACK_HOME", stack.dir.path().join("state"))
        .env("CI", "true")
        .env_remove("DEVSTACK_NAME")
        .env_remove("DEVSTACK_PROFILE")
        .env_remove("DEVSTACK_LOCALSTACK_PORT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn finish(child: Child) -> Run {
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn run(stack: &TestStack, profile: &Path, args: &[&str]) -> Run {
    finish(devstack(stack, profile, args).spawn().unwrap())
}

/// Every Flux row of a `status --json` report is Ready: not reconciling,
/// not failing.
#[track_caller]
fn assert_settled(report: &serde_json::Value) {
    assert_eq!(report["healthy"], true, "{report:#}");
    assert_eq!(report["settled"], true, "{report:#}");
    let rows = report["rows"].as_array().unwrap();
    let kustomizations: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|r| r["component"] == "kustomization")
        .collect();
    assert_eq!(kustomizations.len(), 4, "root and three levels: {report:#}");
    let releases = rows.iter().filter(|r| r["component"] == "helmrelease");
    for row in kustomizations.into_iter().chain(releases) {
        assert_eq!(row["health"], "healthy", "{row}");
        assert_eq!(row["state"], "Ready", "{row}");
    }
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn status_right_after_up_is_settled_and_concurrent_ups_end_in_one_stack() {
    if !require_cluster_kit() {
        return;
    }
    let stack = TestStack::new("contract");
    let profile = ci_profile(stack.dir.path());

    // Two `up` of one stack at the same moment: the second waits for the
    // first, then finds a healthy stack.
    let first = devstack(&stack, &profile, &["up", "--json"])
        .spawn()
        .unwrap();
    let second = devstack(&stack, &profile, &["up", "--json"])
        .spawn()
        .unwrap();
    let (first, second) = (finish(first), finish(second));
    first.ok();
    second.ok();
    let waited = [&first, &second]
        .iter()
        .filter(|r| r.stderr.contains("waiting for another devstack run"))
        .count();
    assert_eq!(
        waited, 1,
        "exactly one run waits:\n{}\n{}",
        first.stderr, second.stderr
    );
    let created: Vec<bool> = [&first, &second]
        .iter()
        .map(|r| r.json()["created"].as_bool().unwrap())
        .collect();
    assert_eq!(created.iter().filter(|c| **c).count(), 1, "{created:?}");
    let containers = stack.containers();
    assert_eq!(
        containers.len(),
        2,
        "one LocalStack and one node: {containers:?}"
    );

    for round in 1..=5 {
        for _ in 0..2 {
            let up = run(&stack, &profile, &["up", "--json", "--no-verify"]);
            let report = up.ok().json();
            assert_eq!(report["created"], false, "round {round}: {report}");
            // `up` reports the health model `status` uses, and it is settled.
            assert_settled(&report["health"]);
        }
        let status = run(&stack, &profile, &["status", "--json"]);
        assert_eq!(status.code, 0, "round {round}: {}", status.all());
        assert_settled(&status.json());
    }

    // The ports `auto` chose are reported, and are the ones in use.
    let status = run(&stack, &profile, &["status", "--json"]).json();
    let localstack_port = status["ports"]["localstack"]
        .as_u64()
        .expect("LocalStack port");
    let api_port = status["ports"]["apiServer"]
        .as_u64()
        .expect("API server port");
    let env = run(&stack, &profile, &["env"]);
    assert!(
        env.ok().stdout.contains(&format!(
            "AWS_ENDPOINT_URL='http://127.0.0.1:{localstack_port}'"
        )),
        "{}",
        env.stdout
    );
    let kubeconfig = std::fs::read_to_string(
        stack
            .dir
            .path()
            .join("state/stacks")
            .join(&stack.name)
            .join("kubeconfig"),
    )
    .unwrap();
    assert!(
        kubeconfig.contains(&format!("127.0.0.1:{api_port}")),
        "{kubeconfig}"
    );

    // `status --wait` on a settled stack returns at once, exit 0.
    run(&stack, &profile, &["status", "--wait", "30s", "--json"]).ok();

    run(&stack, &profile, &["down"]).ok();
    assert!(stack.containers().is_empty(), "{:?}", stack.containers());
}

/// The `next:` lines of `up --name X`, executed as printed, act on X.
#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn next_lines_reach_the_named_stack() {
    if !require_cluster_kit() {
        return;
    }
    let stack = TestStack::new("next");
    let profile = ci_profile(stack.dir.path());
    let up = run(&stack, &profile, &["up"]);
    up.ok();
    let next: Vec<String> = up
        .stderr
        .lines()
        .skip_while(|l| !l.starts_with("next:"))
        .skip(1)
        .map(|l| l.split("  #").next().unwrap().trim().to_string())
        .filter(|l| l.contains("devstack"))
        .collect();
    assert_eq!(next.len(), 4, "env, status, verify, down: {}", up.stderr);
    let bin = env!("CARGO_BIN_EXE_devstack");
    for line in &next {
        assert!(
            line.contains(&format!("--name {}", stack.name)),
            "`{line}` does not select the stack"
        );
        // Run each line as a user pastes it, with `devstack` on PATH.
        let bin_dir = Path::new(bin).parent().unwrap();
        let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
        let script = if line.starts_with("eval") {
            format!("{line} && echo \"stack=$DEVSTACK_STACK endpoint=$AWS_ENDPOINT_URL\"")
        } else {
            line.clone()
        };
        let out = Command::new("sh")
            .args(["-c", &script])
            .current_dir(stack.dir.path())
            .env("PATH", path)
            .env("DEVSTACK_HOME", stack.dir.path().join("state"))
            .env("CI", "true")
            .env_remove("DEVSTACK_NAME")
            .env_remove("DEVSTACK_PROFILE")
            .output()
            .unwrap();
        let all = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "`{line}` failed:\n{all}");
        if line.starts_with("eval") {
            assert!(all.contains(&format!("stack={}", stack.name)), "{all}");
            assert!(!all.contains("endpoint=http://127.0.0.1:0"), "{all}");
        } else if line.ends_with(" status") {
            assert!(all.contains(&format!("devstack-{}", stack.name)), "{all}");
        }
    }
    assert!(
        stack.containers().is_empty(),
        "the pasted `down` removed stack X"
    );
}

/// Three stacks of one profile started at the same moment: free ports, no
/// collision, each verified, all torn down.
#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn three_stacks_of_one_profile_side_by_side() {
    if !require_cluster_kit() {
        return;
    }
    let stacks: Vec<TestStack> = (1..=3)
        .map(|i| TestStack::new(&format!("par{i}")))
        .collect();
    let profile = ci_profile(stacks[0].dir.path());
    let children: Vec<Child> = stacks
        .iter()
        .map(|s| devstack(s, &profile, &["up", "--json"]).spawn().unwrap())
        .collect();
    let runs: Vec<Run> = children.into_iter().map(finish).collect();
    let mut ports = std::collections::BTreeSet::new();
    for (stack, up) in stacks.iter().zip(&runs) {
        let report = up.ok().json();
        assert_eq!(report["created"], true, "{report}");
        assert_eq!(report["verify"]["passed"], true, "{report}");
        ports.insert(report["ports"]["localstack"].as_u64().unwrap());
        ports.insert(report["ports"]["apiServer"].as_u64().unwrap());
        assert_eq!(report["stack"], stack.name.as_str());
    }
    assert_eq!(ports.len(), 6, "six distinct host ports: {ports:?}");
    for stack in &stacks {
        run(stack, &profile, &["down"]).ok();
        assert!(
            stack.containers().is_empty(),
            "{}: {:?}",
            stack.name,
            stack.containers()
        );
        assert!(stack.networks().is_empty());
    }
}
