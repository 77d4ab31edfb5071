//! Shared helpers for tests that need a Docker engine.
#![allow(dead_code)]

pub mod kind;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The image devstack runs by default (the version matrix's).
pub const LOCALSTACK_IMAGE: &str = devstack::versions::LOCALSTACK_IMAGE;

/// Prints the line tests/run.sh counts as a skipped test,
/// `SKIPPED: <test>: <why>`, naming the running test (libtest runs each
/// test on a thread named after it).
pub fn say_skipped(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<unnamed test>");
    eprintln!("SKIPPED: {test}: {why}");
}

/// Whether this runs under CI (`CI` set to anything but empty, `0` or
/// `false`), where nothing may be skipped on purpose.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false"))
}

/// Whether the test must skip because DEVSTACK_TEST_SKIP_DOCKER asks it
/// to. The skip never wins over a demand: a test of a required tier, or
/// any test in CI, fails instead of reporting a skip as a pass.
fn docker_skip_requested() -> bool {
    if std::env::var_os("DEVSTACK_TEST_SKIP_DOCKER").is_none() {
        return false;
    }
    assert!(
        !in_ci(),
        "DEVSTACK_TEST_SKIP_DOCKER is refused when CI is set: CI must run the Docker tier"
    );
    assert!(
        std::env::var_os("DEVSTACK_TEST_REQUIRE_CLUSTER").is_none(),
        "DEVSTACK_TEST_SKIP_DOCKER and DEVSTACK_TEST_REQUIRE_CLUSTER are both set: a required test cannot be skipped"
    );
    true
}

/// The engine must answer: a Docker-tier test that finds none fails loudly
/// (CI installs and starts one) unless explicitly skipped outside CI.
pub fn require_docker() -> bool {
    if docker_skip_requested() {
        say_skipped("DEVSTACK_TEST_SKIP_DOCKER is set");
        return false;
    }
    let ok = Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "this test needs a Docker engine: run `make host` (or set DEVSTACK_TEST_SKIP_DOCKER=1 to skip the Docker tier outside CI)"
    );
    true
}

pub fn require_image(image: &str) {
    let ok = Command::new("docker")
        .args(["image", "inspect", image])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "image {image} is missing: build it with `make kit` (kit/components/localstack.sh)"
    );
}

