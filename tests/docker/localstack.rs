//! Docker tier: a real engine and the real LocalStack image.

use crate::common::*;

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn localstack_starts_is_reused_restarted_and_recreated_on_a_changed_spec() {
    if !require_docker() {
        return;
    }
    require_image(LOCALSTACK_IMAGE);
    let stack = TestStack::new("ls");
    let profile = stack.profile("");

    let first = stack.run(&profile, &["localstack", "up", "--json"]);
    first.ok();
    let report = first.json();
    assert_eq!(report["action"]["action"], "created", "{report}");
    for service in ["secretsmanager", "sts", "s3"] {
        let state = report["services"][service].as_str().unwrap_or("absent");
        assert!(
            matches!(state, "available" | "running"),
            "{service}: {state}"
        );
    }
    assert_eq!(stack.containers().len(), 1);
    assert_eq!(stack.networks().len(), 1);
    assert_eq!(listed_state(&stack).as_deref(), Some("running"));

    let again = stack.run(&profile, &["localstack", "up", "--json"]);
    assert_eq!(again.ok().json()["action"]["action"], "reused");

    let container = format!("devstack-{}-localstack", stack.name);
    assert!(docker(&["stop", "-t", "1", &container]).status.success());
    assert_eq!(listed_state(&stack).as_deref(), Some("stopped"));
    let restarted = stack.run(&profile, &["localstack", "up", "--json"]);
    assert_eq!(restarted.ok().json()["action"]["action"], "restarted");

    let changed = stack.profile("  # changed spec\n");
    std::fs::write(
        &changed,
        std::fs::read_to_string(&changed).unwrap().replace(
            &format!("  port: {}\n", stack.port),
            &format!(
                "  port: {}\n  services: [secretsmanager, sts, s3, ssm]\n",
                stack.port
            ),
        ),
    )
    .unwrap();
    let recreated = stack.run(&changed, &["localstack", "up", "--json"]);
    let report = recreated.ok().json();
    assert_eq!(report["action"]["action"], "recreated");
    assert!(
        report["action"]["reason"]
            .as_str()
            .unwrap()
            .contains("services"),
        "{report}"
    );
    assert!(
        recreated.stderr.contains("recreated (services"),
        "{}",
        recreated.stderr
    );

    let status = stack.run(&changed, &["localstack", "status", "--json"]);
    assert_eq!(status.ok().json()["healthy"], true);

    let logs = stack.run(&changed, &["localstack", "logs", "--tail", "5"]);
    logs.ok();
    assert!(!logs.stdout.trim().is_empty(), "logs should not be empty");

    stack.run(&changed, &["localstack", "down"]).ok();
    assert!(stack.containers().is_empty());
    assert!(stack.networks().is_empty());
    // A record, if any, stays until `down`: listed with no container behind it.
    let state = listed_state(&stack);
    assert!(
        matches!(state.as_deref(), None | Some("missing")),
        "{state:?}"
    );
    // Idempotent: nothing left to remove is success.
    stack.run(&changed, &["localstack", "down"]).ok();
    let status = stack.run(&changed, &["localstack", "status"]);
    assert_eq!(
        status.code, 4,
        "status of an absent LocalStack is unhealthy"
    );
}

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn a_taken_port_is_a_clear_error_and_leaves_nothing_behind() {
    if !require_docker() {
        return;
    }
    require_image(LOCALSTACK_IMAGE);
    let mut stack = TestStack::new("port");
    let listener = stack.hold_its_port();
    let profile = stack.profile("");
    let run = stack.run(&profile, &["localstack", "up"]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("127.0.0.1:{}", stack.port)),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("already in use"), "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("pid {}", std::process::id()))
            || run.stderr.contains("held by"),
        "names the holder: {}",
        run.stderr
    );
    assert!(run.stderr.contains("hint:"), "{}", run.stderr);
    assert!(
        stack.containers().is_empty(),
        "no container may be left behind"
    );
    drop(listener);
}

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn an_unlabelled_container_with_the_same_name_is_left_alone() {
    if !require_docker() {
        return;
    }
    require_image(LOCALSTACK_IMAGE);
    let stack = TestStack::new("foreign");
    let name = format!("devstack-{}-localstack", stack.name);
    let created = docker(&["create", "--name", &name, LOCALSTACK_IMAGE]);
    assert!(created.status.success());
    let profile = stack.profile("");
    let up = stack.run(&profile, &["localstack", "up"]);
    let down = stack.run(&profile, &["localstack", "down"]);
    let still_there = docker(&["inspect", &name]).status.success();
    let _ = docker(&["rm", "-f", "-v", &name]);
    assert_eq!(up.code, 3, "{}", up.stderr);
    assert!(
        up.stderr.contains(&format!(
            "a container named `{name}` exists but devstack did not create it\n\
             hint: rename or remove it (`docker rm -f {name}`), or choose another stack name with --name"
        )),
        "{}",
        up.stderr
    );
    // `down` refuses a container it does not own as an input error (2),
    // where `up` reports the same name in the way as a prerequisite (3).
    assert_eq!(down.code, 2, "{}", down.stderr);
    assert!(
        down.stderr.contains(&format!(
            "error: container `{name}` was not created by devstack; leaving it alone"
        )),
        "{}",
        down.stderr
    );
    assert!(
        still_there,
        "devstack must never remove a container it did not label"
    );
}

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn doctor_reports_the_real_engine_and_a_dead_socket() {
    if !require_docker() {
        return;
    }
    let stack = TestStack::new("doc");
    let profile = stack.profile("");
    let run = stack.run(&profile, &["doctor", "--json"]);
    let report = run.json();
    let docker_check = doctor_check(&report, "docker");
    assert_eq!(docker_check["status"], "pass", "{report}");
    assert!(
        docker_check["detail"]
            .as_str()
            .unwrap()
            .contains("cgroup v"),
        "{report}"
    );
    assert_eq!(run.code, if report["ok"] == true { 0 } else { 3 });

    let dead = stack.dir.path().join("dead.sock");
    let host = format!("unix://{}", dead.display());
    let run = stack.run_env(&profile, &["doctor"], &[("DOCKER_HOST", &host)]);
    assert_eq!(run.code, 3, "{}", run.all());
    assert!(
        run.stdout
            .contains(&format!("cannot reach the Docker engine at {host}")),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("hint: start the Docker engine at"),
        "{}",
        run.stdout
    );
    let run = stack.run_env(&profile, &["localstack", "up"], &[("DOCKER_HOST", &host)]);
    assert_eq!(run.code, 3);
    assert!(run.stderr.contains("hint:"), "{}", run.stderr);
}

