//! What `--help` and the man page tell a user: examples for every command,
//! every exit code, where completions go, and the sections of a program's
//! man page (EXIT STATUS, ENVIRONMENT, FILES).

use devstack::error::Kind;

use crate::cli::{devstack, manifest_dir};
use crate::pipes::{command_paths, stack_at};

/// Every exit code the binary uses (`devstack::cli::exit_codes`, whose
/// exhaustive match names every error kind), sorted.
fn exit_codes_in_use() -> Vec<i32> {
    let mut codes: Vec<i32> = devstack::cli::exit_codes()
        .iter()
        .map(|(code, _)| *code)
        .collect();
    codes.sort();
    // The timeout's code was once missing from --help.
    assert!(codes.contains(&Kind::Timeout.exit_code()), "{codes:?}");
    assert_eq!(
        codes.len(),
        9,
        "success, five error kinds and an interrupt by each of three signals: {codes:?}"
    );
    codes
}

/// The lines of `text` after the line `heading`, up to a blank line.
fn block_after<'a>(text: &'a str, heading: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|l| l.trim_end() != heading)
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect()
}

#[test]
fn every_command_s_help_ends_with_examples_of_it() {
    let paths = command_paths();
    assert!(paths.len() > 30, "only {} commands found", paths.len());
    let mut without = Vec::new();
    for path in &paths {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let (code, help, stderr) = devstack(&args, &manifest_dir());
        assert_eq!(code, 0, "{args:?}: {stderr}");
        let examples = block_after(&help, "Examples:");
        if !examples.iter().any(|l| l.contains("devstack ")) {
            without.push(path.join(" "));
        }
    }
    let (_, help, _) = devstack(&["--help"], &manifest_dir());
    if !block_after(&help, "Examples:")
        .iter()
        .any(|l| l.trim_start().starts_with("devstack "))
    {
        without.push("(devstack itself)".into());
    }
    assert!(
        without.is_empty(),
        "no `Examples:` block naming a devstack command in the --help of: {without:?}"
    );
}

#[test]
fn help_lists_every_exit_code_the_binary_uses() {
    let (code, help, _) = devstack(&["--help"], &manifest_dir());
    assert_eq!(code, 0);
    let mut listed: Vec<i32> = block_after(&help, "Exit codes:")
        .iter()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    listed.sort();
    assert_eq!(listed, exit_codes_in_use(), "{help}");
    assert!(
        help.contains("  5    timeout: a wait passed its deadline"),
        "{help}"
    );
}

/// The text of section `name` of a roff page, up to the next section.
fn man_section<'a>(page: &'a str, name: &str) -> &'a str {
    // roff quotes a heading with a space.
    let heading = if name.contains(' ') {
        format!(".SH \"{name}\"\n")
    } else {
        format!(".SH {name}\n")
    };
    let start = page
        .find(&heading)
        .unwrap_or_else(|| panic!("no section {name} in the man page:\n{page}"));
    let body = &page[start + heading.len()..];
    &body[..body.find("\n.SH ").map_or(body.len(), |end| end + 1)]
}

/// Names of the variables `src/envvars.rs` declares (`pub const NAME: &str`).
fn declared_variables() -> Vec<String> {
    let source = std::fs::read_to_string(manifest_dir().join("src/envvars.rs")).unwrap();
    source
        .lines()
        .filter_map(|l| l.strip_prefix("pub const "))
        .filter_map(|l| l.split_once(": &str"))
        .map(|(name, _)| name.to_string())
        .collect()
}

#[test]
fn the_man_page_has_exit_status_environment_and_files() {
    let (code, page, stderr) = devstack(&["man"], &manifest_dir());
    assert_eq!(code, 0, "{stderr}");

    let exit_status = man_section(&page, "EXIT STATUS");
    let mut listed: Vec<i32> = exit_status
        .split("\\fB")
        .skip(1)
        .filter_map(|bold| bold.split("\\fR").next()?.parse().ok())
        .collect();
    listed.sort();
    assert_eq!(listed, exit_codes_in_use(), "{exit_status}");

    let environment = man_section(&page, "ENVIRONMENT");
    let variables = declared_variables();
    assert!(variables.len() >= 20, "found only {variables:?}");
    let missing: Vec<&String> = variables
        .iter()
        .filter(|name| !environment.contains(&format!("\\fB{name}\\fR")))
        .collect();
    assert!(
        missing.is_empty(),
        "ENVIRONMENT lacks {missing:?}:\n{environment}"
    );

    // The places devstack writes, as the library names them.
    let files = man_section(&page, "FILES").replace("\\-", "-");
    let home = std::path::Path::new("$DEVSTACK_HOME");
    let stack = stack_at(home, "NAME");
    for dir in [
        devstack::state::stack_dir(&stack),
        devstack::snapshot::store_dir(&stack),
        stack.artifact_cache().parent().unwrap().to_path_buf(),
        devstack::state::StackLock::path(&stack)
            .parent()
            .unwrap()
            .to_path_buf(),
    ] {
        let dir = dir.display().to_string();
        assert!(files.contains(&dir), "FILES does not name {dir}:\n{files}");
    }
    assert!(
        page.find(".SH FILES") < page.find(".SH VERSION"),
        "the program's sections come before VERSION"
    );
    assert!(
        !man_section(&page, "EXTRA").contains("Exit codes"),
        "the exit codes are in EXIT STATUS, not twice"
    );
}

