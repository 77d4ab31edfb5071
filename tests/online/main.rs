//! Online tier: devstack as a user with network runs it — no bundle, no
//! kind on PATH, a fresh DEVSTACK_HOME — against a real OCI registry and a
//! real file server standing in for upstream (`tests/online/mirror.sh`,
//! images built by the kit). The mirror serves the kit's rebuilds under
//! their upstream names and paths, and a pins file of their digests
//! replaces upstream's (`DEVSTACK_PINS`), as a private rebuild would.
//!
//! The default profile on Kind and the K3s profile come up to a verified
//! round trip through the mirror; a second stack on the same cache sends
//! the mirror no request; a tampered image and a tampered download are
//! each refused naming the artifact and both digests, with nothing left.
//! A Kind cluster made outside devstack takes the stack from a devstack
//! that reaches no Docker engine (`provider: existing`): its nodes pull the
//! images through the profile's mirrors, at the pinned digests.
//!
//! Every test is `#[ignore]`d so that a plain `cargo test` passes on any
//! machine; `make test-online` runs them with `--include-ignored`.

#[path = "../common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

const MIRROR_SCRIPT: &str = "tests/online/mirror.sh";
const REGISTRY: &str = "devstack-test-mirror-registry";
const FILES: &str = "devstack-test-mirror-files";

/// The mirror, started for one test and stopped when it ends (also on panic).
struct Mirror {
    exports: Vec<(String, String)>,
}

impl Mirror {
    /// `None` (with `SKIPPED:`) when the kit has not built what the mirror
    /// serves; a required run fails instead.
    fn start(test: &str) -> Option<Mirror> {
        if !require_cluster_kit() {
            return None;
        }
        let missing: Vec<&str> = ["devstack-kit/registry:v3.0.0", "devstack-kit/fileserver:1"]
            .into_iter()
            .filter(|image| !docker(&["image", "inspect", image]).status.success())
            .collect();
        if !missing.is_empty() {
            let why = format!(
                "needs the kit's mirror images {} (run `make kit`)",
                missing.join(", ")
            );
            assert!(
                std::env::var_os("DEVSTACK_TEST_REQUIRE_CLUSTER").is_none(),
                "{test}: {why}"
            );
            say_skipped(&why);
            return None;
        }
        let out = mirror_script(&["start"]);
        assert!(
            out.status.success(),
            "mirror.sh start failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let exports = parse_exports(&String::from_utf8_lossy(&out.stdout));
        let names: Vec<&str> = exports.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "DEVSTACK_MIRRORS",
                "DEVSTACK_DOWNLOAD_MIRROR",
                "DEVSTACK_PINS"
            ],
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        Some(Mirror { exports })
    }

    fn pins(&self) -> serde_json::Value {
        let path = &self
            .exports
            .iter()
            .find(|(k, _)| k == "DEVSTACK_PINS")
            .unwrap()
            .1;
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// A moment to read the servers' logs from: `docker logs --since`
    /// takes a Unix time with a fraction (the two streams of a log cannot
    /// be counted as one, their lines interleave).
    fn mark(&self) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        format!("{}.{:09}", now.as_secs(), now.subsec_nanos())
    }

