//! Docker tier: one test per row of README's exit-code table, each causing
//! that class of failure for real and checking the code and the `hint:`.

mod common;

use std::time::{Duration, Instant};

use common::*;

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_devstack_raw(dir.path(), &["up", "--no-such-flag"], &[]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("--no-such-flag"), "{}", run.stderr);
}

#[test]
fn profile_errors_exit_2() {
    let stack = TestStack::new("exit-profile");
    let profile = stack.profile("flux:\n  componets: [source-controller]\n");
    let run = stack.run(&profile, &["up"]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("profile.yaml:"), "{}", run.stderr);
    assert!(run.stderr.contains("hint:"), "{}", run.stderr);
    assert!(
        stack.containers().is_empty(),
        "a bad profile creates nothing"
    );
}

#[test]
fn an_unreachable_docker_engine_exits_3() {
    let stack = TestStack::new("exit-docker");
    let profile = stack.profile("");
    let run = stack.run_env(
        &profile,
        &["up"],
        &[("DOCKER_HOST", "unix:///nonexistent/docker.sock")],
    );
    assert_eq!(run.code, 3, "{}", run.all());
    assert!(run.stderr.contains("Docker"), "{}", run.stderr);
    assert!(run.stderr.contains("hint:"), "{}", run.stderr);
}

#[test]
fn a_wait_past_its_deadline_exits_5() {
    if !require_docker() {
        return;
    }
    require_image(LOCALSTACK_IMAGE);
    let stack = TestStack::new("exit-timeout");
    // No LocalStack reports healthy 100 ms after its container is created.
    let profile = stack.profile("");
    let text = std::fs::read_to_string(&profile)
        .unwrap()
        .replace("  localstack: 120s\n", "  localstack: 100ms\n");
    std::fs::write(&profile, text).unwrap();
    let run = stack.run(&profile, &["localstack", "up"]);
    assert_eq!(run.code, 5, "{}", run.all());
    assert!(run.stderr.contains("within"), "{}", run.stderr);
    assert!(
        run.stderr.contains("hint: raise `timeouts.localstack`"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_unhealthy_stack_exits_4() {
    // A stack that was never brought up: every part is missing.
    let stack = TestStack::new("exit-unhealthy");
    let profile = stack.profile("");
    let run = stack.run(&profile, &["status", "--json"]);
    assert_eq!(run.code, 4, "{}", run.all());
    let report = run.json();
    assert_eq!(report["healthy"], false, "{report}");
    assert_eq!(report["settled"], false, "{report}");
    assert!(run.stderr.contains("hint:"), "{}", run.stderr);
}

/// Ctrl-C while `up` waits for another run of the same stack: exit 130,
/// and nothing was created (the run never got the stack's lock).
#[test]
fn an_interrupted_run_exits_130_and_a_second_run_waits_for_the_first() {
    if !require_docker() {
        return;
    }
    let stack = TestStack::new("exit-sigint");
    let profile = stack.profile("");
    let state = stack.dir.path().join("state");
    let lock_path = state.join("locks").join(format!("{}.lock", stack.name));
    std::fs::create_dir_all(lock_path.parent().unwrap()).unwrap();
    let held = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .unwrap();
    // SAFETY: flock on a descriptor this test owns; released when dropped.
    let rc = unsafe {
        libc::flock(
            std::os::fd::AsRawFd::as_raw_fd(&held),
            libc::LOCK_EX | libc::LOCK_NB,
        )
    };
    assert_eq!(rc, 0, "the test takes the stack's lock first");

    let child = std::process::Command::new(env!("CARGO_BIN_EXE_devstack"))
        .current_dir(stack.dir.path())
        .args(["up", "--profile"])
        .arg(&profile)
        .env("DEVSTACK_HOME", &state)
        .env("CI", "true")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The waiting message is printed once the lock is found taken.
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    assert!(started.elapsed() < Duration::from_secs(30));
    // SAFETY: signalling the child this test spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "waiting for another devstack run on stack `{}`",
            stack.name
        )),
        "{stderr}"
    );
    assert!(stderr.contains("hint:"), "{stderr}");
    assert!(
        stack.containers().is_empty(),
        "a run that never got the lock creates nothing: {:?}",
        stack.containers()
    );
    drop(held);
}
