//! Finding a usable `kind` binary, and running it: bounded in time, in its
//! own process group, its failures quoting the end of its stderr.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use super::{INSTALL_HINT, STDERR_TAIL_LINES};
use crate::bundle::{Artifact, Bundle};
use crate::error::Error;
use crate::hostinfo::{parse_semver, tool_version};
use crate::profile::{HumanDuration, Settings};
use crate::timeline::{SpanGuard, Timeline};
use crate::versions::KIND_MIN_VERSION;

/// A usable kind CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindCli {
    pub path: PathBuf,
    pub version: (u64, u64, u64),
    /// What `kind version` printed.
    pub version_line: String,
    /// `DEVSTACK_KIND`, `PATH` or `the offline bundle`.
    pub origin: &'static str,
}

/// The kind CLI devstack drives: `DEVSTACK_KIND` when set (and then only
/// that one), else the first usable of `kind` on `PATH` and the offline
/// bundle's `bin/kind` (an airgapped machine gets kind with the bundle). A
/// kind older than [`KIND_MIN_VERSION`] is refused.
pub async fn find_kind(settings: &Settings) -> Result<KindCli, Error> {
    let found = find_installed_kind(settings).await;
    let Err(not_found) = found else {
        return found;
    };
    if crate::envvars::is_set(crate::envvars::DEVSTACK_KIND) {
        return Err(not_found);
    }
    // Kind needs nothing but Docker: the pinned release, checksum verified.
    match crate::artifacts::fetch_kind(settings).await {
        Ok(path) => check_kind(path, "devstack's cache").await,
        Err(fetch) => Err(Error::prerequisite(format!(
            "{}, and fetching kind {} failed: {}",
            not_found.message(),
            crate::versions::KIND_CLI_VERSION,
            fetch.message()
        ))
        .with_hint(
            not_found
                .hint()
                .map(String::from)
                .unwrap_or_else(|| INSTALL_HINT.to_string()),
        )),
    }
}

/// [`find_kind`] without fetching: what this machine has. The bundle's
/// kind is hashed against the bundle's index before it may run: a damaged
/// one is no candidate, and when nothing else is found, the error is about
/// it (then [`find_kind`] fetches kind, when it can).
pub async fn find_installed_kind(settings: &Settings) -> Result<KindCli, Error> {
    let explicit = crate::envvars::get(crate::envvars::DEVSTACK_KIND).map(PathBuf::from);
    let bundled = verified_bundled_kind(settings);
    let found = find_kind_from(
        explicit.clone(),
        &path_var(),
        bundled.as_ref().ok().cloned().flatten(),
    )
    .await;
    match (found, bundled) {
        (Err(_), Err(damaged)) if explicit.is_none() => Err(damaged),
        (found, _) => found,
    }
}

/// [`bundled_kind`] when its bytes are the ones the index pins (an index
/// without a digest for it is taken as it is).
fn verified_bundled_kind(settings: &Settings) -> Result<Option<PathBuf>, Error> {
    let Some((bundle, artifact)) = bundled_kind_entry(settings) else {
        return Ok(None);
    };
    let path = bundle.path_of(&artifact);
    if path.is_file() {
        crate::artifacts::check_file(settings, &bundle, &artifact)?;
    }
    Ok(Some(path))
}

fn bundled_kind_entry(settings: &Settings) -> Option<(Bundle, Artifact)> {
    let bundle = crate::bundle::open(settings).ok().flatten()?;
    let artifact = bundle
        .index
        .artifacts
        .iter()
        .find(|a| a.kind == "binary" && a.name == "kind")?
        .clone();
    Some((bundle, artifact))
}

/// The offline bundle's kind binary (index entry `kind: binary`, `name:
/// kind`); without a bundle, the one in devstack's cache, read as one.
pub fn bundled_kind(settings: &Settings) -> Option<PathBuf> {
    bundled_kind_entry(settings).map(|(bundle, artifact)| bundle.path_of(&artifact))
}

