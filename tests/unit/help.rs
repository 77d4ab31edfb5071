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
    assert_eq!(codes.len(), 7, "success and six error kinds: {codes:?}");
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
