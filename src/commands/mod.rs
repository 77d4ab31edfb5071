//! One module per CLI verb. Each takes the shared [`Context`] and returns
//! the process exit code on success paths that are not plain success
//! (doctor with failing checks), or an [`Error`] that decides it.

pub mod cluster;
pub mod completions;
pub mod diagnose;
pub mod doctor;
pub mod down;
pub mod env;
pub mod facts;
pub mod kubeconfig;
pub mod list;
pub mod load;
pub mod localstack;
pub mod logs;
pub mod man;
pub mod profile;
pub mod pull;
pub mod seed;
pub mod snapshot;
pub mod start;
pub mod status;
pub mod stop;
pub mod sync;
pub mod up;
pub mod verify;
pub mod version;

use crate::cli::{Cli, Command, GlobalArgs};
use crate::error::Error;
use crate::profile::{Overrides, Settings};
use crate::ui::Ui;

pub struct Context {
    pub ui: Ui,
    pub global: GlobalArgs,
    /// Whether the profile's notices were told: settings are resolved more
    /// than once in a run, the notices said once.
    notices_told: std::sync::atomic::AtomicBool,
}

impl Context {
    /// The global flags that override the profile.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            name: self.global.name.clone(),
            provider: self.global.provider.map(Into::into),
            context: self.global.context.clone(),
            bundle: self.global.bundle.clone(),
            ..Overrides::default()
        }
    }

    /// What the profile asks for, with the global overrides: what `up`
    /// starts from.
    pub fn asked(&self, extra: impl FnOnce(&mut Overrides)) -> Result<Settings, Error> {
        let mut overrides = self.overrides();
        extra(&mut overrides);
        let settings = crate::profile::select(self.global.profile.as_deref(), &overrides)?;
        if !self
            .notices_told
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            for notice in &settings.notices {
                self.ui.warn(notice);
            }
        }
        Ok(settings)
    }

    /// Settings for commands that act on a stack an `up` made: what was
    /// asked, with what the stack's record knows (the ports `auto` chose,
    /// the provider its cluster was made with...).
    pub fn settings(&self, extra: impl FnOnce(&mut Overrides)) -> Result<Settings, Error> {
        Ok(crate::stack::recorded_settings(&self.asked(extra)?))
    }
}

pub async fn run(cli: Cli, ui: Ui) -> Result<i32, Error> {
    let ctx = Context {
        ui,
        global: cli.global,
        notices_told: Default::default(),
    };
    let stackless = !reads_stack(&cli.command);
    let result = match cli.command {
        Command::Up(args) => up::run(&ctx, args).await,
        Command::Down(args) => down::run(&ctx, args).await,
        Command::List => list::run(&ctx).await,
        Command::Stop => stop::run(&ctx).await,
        Command::Start(args) => start::run(&ctx, args).await,
        Command::Doctor => doctor::run(&ctx).await,
        Command::Profile(cmd) => profile::run(&ctx, cmd),
        Command::Localstack(cmd) => localstack::run(&ctx, cmd).await,
        Command::Cluster(cmd) => cluster::run(&ctx, cmd).await,
        Command::Seed(args) => seed::run(&ctx, args).await,
        Command::Load(args) => load::run(&ctx, args).await,
        Command::Verify(args) => verify::run(&ctx, args).await,
        Command::Status(args) => status::run(&ctx, args).await,
        Command::Diagnose => diagnose::run(&ctx).await,
        Command::Env(args) => env::run(&ctx, args).await,
        Command::Facts(args) => facts::run(&ctx, args).await,
        Command::Sync(args) => sync::run(&ctx, args).await,
        Command::Version => version::run(&ctx),
        Command::Pull => pull::run(&ctx).await,
        Command::Snapshot(cmd) => snapshot::run(&ctx, cmd).await,
        Command::Logs(args) => logs::run(&ctx, args).await,
        Command::Kubeconfig(args) => kubeconfig::run(&ctx, args),
        Command::Completions { shell } => completions::run(&ctx, shell),
        Command::Man(args) => man::run(&ctx, args),
    };
    result.map_err(|err| {
        // `devstack snapshot list` is the same command whatever the stack.
        if stackless {
            return err;
        }
        match ctx.settings(|_| {}) {
            Ok(settings) => err.with_command_flags(&settings.cli_flags()),
            // The profile itself is what failed: its error names no command.
            Err(_) => err,
        }
    })
}

/// Whether `command` acts on a stack: not one of those the options that
/// select a stack have no effect on ([`crate::cli::unused_global_options`]).
fn reads_stack(command: &Command) -> bool {
    use crate::cli::{ProfileCommand, SnapshotCommand};
    let words: &[&str] = match command {
        Command::List => &["list"],
        Command::Version => &["version"],
        Command::Completions { .. } => &["completions"],
        Command::Man(_) => &["man"],
        Command::Profile(ProfileCommand::List) => &["profile", "list"],
        Command::Profile(ProfileCommand::Validate { .. }) => &["profile", "validate"],
        Command::Snapshot(SnapshotCommand::List) => &["snapshot", "list"],
        Command::Snapshot(SnapshotCommand::Rm { .. }) => &["snapshot", "rm"],
        Command::Snapshot(SnapshotCommand::Export { .. }) => &["snapshot", "export"],
        Command::Snapshot(SnapshotCommand::Import { .. }) => &["snapshot", "import"],
        _ => &[],
    };
    !crate::cli::unused_global_options(words).contains(&"name")
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `reads_stack` names the commands as clap does: every command the
    /// stack's options are hidden from reads no stack, and no other.
    #[test]
    fn reads_stack_agrees_with_the_commands_the_stack_options_are_hidden_from() {
        fn walk(command: &clap::Command, above: &[String], out: &mut Vec<Vec<String>>) {
            for sub in command.get_subcommands().filter(|c| c.get_name() != "help") {
                let mut path = above.to_vec();
                path.push(sub.get_name().to_string());
                if !sub.has_subcommands() {
                    out.push(path.clone());
                }
                walk(sub, &path, out);
            }
        }
        let mut paths = Vec::new();
        walk(&crate::cli::command(), &[], &mut paths);
        assert!(paths.len() > 30, "{paths:?}");
        for path in paths {
            // Enough arguments for the command's required ones (a shell, a name, a file).
            let parsed = (0..3).find_map(|extra| {
                let mut args = vec!["devstack".to_string()];
                args.extend(path.iter().cloned());
                args.extend(std::iter::repeat_n("bash".to_string(), extra));
                Cli::try_parse_from(&args).ok()
            });
            let cli = parsed.unwrap_or_else(|| panic!("{path:?} does not parse"));
            let words: Vec<&str> = path.iter().map(String::as_str).collect();
            let hidden = crate::cli::unused_global_options(&words).contains(&"name");
            assert_eq!(reads_stack(&cli.command), !hidden, "{path:?}");
        }
    }
}