/// [`find_kind`] with explicit inputs, so tests need not touch the
/// process-wide environment.
pub async fn find_kind_from(
    explicit: Option<PathBuf>,
    path_var: &OsStr,
    bundled: Option<PathBuf>,
) -> Result<KindCli, Error> {
    if let Some(path) = explicit {
        return check_kind(path, "DEVSTACK_KIND").await;
    }
    let candidates: Vec<(PathBuf, &'static str)> = locate("kind", path_var)
        .map(|p| (p, "PATH"))
        .into_iter()
        .chain(
            bundled
                .filter(|p| p.is_file())
                .map(|p| (p, "the offline bundle")),
        )
        .collect();
    if candidates.is_empty() {
        return Err(Error::prerequisite(
            "`kind` not found on PATH, in DEVSTACK_KIND or in the offline bundle (provider kind needs it)",
        )
        .with_hint(format!(
            "{INSTALL_HINT}; or use `--provider k3s`, which needs only Docker"
        )));
    }
    // An old kind on PATH must not hide a good one in the bundle; when none
    // works, the first one's problem is the one to fix.
    let mut first_error = None;
    for (path, origin) in candidates {
        match check_kind(path, origin).await {
            Ok(cli) => return Ok(cli),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.expect("at least one candidate"))
}

async fn check_kind(path: PathBuf, origin: &'static str) -> Result<KindCli, Error> {
    unusable_file(&path, origin)?;
    let line = tool_version(&path, &["version"]).await;
    let Some(version) = line.as_deref().and_then(parse_semver) else {
        return Err(Error::prerequisite(format!(
            "`{} version` ({origin}) does not report a version{}",
            path.display(),
            line.map(|l| format!(" (it printed `{l}`)"))
                .unwrap_or_default()
        ))
        .with_hint(format!("reinstall kind: {INSTALL_HINT}")));
    };
    if version < KIND_MIN_VERSION {
        let (a, b, c) = version;
        let (x, y, z) = KIND_MIN_VERSION;
        return Err(Error::prerequisite(format!(
            "kind v{a}.{b}.{c} at {} ({origin}) is older than v{x}.{y}.{z}, the oldest devstack supports",
            path.display()
        ))
        .with_hint(format!(
            "upgrade kind: {INSTALL_HINT}; or use `--provider k3s`, which needs only Docker"
        )));
    }
    Ok(KindCli {
        path,
        version,
        version_line: line.unwrap_or_default(),
        origin,
    })
}

/// A path that is no executable file (a mistyped DEVSTACK_KIND) is said
/// to be so, rather than as a kind that does not report its version.
fn unusable_file(path: &Path, origin: &str) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let why = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "does not exist".to_string(),
        Err(e) => format!("cannot be read: {e}"),
        Ok(meta) if meta.is_dir() => "is a directory".to_string(),
        Ok(meta) if meta.permissions().mode() & 0o111 == 0 => "is not executable".to_string(),
        Ok(_) => return Ok(()),
    };
    let fix = if origin == crate::envvars::DEVSTACK_KIND {
        format!(
            "point {origin} at a kind binary (`command -v kind` finds one on PATH), or unset it to let devstack find kind on PATH or in the offline bundle, or fetch kind {}",
            crate::versions::KIND_CLI_VERSION
        )
    } else {
        format!("reinstall kind: {INSTALL_HINT}")
    };
    let hint = if why == "is not executable" {
        format!("`chmod +x {}`, or {fix}", path.display())
    } else {
        fix
    };
    Err(Error::prerequisite(format!(
        "the kind binary {} ({origin}) {why}",
        path.display()
    ))
    .with_hint(hint))
}

fn path_var() -> OsString {
    std::env::var_os("PATH").unwrap_or_default()
}

fn locate(binary: &str, path_var: &OsStr) -> Option<PathBuf> {
    which::which_in_global(binary, Some(path_var)).ok()?.next()
}

/// kind shells out to the Docker CLI; without it every kind command fails
/// with a message about `docker` rather than about what is missing.
pub(super) fn require_docker_cli() -> Result<(), Error> {
    match locate("docker", &path_var()) {
        Some(_) => Ok(()),
        None => Err(Error::prerequisite(
            "`docker` CLI not found on PATH (kind runs it to manage nodes)",
        )
        .with_hint(
            "install the Docker CLI, or use `--provider k3s`, which talks to the engine directly",
        )),
    }
}

/// Runs kind to completion within `timeout`; callers judge the exit status.
/// Failing to start kind is a prerequisite error (nothing happened), running
/// past `timeout` an internal one (kind may have done part of its work).
pub(super) async fn run_kind(
    kind: &Path,
    args: &[&OsStr],
    timeout: Duration,
) -> Result<Output, Error> {
    run_kind_streaming(kind, args, timeout, |_| {}).await
}

