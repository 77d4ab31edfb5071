//! A real git server for a test stack (the kit's `devstack-kit/gitserver:1`,
//! git's `http-backend` behind a small web server) on the stack's Docker
//! network, and a work tree on the host that pushes to it with the git CLI.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

pub const GITSERVER_IMAGE: &str = "devstack-kit/gitserver:1";
/// The port the server listens on inside its container.
const GITSERVER_PORT: u16 = 8080;

/// Whether the kit built the git server; otherwise the test prints why it
/// skips, or fails where the cluster tier is required.
pub fn gitserver_kit() -> bool {
    if docker(&["image", "inspect", GITSERVER_IMAGE])
        .status
        .success()
    {
        return true;
    }
    let why = format!(
        "needs the kit's {GITSERVER_IMAGE} image (run `make kit`: kit/components/gitserver.sh)"
    );
    assert!(
        std::env::var_os("DEVSTACK_TEST_REQUIRE_CLUSTER").is_none(),
        "{why}"
    );
    say_skipped(&why);
    false
}

/// The git server of one test stack. Its container and the network carry
/// the stack's label, so the stack's drop removes them even when the test
/// fails.
pub struct GitServer {
    pub container: String,
    /// Where the host pushes: `127.0.0.1:<port>`.
    pub host_port: u16,
    /// Its address on the stack network, which the cluster's pods reach.
    pub ip: String,
}

impl GitServer {
    /// Starts the server on the stack's network, created first with the
    /// labels devstack gives it so that `up` adopts it: pods reach only
    /// containers on that network, and it exists only after `up` otherwise.
    pub fn start(stack: &TestStack) -> Self {
        let network = format!("devstack-{}", stack.name);
        let stack_label = format!("dev.devstack.stack={}", stack.name);
        let created = docker(&[
            "network",
            "create",
            "--driver",
            "bridge",
            "--label",
            "dev.devstack.managed-by=devstack",
            "--label",
            &stack_label,
            "--label",
            "dev.devstack.role=network",
            &network,
        ]);
        assert!(created.status.success(), "{created:?}");
        let container = format!("{network}-gitserver");
        let host_port = free_port();
        // Labelled with the stack only, not as devstack's: `down` must leave it alone.
        let run = docker(&[
            "run",
            "-d",
            "--name",
            &container,
            "--label",
            &stack_label,
            "--network",
            &network,
            "-p",
            &format!("127.0.0.1:{host_port}:{GITSERVER_PORT}"),
            GITSERVER_IMAGE,
        ]);
        assert!(run.status.success(), "{run:?}");
        let ip = docker_lines(&[
            "inspect",
            "-f",
            &format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}"),
            &container,
        ])
        .pop()
        .unwrap_or_default();
        assert!(!ip.is_empty(), "{container} has no address on {network}");
        let server = GitServer {
            container,
            host_port,
            ip,
        };
        server.wait_serving();
        server
    }

    /// Waits (bounded) until the server answers HTTP on the host port.
    fn wait_serving(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.host_port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "{} did not listen within 30 s:\n{}",
                self.container,
                self.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// The URL of repository `repo` as the cluster's pods reach it.
    pub fn cluster_url(&self, repo: &str) -> String {
        format!("http://{}:{GITSERVER_PORT}/{repo}", self.ip)
    }

    /// The URL of repository `repo` as the host reaches it.
    pub fn host_url(&self, repo: &str) -> String {
        format!("http://127.0.0.1:{}/{repo}", self.host_port)
    }

    /// The server's request log, one `METHOD PATH STATUS` line each.
    pub fn log(&self) -> String {
        let out = docker(&["logs", &self.container]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// A git work tree on the host whose `main` is pushed to one remote.
pub struct WorkTree {
    pub dir: PathBuf,
    remote: String,
}

impl WorkTree {
    pub fn init(dir: &Path, remote: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let tree = WorkTree {
            dir: dir.to_path_buf(),
            remote: remote.to_string(),
        };
        tree.git(&["init", "--quiet", "--initial-branch=main"]);
        tree
    }

    /// Runs git in the work tree, isolated from the host's git configuration.
    pub fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(&self.dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .args([
                "-c",
                "user.name=devstack test",
                "-c",
                "user.email=test@devstack.dev",
            ])
            .args(args)
            .output()
            .expect("git CLI");
        assert!(
            out.status.success(),
            "git {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn write(&self, path: &str, text: &str) {
        let file = self.dir.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }

    pub fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.dir.join(path)).unwrap()
    }

    /// Copies the directory `from` to `path` in the work tree.
    pub fn copy_dir(&self, from: &Path, path: &str) {
        super::copy_dir(from, &self.dir.join(path));
    }

    /// Commits every change and pushes `main`; returns the commit's SHA-1.
    pub fn commit_and_push(&self, message: &str) -> String {
        self.git(&["add", "--all"]);
        self.git(&["commit", "--quiet", "-m", message]);
        self.git(&["push", "--quiet", &self.remote, "main"]);
        self.git(&["rev-parse", "HEAD"])
    }
}
