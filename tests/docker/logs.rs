//! Docker tier: `devstack logs` and `localstack logs` against a real
//! LocalStack container.

use std::io::BufRead;
use std::time::Duration;

use crate::common::*;

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn logs_read_localstack_bare_labelled_as_json_and_followed_until_a_signal() {
    if !require_docker() {
        return;
    }
    require_image(LOCALSTACK_IMAGE);
    let stack = TestStack::new("logs");
    let profile = stack.profile("");

    // No LocalStack yet: the stack is not there, exit 4 as for every read.
    let before = stack.run(&profile, &["logs", "localstack"]);
    assert_eq!(before.code, 4, "{}", before.all());
    assert!(
        before.stderr.contains("has no LocalStack"),
        "{}",
        before.stderr
    );
    assert!(before.stderr.contains("hint:"), "{}", before.stderr);
    let nothing = stack.run(&profile, &["logs"]);
    assert_eq!(nothing.code, 4, "{}", nothing.all());
    assert!(nothing.stderr.contains("hint:"), "{}", nothing.stderr);

    stack.run(&profile, &["localstack", "up"]).ok();

    let bare = stack.run(&profile, &["logs", "localstack", "--tail", "5"]);
    bare.ok();
    let lines: Vec<&str> = bare.stdout.lines().collect();
    assert!(!lines.is_empty() && lines.len() <= 5, "{}", bare.stdout);
    assert!(
        !lines.iter().any(|l| l.starts_with("localstack | ")),
        "one named source prints bare lines: {}",
        bare.stdout
    );
    // The same lines `localstack logs` prints: one code path.
    let same = stack.run(&profile, &["localstack", "logs", "--tail", "5"]);
    assert_eq!(same.ok().stdout.lines().count(), lines.len());
    let since = stack.run(&profile, &["localstack", "logs", "--since", "1h"]);
    assert!(
        since.ok().stdout.lines().count() >= lines.len(),
        "--since 1h takes every line of the hour: {}",
        since.stdout
    );

    // Every component: the cluster's have no source here, LocalStack's
    // lines carry their source.
    let all = stack.run(&profile, &["logs", "--tail", "5"]);
    all.ok();
    assert!(
        all.stdout.lines().all(|l| l.starts_with("localstack | ")),
        "{}",
        all.stdout
    );

    let json = stack.run(&profile, &["logs", "localstack", "--since", "1h", "--json"]);
    json.ok();
    for line in json.stdout.lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(value["source"], "localstack");
        assert!(value["time"].as_str().unwrap().ends_with('Z'), "{value}");
    }
    assert!(json.stdout.lines().count() > 0);

    let eso = stack.run(&profile, &["logs", "eso"]);
    assert_eq!(eso.code, 4, "no cluster: {}", eso.all());
    assert!(eso.stderr.contains("has no cluster"), "{}", eso.stderr);
    assert!(eso.stderr.contains("hint:"), "{}", eso.stderr);

    let mut child = stack.spawn(&profile, &["logs", "localstack", "-f", "--tail", "2"]);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("a followed log prints its tail at once");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "-f keeps following after the tail"
    );
    // SIGTERM as Ctrl-C (which tests/cluster/logs_k3s.rs sends): the way a
    // follow ends, so not a failure.
    // SAFETY: signalling the child this test spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    reader.join().unwrap();
    assert_eq!(status.code(), Some(0), "SIGTERM ends a followed log");
}