/// [`run_kind`], showing `on_stderr_line` each line of kind's stderr as it
/// is written (kind reports its progress there), while keeping the whole of
/// it for the error message.
pub(super) async fn run_kind_streaming(
    kind: &Path,
    args: &[&OsStr],
    timeout: Duration,
    mut on_stderr_line: impl FnMut(&str),
) -> Result<Output, Error> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let mut command = tokio::process::Command::new(kind);
    command
        .args(args)
        // devstack manages the engine through Docker; an inherited podman
        // selection would put the nodes where bollard cannot see them.
        .env("KIND_EXPERIMENTAL_PROVIDER", "docker")
        // kind runs the Docker CLI: pinned to the engine devstack resolved.
        .envs(crate::docker::cli_env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so that stopping kind also stops the `docker run`s
        // it started (see `KillGroup`); devstack handles Ctrl-C itself.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|e| {
        Error::prerequisite(format!("cannot run {}", kind.display()))
            .with_source(e)
            .with_hint(format!("reinstall kind: {INSTALL_HINT}"))
    })?;
    let mut group = KillGroup(child.id());
    let (Some(mut stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(Error::internal(format!(
            "{} started without its output pipes",
            kind.display()
        )));
    };
    let run = async {
        let read_stdout = async {
            let mut all = Vec::new();
            stdout.read_to_end(&mut all).await.map(|_| all)
        };
        let read_stderr = async {
            let mut reader = tokio::io::BufReader::new(stderr);
            let mut all = Vec::new();
            loop {
                let from = all.len();
                if reader.read_until(b'\n', &mut all).await? == 0 {
                    break;
                }
                on_stderr_line(
                    String::from_utf8_lossy(&all[from..]).trim_end_matches(['\n', '\r']),
                );
            }
            Ok::<_, std::io::Error>(all)
        };
        let (stdout, stderr) = tokio::try_join!(read_stdout, read_stderr)?;
        let status = child.wait().await?;
        Ok::<_, std::io::Error>(Output {
            status,
            stdout,
            stderr,
        })
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(Ok(output)) => {
            group.0 = None;
            Ok(output)
        }
        Ok(Err(e)) => {
            Err(Error::internal(format!("waiting for {} failed", kind.display())).with_source(e))
        }
        Err(_) => Err(Error::timeout(format!(
            "`{}` did not finish within {}",
            display_command(args),
            HumanDuration(timeout)
        ))),
    }
}

/// A progress line of `kind create cluster`. Writing to a pipe (no
/// spinner), kind's status prints ` • PHASE  ...` when a phase starts and
/// ` ✓ PHASE` or ` ✗ PHASE` when it ends (sigs.k8s.io/kind
/// pkg/internal/cli/status.go), PHASE ending in emoji.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum KindProgress {
    Started(String),
    Ended { phase: String, ok: bool },
}

pub(super) fn parse_progress_line(line: &str) -> Option<KindProgress> {
    let line = without_color(line);
    let rest = line.strip_prefix(' ')?;
    let mut chars = rest.chars();
    let marker = chars.next()?;
    let text = chars.as_str().strip_prefix(' ')?;
    let progress = match marker {
        '•' => KindProgress::Started(phase_name(text.trim_end().strip_suffix("...")?)),
        '✓' => KindProgress::Ended {
            phase: phase_name(text),
            ok: true,
        },
        '✗' => KindProgress::Ended {
            phase: phase_name(text),
            ok: false,
        },
        _ => return None,
    };
    match &progress {
        KindProgress::Started(p) | KindProgress::Ended { phase: p, .. } if p.is_empty() => None,
        _ => Some(progress),
    }
}

/// A phase's words without the emoji kind ends them with: "Preparing
/// nodes 📦 📦" is "Preparing nodes".
fn phase_name(text: &str) -> String {
    let mut words: Vec<&str> = text.split_whitespace().collect();
    while words
        .last()
        .is_some_and(|w| !w.chars().any(|c| c.is_ascii_alphanumeric()))
    {
        words.pop();
    }
    words.join(" ")
}

