//! Engines group: devstack on the engine its users run today, not only on
//! the machine's own. tests/run.sh starts the kit's current Docker engine
//! beside the machine's (tests/engines/engine.sh: dockerd 28.5.2 in a
//! network namespace of its own, the containerd image store on, `"init":
//! true` in its daemon.json, clients below API 1.44 refused, as Docker 29
//! does) and runs this target inside that namespace with DOCKER_HOST
//! pointing at it. The same run takes the online group's default-profile
//! test (Kind, through the mirror, whose images are multi-platform
//! indexes) there.
//!
//! Every test is `#[ignore]`d so that a plain `cargo test` passes on any
//! machine; on an engine that is not that shape each says `SKIPPED:` (a
//! required run fails instead).

#[path = "../common/mod.rs"]
mod common;

use std::process::Command;

use crate::common::*;

/// What the second engine is: the test refuses to pass on another one,
/// which would prove nothing about current engines.
struct EngineShape {
    version: String,
    min_api: String,
    containerd_store: bool,
    default_init: bool,
}

fn engine_shape() -> Option<EngineShape> {
    let version = docker(&["version", "--format", "{{json .Server}}"]);
    let info = docker(&["info", "--format", "{{json .}}"]);
    if !version.status.success() || !info.status.success() {
        return None;
    }
    let server: serde_json::Value = serde_json::from_slice(&version.stdout).ok()?;
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).ok()?;
    let containerd_store = info["DriverStatus"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|pair| {
            pair[0] == "driver-type"
                && pair[1]
                    .as_str()
                    .is_some_and(|v| v.starts_with("io.containerd.snapshotter"))
        });
    Some(EngineShape {
        version: server["Version"].as_str()?.to_string(),
        min_api: server["MinAPIVersion"].as_str()?.to_string(),
        containerd_store,
        default_init: default_init(),
    })
}

/// Whether a container created without `init` runs docker-init as PID 1,
/// i.e. the engine's daemon.json says `"init": true`.
fn default_init() -> bool {
    ensure_busybox_image();
    let out = docker(&["run", "--rm", BUSYBOX, "cat", "/proc/1/comm"]);
    String::from_utf8_lossy(&out.stdout).trim() == "docker-init"
}

/// The current engine of tests/engines/engine.sh answers at DOCKER_HOST,
/// with the kit's images; else `SKIPPED:` (a required run fails).
fn require_current_engine() -> Option<EngineShape> {
    if !require_cluster_kit() {
        return None;
    }
    let shape = engine_shape();
    let why = match &shape {
        None => {
            "the engine at DOCKER_HOST does not answer `docker version`/`docker info`".to_string()
        }
        Some(s) if !s.containerd_store || major(&s.version) < 28 => format!(
            "needs Docker 28+ with the containerd image store (tests/engines/engine.sh); DOCKER_HOST={} is Docker {}{}",
            std::env::var("DOCKER_HOST").unwrap_or_default(),
            s.version,
            if s.containerd_store {
                ""
            } else {
                " on the classic store"
            }
        ),
        Some(_) => return shape,
    };
    assert!(
        std::env::var_os("DEVSTACK_TEST_REQUIRE_CLUSTER").is_none(),
        "{why}"
    );
    say_skipped(&why);
    None
}

fn major(version: &str) -> u64 {
    version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

#[test]
#[ignore = "needs the engines group's engine: make test (tests/run.sh engines)"]
fn doctor_names_the_engine_its_api_cgroup_version_and_image_store() {
    let Some(shape) = require_current_engine() else {
        return;
    };
    // The engine refuses old clients, as Docker 29 does; devstack is not one.
    assert_eq!(
        shape.min_api, "1.44",
        "engine.sh sets DOCKER_MIN_API_VERSION"
    );
    let old = Command::new("docker")
        .arg("version")
        .env("DOCKER_API_VERSION", "1.41")
        .output()
        .unwrap();
    assert!(
        !old.status.success(),
        "the engine accepted API 1.41:\n{}",
        String::from_utf8_lossy(&old.stdout)
    );
    let stack = TestStack::new("engine-doctor");
    let profile = profile::ci(&stack.name).write(&stack.dir.path().join("profile.yaml"));
    let run = stack.run(&profile, &["doctor", "--json"]);
    let report = run.json();
    let check = |name: &str| doctor_check(&report, name);
    let docker_check = check("docker");
    assert_eq!(docker_check["status"], "pass", "{report}");
    let detail = docker_check["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("Docker Engine {}", shape.version)),
        "{detail}"
    );
    assert!(detail.contains("min 1.44"), "{detail}");
    assert!(detail.contains("containerd image store"), "{detail}");
    let store = check("image store");
    assert_eq!(store["status"], "pass", "{report}");
    assert!(
        store["detail"]
            .as_str()
            .unwrap()
            .contains("saved for linux/amd64 only"),
        "{report}"
    );
    // These machines run cgroup v1: named, with the way off it.
    let cgroup = check("cgroup");
    let host_v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    if host_v2 {
        assert_eq!(cgroup["status"], "pass", "{report}");
    } else {
        assert_eq!(cgroup["status"], "warn", "{report}");
        assert!(
            cgroup["hint"].as_str().unwrap().contains("cgroup v2"),
            "{report}"
        );
    }
}

#[test]
#[ignore = "needs the engines group's engine: make test (tests/run.sh engines)"]
fn the_k3s_profile_comes_up_verified_with_nodes_that_state_init_and_cgroupns() {
    let Some(shape) = require_current_engine() else {
        return;
    };
    // The trap: a daemon.json default that puts docker-init in front of K3s.
    assert!(
        shape.default_init,
        "engine.sh's daemon.json sets \"init\": true, which the nodes must override"
    );
    let stack = TestStack::new("engine-k3s");
    let profile = profile::ci(&stack.name).write(&stack.dir.path().join("profile.yaml"));
    let up = stack.run(&profile, &["up", "--json"]);
    let report = up.ok().json();
    assert_eq!(report["verify"]["passed"], true, "{report}");

    let server = format!("devstack-{}-server-0", stack.name);
    let inspect = docker(&[
        "inspect",
        "--format",
        "{{json .HostConfig.Init}} {{.HostConfig.CgroupnsMode}}",
        &server,
    ]);
    assert_eq!(
        String::from_utf8_lossy(&inspect.stdout).trim(),
        "false private",
        "{}",
        String::from_utf8_lossy(&inspect.stderr)
    );
    // K3s is PID 1 (it names itself `k3s-server`), not docker-init.
    let pid1 = docker(&["exec", &server, "cat", "/proc/1/comm"]);
    let pid1 = String::from_utf8_lossy(&pid1.stdout);
    assert!(pid1.trim().starts_with("k3s"), "PID 1 is {pid1}");
    // The kubelet is told to accept cgroup v1 where the host has it, only there.
    let args = docker(&["inspect", "--format", "{{json .Args}}", &server]);
    let args = String::from_utf8_lossy(&args.stdout);
    let host_v1 = !std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    assert_eq!(args.contains("fail-cgroupv1=false"), host_v1, "{args}");

    stack.run(&profile, &["down"]).ok();
    assert!(stack.containers().is_empty(), "{:?}", stack.containers());
    assert!(stack.networks().is_empty(), "{:?}", stack.networks());
}