/// A download mirror that answers every request and records its request
/// lines: what `doctor` asked of the network.
fn recording_http_server() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            record.lock().unwrap().push(line.trim().to_string());
            let mut header = String::new();
            while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
                header.clear();
            }
            let mut stream = stream;
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nkind",
            );
        }
    });
    (port, seen)
}

/// `doctor` looks and changes nothing: no state directory, no cache, no
/// download (a HEAD to see that kind could be fetched is all it asks), and
/// a missing kind is a warning that says `up` fetches it.
#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn doctor_creates_nothing_and_downloads_nothing() {
    if !require_docker() {
        return;
    }
    let stack = TestStack::new("docnone");
    let profile = stack.profile("");
    let (port, seen) = recording_http_server();
    let mirror = format!("http://127.0.0.1:{port}");
    let path_without_kind = path_without_kind();
    let run = stack.run_env(
        &profile,
        &["doctor", "--json"],
        &[
            ("DEVSTACK_DOWNLOAD_MIRROR", &mirror),
            ("PATH", &path_without_kind),
            ("DEVSTACK_KIND", ""),
        ],
    );
    let report = run.json();
    let state = stack.dir.path().join("state");
    assert!(
        !state.exists(),
        "doctor wrote {}: {:?}",
        state.display(),
        std::fs::read_dir(&state).map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
    );
    let requests = seen.lock().unwrap().clone();
    assert!(
        requests.iter().all(|r| r.starts_with("HEAD ")),
        "doctor downloaded: {requests:?}"
    );
    assert!(
        !requests.is_empty(),
        "doctor did not look for kind's download: {report}"
    );
    let kind = doctor_check(&report, "kind");
    assert_eq!(kind["status"], "warn", "{report}");
    assert!(
        kind["detail"].as_str().unwrap().contains("not installed"),
        "{report}"
    );
}

