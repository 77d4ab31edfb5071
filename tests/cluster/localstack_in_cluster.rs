//! Cluster tier: `localstack.mode: in-cluster`. LocalStack as a Deployment
//! and Service in namespace `localstack`, delivered as the Flux level the
//! ESO operator depends on: on K3s `up` -> `verify --push-secret` ->
//! `status` -> `seed` -> `localstack forward` (a real AWS request through
//! it) -> `localstack logs` -> `env` and `snapshot save` refused with the
//! reason -> `down`; on Kind to a verified round trip.

use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;

use crate::common::kind::{KindGuard, kind_kit};
use crate::common::*;

fn in_cluster_profile(stack: &TestStack, provider: &str) -> PathBuf {
    profile::ci(&stack.name)
        .provider(provider)
        .localstack("  mode: in-cluster\n")
        .write(&stack.dir.path().join("profile.yaml"))
}

/// The stack's rows by component and name, from `status --json`.
fn status_row<'a>(
    status: &'a serde_json::Value,
    component: &str,
    name: &str,
) -> &'a serde_json::Value {
    status["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["component"] == component && r["name"] == name)
        .unwrap_or_else(|| panic!("no {component} row {name}:\n{status:#}"))
}

/// A plain HTTP GET on `127.0.0.1:port`, returning the whole response.
fn http_get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the forward");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn in_cluster_localstack_on_k3s_from_up_to_down() {
    if !require_cluster_kit() {
        return;
    }
    let stack = TestStack::new("lsic");
    let profile = in_cluster_profile(&stack, "k3s");

    let up = stack.run(&profile, &["up", "--json"]);
    let report = up.ok().json();
    assert_eq!(report["created"], true, "{report}");
    assert_eq!(report["verify"]["passed"], true, "{report}");
    assert_eq!(
        report["localstack"]["endpoint"]["container"], "Deployment localstack/localstack",
        "{report}"
    );
    assert!(
        up.stderr.contains("devstack") && up.stderr.contains("localstack forward"),
        "the next steps name the forward:\n{}",
        up.stderr
    );
    // No LocalStack container: only the node.
    let containers = docker_lines(&[
        "ps",
        "-a",
        "--format",
        "{{.Names}}",
        "--filter",
        &format!("label=dev.devstack.stack={}", stack.name),
    ]);
    assert!(
        !containers.iter().any(|c| c.ends_with("-localstack")),
        "{containers:?}"
    );

    let verify = stack.run(&profile, &["verify", "--push-secret", "--json"]);
    assert_eq!(verify.ok().json()["passed"], true, "{}", verify.all());

    let status = stack.run(&profile, &["status", "--json"]);
    let status = status.ok().json();
    let localstack = status_row(&status, "localstack", "localstack/localstack");
    assert_eq!(localstack["health"], "healthy", "{status:#}");
    let level = status_row(&status, "kustomization", "flux-system/localstack");
    assert_eq!(level["health"], "healthy", "{status:#}");

    let seed = stack.run(&profile, &["seed", "--json"]);
    assert_eq!(seed.ok().json()["secrets"][0]["outcome"], "unchanged");

    an_image_pull_that_fails_is_named_and_up_repairs_it(&stack, &profile);

    forward_serves_aws_and_closes_on_ctrl_c(&stack, &profile);

    let logs = stack.run(&profile, &["localstack", "logs", "--tail", "20"]);
    assert!(
        logs.ok().stdout.contains("secretsmanager"),
        "LocalStack's pod log shows the seeding:\n{}",
        logs.all()
    );

    let env = stack.run(&profile, &["env"]);
    assert_eq!(env.code, 2, "{}", env.all());
    assert!(env.stderr.contains("localstack forward"), "{}", env.stderr);
    let save = stack.run(&profile, &["snapshot", "save"]);
    assert_eq!(save.code, 2, "{}", save.all());
    assert!(save.stderr.contains("localstack.mode"), "{}", save.stderr);

    stack.run(&profile, &["down"]).ok();
    assert!(stack.containers().is_empty(), "{:?}", stack.containers());
}