#[test]
fn completions_help_says_where_each_shell_loads_them_from() {
    let (code, help, _) = devstack(&["completions", "--help"], &manifest_dir());
    assert_eq!(code, 0);
    for line in [
        "devstack completions bash > ~/.local/share/bash-completion/completions/devstack",
        "devstack completions zsh > ~/.zfunc/_devstack",
        "zsh reads ~/.zfunc when ~/.zshrc has `fpath=(~/.zfunc $fpath)` before `compinit`",
        "devstack completions fish > ~/.config/fish/completions/devstack.fish",
    ] {
        assert!(help.contains(line), "no `{line}` in:\n{help}");
    }
}

/// The `--help` of the command at `path`.
fn help_of(path: &[String]) -> String {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let (code, help, stderr) = devstack(&args, &manifest_dir());
    assert_eq!(code, 0, "{args:?}: {stderr}");
    help
}

/// The option names (`--retain`) listed in the block under `heading`.
fn options_under(help: &str, heading: &str) -> Vec<String> {
    block_after_heading(help, heading)
        .iter()
        .flat_map(|line| line.split_whitespace())
        .filter(|word| word.starts_with("--"))
        .map(|word| {
            word.trim_end_matches(',')
                .trim_end_matches("...")
                .to_string()
        })
        .collect()
}

/// The lines of `text` after `heading` up to the next heading (a line
/// that ends with `:` and does not start with a space).
fn block_after_heading<'a>(text: &'a str, heading: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|l| l.trim_end() != heading)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect()
}

/// U4: each command's own options come first; the global options follow
/// under their own heading, without those the command has no use for.
#[test]
fn global_options_come_after_each_command_s_own_and_only_where_they_apply() {
    let stack_options = ["--profile", "--name", "--provider", "--context", "--bundle"];
    for path in command_paths() {
        let help = help_of(&path);
        let (own, global) = (
            help.find("\nOptions:\n").expect("an Options heading"),
            help.find("\nGlobal options:\n")
                .unwrap_or_else(|| panic!("{path:?}: no Global options heading:\n{help}")),
        );
        assert!(own < global, "{path:?}: own options first:\n{help}");
        let global_options = options_under(&help, "Global options:");
        for option in ["--quiet", "--verbose"] {
            assert!(
                global_options.iter().any(|o| o == option),
                "{path:?}: {global_options:?}"
            );
        }
        let words: Vec<&str> = path.iter().map(String::as_str).collect();
        let unused = devstack::cli::unused_global_options(&words);
        for option in stack_options.iter().chain(&["--json"]) {
            if *option == "--bundle" && words == ["pull"] {
                continue;
            }
            let listed = global_options.iter().any(|o| o == option);
            let is_unused = unused.contains(&option.trim_start_matches('-'));
            assert_eq!(
                listed, !is_unused,
                "{path:?}: {option} listed: {listed}\n{help}"
            );
        }
        if !unused.is_empty() {
            assert!(unused.contains(&"profile"), "{path:?}: {unused:?}");
        }
    }
    // `pull --bundle DIR` writes a bundle: its own option, said so.
    let help = help_of(&["pull".to_string()]);
    assert!(
        options_under(&help, "Options:").contains(&"--bundle".to_string()),
        "{help}"
    );
    assert!(
        !options_under(&help, "Global options:").contains(&"--bundle".to_string()),
        "{help}"
    );
    assert!(help.contains("Write a portable offline bundle"), "{help}");
    assert!(
        !help.contains("Offline bundle directory, overriding the profile"),
        "{help}"
    );
}

/// M5: every argument has its help line (no bare `<NAME>`).
#[test]
fn every_argument_of_every_command_is_described() {
    let mut bare = Vec::new();
    for path in command_paths() {
        // The short help: each argument and its help on one line.
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("-h");
        let (code, help, stderr) = devstack(&args, &manifest_dir());
        assert_eq!(code, 0, "{args:?}: {stderr}");
        for line in block_after_heading(&help, "Arguments:") {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.len() == 1 && (words[0].starts_with('<') || words[0].starts_with('[')) {
                bare.push(format!("{}: {}", path.join(" "), words[0]));
            }
        }
    }
    assert!(bare.is_empty(), "arguments without help: {bare:?}");
}