/// A port that is free now, drawn below Linux's ephemeral range (32768-60999):
/// a port asked of the kernel (`bind(0)`) is released before the test uses it,
/// and devstack's `port: auto` or Docker, asking the kernel in a parallel
/// test, could be handed that very port in between (CI once failed on it).
pub fn free_port() -> u16 {
    const BELOW_EPHEMERAL: std::ops::Range<u32> = 20000..32000;
    for _ in 0..200 {
        let port = (BELOW_EPHEMERAL.start + rand_u32() % BELOW_EPHEMERAL.len() as u32) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {BELOW_EPHEMERAL:?} after 200 tries");
}

/// A uniquely named stack whose labelled resources are removed on drop,
/// even when the test panics. Set DEVSTACK_TEST_KEEP=1 to keep them.
pub struct TestStack {
    pub name: String,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl TestStack {
    pub fn new(prefix: &str) -> Self {
        let suffix: String = format!("{:x}", rand_u32());
        let name = format!("t-{prefix}-{suffix}");
        TestStack {
            name,
            port: free_port(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Takes this stack's port and keeps it taken until the listener drops:
    /// the port is held from the moment it is chosen, so no parallel test can
    /// be handed it in between.
    pub fn hold_its_port(&mut self) -> std::net::TcpListener {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        self.port = listener.local_addr().unwrap().port();
        listener
    }

    /// Writes a profile for this stack with extra YAML appended.
    pub fn profile(&self, extra: &str) -> PathBuf {
        let path = self.dir.path().join("profile.yaml");
        let text = format!(
            "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: {}\nlocalstack:\n  port: {}\ntimeouts:\n  localstack: 120s\n  seed: 60s\n{extra}",
            self.name, self.port
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    pub fn run(&self, profile: &Path, args: &[&str]) -> Run {
        run_devstack(self.dir.path(), profile, args, &[])
    }

    pub fn run_env(&self, profile: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
        run_devstack(self.dir.path(), profile, args, env)
    }

    /// Starts `devstack ARGS --profile PROFILE` for this stack without
    /// waiting, its output piped: for tests that signal or race it.
    pub fn spawn(&self, profile: &Path, args: &[&str]) -> std::process::Child {
        Command::new(env!("CARGO_BIN_EXE_devstack"))
            .current_dir(self.dir.path())
            .args(args)
            .arg("--profile")
            .arg(profile)
            .env("DEVSTACK_HOME", self.dir.path().join("state"))
            .env("CI", "true")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run devstack")
    }

    pub fn containers(&self) -> Vec<String> {
        docker_lines(&[
            "ps",
            "-aq",
            "--filter",
            &format!("label=dev.devstack.stack={}", self.name),
        ])
    }

    pub fn networks(&self) -> Vec<String> {
        docker_lines(&[
            "network",
            "ls",
            "-q",
            "--filter",
            &format!("label=dev.devstack.stack={}", self.name),
        ])
    }
}

impl Drop for TestStack {
    fn drop(&mut self) {
        if std::env::var_os("DEVSTACK_TEST_KEEP").is_some() {
            eprintln!("keeping stack {} (DEVSTACK_TEST_KEEP)", self.name);
            return;
        }
        remove_stack_resources(&self.name);
    }
}

pub fn remove_stack_resources(stack: &str) {
    let filter = format!("label=dev.devstack.stack={stack}");
    let containers = docker_lines(&["ps", "-aq", "--filter", &filter]);
    if !containers.is_empty() {
        let mut args = vec!["rm", "-f", "-v"];
        args.extend(containers.iter().map(String::as_str));
        let _ = Command::new("docker").args(&args).output();
    }
    for network in docker_lines(&["network", "ls", "-q", "--filter", &filter]) {
        let _ = Command::new("docker")
            .args(["network", "rm", &network])
            .output();
    }
    for volume in docker_lines(&["volume", "ls", "-q", "--filter", &filter]) {
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", &volume])
            .output();
    }
}

pub fn docker_lines(args: &[&str]) -> Vec<String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

pub fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI")
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish() as u32
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Run {
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
    #[track_caller]
    pub fn ok(&self) -> &Self {
        assert_eq!(
            self.code, 0,
            "expected success\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }
}

pub fn run_devstack(cwd: &Path, profile: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let profile = profile.to_str().expect("profile path is UTF-8");
    let mut args = args.to_vec();
    args.extend(["--profile", profile]);
    run_devstack_raw(cwd, &args, env)
}

/// devstack with exactly these arguments, its state under `cwd/state`.
pub fn run_devstack_raw(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_devstack"));
    cmd.current_dir(cwd)
        .args(args)
        .env("DEVSTACK_HOME", cwd.join("state"))
        .env("CI", "true")
        .env_remove("DEVSTACK_PROFILE")
        .env_remove("DEVSTACK_NAME")
        .env_remove("DEVSTACK_LOCALSTACK_PORT")
        .env_remove("LOCALSTACK_AUTH_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    Run::from(cmd.output().expect("run devstack"))
}

/// A `devstack ARGS` command as devstack's messages quote it to a run given
/// `--profile PROFILE` (the flags that select the stack are added, so a
/// pasted command reaches the same stack), backquotes included.
pub fn quoted_command(profile: &Path, args: &str) -> String {
    format!("`devstack -p {} {args}`", profile.display())
}

/// Settings for a test profile, to talk to its LocalStack directly.
pub fn settings(profile: &Path) -> devstack::profile::Settings {
    devstack::profile::select(Some(profile.to_str().unwrap()), &Default::default()).unwrap()
}

/// Reads a secret's current value straight from LocalStack.
pub async fn secret_value(settings: &devstack::profile::Settings, name: &str) -> Option<String> {
    let client = devstack::aws::secrets_manager(settings);
    client
        .get_secret_value()
        .secret_id(name)
        .send()
        .await
        .ok()?
        .secret_string
}

pub async fn secret_names(settings: &devstack::profile::Settings) -> Vec<String> {
    let client = devstack::aws::secrets_manager(settings);
    let list = client
        .list_secrets()
        .max_results(100)
        .send()
        .await
        .expect("list secrets");
    list.secret_list
        .unwrap_or_default()
        .into_iter()
        .filter_map(|s| s.name)
        .collect()
}

pub const K3S_IMAGE: &str = devstack::versions::K3S_IMAGE;

pub fn bundle_dir() -> std::path::PathBuf {
    std::env::var_os("DEVSTACK_KIT_BUNDLE")
        .map(Into::into)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap())
                .join(".cache/devstack/kit/bundle")
        })
}

/// The cluster tier needs the kit; without it the test says so loudly and
/// stops, unless DEVSTACK_TEST_REQUIRE_CLUSTER demands it.
pub fn require_cluster_kit() -> bool {
    if !require_docker() {
        return false;
    }
    let image = docker(&["image", "inspect", K3S_IMAGE]).status.success();
    let bundle = bundle_dir().join("index.json").is_file();
    if image && bundle {
        return true;
    }
    let why = format!(
        "needs the kit's {K3S_IMAGE} image and bundle at {} (run `make kit`)",
        bundle_dir().display()
    );
    assert!(
        std::env::var_os("DEVSTACK_TEST_REQUIRE_CLUSTER").is_none(),
        "{why}"
    );
    say_skipped(&why);
    false
}

/// A runtime for the async library calls a test makes.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A kube client for a test stack's cluster, from the kubeconfig `devstack`
/// wrote under the stack's DEVSTACK_HOME.
pub fn kube_client(rt: &tokio::runtime::Runtime, stack: &TestStack) -> kube::Client {
    let path = stack
        .dir
        .path()
        .join("state/stacks")
        .join(&stack.name)
        .join("kubeconfig");
    let config =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    rt.block_on(devstack::k8s::client_from_kubeconfig(&config))
        .unwrap()
}

/// A tiny image with the tools pod probes use, made from the host's
/// busybox, preloaded into test clusters.
pub const BUSYBOX: &str = "devstack-test/busybox:1";

pub fn ensure_busybox_image() {
    if docker(&["image", "inspect", BUSYBOX]).status.success() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root/bin");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy("/bin/busybox", root.join("busybox"))
        .expect("busybox-static is installed by scripts/setup-docker.sh");
    // busybox-static's wget segfaults in pods; nc speaks HTTP well enough
    // (stdin is held open so nc reads the whole response).
    for tool in ["sh", "nc", "printf", "sleep", "nslookup", "cat", "grep"] {
        std::os::unix::fs::symlink("busybox", root.join(tool)).unwrap();
    }
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar -C {} -c . | docker import - {BUSYBOX}",
            dir.path().join("root").display()
        ))
        .status()
        .unwrap();
    assert!(status.success());
}

/// A `verify --push-secret --json` report passed, push check included.
#[track_caller]
pub fn assert_push_verified(report: &serde_json::Value) {
    assert_eq!(report["passed"], true, "{report}");
    assert!(
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "push" && c["passed"] == true),
        "{report}"
    );
}

/// A pod (pinned to `node`, when given) fetches LocalStack's health through
/// the in-cluster Service name; returns what it printed.
pub async fn probe_localstack(client: &kube::Client, name: &str, node: Option<&str>) -> String {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, DeleteParams, LogParams, PostParams};
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut spec = serde_json::json!({"restartPolicy": "Never", "containers": [{
        "name": "probe", "image": BUSYBOX, "imagePullPolicy": "Never",
        "command": ["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do (printf 'GET /_localstack/health HTTP/1.0\\r\\nHost: localstack\\r\\n\\r\\n'; sleep 3) | nc -w 10 localstack.localstack.svc.cluster.local 4566 | grep services && exit 0; sleep 1; done; exit 1"],
    }]});
    if let Some(node) = node {
        spec["nodeName"] = node.into();
        spec["tolerations"] = serde_json::json!([{"operator": "Exists"}]);
    }
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let mut phase = String::new();
    for _ in 0..240 {
        let p = pods.get(name).await.unwrap();
        phase = p.status.and_then(|s| s.phase).unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let logs = pods
        .logs(name, &LogParams::default())
        .await
        .unwrap_or_default();
    let _ = pods.delete(name, &DeleteParams::default()).await;
    assert_eq!(phase, "Succeeded", "probe pod {name} on {node:?}: {logs}");
    logs
}

/// Ctrl-C during the round trip of `up` on an existing stack, whatever its
/// provider: the run exits 130 after removing its probes, so no probe
/// ExternalSecret, no probe Secret and no probe secret in LocalStack is left,
/// not even a probe Secret written again once its ExternalSecret is gone
/// (as an ESO reconcile still in flight does; a stand-in writes it here).
pub fn interrupted_verify_leaves_no_probe(stack: &TestStack, profile: &std::path::Path) {
    use kube::api::Api;
    use std::io::BufRead;
    let port = stack.run(profile, &["status", "--json"]).json()["ports"]["localstack"]
        .as_u64()
        .expect("LocalStack port") as u16;
    let late_writer = late_probe_secret_writer(stack, profile);
    let mut child = stack.spawn(profile, &["up"]);
    let stderr = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    for line in std::io::BufReader::new(stderr).lines() {
        let line = line.unwrap();
        let started = line.contains("ExternalSecret syncs a new secret");
        seen.push(line);
        if started {
            // SAFETY: signalling the child this test spawned.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGINT);
            }
        }
    }
    let status = child.wait().unwrap();
    let log = seen.join("\n");
    let rewritten = late_writer.join().expect("late writer");
    assert_eq!(status.code(), Some(130), "{log}");
    assert!(log.contains("probe objects were removed"), "{log}");
    assert!(
        rewritten.is_some(),
        "the stand-in never saw the probe ExternalSecret come and go:\n{log}"
    );

    let rt = runtime();
    let client = kube_client(&rt, stack);
    let settings = settings(profile).with_localstack_port(port);
    rt.block_on(async {
        let namespace = &settings.verify.namespace;
        let external_secrets = devstack::k8s::dynamic_api(
            &client,
            "external-secrets.io/v1",
            "ExternalSecret",
            Some(namespace),
        );
        let probes = |names: Vec<String>| -> Vec<String> {
            names
                .into_iter()
                .filter(|n| n.contains(devstack::verify::PROBE_PREFIX))
                .collect()
        };
        let listed = external_secrets.list(&Default::default()).await.unwrap();
        let left = probes(
            listed
                .items
                .into_iter()
                .filter_map(|o| o.metadata.name)
                .collect(),
        );
        assert!(left.is_empty(), "probe ExternalSecrets left: {left:?}");
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(client.clone(), namespace);
        let names = secrets.list(&Default::default()).await.unwrap().items;
        let left = probes(names.into_iter().filter_map(|o| o.metadata.name).collect());
        assert!(left.is_empty(), "probe Secrets left: {left:?}");
        let left = probes(secret_names(&settings).await);
        assert!(
            left.is_empty(),
            "probe secrets left in LocalStack: {left:?}"
        );
    });
}

/// Watches (on its own thread) for the round trip's probe ExternalSecret
/// to be created and removed, then writes a Secret of its name at once, as
/// a reconcile of ESO's still in flight would; returns that name. Returns
/// once its watch is established, so it sees an ExternalSecret that lives
/// for milliseconds.
fn late_probe_secret_writer(
    stack: &TestStack,
    profile: &std::path::Path,
) -> std::thread::JoinHandle<Option<String>> {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, PostParams};
    use kube::runtime::watcher::{self, Event};
    let rt = runtime();
    let client = kube_client(&rt, stack);
    let namespace = settings(profile).verify.namespace.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let writer = std::thread::spawn(move || {
        rt.block_on(async move {
            let external_secrets = devstack::k8s::dynamic_api(
                &client,
                "external-secrets.io/v1",
                "ExternalSecret",
                Some(&namespace),
            );
            let mut events = watcher::watcher(external_secrets, watcher::Config::default()).boxed();
            let is_probe = |o: &kube::api::DynamicObject| {
                o.metadata
                    .name
                    .clone()
                    .filter(|n| n.contains(devstack::verify::PROBE_PREFIX))
            };
            let mut created = None;
            let watching = async {
                while let Some(event) = events.next().await {
                    match event {
                        Ok(Event::InitDone) => {
                            let _ = ready_tx.send(());
                        }
                        Ok(Event::Apply(o)) if created.is_none() => created = is_probe(&o),
                        Ok(Event::Delete(o)) if created.is_some() && is_probe(&o) == created => {
                            return created.clone();
                        }
                        _ => {}
                    }
                }
                None
            };
            let name = tokio::time::timeout(std::time::Duration::from_secs(120), watching)
                .await
                .ok()
                .flatten()?;
            let secrets: Api<Secret> = Api::namespaced(client, &namespace);
            let late: Secret = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": namespace},
                "stringData": {"value": "written-late"},
            }))
            .unwrap();
            // Already there (ESO's own late write) serves as well.
            let _ = secrets.create(&PostParams::default(), &late).await;
            Some(name)
        })
    });
    ready_rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the stand-in's watch of ExternalSecrets");
    writer
}