/// Without the colors kind puts on its ✓ and ✗ when it thinks it writes to
/// a terminal (`ESC [ ... m`).
fn without_color(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// kind's phases as spans under `parent` on the run's timeline, named
/// `kind: PHASE`, each from its start line to its end line (or to kind's
/// exit, for one kind never ended).
pub(super) struct KindPhases {
    timeline: Option<(Timeline, usize)>,
    open: Option<(String, SpanGuard)>,
}

impl KindPhases {
    pub(super) fn new(timeline: Option<(Timeline, usize)>) -> Self {
        KindPhases {
            timeline,
            open: None,
        }
    }

    pub(super) fn line(&mut self, line: &str) {
        match parse_progress_line(line) {
            Some(KindProgress::Started(phase)) => {
                self.end(true);
                if let Some((timeline, parent)) = &self.timeline {
                    let span = timeline.span(format!("kind: {phase}"), Some(*parent));
                    self.open = Some((phase, span));
                }
            }
            Some(KindProgress::Ended { phase, ok })
                if self.open.as_ref().is_some_and(|(open, _)| *open == phase) =>
            {
                self.end(ok);
            }
            _ => {}
        }
    }

    /// Ends the open phase, if any: kind exited.
    pub(super) fn end(&mut self, ok: bool) {
        if let Some((_, span)) = self.open.take() {
            let _ = span.finish(if ok { Ok(()) } else { Err(()) });
        }
    }
}

/// Kills a kind process group unless kind finished: Ctrl-C drops the `up`
/// future, and neither kind nor the Docker CLIs it runs may keep creating
/// nodes after devstack has started rolling back.
struct KillGroup(Option<u32>);

impl Drop for KillGroup {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: signals the process group devstack created for kind.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }
}

