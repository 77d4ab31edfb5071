//! Docker tier: one test per row of README's exit-code table, each causing
//! that class of failure for real and checking the code and the `hint:`.

use std::time::{Duration, Instant};

use crate::common::*;

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_devstack_raw(dir.path(), &["up", "--no-such-flag"], &[]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(run.stderr.contains("--no-such-flag"), "{}", run.stderr);
}

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
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
#[ignore = "needs a Docker engine: make test-docker"]
fn an_unreachable_docker_engine_exits_3() {
    let stack = TestStack::new("exit-docker");
    let profile = stack.profile("");
    let run = stack.run_env(
        &profile,
        &["up"],
        &[("DOCKER_HOST", "unix:///nonexistent/docker.sock")],
    );
    assert_eq!(run.code, 3, "{}", run.all());
    assert!(
        run.stderr
            .contains("error: cannot reach the Docker engine at unix:///nonexistent/docker.sock: "),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(
            "\nhint: start the Docker engine at unix:///nonexistent/docker.sock, or unset DOCKER_HOST to use the local socket"
        ),
        "{}",
        run.stderr
    );
}

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
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
#[ignore = "needs a Docker engine: make test-docker"]
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
/// and nothing was created (the run never got the stack's lock). Then a run
/// that waits for the lock goes ahead once it is released: it was still
/// waiting the moment before, and it finishes after, holding the lock.
#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn an_interrupted_run_exits_130_and_a_second_run_waits_for_the_first() {
    if !require_docker() {
        return;
    }
    let stack = TestStack::new("exit-sigint");
    let profile = stack.profile("");
    let (lock_path, held) = hold_stack_lock(&stack);
    let waiting = format!("waiting for another devstack run on stack `{}`", stack.name);

    let mut child = stack.spawn(&profile, &["up"]);
    let stderr = wait_for_line(&mut child, "up", &waiting);
    // devstack's Ctrl-C handler is installed when its watcher task first
    // runs, at the run's first pause, which can come a moment after the
    // message; the lock is retried every 200 ms, so by then it is in place.
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling the child this test spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    let stderr = stderr.join().unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("hint:"), "{stderr}");
    assert!(
        stack.containers().is_empty(),
        "a run that never got the lock creates nothing: {:?}",
        stack.containers()
    );

    // The lock still held: `down` waits and says so (README: "a second run
    // waits and says so"), and goes ahead once the lock is released.
    let mut child = stack.spawn(&profile, &["down"]);
    let stderr = wait_for_line(&mut child, "down", &waiting);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "`down` finished while the lock was held"
    );
    let released = Instant::now();
    drop(held);
    let status = child.wait().unwrap();
    let stderr = stderr.join().unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        released.elapsed() < Duration::from_secs(30),
        "`down` took {:?} after the lock was released:\n{stderr}",
        released.elapsed()
    );
    let holder = std::fs::read_to_string(&lock_path).unwrap();
    assert_eq!(
        holder,
        format!("`devstack down`, pid {}", child.id()),
        "the lock file names its last holder"
    );
}

/// `localstack up` takes the stack's lock as `up` and `down` do: a `down`
/// (or `down --all`) that lists the stack's containers while a LocalStack is
/// being created would otherwise find its network in use and fail half-way.
#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn localstack_up_and_down_wait_for_a_run_that_holds_the_stack() {
    if !require_docker() {
        return;
    }
    require_image(LOCALSTACK_IMAGE);
    let stack = TestStack::new("ls-lock");
    let profile = stack.profile("");
    let waiting = format!("waiting for another devstack run on stack `{}`", stack.name);
    for command in ["up", "down"] {
        let (_, held) = hold_stack_lock(&stack);
        let mut child = stack.spawn(&profile, &["localstack", command]);
        let stderr = wait_for_line(&mut child, command, &waiting);
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            child.try_wait().unwrap().is_none(),
            "`localstack {command}` finished while the lock was held"
        );
        let before = stack.containers();
        drop(held);
        let status = child.wait().unwrap();
        let stderr = stderr.join().unwrap();
        assert_eq!(status.code(), Some(0), "{stderr}");
        let after = stack.containers();
        if command == "up" {
            assert!(before.is_empty(), "created while waiting: {before:?}");
            assert_eq!(after.len(), 1, "{after:?}\n{stderr}");
        } else {
            assert_eq!(before.len(), 1, "removed while waiting: {before:?}");
            assert!(after.is_empty(), "{after:?}\n{stderr}");
        }
    }
}

/// Takes `stack`'s lock as another devstack run would hold it; released
/// when the file is dropped.
fn hold_stack_lock(stack: &TestStack) -> (std::path::PathBuf, std::fs::File) {
    let lock_path = stack
        .dir
        .path()
        .join("state")
        .join("locks")
        .join(format!("{}.lock", stack.name));
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
    (lock_path, held)
}

/// Reads the stderr of `child` (`devstack WHAT`) until a line contains
/// `wanted`, failing when it ends first or after 60 s, then keeps reading
/// on a thread that returns all of it.
fn wait_for_line(
    child: &mut std::process::Child,
    what: &str,
    wanted: &str,
) -> std::thread::JoinHandle<String> {
    use std::io::BufRead;
    use std::sync::mpsc::RecvTimeoutError;
    let stderr = child.stderr.take().unwrap();
    let (seen_tx, seen_rx) = std::sync::mpsc::channel();
    let needle = wanted.to_string();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap();
            if line.contains(&needle) {
                let _ = seen_tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let why = match seen_rx.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => return reader,
        Err(RecvTimeoutError::Disconnected) => "before its stderr closed",
        Err(RecvTimeoutError::Timeout) => "within 60 s (killed)",
    };
    let _ = child.kill();
    panic!(
        "`devstack {what}` did not print `{wanted}` {why}; its stderr:\n{}",
        reader.join().unwrap()
    );
}