/// The image the stack's ESO operator Deployment runs.
pub fn eso_operator_image(rt: &tokio::runtime::Runtime, stack: &TestStack) -> String {
    use k8s_openapi::api::apps::v1::Deployment;
    let client = kube_client(rt, stack);
    let deployment = rt
        .block_on(
            kube::api::Api::<Deployment>::namespaced(client, "external-secrets")
                .get("external-secrets"),
        )
        .unwrap();
    deployment.spec.template.spec.unwrap().containers[0]
        .image
        .clone()
        .unwrap()
}

/// The versions a running stack actually runs equal devstack's version
/// matrix: every node's kubelet, the ESO operator's image, and the
/// LocalStack container's image.
pub fn assert_running_versions_match_the_matrix(stack: &TestStack, node_image: &str) {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::Api;
    let (major, minor, patch) = devstack::versions::kubernetes_of_image(node_image)
        .unwrap_or_else(|| panic!("no Kubernetes version in {node_image}"));
    let rt = runtime();
    let client = kube_client(&rt, stack);
    let nodes = rt
        .block_on(Api::<Node>::all(client).list(&Default::default()))
        .unwrap();
    assert!(!nodes.items.is_empty());
    for node in nodes.items {
        let kubelet = node.status.unwrap().node_info.unwrap().kubelet_version;
        assert!(
            kubelet == format!("v{major}.{minor}.{patch}")
                || kubelet.starts_with(&format!("v{major}.{minor}.{patch}+")),
            "kubelet {kubelet} is not the matrix's {node_image}"
        );
    }
    let image = eso_operator_image(&rt, stack);
    assert_eq!(image, devstack::versions::ESO_IMAGE, "ESO operator image");
    let localstack = docker(&[
        "inspect",
        "-f",
        "{{.Config.Image}}",
        &format!("devstack-{}-localstack", stack.name),
    ]);
    assert_eq!(
        String::from_utf8_lossy(&localstack.stdout).trim(),
        devstack::versions::LOCALSTACK_IMAGE
    );
}