fn display_command(args: &[&OsStr]) -> String {
    std::iter::once("kind".into())
        .chain(args.iter().map(|a| a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

pub(super) fn tail_lines(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A failed kind command as an error quoting the end of its stderr.
pub(super) fn kind_failed(args: &[&OsStr], output: &Output) -> Error {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tail = tail_lines(&stderr, STDERR_TAIL_LINES);
    let message = format!(
        "`{}` failed ({}){}",
        display_command(args),
        output.status,
        if tail.is_empty() {
            String::new()
        } else {
            format!("; kind said:\n{tail}")
        }
    );
    if stderr.contains("port is already allocated") || stderr.contains("address already in use") {
        Error::prerequisite(message).with_hint(
            "a host port is taken: change `cluster.apiServerPort` (0 picks a free one) or `cluster.ports`",
        )
    } else {
        Error::internal(message).with_hint(
            "`devstack doctor` checks what kind needs (Docker, inotify limits, memory, free ports)",
        )
    }
}

/// Runs kind and returns its stdout, failing on a non-zero exit.
pub(super) async fn kind_stdout(
    kind: &Path,
    args: &[&OsStr],
    timeout: Duration,
) -> Result<String, Error> {
    let output = run_kind(kind, args, timeout).await?;
    if !output.status.success() {
        return Err(kind_failed(args, &output));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

pub(super) fn scratch_dir() -> Result<tempfile::TempDir, Error> {
    tempfile::Builder::new()
        .prefix("devstack-kind-")
        .tempdir()
        .map_err(|e| {
            Error::internal("cannot create a temporary directory for kind")
                .with_source(e)
                .with_hint("make the temporary directory (TMPDIR) writable")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;

    #[tokio::test]
    async fn missing_kind_is_a_prerequisite_error_with_a_hint() {
        let empty = tempfile::tempdir().unwrap();
        let missing_bundle = Some(empty.path().join("bin/kind"));
        let err = find_kind_from(None, empty.path().as_os_str(), missing_bundle)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), Kind::Prerequisite);
        assert_eq!(
            err.message(),
            "`kind` not found on PATH, in DEVSTACK_KIND or in the offline bundle (provider kind needs it)"
        );
        let hint = err.hint().unwrap();
        assert!(
            hint.contains("go install sigs.k8s.io/kind@v0.33.0"),
            "{hint}"
        );
        assert!(hint.contains("DEVSTACK_KIND"), "{hint}");
        assert!(hint.contains("--provider k3s"), "{hint}");
    }

    /// A fake `kind` printing `version_line`, in its own directory.
    fn fake_kind(version_line: &str) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kind");
        std::fs::write(&path, format!("#!/bin/sh\necho '{version_line}'\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    /// Retried because executing a freshly written script can fail with
    /// ETXTBSY while another test thread forks.
    async fn retried<F, Fut>(find: F) -> Result<KindCli, Error>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<KindCli, Error>>,
    {
        let mut result = find().await;
        for _ in 0..3 {
            match &result {
                Err(e) if e.message().contains("does not report a version") => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    result = find().await;
                }
                _ => break,
            }
        }
        result
    }

    /// `find_kind_from` with a fake kind on PATH.
    async fn find_fake(version_line: &str) -> Result<KindCli, Error> {
        let dir = fake_kind(version_line);
        retried(|| find_kind_from(None, dir.path().as_os_str(), None)).await
    }

    #[tokio::test]
    async fn old_kind_is_refused() {
        let err = find_fake("kind v0.20.0 go1.20 linux/amd64")
            .await
            .unwrap_err();
        assert_eq!(err.kind(), Kind::Prerequisite);
        assert!(err.message().contains("kind v0.20.0"), "{}", err.message());
        assert!(
            err.message().contains("older than v0.30.0"),
            "{}",
            err.message()
        );
        assert!(err.hint().unwrap().contains("upgrade kind"));
    }

    #[tokio::test]
    async fn supported_kind_is_found() {
        let cli = find_fake("kind v0.33.0 go1.26.8 linux/amd64")
            .await
            .unwrap();
        assert!(cli.path.ends_with("kind"));
        assert_eq!(cli.version, (0, 33, 0));
        assert_eq!(cli.origin, "PATH");
    }

    #[tokio::test]
    async fn kind_without_a_version_is_refused() {
        let err = find_fake("something else").await.unwrap_err();
        assert_eq!(err.kind(), Kind::Prerequisite);
        assert!(err.message().contains("does not report a version"));
        assert!(err.message().contains("`something else`"));
    }

    #[tokio::test]
    async fn the_bundle_kind_is_used_when_path_has_none_or_an_old_one() {
        let bundled = fake_kind("kind v0.33.0 go1.26.8 linux/amd64");
        let bundled_path = bundled.path().join("kind");
        let empty = tempfile::tempdir().unwrap();
        let cli =
            retried(|| find_kind_from(None, empty.path().as_os_str(), Some(bundled_path.clone())))
                .await
                .unwrap();
        assert_eq!(
            (cli.path.as_path(), cli.origin),
            (bundled_path.as_path(), "the offline bundle")
        );

        let old = fake_kind("kind v0.20.0 go1.20 linux/amd64");
        let cli =
            retried(|| find_kind_from(None, old.path().as_os_str(), Some(bundled_path.clone())))
                .await
                .unwrap();
        assert_eq!(cli.origin, "the offline bundle");
    }

    #[tokio::test]
    async fn devstack_kind_wins_and_is_not_second_guessed() {
        let good = fake_kind("kind v0.33.0 go1.26.8 linux/amd64");
        let old = fake_kind("kind v0.20.0 go1.20 linux/amd64");
        let cli = retried(|| {
            find_kind_from(Some(old.path().join("kind")), good.path().as_os_str(), None)
        })
        .await
        .unwrap_err();
        assert!(
            cli.message().contains("(DEVSTACK_KIND)"),
            "{}",
            cli.message()
        );
        let cli = retried(|| {
            find_kind_from(Some(good.path().join("kind")), old.path().as_os_str(), None)
        })
        .await
        .unwrap();
        assert_eq!(cli.origin, "DEVSTACK_KIND");
    }

    /// What kind v0.33.0 writes to a pipe for a two-node cluster: the
    /// status lines of pkg/internal/cli/status.go (` • %s  ...`, ` ✓ %s`)
    /// around the phases of pkg/cluster/internal/create and the docker
    /// provider, verbatim with their emoji.
    const KIND_CREATE_STDERR: &str = "Creating cluster \"devstack-dev\" ...\n \
 • Ensuring node image (kindest/node:v1.35.0) 🖼️  ...\n \
 ✓ Ensuring node image (kindest/node:v1.35.0) 🖼️\n \
 • Preparing nodes 📦 📦   ...\n \
 ✓ Preparing nodes 📦 📦 \n \
 • Writing configuration 📜  ...\n \
 ✓ Writing configuration 📜\n \
 • Starting control-plane 🕹️  ...\n \
 ✓ Starting control-plane 🕹️\n \
 • Installing CNI 🔌  ...\n \
 ✓ Installing CNI 🔌\n \
 • Installing StorageClass 💾  ...\n \
 ✓ Installing StorageClass 💾\n \
 • Joining worker nodes 🚜  ...\n \
 ✓ Joining worker nodes 🚜\n\
Set kubectl context to \"kind-devstack-dev\"\n";

    #[test]
    fn kind_progress_lines_name_the_phase_without_emoji() {
        let parsed: Vec<KindProgress> = KIND_CREATE_STDERR
            .lines()
            .filter_map(parse_progress_line)
            .collect();
        let phases = [
            "Ensuring node image (kindest/node:v1.35.0)",
            "Preparing nodes",
            "Writing configuration",
            "Starting control-plane",
            "Installing CNI",
            "Installing StorageClass",
            "Joining worker nodes",
        ];
        let expected: Vec<KindProgress> = phases
            .iter()
            .flat_map(|p| {
                [
                    KindProgress::Started(p.to_string()),
                    KindProgress::Ended {
                        phase: p.to_string(),
                        ok: true,
                    },
                ]
            })
            .collect();
        assert_eq!(parsed, expected);

        // A failure, as a terminal would show it (colored), and phases
        // with words after non-ASCII ones.
        assert_eq!(
            parse_progress_line(" \u{1b}[31m✗\u{1b}[0m Starting control-plane 🕹️"),
            Some(KindProgress::Ended {
                phase: "Starting control-plane".into(),
                ok: false
            })
        );
        assert_eq!(
            parse_progress_line(" • Waiting ≤ 5m0s for control-plane = Ready ⏳  ..."),
            Some(KindProgress::Started(
                "Waiting ≤ 5m0s for control-plane = Ready".into()
            ))
        );
        for other in [
            "",
            "Creating cluster \"x\" ...",
            "ERROR: failed to create cluster: failed to init node with kubeadm",
            " • 📦  ...",
            "DEBUG: docker/images.go:58] Image: kindest/node:v1.35.0 present locally",
        ] {
            assert_eq!(parse_progress_line(other), None, "{other:?}");
        }
    }

    #[test]
    fn kind_phases_become_spans_ended_by_their_end_line_or_kinds_exit() {
        let timeline = Timeline::new();
        let parent = timeline.start("kind create cluster", None);
        let mut phases = KindPhases::new(Some((timeline.clone(), parent)));
        for line in KIND_CREATE_STDERR.lines() {
            phases.line(line);
        }
        phases.line(" • Joining more control-plane nodes 🎮  ...");
        phases.end(false);
        let spans = timeline.spans();
        let names: Vec<(&str, Option<usize>, Option<bool>)> = spans
            .iter()
            .skip(1)
            .map(|s| (s.name.as_str(), s.parent, s.ok))
            .collect();
        assert_eq!(names.len(), 8, "{names:?}");
        assert_eq!(
            names[1],
            ("kind: Preparing nodes", Some(parent), Some(true))
        );
        assert_eq!(
            names[7],
            (
                "kind: Joining more control-plane nodes",
                Some(parent),
                Some(false)
            )
        );
        assert!(spans.iter().skip(1).all(|s| s.end_ms.is_some()));
    }

    #[tokio::test]
    async fn kinds_stderr_is_streamed_line_by_line_and_kept_whole() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kind");
        std::fs::write(
            &path,
            "#!/bin/sh\necho out\nprintf ' • Preparing nodes 📦   ...\\n' >&2\nprintf 'no newline' >&2\nexit 3\n",
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut lines = Vec::new();
        let mut output = None;
        // ETXTBSY, as in `retried`.
        for _ in 0..4 {
            lines.clear();
            match run_kind_streaming(&path, &[], Duration::from_secs(30), |l| {
                lines.push(l.to_string())
            })
            .await
            {
                Ok(o) => {
                    output = Some(o);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let output = output.expect("the fake kind ran");
        assert_eq!(output.status.code(), Some(3));
        assert_eq!(output.stdout, b"out\n");
        assert_eq!(
            String::from_utf8_lossy(&output.stderr),
            " • Preparing nodes 📦   ...\nno newline"
        );
        assert_eq!(lines, [" • Preparing nodes 📦   ...", "no newline"]);
    }

    #[test]
    fn kind_failures_quote_the_end_of_stderr() {
        use std::os::unix::process::ExitStatusExt;
        let stderr: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let output = Output {
            status: std::process::ExitStatus::from_raw(256),
            stdout: Vec::new(),
            stderr: stderr.into_bytes(),
        };
        let args = [OsStr::new("create"), OsStr::new("cluster")];
        let err = kind_failed(&args, &output);
        assert_eq!(err.kind(), Kind::Internal);
        let message = err.message();
        assert!(
            message.starts_with("`kind create cluster` failed"),
            "{message}"
        );
        assert!(
            message.contains("line 11\n") && message.ends_with("line 30"),
            "{message}"
        );
        assert!(!message.contains("line 10\n"), "{message}");
        assert!(err.hint().is_some());

        let output = Output {
            stderr: b"Bind for 127.0.0.1:8080 failed: port is already allocated\n".to_vec(),
            ..output
        };
        assert_eq!(kind_failed(&args, &output).kind(), Kind::Prerequisite);
    }
}