    /// The request lines each server logged after `mark`.
    fn requests_since(&self, mark: &str) -> (Vec<String>, Vec<String>) {
        let requests = |name: &str| -> Vec<String> {
            log_lines(name, mark)
                .into_iter()
                .filter(|l| {
                    ["GET ", "HEAD ", "PUT ", "POST ", "PATCH "]
                        .iter()
                        .any(|m| l.contains(m))
                })
                .collect()
        };
        (requests(REGISTRY), requests(FILES))
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        let out = mirror_script(&["stop"]);
        if !out.status.success() {
            eprintln!("mirror.sh stop: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}

fn mirror_script(args: &[&str]) -> std::process::Output {
    Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(MIRROR_SCRIPT))
        .args(args)
        .output()
        .expect("run mirror.sh")
}

fn parse_exports(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
        .collect()
}

fn log_lines(container: &str, since: &str) -> Vec<String> {
    let out = docker(&["logs", "--since", since, container]);
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    text.lines().map(String::from).collect()
}

/// `devstack ARGS --profile PROFILE` as a user with network runs it: the
/// mirror's exports, state under `home`, no bundle, no kind.
fn online(mirror: &Mirror, home: &Path, profile: &Path, args: &[&str]) -> Run {
    online_env(mirror, home, profile, args, &[])
}

/// [`online`] with `env` set too.
fn online_env(
    mirror: &Mirror,
    home: &Path,
    profile: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_devstack"));
    cmd.args(args)
        .arg("--profile")
        .arg(profile)
        .current_dir(home)
        .env("DEVSTACK_HOME", home.join("state"))
        .env("CI", "true")
        .env("PATH", path_without_kind())
        .env_remove("DEVSTACK_BUNDLE")
        .env_remove("DEVSTACK_KIND")
        .env_remove("DEVSTACK_PROFILE")
        .env_remove("DEVSTACK_NAME")
        .env_remove("DEVSTACK_PROVIDER")
        .env_remove("LOCALSTACK_AUTH_TOKEN");
    for (k, v) in &mirror.exports {
        cmd.env(k, v);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    Run::from(cmd.output().expect("run devstack"))
}

fn cache_of(home: &Path) -> PathBuf {
    home.join("state/cache/artifacts")
}

fn outcomes(report: &serde_json::Value) -> Vec<(String, String)> {
    report["artifacts"]["artifacts"]
        .as_array()
        .unwrap_or_else(|| panic!("no artifacts in {report}"))
        .iter()
        .map(|a| {
            (
                a["name"].as_str().unwrap().to_string(),
                a["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every artifact the report lists was checked against the pins file's digest.
fn assert_checked_against(report: &serde_json::Value, pins: &serde_json::Value) {
    let artifacts = report["artifacts"]["artifacts"].as_array().unwrap();
    assert!(!artifacts.is_empty(), "{report}");
    for a in artifacts {
        let digest = a["digest"]
            .as_str()
            .unwrap_or_else(|| panic!("unpinned: {a}"));
        let name = a["name"].as_str().unwrap();
        let pinned = pins["images"]
            .as_object()
            .unwrap()
            .iter()
            .chain(pins["files"].as_object().unwrap())
            .any(|(_, v)| v == digest);
        assert!(
            pinned,
            "{name}: {digest} is not a pin of the mirror's pins file"
        );
    }
}

#[test]
#[ignore = "needs Docker and the kit's mirror: make test-online"]
fn the_default_profile_comes_up_on_kind_online_with_nothing_but_docker() {
    let Some(mirror) = Mirror::start("the_default_profile_comes_up_on_kind_online") else {
        return;
    };
    let Some(kind) = crate::common::kind::kind_kit("the_default_profile_comes_up_on_kind_online")
    else {
        return;
    };
    let stack = TestStack::new("online-kind");
    let _guard = crate::common::kind::KindGuard::new(kind, &stack);
    // The default profile: no cluster block, so the provider is the default.
    let profile = stack.profile("");
    let mark = mirror.mark();
    let up = online(&mirror, stack.dir.path(), &profile, &["up", "--json"]);
    let report = up.ok().json();
    assert!(
        !up.stderr.contains("using K3s instead"),
        "kind is fetched, not replaced by K3s:\n{}",
        up.stderr
    );
    assert_eq!(report["provider"], "kind", "{report}");
    assert_eq!(report["verify"]["passed"], true, "{report}");
    assert_checked_against(&report, &mirror.pins());
    let outcomes = outcomes(&report);
    assert!(
        outcomes
            .iter()
            .any(|(name, how)| name == devstack::versions::KIND_NODE_IMAGE && how == "pulled"),
        "{outcomes:?}"
    );
    // kind itself came from the download mirror, checksum verified.
    let kind_bin = cache_of(stack.dir.path())
        .join(format!("bin/kind-{}", devstack::versions::KIND_CLI_VERSION));
    assert!(kind_bin.is_file(), "{} missing", kind_bin.display());
    let (registry, files) = mirror.requests_since(&mark);
    assert!(
        files
            .iter()
            .any(|l| l.contains("/kubernetes-sigs/kind/releases/download/")),
        "{files:?}"
    );
    assert!(
        registry
            .iter()
            .any(|l| l.contains("/docker.io/kindest/node/manifests/")),
        "{registry:?}"
    );
    online(&mirror, stack.dir.path(), &profile, &["down"]).ok();
}

#[test]
#[ignore = "needs Docker and the kit's mirror: make test-online"]
fn the_k3s_profile_comes_up_online_and_a_second_stack_downloads_nothing() {
    let Some(mirror) = Mirror::start("the_k3s_profile_comes_up_online") else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let first = TestStack::new("online-k3s");
    let second = TestStack::new("online-k3s2");
    let first_profile = first.profile("cluster:\n  provider: k3s\n");
    let second_profile = second.profile("cluster:\n  provider: k3s\n");

    let up = online(&mirror, home.path(), &first_profile, &["up", "--json"]);
    let report = up.ok().json();
    assert_eq!(report["verify"]["passed"], true, "{report}");
    assert_checked_against(&report, &mirror.pins());
    let fetched = outcomes(&report);
    let roles_fetched = fetched
        .iter()
        .filter(|(_, how)| how == "pulled" || how == "downloaded")
        .count();
    assert_eq!(
        roles_fetched,
        fetched.len(),
        "a fresh cache fetches every artifact: {fetched:?}"
    );
    assert!(
        report["artifacts"]["downloadedBytes"].as_u64().unwrap() > 0,
        "{report}"
    );

    let mark = mirror.mark();
    let up = online(&mirror, home.path(), &second_profile, &["up", "--json"]);
    let report = up.ok().json();
    assert_eq!(report["verify"]["passed"], true, "{report}");
    let second_outcomes = outcomes(&report);
    assert_eq!(second_outcomes.len(), fetched.len(), "{second_outcomes:?}");
    assert!(
        second_outcomes.iter().all(|(_, how)| how == "cached"),
        "{second_outcomes:?}"
    );
    assert_eq!(report["artifacts"]["downloadedBytes"], 0, "{report}");
    let (registry, files) = mirror.requests_since(&mark);
    assert!(registry.is_empty(), "the registry was asked: {registry:?}");
    assert!(files.is_empty(), "the file server was asked: {files:?}");

    online(&mirror, home.path(), &second_profile, &["down"]).ok();
    online(&mirror, home.path(), &first_profile, &["down"]).ok();
}

/// What a refused run must leave: no container, network or volume of the
/// stack, no cache entry of the refused artifact and no partial file.
fn assert_nothing_left(stack: &TestStack, home: &Path, refused: &str) {
    assert!(stack.containers().is_empty(), "{:?}", stack.containers());
    assert!(stack.networks().is_empty(), "{:?}", stack.networks());
    let volumes = docker_lines(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label=dev.devstack.stack={}", stack.name),
    ]);
    assert!(volumes.is_empty(), "{volumes:?}");
    let cache = cache_of(home);
    if let Ok(index) = std::fs::read_to_string(cache.join("index.json")) {
        assert!(
            !index.contains(refused),
            "{refused} entered the cache:\n{index}"
        );
    }
    let mut partials = Vec::new();
    let mut dirs = vec![cache];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.to_string_lossy().ends_with(".partial") {
                partials.push(path);
            }
        }
    }
    assert!(partials.is_empty(), "{partials:?}");
}

#[test]
#[ignore = "needs Docker and the kit's mirror: make test-online"]
fn a_tampered_download_and_a_tampered_image_are_refused_with_both_digests() {
    let Some(mirror) = Mirror::start("a_tampered_download_and_a_tampered_image_are_refused") else {
        return;
    };
    let pins = mirror.pins();
    let flux_url = devstack::versions::FLUX_INSTALL.url;
    let flux_pin = pins["files"][flux_url].as_str().unwrap().to_string();
    let image = devstack::versions::LOCALSTACK_IMAGE;
    let image_pin = pins["images"][image].as_str().unwrap().to_string();

    // One byte of Flux's install.yaml changed.
    let out = mirror_script(&["tamper", "download"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stack = TestStack::new("online-tamper");
    let profile = stack.profile("cluster:\n  provider: k3s\n");
    let run = online(&mirror, stack.dir.path(), &profile, &["up"]);
    assert_eq!(run.code, 3, "{}", run.all());
    let files_dir = PathBuf::from(std::env::var("HOME").unwrap())
        .join(".cache/devstack/mirror/files/github.com/fluxcd/flux2/releases/download")
        .join(devstack::versions::FLUX_VERSION)
        .join("install.yaml");
    let received = format!(
        "sha256:{}",
        sha256_hex(&std::fs::read(&files_dir).expect("the tampered file"))
    );
    assert_ne!(received, flux_pin);
    let expected = format!(
        "error: rolled back: download flux-install from {}/github.com/fluxcd/flux2/releases/download/{}/install.yaml does not match its pin: expected {flux_pin}, received {received}; it was not used and nothing was kept",
        mirror.exports[1].1,
        devstack::versions::FLUX_VERSION
    );
    assert!(run.stderr.contains(&expected), "{expected}\n{}", run.stderr);
    assert!(
        run.stderr
            .contains("hint: the source serves other bytes than upstream published"),
        "{}",
        run.stderr
    );
    assert_nothing_left(&stack, stack.dir.path(), "flux-install");

    // Another image pushed under LocalStack's tag.
    let out = mirror_script(&["start"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = mirror_script(&["tamper", "image"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stack = TestStack::new("online-tamper2");
    let profile = stack.profile("cluster:\n  provider: k3s\n");
    let images_before = docker_lines(&["image", "ls", "-q", "--no-trunc"]).len();
    let run = online(&mirror, stack.dir.path(), &profile, &["up"]);
    assert_eq!(run.code, 3, "{}", run.all());
    let message = format!(
        "error: rolled back: image {image} from {}/localstack/localstack:{} does not match its pin: expected {image_pin}, received sha256:",
        mirror.exports[0]
            .1
            .split(',')
            .next()
            .unwrap()
            .trim_start_matches("docker.io=")
            .trim_start_matches("http://"),
        devstack::bundle::normalize_reference(image)
            .rsplit_once(':')
            .unwrap()
            .1
    );
    assert!(run.stderr.contains(&message), "{message}\n{}", run.stderr);
    let received = run.stderr.split(&message).nth(1).unwrap();
    assert!(
        received.len() > 64 && received[..64].bytes().all(|b| b.is_ascii_hexdigit()),
        "{received}"
    );
    assert!(!received.starts_with(image_pin.trim_start_matches("sha256:")));
    assert_nothing_left(&stack, stack.dir.path(), "localstack/localstack");
    let mirrored = docker_lines(&["image", "ls", "--format", "{{.Repository}}:{{.Tag}}"]);
    assert!(
        !mirrored.iter().any(|r| r.starts_with("127.0.0.1:")),
        "the refused pull left a reference: {mirrored:?}"
    );
    assert_eq!(
        docker_lines(&["image", "ls", "-q", "--no-trunc"]).len(),
        images_before,
        "the refused pull left an image"
    );
    // The mirror is restored for whoever runs next.
    assert!(mirror_script(&["start"]).status.success());
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Lets every node pull from the mirror registry over plain HTTP, as a
/// cluster's nodes reach a registry of their network: the registry joins
/// the nodes' network, and containerd gets a `hosts.toml` for its address
/// there. Returns that address (`ip:5000`).
fn nodes_reach_the_registry(nodes: &[String]) -> String {
    let network = docker_lines(&[
        "inspect",
        "-f",
        "{{range $name, $_ := .NetworkSettings.Networks}}{{$name}}{{end}}",
        &nodes[0],
    ])
    .join("");
    let out = docker(&["network", "connect", &network, REGISTRY]);
    assert!(
        out.status.success(),
        "connect the registry to {network}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let template = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
    let ip = docker_lines(&["inspect", "-f", &template, REGISTRY]).join("");
    assert!(!ip.is_empty(), "the registry has no address on {network}");
    let address = format!("{ip}:5000");
    let hosts = format!(
        "server = \"http://{address}\"\n\n[host.\"http://{address}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
    );
    let dir = format!("/etc/containerd/certs.d/{address}");
    for node in nodes {
        let script = format!("mkdir -p {dir} && cat > {dir}/hosts.toml");
        let mut child = Command::new("docker")
            .args(["exec", "-i", node, "sh", "-c", &script])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(hosts.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success(), "hosts.toml on {node}");
    }
    address
}

#[test]
#[ignore = "needs Docker and the kit's mirror: make test-online"]
fn an_existing_cluster_takes_the_stack_from_a_machine_without_docker() {
    const TEST: &str = "an_existing_cluster_takes_the_stack_from_a_machine_without_docker";
    let Some(mirror) = Mirror::start(TEST) else {
        return;
    };
    let Some(kind) = crate::common::kind::kind_kit(TEST) else {
        return;
    };
    let stack = TestStack::new("online-nodocker");
    let _guard = crate::common::kind::KindGuard::new(kind.clone(), &stack);
    let cluster = crate::common::kind::kind_cluster(&stack);
    let kubeconfig = stack.dir.path().join("admin.kubeconfig");
    crate::common::kind::create_kind_cluster(&kind, &cluster, &kubeconfig);
    let registry = nodes_reach_the_registry(&crate::common::kind::kind_nodes(&stack));
    let profile = stack.dir.path().join("profile.yaml");
    std::fs::write(
        &profile,
        format!(
            "apiVersion: devstack.dev/v1alpha1\nkind: Profile\nname: {}\ncluster:\n  provider: existing\n  context: kind-{cluster}\nsecrets:\n  - name: ci/app/token\n    generate: {{length: 32, charset: hex}}\n    sync:\n      namespace: default\n      secretName: app-token\ntimeouts:\n  localstack: 3m\n  flux: 5m\n  eso: 6m\n  verify: 2m\n",
            stack.name
        ),
    )
    .unwrap();
    // No engine answers at DOCKER_HOST: everything devstack does goes
    // through the Kubernetes API and the download mirror.
    let no_engine = format!(
        "unix://{}",
        stack.dir.path().join("no-docker.sock").display()
    );
    // The nodes pull through the profile's mirrors, at the registry's
    // address on their network (DEVSTACK_MIRRORS, as a user sets it).
    let mirrors = ["docker.io", "ghcr.io", "registry.k8s.io"]
        .map(|upstream| format!("{upstream}=http://{registry}/{upstream}"))
        .join(",");
    let env = [
        ("DEVSTACK_MIRRORS", mirrors.as_str()),
        ("DOCKER_HOST", no_engine.as_str()),
        ("KUBECONFIG", kubeconfig.to_str().unwrap()),
    ];
    let home = stack.dir.path();

    let doctor = online_env(&mirror, home, &profile, &["doctor", "--json"], &env).json();
    let docker_check = doctor_check(&doctor, "docker");
    assert_eq!(docker_check["status"], "pass", "{docker_check}");
    assert!(
        docker_check["detail"]
            .to_string()
            .contains("needs no Docker engine"),
        "{docker_check}"
    );

    let mark = mirror.mark();
    let up = online_env(&mirror, home, &profile, &["up", "--json"], &env);
    let report = up.ok().json();
    assert_eq!(report["verify"]["passed"], true, "{report}");
    assert_eq!(report["cluster"]["nodesPull"], true, "{report}");
    assert!(
        up.stderr
            .contains("no Docker engine on this machine: the cluster's nodes pull the images"),
        "{}",
        up.stderr
    );
    // devstack fetched and checked the files; the images were the nodes' to pull.
    let fetched = outcomes(&report);
    assert!(
        fetched.iter().any(|(name, _)| name.contains("flux")),
        "{fetched:?}"
    );
    assert_checked_against(&report, &mirror.pins());
    let artifacts = report["artifacts"]["artifacts"].as_array().unwrap();
    assert!(
        artifacts.iter().all(|a| a["kind"] != "image"),
        "no image went through this machine: {report}"
    );
    let (registry, _) = mirror.requests_since(&mark);
    for pulled in [
        "/v2/ghcr.io/fluxcd/source-controller/manifests/",
        "/v2/ghcr.io/external-secrets/external-secrets/manifests/",
        "/v2/docker.io/localstack/localstack/manifests/",
    ] {
        assert!(
            registry.iter().any(|l| l.contains(pulled)),
            "the nodes did not pull {pulled} from the registry: {registry:?}"
        );
    }

    let verify = online_env(&mirror, home, &profile, &["verify", "--json"], &env);
    assert_eq!(verify.ok().json()["passed"], true, "{}", verify.all());
    let status = online_env(&mirror, home, &profile, &["status"], &env);
    assert!(status.ok().stdout.contains("existing"), "{}", status.stdout);
    let down = online_env(&mirror, home, &profile, &["down", "--json"], &env);
    let removed = down.ok().json()["stacks"][0]["uninstalled"].to_string();
    assert!(removed.contains("Namespace localstack"), "{removed}");
    let rt = runtime();
    let client = rt
        .block_on(devstack::k8s::client_from_kubeconfig(
            &std::fs::read_to_string(&kubeconfig).unwrap(),
        ))
        .unwrap();
    let namespaces: Vec<String> = rt
        .block_on(
            kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
                .list(&Default::default()),
        )
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    for gone in ["flux-system", "localstack", "external-secrets"] {
        assert!(
            !namespaces.iter().any(|n| n == gone),
            "{gone} stayed after down: {namespaces:?}"
        );
    }
    assert!(
        !crate::common::kind::kind_nodes(&stack).is_empty(),
        "the cluster itself stays"
    );
}
