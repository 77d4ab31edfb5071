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
    assert!(
        run.stderr
            .ends_with("hint: `devstack up --help` lists what it takes\n"),
        "{}",
        run.stderr
    );
    // A global flag the command has no use for is refused, not ignored.
    let run = run_devstack_raw(dir.path(), &["-p", "ci", "version"], &[]);
    assert_eq!(run.code, 2, "{}", run.all());
    assert!(
        run.stderr
            .contains("--profile has no effect on `devstack version`"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("hint:"), "{}", run.stderr);
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

/// The container the timed-out `localstack up` created is removed by its
/// rollback, as `up`'s would be; `--retain` keeps it, saying how to remove
/// it, which `localstack down` does.
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
    assert!(run.stderr.contains("rolled back"), "{}", run.stderr);
    assert!(
        stack.containers().is_empty(),
        "left: {:?}\n{}",
        stack.containers(),
        run.stderr
    );

    let kept = stack.run(&profile, &["localstack", "up", "--retain"]);
    assert_eq!(kept.code, 5, "{}", kept.all());
    assert!(
        kept.stderr.contains(&format!(
            "is retained (--retain: LocalStack container devstack-{}-localstack)",
            stack.name
        )) && kept.stderr.contains(" down` removes it"),
        "{}",
        kept.stderr
    );
    assert_eq!(stack.containers().len(), 1, "{}", kept.stderr);
    stack.run(&profile, &["localstack", "down"]).ok();
    assert!(stack.containers().is_empty());
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
    assert!(
        report["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|row| row["health"] == "missing"),
        "{report}"
    );
    assert!(run.stderr.contains("hint:"), "{}", run.stderr);

    // `diagnose --json` prints its usual shape too: a list of findings,
    // here the one that says the stack does not exist and how to create it.
    let run = stack.run(&profile, &["diagnose", "--json"]);
    assert_eq!(run.code, 4, "{}", run.all());
    let findings = run.json();
    assert_eq!(findings.as_array().map(Vec::len), Some(1), "{findings}");
    assert_eq!(findings[0]["detector"], "stack-missing", "{findings}");
    assert_eq!(
        findings[0]["fix"]["command"],
        format!("devstack -p {} up", profile.display()),
        "{findings}"
    );
    assert!(run.stderr.contains("does not exist"), "{}", run.stderr);

    // Every command that reads the stack says it is not there the same
    // way: exit 4, with the command that creates it.
    for args in [
        vec!["diagnose"],
        vec!["logs"],
        vec!["logs", "localstack"],
        vec!["logs", "eso"],
        vec!["logs", "node"],
        vec!["localstack", "logs"],
        vec!["localstack", "logs", "--since", "1m"],
        vec!["kubeconfig"],
        vec!["env"],
        vec!["verify"],
        vec!["seed"],
        vec!["sync"],
        vec!["snapshot", "save"],
        vec!["stop"],
        vec!["start"],
    ] {
        // `auto`: no port to export before LocalStack is made (a fixed
        // one is exported before, as `facts` works before the stack).
        let run = stack.run_env(&profile, &args, &[("DEVSTACK_LOCALSTACK_PORT", "auto")]);
        assert_eq!(run.code, 4, "{args:?}: {}", run.all());
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
        assert!(
            run.stderr.contains(&format!("stack `{}`", stack.name)),
            "{args:?}: the error names the stack: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains(&quoted_command(&profile, "up"))
                || run
                    .stderr
                    .contains(&quoted_command(&profile, "up --provider k3s")),
            "{args:?}: the hint creates the stack: {}",
            run.stderr
        );
    }
    // The test harness leaves `--profile` out where a command takes none.
    let run = stack.run(&profile, &["snapshot", "list", "--json"]);
    assert_eq!(run.ok().json()["snapshots"], serde_json::json!([]));

    // `localstack status` prints its row (LocalStack on its fixed port, absent).
    let run = stack.run(&profile, &["localstack", "status"]);
    assert_eq!(run.code, 4, "{}", run.all());
    assert!(run.stdout.contains("absent"), "{}", run.stdout);
    assert!(
        run.stderr
            .contains(&quoted_command(&profile, "localstack up")),
        "{}",
        run.stderr
    );
    assert!(stack.containers().is_empty(), "reading creates nothing");
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
    // devstack listens for signals from before it waits for the lock; the
    // pause makes sure the run is waiting, not still about to.
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

/// SIGTERM (`timeout`, a cancelled CI job) while `up` downloads its
/// artifacts: exit 143 (128 + 15), the run rolled back, nothing of the stack
/// left, and no trace that would keep the next `up` from starting clean.
#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn an_up_stopped_by_sigterm_while_fetching_artifacts_exits_143_and_leaves_nothing() {
    if !require_docker() {
        return;
    }
    let stack = TestStack::new("exit-sigterm");
    let profile = stack.profile("cluster:\n  provider: k3s\n");
    let (port, requested) = stalling_http_server();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_devstack"))
        .current_dir(stack.dir.path())
        .args(["up", "--profile", profile.to_str().unwrap()])
        .env("DEVSTACK_HOME", stack.dir.path().join("state"))
        .env("CI", "true")
        // Online, through a mirror that starts every download and stalls.
        .env_remove("DEVSTACK_BUNDLE")
        .env(
            "DEVSTACK_DOWNLOAD_MIRROR",
            format!("http://127.0.0.1:{port}"),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let first = requested.recv_timeout(Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: signalling the child this test spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let run = Run::from(child.wait_with_output().unwrap());
    let first = first.unwrap_or_else(|_| panic!("no download began:\n{}", run.all()));
    assert!(first.contains("/flux"), "{first}");
    assert_eq!(run.code, 143, "{}", run.all());
    assert!(
        run.stderr.contains("✗ Artifacts: interrupted"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("error: SIGTERM: rolled back: interrupted"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("hint:"), "{}", run.stderr);
    assert_eq!(stack.leftovers(), Vec::<String>::new(), "{}", run.stderr);
    let listed = run_devstack_raw(stack.dir.path(), &["list", "--json"], &[]);
    assert!(
        !listed.ok().stdout.contains(&stack.name),
        "the next `up` would find a stack to converge: {}",
        listed.stdout
    );
}

/// SIGHUP (the terminal closed) while `status --wait` waits: exit 129
/// (128 + 1) with a message, where it used to end without a word.
#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn a_wait_stopped_by_sighup_exits_129() {
    if !require_docker() {
        return;
    }
    let stack = TestStack::new("exit-sighup");
    let profile = stack.profile("");
    let mut child = stack.spawn(&profile, &["status", "--wait", "2m"]);
    let stderr = wait_for_line(&mut child, "status --wait", "waiting for");
    // SAFETY: signalling the child this test spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGHUP);
    }
    let status = child.wait().unwrap();
    let stderr = stderr.join().unwrap();
    assert_eq!(status.code(), Some(129), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: SIGHUP: stopped waiting for stack `{}` to settle",
            stack.name
        )),
        "{stderr}"
    );
    assert!(stderr.contains("hint:"), "{stderr}");
}

/// A download mirror that answers each request with the start of a large
/// body and then nothing more, so a download is under way for as long as
/// the test needs; each request line is sent on the channel.
fn stalling_http_server() -> (u16, std::sync::mpsc::Receiver<String>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let _ = tx.send(line.trim().to_string());
            let mut stream = stream;
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n");
            let _ = stream.write_all(&[b'x'; 65536]);
            // Held open, unanswered, until the test process ends.
            open.push(stream);
        }
    });
    (port, rx)
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

