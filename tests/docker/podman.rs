//! Podman's Docker-compatible API (Debian's podman 4.3, `podman system
//! service`) is refused before anything is made, naming what it lacks:
//! tried with devstack's node spec, it names images loaded from tarballs
//! `localhost/<name>`, ignores the private cgroup namespace and answers
//! name conflicts with 500. The service runs on a socket and storage of the
//! test's own, so the machine's Podman (if any) is never touched.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

/// `podman system service` on a private socket and storage, stopped on drop.
struct PodmanService {
    child: Child,
    socket: String,
}

impl PodmanService {
    fn start(dir: &Path) -> PodmanService {
        let socket = dir.join("podman.sock");
        let child = Command::new("podman")
            .arg("--root")
            .arg(dir.join("root"))
            .arg("--runroot")
            .arg(dir.join("runroot"))
            .args(["system", "service", "--time=0"])
            .arg(format!("unix://{}", socket.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start podman system service");
        let service = PodmanService {
            child,
            socket: format!("unix://{}", socket.display()),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !service.answers() {
            assert!(
                Instant::now() < deadline,
                "podman system service did not answer at {} within 30 s",
                service.socket
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        service
    }

    fn answers(&self) -> bool {
        Command::new("docker")
            .args(["version", "--format", "{{.Server.Version}}"])
            .env("DOCKER_HOST", &self.socket)
            .output()
            .is_ok_and(|o| o.status.success())
    }
}

impl Drop for PodmanService {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
#[ignore = "needs Docker and podman: make test-docker"]
fn podman_is_refused_up_front_naming_what_it_lacks() {
    if !require_docker() {
        return;
    }
    if which("podman").is_none() {
        let why = "podman is not installed (`make host` installs Debian's podman)";
        assert!(!in_ci(), "{why}");
        say_skipped(why);
        return;
    }
    let stack = TestStack::new("podman");
    let service = PodmanService::start(stack.dir.path());
    let profile = profile::ci(&stack.name).write(&stack.dir.path().join("profile.yaml"));
    let on_podman = [("DOCKER_HOST", service.socket.as_str())];

    let up = stack.run_env(&profile, &["up"], &on_podman);
    assert_eq!(up.code, 3, "{}", up.all());
    for named in [
        "Podman Engine",
        "localhost/<name>",
        "CgroupnsMode",
        "409",
        "hint: use Docker Engine",
    ] {
        assert!(up.stderr.contains(named), "{named}:\n{}", up.stderr);
    }
    let made = Command::new("docker")
        .args(["ps", "-aq"])
        .env("DOCKER_HOST", &service.socket)
        .output()
        .unwrap();
    assert!(made.status.success());
    assert_eq!(
        String::from_utf8_lossy(&made.stdout).trim(),
        "",
        "up made containers on Podman"
    );

    let doctor = stack.run_env(&profile, &["doctor", "--json"], &on_podman);
    assert_eq!(doctor.code, 3, "{}", doctor.all());
    let report = doctor.json();
    let docker_check = doctor_check(&report, "docker");
    assert_eq!(docker_check["status"], "fail", "{report}");
    assert!(
        docker_check["detail"]
            .as_str()
            .unwrap()
            .contains("Podman Engine"),
        "{report}"
    );
}

fn which(tool: &str) -> Option<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(tool))
        .find(|path| path.is_file())
}