/// LocalStack's Deployment pointed at an image no node can pull: `status`
/// names the pull, and `up` puts the profile's image back, re-seeds the new
/// LocalStack and verifies.
fn an_image_pull_that_fails_is_named_and_up_repairs_it(
    stack: &TestStack,
    profile: &std::path::Path,
) {
    let rt = runtime();
    let client = kube_client(&rt, stack);
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client, "localstack");
    let patch = serde_json::json!({"spec": {"template": {"spec": {"containers": [
        {"name": "localstack", "image": "localstack/localstack:0.0.0-devstack-test-missing"}]}}}});
    rt.block_on(deployments.patch(
        "localstack",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Strategic(&patch),
    ))
    .unwrap();
    let named = (0..120).find_map(|_| {
        let status = stack.run(profile, &["status", "--json"]).json();
        let row = status_row(&status, "localstack", "localstack/localstack").clone();
        let detail = row["detail"].as_str().unwrap_or_default().to_string();
        if detail.contains("ErrImagePull") || detail.contains("ImagePullBackOff") {
            return Some(row);
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        None
    });
    let row = named.expect("status names the failing image pull");
    assert_eq!(row["health"], "unhealthy", "{row}");
    let up = stack.run(profile, &["up", "--json"]);
    let report = up.ok().json();
    assert_eq!(report["verify"]["passed"], true, "{report}");
    assert!(
        report["repaired"].to_string().contains("LocalStack"),
        "{report}"
    );
}

/// `localstack forward --port P` prints the env lines for P, serves AWS
/// requests there, and exits 0 on Ctrl-C with the port closed.
fn forward_serves_aws_and_closes_on_ctrl_c(stack: &TestStack, profile: &std::path::Path) {
    let port = free_port();
    let mut child = stack.spawn(
        profile,
        &["localstack", "forward", "--port", &port.to_string()],
    );
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut printed = String::new();
    while !printed.contains("KUBECONFIG") {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .unwrap();
            panic!("forward ended early:\n{printed}\n{stderr}");
        }
        printed.push_str(&line);
    }
    assert!(
        printed.contains(&format!(
            "export AWS_ENDPOINT_URL='http://127.0.0.1:{port}'"
        )),
        "{printed}"
    );
    let health = http_get(port, "/_localstack/health");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(
        health.contains("\"secretsmanager\": \"running\""),
        "{health}"
    );
    // A real AWS call through the forward: the seeded secret is listed.
    let settings = settings(profile).with_localstack_port(port);
    let rt = runtime();
    let names = rt.block_on(async {
        let client = devstack::aws::secrets_manager(&settings);
        let listed = client.list_secrets().send().await.expect("list secrets");
        listed
            .secret_list()
            .iter()
            .filter_map(|s| s.name().map(String::from))
            .collect::<Vec<_>>()
    });
    assert!(names.contains(&"ci/app/token".to_string()), "{names:?}");

    // SAFETY: signalling the child this test spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the forward's port is still open"
    );
}

#[test]
#[ignore = "needs Docker and the offline kit: make test-cluster"]
fn in_cluster_localstack_on_kind_to_a_verified_round_trip() {
    const TEST: &str = "in_cluster_localstack_on_kind_to_a_verified_round_trip";
    let Some(kind) = kind_kit(TEST) else {
        return;
    };
    let stack = TestStack::new("lsick");
    let _guard = KindGuard::new(kind, &stack);
    let profile = in_cluster_profile(&stack, "kind");

    let up = stack.run(&profile, &["up", "--json"]);
    let report = up.ok().json();
    assert_eq!(report["cluster"]["provider"], "kind", "{report}");
    assert_eq!(report["verify"]["passed"], true, "{report}");
    assert_eq!(
        report["localstack"]["endpoint"]["container"], "Deployment localstack/localstack",
        "{report}"
    );
    let verify = stack.run(&profile, &["verify", "--json"]);
    assert_eq!(verify.ok().json()["passed"], true, "{}", verify.all());
    stack.run(&profile, &["down"]).ok();
}