/// `cluster up` and `cluster down` take the stack's lock as `up` does: a
/// `cluster down` started while `localstack up` runs waits for it, naming
/// it, and goes ahead once it is done; a `cluster up` waits for the run that
/// holds the lock too, and Ctrl-C ends it there (exit 130) with nothing
/// created.
#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn cluster_up_and_down_wait_for_a_run_that_holds_the_stack() {
    if !require_docker() {
        return;
    }
    require_image(LOCALSTACK_IMAGE);
    let stack = TestStack::new("cl-lock");
    // Pinned: settling an open provider may look for kind first.
    let profile = stack.profile("cluster:\n  provider: k3s\n");
    let waiting = format!("waiting for another devstack run on stack `{}`", stack.name);

    // LocalStack takes seconds to report healthy: the lock is held that long.
    let localstack = stack.spawn(&profile, &["localstack", "up"]);
    let holder = format!("`devstack localstack up`, pid {}", localstack.id());
    let lock_path = stack
        .dir
        .path()
        .join(format!("state/locks/{}.lock", stack.name));
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&lock_path).ok().as_deref() != Some(holder.as_str()) {
        assert!(
            Instant::now() < deadline,
            "`localstack up` never took the lock"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut down = stack.spawn(&profile, &["cluster", "down"]);
    let stderr = wait_for_line(
        &mut down,
        "cluster down",
        &format!("{waiting} to finish ({holder})"),
    );
    let localstack = localstack.wait_with_output().unwrap();
    assert!(
        localstack.status.success(),
        "{}",
        String::from_utf8_lossy(&localstack.stderr)
    );
    let status = down.wait().unwrap();
    let stderr = stderr.join().unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("has no cluster"), "{stderr}");

    let (_, held) = hold_stack_lock(&stack);
    let before = stack.leftovers();
    let mut up = stack.spawn(&profile, &["cluster", "up"]);
    let stderr = wait_for_line(&mut up, "cluster up", &waiting);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        up.try_wait().unwrap().is_none(),
        "`cluster up` finished while the lock was held"
    );
    // SAFETY: signalling the child this test spawned.
    unsafe {
        libc::kill(up.id() as i32, libc::SIGINT);
    }
    let status = up.wait().unwrap();
    let stderr = stderr.join().unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert_eq!(
        stack.leftovers(),
        before,
        "a run that never got the lock creates nothing: {stderr}"
    );
    drop(held);
}

/// `stop` does not wait for a run that holds the stack, as `up` and `down`
/// do: it is refused at once (exit 3), naming that run, with nothing stopped.
#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn stop_is_refused_while_another_run_holds_the_stack() {
    use std::io::Write;
    if !require_docker() {
        return;
    }
    let stack = TestStack::new("stop-busy");
    let profile = stack.profile("cluster:\n  provider: k3s\n");
    let (_, mut held) = hold_stack_lock(&stack);
    write!(held, "`devstack up`, pid 4242").unwrap();
    let started = Instant::now();
    let run = stack.run(&profile, &["stop"]);
    assert_eq!(run.code, 3, "{}", run.all());
    assert!(started.elapsed() < Duration::from_secs(10), "it waited");
    assert!(
        run.stderr.contains(&format!(
            "stack `{}` is busy: {}, pid 4242 is working on it, so nothing was stopped",
            stack.name,
            quoted_command(&profile, "up")
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&quoted_command(&profile, "stop")),
        "{}",
        run.stderr
    );
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
