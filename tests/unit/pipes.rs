//! A reader that closes its end at once (`devstack completions bash | head
//! -1`) ends the output, not the command: every printing command that needs
//! no Docker engine exits 0 and prints no panic. Any other failed write to
//! stdout is an error.

use std::path::Path;
use std::process::Stdio;

use clap::CommandFactory;
use devstack::profile::{Overrides, Settings};
use devstack::state::{self, StackRecord};

use crate::cli::devstack_in_home;

/// Every command's words, `["up"]`, `["snapshot", "save"]`, ..., from the
/// CLI's own definition (clap's `help` left out).
pub(crate) fn command_paths() -> Vec<Vec<String>> {
    fn walk(command: &clap::Command, above: &[String], out: &mut Vec<Vec<String>>) {
        for sub in command.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            let mut path = above.to_vec();
            path.push(sub.get_name().to_string());
            out.push(path.clone());
            walk(sub, &path, out);
        }
    }
    let mut paths = Vec::new();
    walk(&devstack::cli::Cli::command(), &[], &mut paths);
    paths
}

/// Settings of stack `name` in the state directory `state_dir`, to write
/// its files as devstack does.
pub(crate) fn stack_at(state_dir: &Path, name: &str) -> Settings {
    let mut settings = Settings::builtin(&Overrides::default()).unwrap();
    settings.state_dir = state_dir.to_path_buf();
    settings.name = name.into();
    settings
}

/// Runs devstack with its stdout on a pipe whose reader is already
/// closed; the exit code (`None`: killed by a signal) and stderr.
fn into_closed_pipe(args: &[&str], home: &Path) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = devstack_in_home(home, args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn printing_commands_exit_0_without_a_panic_when_their_reader_closed() {
    let home = tempfile::tempdir().unwrap();
    // A stack with a record and a kubeconfig, for `list` and `kubeconfig`.
    let ci = stack_at(&home.path().join("state"), "ci");
    StackRecord::update(&ci, |r| r.ports.localstack = Some(4566)).unwrap();
    std::fs::write(
        state::kubeconfig_path(&ci),
        "apiVersion: v1\nkind: Config\n",
    )
    .unwrap();

    let mut runs: Vec<Vec<String>> = [
        "--help",
        "-h",
        "--version",
        "help",
        "version",
        "version --json",
        "man",
        "man up",
        "man snapshot save",
        "profile list",
        "profile list --json",
        "profile validate ci dev demo --json",
        "-p ci profile show --origins",
        "-p ci profile show --json",
        "list",
        "ls --json",
        "-p ci kubeconfig",
        "-p ci kubeconfig --path",
        "-p ci kubeconfig --json",
        "snapshot list --json",
    ]
    .iter()
    .map(|line| line.split(' ').map(String::from).collect())
    .collect();
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        runs.push(vec!["completions".into(), shell.into()]);
    }
    let paths = command_paths();
    assert!(paths.len() > 30, "only {} commands found", paths.len());
    for path in paths {
        runs.push([path.clone(), vec!["--help".into()]].concat());
        runs.push([vec!["help".into()], path].concat());
    }

    let mut failed = Vec::new();
    for args in &runs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stderr) = into_closed_pipe(&args, home.path());
        if code != Some(0)
            || stderr.contains("panicked")
            || stderr.contains("Broken pipe")
            || stderr.contains("cannot write to stdout")
        {
            failed.push(format!(
                "devstack {}: exit {code:?}\n{stderr}",
                args.join(" ")
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} runs failed:\n{}",
        failed.len(),
        runs.len(),
        failed.join("\n")
    );
}

/// Any other failed write (a full disk: `/dev/full`) loses output the user
/// asked for: the command exits non-zero and says so once, on stderr.
#[test]
fn a_failed_write_to_stdout_is_one_error_and_a_non_zero_exit() {
    let full = Path::new("/dev/full");
    if !full.exists() {
        eprintln!(
            "SKIPPED: a_failed_write_to_stdout_is_one_error_and_a_non_zero_exit: no /dev/full on this machine"
        );
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let ci = stack_at(&home.path().join("state"), "ci");
    StackRecord::update(&ci, |r| r.ports.localstack = Some(4566)).unwrap();
    std::fs::write(
        state::kubeconfig_path(&ci),
        "apiVersion: v1\nkind: Config\n",
    )
    .unwrap();
    let mut failed = Vec::new();
    for line in [
        "version",
        "version --json",
        "--version",
        "--help",
        "up --help",
        "completions bash",
        "man",
        "profile list",
        "-p ci kubeconfig",
    ] {
        let args: Vec<&str> = line.split(' ').collect();
        let out = devstack_in_home(home.path(), &args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(full).unwrap())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let errors = stderr.matches("error: cannot write to stdout").count();
        if out.status.code() != Some(1)
            || errors != 1
            || !stderr.contains("No space left on device")
            || !stderr.contains("hint:")
            || stderr.contains("warning:")
            || stderr.contains("panicked")
        {
            failed.push(format!(
                "devstack {line}: exit {:?}\n{stderr}",
                out.status.code()
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
