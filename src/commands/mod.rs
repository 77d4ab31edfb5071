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
pub mod localstack;
pub mod logs;
pub mod man;
pub mod profile;
pub mod pull;
pub mod seed;
pub mod snapshot;
pub mod status;
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

    /// Settings for commands that act on a stack, with the global overrides
    /// and what the stack's record knows (the ports `auto` chose).
    pub fn settings(&self, extra: impl FnOnce(&mut Overrides)) -> Result<Settings, Error> {
        let mut overrides = self.overrides();
        extra(&mut overrides);
        let mut settings = crate::profile::select(self.global.profile.as_deref(), &overrides)?;
        crate::state::attach_record(&mut settings);
        Ok(settings)
    }
}

pub async fn run(cli: Cli, ui: Ui) -> Result<i32, Error> {
    let ctx = Context {
        ui,
        global: cli.global,
    };
    let result = match cli.command {
        Command::Up(args) => up::run(&ctx, args).await,
        Command::Down(args) => down::run(&ctx, args).await,
        Command::List => list::run(&ctx),
        Command::Doctor => doctor::run(&ctx).await,
        Command::Profile(cmd) => profile::run(&ctx, cmd),
        Command::Localstack(cmd) => localstack::run(&ctx, cmd).await,
        Command::Cluster(cmd) => cluster::run(&ctx, cmd).await,
        Command::Seed(args) => seed::run(&ctx, args).await,
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
    result.map_err(|err| match ctx.settings(|_| {}) {
        Ok(settings) => err.with_command_flags(&settings.cli_flags()),
        // The profile itself is what failed: its error names no command.
        Err(_) => err,
    })
}