/// Where kind is missing and cannot be fetched, `up` makes a new stack on
/// K3s: doctor assesses K3s and says so (its first and last lines), and
/// its kind line warns rather than passes. With an engine too, input `up`
/// refuses before creating anything fails doctor with `up`'s class, 2.
#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn doctor_assesses_the_k3s_fallback_and_refuses_what_up_refuses() {
    if !require_docker() {
        return;
    }
    let stack = TestStack::new("dock3s");
    let profile = stack.profile("");
    let path_without_kind = path_without_kind();
    let no_kind = [
        // Nothing listens there: the download is refused at once.
        ("DEVSTACK_DOWNLOAD_MIRROR", "http://127.0.0.1:9"),
        ("PATH", path_without_kind.as_str()),
        ("DEVSTACK_KIND", ""),
        ("DEVSTACK_BUNDLE", ""),
    ];
    let run = stack.run_env(&profile, &["doctor"], &no_kind);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines.first().is_some_and(
            |l| l.starts_with("✓ provider") && l.contains("k3s instead of Kind, the default")
        ),
        "{}",
        run.all()
    );
    let kind = lines
        .iter()
        .position(|l| l.starts_with("! kind "))
        .unwrap_or_else(|| panic!("no warning about kind: {}", run.all()));
    assert!(
        lines[kind].contains("a new stack uses K3s instead of Kind"),
        "{}",
        run.all()
    );
    assert!(
        lines[kind + 1].contains("hint: install kind"),
        "{}",
        run.all()
    );
    let subject = format!(
        "stack `{}` (profile {}, provider k3s) ",
        stack.name,
        profile.display()
    );
    assert!(
        lines.last().is_some_and(|l| l.starts_with(&subject)),
        "{}",
        run.all()
    );
    assert_eq!(
        run.code,
        if run.stdout.contains("can run here") {
            0
        } else {
            3
        }
    );

    let bundle = [("DEVSTACK_BUNDLE", "/nonexistent")];
    let run = stack.run_env(
        &profile,
        &["--provider", "k3s", "doctor", "--json"],
        &bundle,
    );
    assert_eq!(run.code, 2, "{}", run.all());
    let report = run.json();
    assert_eq!(report["exitCode"], 2, "{report}");
    assert_eq!(
        doctor_check(&report, "docker")["status"],
        "pass",
        "{report}"
    );
    let check = doctor_check(&report, "bundle");
    assert_eq!(check["status"], "fail", "{report}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("cannot read offline bundle index /nonexistent/index.json"),
        "{check}"
    );
    assert!(stack.containers().is_empty(), "doctor created containers");
}

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn doctor_names_the_holder_of_a_taken_port() {
    let mut stack = TestStack::new("docport");
    let listener = stack.hold_its_port();
    let profile = stack.profile("");
    let run = stack.run_env(&profile, &["doctor", "--json"], &[]);
    let report = run.json();
    let check = doctor_check(&report, &format!("port {}", stack.port));
    drop(listener);
    assert_eq!(check["status"], "fail", "{report}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("pid {}", std::process::id())),
        "{check}"
    );
    assert!(check["hint"].as_str().is_some());
    assert_eq!(run.code, 3);
}

/// `port: auto` (the default): two stacks of one profile each get a free
/// port, keep it across a restart, and report it through `env`.
#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn auto_ports_let_stacks_of_one_profile_run_side_by_side() {
    if !require_docker() {
        return;
    }
    require_image(LOCALSTACK_IMAGE);
    let first = TestStack::new("auto1");
    let second = TestStack::new("auto2");
    let profile = first.dir.path().join("shared.yaml");
    std::fs::write(
        &profile,
        "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: shared\ntimeouts:\n  localstack: 120s\n",
    )
    .unwrap();
    // Before LocalStack exists an `auto` port is unknown: `env` says how
    // to get one instead of printing an address of no stack.
    let early = first.run(&profile, &["env", "--name", &first.name]);
    assert_eq!(early.code, 4, "{}", early.all());
    assert!(
        early.stderr.contains(&format!(
            "hint: run `devstack -p {} --name {} up`",
            profile.display(),
            first.name
        )),
        "{}",
        early.stderr
    );

    let port_of = |stack: &TestStack| -> u64 {
        let run = stack.run(
            &profile,
            &["localstack", "up", "--json", "--name", &stack.name],
        );
        run.ok().json()["endpoint"]["hostPort"].as_u64().unwrap()
    };
    let (a, b) = (port_of(&first), port_of(&second));
    assert_ne!(a, b, "each stack has its own port");
    assert_eq!(port_of(&first), a, "a reused container keeps its port");
    let container = format!("devstack-{}-localstack", first.name);
    assert!(docker(&["stop", "-t", "1", &container]).status.success());
    assert_eq!(port_of(&first), a, "a restarted container keeps its port");

    let env = first.run(&profile, &["env", "--name", &first.name]);
    assert!(
        env.ok()
            .stdout
            .contains(&format!("AWS_ENDPOINT_URL='http://127.0.0.1:{a}'")),
        "{}",
        env.stdout
    );
    let record = std::fs::read_to_string(
        first
            .dir
            .path()
            .join("state/stacks")
            .join(&first.name)
            .join("stack.json"),
    )
    .unwrap();
    assert!(record.contains(&format!("\"localstack\": {a}")), "{record}");
}

/// The state `devstack list --json` gives `stack` (`None`: not listed).
fn listed_state(stack: &TestStack) -> Option<String> {
    let run = run_devstack_raw(stack.dir.path(), &["list", "--json"], &[]);
    let stacks = run.ok().json()["stacks"].as_array().unwrap().clone();
    stacks
        .iter()
        .find(|s| s["name"] == stack.name.as_str())
        .map(|s| s["state"].as_str().unwrap().to_string())
}
