//! A test's own stack (unique name, free port, state directory, removed on
//! drop) and running devstack against it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::*;

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

    /// What of this stack exists: its containers, networks and volumes, and
    /// its state directory. Empty after a rollback.
    pub fn leftovers(&self) -> Vec<String> {
        let filter = format!("label=dev.devstack.stack={}", self.name);
        let mut left: Vec<String> = self
            .containers()
            .into_iter()
            .map(|c| format!("container {c}"))
            .collect();
        left.extend(self.networks().into_iter().map(|n| format!("network {n}")));
        left.extend(
            docker_lines(&["volume", "ls", "-q", "--filter", &filter])
                .into_iter()
                .map(|v| format!("volume {v}")),
        );
        let state = self.dir.path().join("state/stacks").join(&self.name);
        if state.exists() {
            left.push(format!("state directory {}", state.display()));
        }
        left
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

/// devstack on `profile`, given as `--profile` to a command that reads a
/// stack; the others (`snapshot list`, `version`, ...) refuse it.
pub fn run_devstack(cwd: &Path, profile: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let profile = profile.to_str().expect("profile path is UTF-8");
    let mut args = args.to_vec();
    let words: Vec<&str> = args.iter().take(2).copied().collect();
    let takes_profile = (1..=words.len())
        .all(|n| !devstack::cli::unused_global_options(&words[..n]).contains(&"profile"));
    if takes_profile {
        args.extend(["--profile", profile]);
    }
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

/// An environment variable set for the rest of a test and restored when it
/// ends, panics included: a tier's tests share one process.
pub struct ScopedEnv {
    key: &'static str,
    previous: Option<std::ffi::OsString>,
}

impl ScopedEnv {
    /// Callers run one test at a time (the cluster tier's `--test-threads=1`).
    pub fn set(key: &'static str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        let previous = std::env::var_os(key);
        // SAFETY: the tier runs its tests one at a time, so no other thread
        // reads the environment meanwhile.
        unsafe { std::env::set_var(key, value) };
        ScopedEnv { key, previous }
    }
}

impl Drop for ScopedEnv {
    fn drop(&mut self) {
        // SAFETY: as in `set`.
        unsafe {
            match &self.previous {
                Some(value) => std::env::set_var(self.key, value),
                None => std::env::remove_var(self.key),
            }
        }
    }
}

/// The check named `name` of a `doctor --json` report.
#[track_caller]
pub fn doctor_check(report: &serde_json::Value, name: &str) -> serde_json::Value {
    report["checks"]
        .as_array()
        .unwrap_or_else(|| panic!("no checks: {report}"))
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {name} check: {report}"))
        .clone()
}

/// PATH without any directory that holds a `kind`: the user has none.
pub fn path_without_kind() -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|dir| !dir.join("kind").exists())
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}
