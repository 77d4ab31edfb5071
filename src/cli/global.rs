//! The global options: which command has a use for which, and the clap
//! command built from [`Cli`] that hides and refuses the others.

use super::Cli;
use crate::error::Error;

/// The global options that select a stack: its profile and what overrides it.
const STACK_OPTIONS: &[&str] = &["profile", "name", "provider", "context", "bundle"];
/// The same and `--json`, for commands whose output has no JSON form.
const STACK_AND_JSON_OPTIONS: &[&str] =
    &["profile", "name", "provider", "context", "bundle", "json"];

/// The global options command `path` (`["snapshot", "rm"]`) has no use
/// for: it reads no stack (state comes from DEVSTACK_HOME alone), or prints
/// no JSON. They are left out of its help and refused when given, rather
/// than ignored.
pub fn unused_global_options(path: &[&str]) -> &'static [&'static str] {
    match path {
        ["list"] | ["version"] | ["profile", "list" | "validate"] => STACK_OPTIONS,
        ["snapshot", "list" | "rm" | "export" | "import"] => STACK_OPTIONS,
        ["completions"] | ["man"] => STACK_AND_JSON_OPTIONS,
        _ => &[],
    }
}

/// The clap command devstack parses and documents: [`Cli`]'s, built, with
/// each command's unused global options hidden and `pull`'s `--bundle`
/// described as what it is there (where to write a bundle).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    adjusted(Cli::command())
}

/// [`command`] without clap's `help` subcommand, which has no page of its
/// own: the man pages are made from this one.
pub fn documented_command() -> clap::Command {
    use clap::CommandFactory;
    adjusted(Cli::command().disable_help_subcommand(true))
}

fn adjusted(command: clap::Command) -> clap::Command {
    let globals: Vec<clap::Arg> = command
        .get_arguments()
        .filter(|arg| arg.is_global_set())
        .cloned()
        .collect();
    let mut command = hide_unused(command, &mut Vec::new(), &globals);
    let bundle = global(&globals, "bundle")
        .help(
            "Write a portable offline bundle (every artifact and the kind CLI) into DIR instead \
             of the cache",
        )
        .help_heading(None::<&str>);
    command = command.mut_subcommand("pull", |pull| pull.arg(bundle));
    // Built: every subcommand named `devstack-...`, with the global options.
    command.build();
    command
}

/// The global option `id`, for a subcommand to have as its own: building
/// gives a subcommand every global option it does not have an argument of
/// that id for.
fn global(globals: &[clap::Arg], id: &str) -> clap::Arg {
    let arg = globals.iter().find(|arg| arg.get_id() == id);
    arg.expect("a global option of this id").clone()
}

/// `command` (at `path`) and its subcommands, each with hidden copies of the
/// global options it has no use for.
fn hide_unused(
    mut command: clap::Command,
    path: &mut Vec<String>,
    globals: &[clap::Arg],
) -> clap::Command {
    let words: Vec<&str> = path.iter().map(String::as_str).collect();
    for id in unused_global_options(&words) {
        command = command.arg(global(globals, id).hide(true));
    }
    let names: Vec<String> = command
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for name in names {
        path.push(name.clone());
        command = command.mut_subcommand(&name, |sub| hide_unused(sub, path, globals));
        path.pop();
    }
    command
}

/// Refuses a global option given on the command line to a command that has
/// no use for it ([`unused_global_options`]); its variable
/// (DEVSTACK_PROFILE, ...) may stay set in the environment.
pub fn refuse_unused_options(matches: &clap::ArgMatches) -> Result<(), Error> {
    let mut path = Vec::new();
    let mut leaf = matches;
    while let Some((name, sub)) = leaf.subcommand() {
        path.push(name);
        leaf = sub;
    }
    let given = unused_global_options(&path)
        .iter()
        .find(|id| leaf.value_source(id) == Some(clap::parser::ValueSource::CommandLine));
    match given {
        None => Ok(()),
        Some(id) => {
            let command = path.join(" ");
            let why = if *id == "json" {
                "its output has no JSON form"
            } else {
                "it reads no stack and no profile"
            };
            Err(Error::user(format!(
                "--{id} has no effect on `devstack {command}`: {why}"
            ))
            .with_hint(format!(
                "leave --{id} out; `devstack {command} --help` lists the options it takes"
            )))
        }
    }
}

/// A usage error as clap renders it, its closing "For more information"
/// line replaced by a `hint:` that names the help of the command the user
/// typed (read from clap's `Usage:` line), as every other error ends.
pub fn usage_error_with_hint(rendered: &str) -> String {
    let command = rendered
        .lines()
        .find_map(|line| line.trim_start().strip_prefix("Usage: "))
        .map(|usage| {
            usage
                .split_whitespace()
                .take_while(|word| !word.starts_with(['[', '<', '-']))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|command| !command.is_empty())
        .unwrap_or_else(|| "devstack".to_string());
    let mut text: String = rendered
        .lines()
        .filter(|line| !line.starts_with("For more information, try"))
        .map(|line| format!("{line}\n"))
        .collect();
    while text.ends_with("\n\n") {
        text.pop();
    }
    text.push_str(&format!("hint: `{command} --help` lists what it takes\n"));
    text
}

#[cfg(test)]
mod usage_tests {
    use super::usage_error_with_hint;

    #[test]
    fn a_usage_error_ends_with_a_hint_naming_the_command_typed() {
        let rendered = "error: unexpected argument '--bogus' found\n\nUsage: devstack up [OPTIONS]\n\nFor more information, try '--help'.\n";
        assert_eq!(
            usage_error_with_hint(rendered),
            "error: unexpected argument '--bogus' found\n\nUsage: devstack up [OPTIONS]\nhint: `devstack up --help` lists what it takes\n"
        );
        let nested = "error: x\n\nUsage: devstack snapshot rm <NAME>\n\nFor more information, try '--help'.\n";
        assert!(
            usage_error_with_hint(nested)
                .ends_with("hint: `devstack snapshot rm --help` lists what it takes\n")
        );
        assert!(
            usage_error_with_hint("error: x\n")
                .ends_with("hint: `devstack --help` lists what it takes\n")
        );
    }
}