/// The kube-proxy running in `node` (a node container) syncs its rules
/// with `min_sync_period` between them, as read from its own `/configz`:
/// devstack's setting reached the running process, not only its config.
pub fn assert_kube_proxy_min_sync_period(node: &str, min_sync_period: &str) {
    let script = r#"exec 3<>/dev/tcp/127.0.0.1/10249 && printf 'GET /configz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 && cat <&3"#;
    let out = docker(&["exec", node, "bash", "-c", script]);
    let text = String::from_utf8_lossy(&out.stdout);
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no /configz answer from kube-proxy in {node}: {text}"));
    let config: serde_json::Value = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("kube-proxy's /configz in {node} is not JSON ({e}): {body}"));
    // Its internal form up to Kubernetes 1.32 (K3s), the v1alpha1 form after.
    let config = &config["kubeproxy.config.k8s.io"];
    let effective = config["MinSyncPeriod"]
        .as_str()
        .or(config["iptables"]["minSyncPeriod"].as_str());
    assert_eq!(
        effective,
        Some(min_sync_period),
        "kube-proxy in {node}: {config}"
    );
}

/// The ESO webhook serves with the certificate devstack issued at install
/// (its CA's fingerprint is on the Secret), and the cert-controller, instead
/// of replacing it, injected that CA into every webhook configuration and
/// conversion webhook that calls ESO's webhook Service.
pub fn assert_webhook_certificate_issued_by_devstack(stack: &TestStack) {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use k8s_openapi::api::core::v1::{Pod, Secret};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::Api;
    use sha2::Digest;
    let rt = runtime();
    let client = kube_client(&rt, stack);
    let secret = rt
        .block_on(
            Api::<Secret>::namespaced(client.clone(), "external-secrets")
                .get("external-secrets-webhook"),
        )
        .unwrap();
    let ca = secret.data.as_ref().unwrap()["ca.crt"].0.clone();
    let issued = secret.metadata.annotations.unwrap_or_default()
        [devstack::gitops::webhook::ISSUED_CA_ANNOTATION]
        .clone();
    assert_eq!(
        hex::encode(sha2::Sha256::digest(&ca)),
        issued,
        "the webhook's CA is not the one devstack issued"
    );
    let configurations = rt
        .block_on(
            Api::<ValidatingWebhookConfiguration>::all(client.clone()).list(&Default::default()),
        )
        .unwrap();
    let mut injected = 0;
    for configuration in configurations.items {
        for webhook in configuration.webhooks.unwrap_or_default() {
            let config = webhook.client_config;
            if config.service.as_ref().map(|s| s.namespace.as_str()) == Some("external-secrets") {
                assert_eq!(
                    config.ca_bundle.map(|b| b.0).as_ref(),
                    Some(&ca),
                    "webhook {} lacks devstack's CA",
                    webhook.name
                );
                injected += 1;
            }
        }
    }
    assert!(injected >= 2, "no ESO validating webhook found");
    // A webhook process that found no certificate sleeps 10 s before it
    // looks again; devstack either fills the Secret before the pod mounts
    // it or replaces the pod.
    let pods = rt
        .block_on(
            Api::<Pod>::namespaced(client.clone(), "external-secrets").list(
                &kube::api::ListParams::default()
                    .labels("app.kubernetes.io/name=external-secrets-webhook"),
            ),
        )
        .unwrap();
    // A pod devstack replaced may still be terminating: it serves nothing.
    let serving: Vec<Pod> = pods
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    assert!(!serving.is_empty(), "no ESO webhook pod");
    for pod in serving {
        let name = pod.metadata.name.unwrap();
        let log = rt
            .block_on(
                Api::<Pod>::namespaced(client.clone(), "external-secrets")
                    .logs(&name, &Default::default()),
            )
            .unwrap();
        assert!(
            !log.contains("invalid certs"),
            "webhook pod {name} started without its certificate:\n{log}"
        );
    }
    let crd = rt
        .block_on(
            Api::<CustomResourceDefinition>::all(client).get("externalsecrets.external-secrets.io"),
        )
        .unwrap();
    // ESO 2.x serves one version and converts nothing; a CRD that does
    // convert through the webhook must trust the same CA.
    if let Some(conversion) = crd.spec.conversion.filter(|c| c.strategy == "Webhook") {
        let config = conversion.webhook.and_then(|w| w.client_config);
        assert_eq!(
            config.and_then(|c| c.ca_bundle).map(|b| b.0).as_ref(),
            Some(&ca),
            "the ExternalSecret CRD's conversion webhook lacks devstack's CA"
        );
    }
}