/// M5: each command that acts on a stack names its exit codes in its help.
#[test]
fn every_command_that_acts_on_a_stack_names_its_exit_codes() {
    let mut without = Vec::new();
    for path in command_paths() {
        let words: Vec<&str> = path.iter().map(String::as_str).collect();
        let leaf = !matches!(
            words.as_slice(),
            ["profile" | "localstack" | "cluster" | "snapshot"]
        );
        if !leaf || devstack::cli::unused_global_options(&words).contains(&"name") {
            continue;
        }
        let help = help_of(&path);
        let names_a_code = help.split(['.', ';', ',']).any(|part| {
            let part = part.to_lowercase();
            part.contains("exit ") && part.chars().any(|c| c.is_ascii_digit())
        });
        if !names_a_code {
            without.push(path.join(" "));
        }
    }
    assert!(
        without.is_empty(),
        "no exit code in the help of: {without:?}"
    );
}

/// U6: `logs` and `localstack logs` take the same flags, with the same
/// value names and help.
#[test]
fn localstack_logs_takes_the_flags_of_logs() {
    let line_of = |help: &str, flag: &str| -> String {
        let lines: Vec<&str> = help.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.trim_start().starts_with(flag) || l.contains(&format!(", {flag}")))
            .unwrap_or_else(|| panic!("no {flag} in:\n{help}"));
        format!("{}\n{}", lines[at].trim(), lines[at + 1].trim())
    };
    let logs = help_of(&["logs".to_string()]);
    let localstack = help_of(&["localstack".to_string(), "logs".to_string()]);
    for flag in ["--tail <N>", "--since <DURATION>", "--follow"] {
        assert_eq!(line_of(&logs, flag), line_of(&localstack, flag), "{flag}");
    }
}

/// N-U7: the man pages name only pages `man --out-dir` writes: no
/// `devstack-help`, and `man help` is no command.
#[test]
fn the_man_pages_name_no_help_page() {
    let (code, page, stderr) = devstack(&["man"], &manifest_dir());
    assert_eq!(code, 0, "{stderr}");
    let subcommands = man_section(&page, "SUBCOMMANDS");
    assert!(subcommands.contains("devstack\\-up(1)"), "{subcommands}");
    assert!(!subcommands.contains("help"), "{subcommands}");
    let (code, _, stderr) = devstack(&["man", "help"], &manifest_dir());
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("`devstack help` is not a command"),
        "{stderr}"
    );

    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = devstack(
        &["man", "--out-dir", dir.path().to_str().unwrap()],
        &manifest_dir(),
    );
    assert_eq!(code, 0, "{stderr}");
    let written: std::collections::BTreeSet<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    // Every page a page names is written.
    for file in &written {
        let text = std::fs::read_to_string(dir.path().join(file)).unwrap();
        for named in text.split("\\fB").skip(1) {
            let Some(name) = named.split("(1)").next().filter(|_| named.contains("(1)")) else {
                continue;
            };
            let name = name.replace("\\-", "-").replace("\\fR", "");
            if name.starts_with("devstack") && !name.contains(' ') {
                assert!(
                    written.contains(&format!("{name}.1")),
                    "{file} names {name}(1)"
                );
            }
        }
    }
}

/// N-W12: FILES gives the state directory in the order devstack looks for
/// it, as `devstack list` shows where it reads the records.
#[test]
fn the_man_page_names_the_state_directory_devstack_uses() {
    let (_, page, _) = devstack(&["man"], &manifest_dir());
    let files = man_section(&page, "FILES").replace("\\-", "-");
    assert!(
        files.contains(
            "the state directory: DEVSTACK_HOME when it is set, else $XDG_STATE_HOME/devstack, else ~/.local/state/devstack"
        ),
        "{files}"
    );
    let home = tempfile::tempdir().unwrap();
    let listed_in = |env: &[(&str, &std::path::Path)]| -> String {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_devstack"));
        command
            .arg("list")
            .current_dir(home.path())
            .env_remove("DEVSTACK_HOME")
            .env_remove("XDG_STATE_HOME")
            .env("DOCKER_HOST", "unix:///nonexistent/docker.sock");
        for (name, value) in env {
            command.env(name, value);
        }
        let out = command.output().unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let (own, xdg, user) = (
        home.path().join("own"),
        home.path().join("xdg"),
        home.path().join("user"),
    );
    let note = |dir: std::path::PathBuf| format!("none recorded in {}", dir.display());
    let all = [
        ("DEVSTACK_HOME", own.as_path()),
        ("XDG_STATE_HOME", &xdg),
        ("HOME", &user),
    ];
    assert!(listed_in(&all).contains(&note(own.join("stacks"))));
    assert!(listed_in(&all[1..]).contains(&note(xdg.join("devstack/stacks"))));
    assert!(listed_in(&all[2..]).contains(&note(user.join(".local/state/devstack/stacks"))));
}