/// Pod sandboxes the kubelet failed to create after `since` because
/// flannel's subnet file was missing: what a node that starts again (a
/// restart, a restore) must not wait out. Each as `pod: message`.
pub fn sandbox_failures_without_flannel_subnet(
    stack: &TestStack,
    since: std::time::SystemTime,
) -> Vec<String> {
    use k8s_openapi::api::core::v1::Event;
    let rt = runtime();
    let client = kube_client(&rt, stack);
    let events: kube::Api<Event> = kube::Api::all(client);
    let list = rt
        .block_on(
            events.list(&kube::api::ListParams::default().fields("reason=FailedCreatePodSandBox")),
        )
        .unwrap();
    list.items
        .into_iter()
        .filter(|e| {
            let last = e
                .last_timestamp
                .as_ref()
                .map(|t| std::time::SystemTime::from(t.0))
                .or_else(|| {
                    e.event_time
                        .as_ref()
                        .map(|t| std::time::SystemTime::from(t.0))
                });
            last.is_some_and(|t| t >= since)
                && e.message
                    .as_deref()
                    .unwrap_or_default()
                    .contains("subnet.env")
        })
        .map(|e| {
            format!(
                "{}: {}",
                e.involved_object.name.unwrap_or_default(),
                e.message.unwrap_or_default()
            )
        })
        .collect()
}
