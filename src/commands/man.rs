//! `devstack man [COMMAND...]`: man pages (roff) from the CLI's own
//! definition, one for devstack and one for each command.

use std::path::Path;

use clap::CommandFactory;

use crate::cli::{Cli, ManArgs};
use crate::commands::Context;
use crate::error::{Error, ResultExt};

pub fn run(ctx: &Context, args: ManArgs) -> Result<i32, Error> {
    if let Some(dir) = &args.out_dir {
        let written = write_all(dir)?;
        ctx.ui
            .info(format!("wrote {written} man pages to {}", dir.display()));
        return Ok(0);
    }
    let page = render(&args.command)?;
    use std::io::Write;
    // A closed pipe (`| head`) is the reader's choice, not a failure.
    let _ = std::io::stdout().lock().write_all(&page);
    Ok(0)
}

/// The page of the command at `path` (`[]`: devstack itself; `["snapshot",
/// "save"]`), named `devstack-snapshot-save` as its file would be.
pub fn render(path: &[String]) -> Result<Vec<u8>, Error> {
    let mut command = Cli::command();
    // Building names each subcommand `devstack-...` and gives it the global options.
    command.build();
    let mut found = &command;
    for (depth, name) in path.iter().enumerate() {
        found = found.find_subcommand(name).ok_or_else(|| {
            let known: Vec<&str> = found
                .get_subcommands()
                .map(|c| c.get_name())
                .filter(|n| *n != "help")
                .collect();
            Error::user(format!(
                "`devstack {}` is not a command",
                path[..=depth].join(" ")
            ))
            .with_hint(format!("commands there: {}", known.join(", ")))
        })?;
    }
    let mut page = Vec::new();
    page_of(found)
        .render(&mut page)
        .internal(|| "cannot render the man page".into())?;
    Ok(page)
}

/// Writes the pages of devstack and of every command (`devstack.1`,
/// `devstack-up.1`, `devstack-snapshot-save.1`, ...) into `dir`; returns
/// how many.
pub fn write_all(dir: &Path) -> Result<usize, Error> {
    let unwritable = |e: std::io::Error| {
        Error::user(format!("cannot write man pages to {}: {e}", dir.display()))
            .with_hint("name a writable directory")
    };
    std::fs::create_dir_all(dir).map_err(unwritable)?;
    fn write(command: &clap::Command, dir: &Path) -> std::io::Result<usize> {
        let mut written = 0;
        for sub in command.get_subcommands().filter(|c| !c.is_hide_set()) {
            written += write(sub, dir)?;
        }
        page_of(command).generate_to(dir)?;
        Ok(written + 1)
    }
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    write(&command, dir).map_err(unwritable)
}

/// Every page says it is devstack's, of this version (a subcommand has
/// no version of its own).
fn page_of(command: &clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(command.clone())
        .source(format!("devstack {}", env!("CARGO_PKG_VERSION")))
        .manual("devstack manual")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_name_their_command_and_unknown_commands_are_refused() {
        let page = String::from_utf8(render(&["snapshot".into(), "save".into()]).unwrap()).unwrap();
        assert!(page.contains(".SH NAME"), "{page}");
        assert!(page.contains("devstack\\-snapshot\\-save"), "{page}");
        let err = render(&["snapshot".into(), "nope".into()]).unwrap_err();
        assert_eq!(err.kind(), crate::error::Kind::User);
        assert!(err.message().contains("`devstack snapshot nope`"));
        assert!(err.hint().unwrap().contains("save"));
    }

    #[test]
    fn every_command_gets_a_page() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_all(dir.path()).unwrap();
        for page in [
            "devstack.1",
            "devstack-up.1",
            "devstack-snapshot-save.1",
            "devstack-logs.1",
        ] {
            assert!(dir.path().join(page).is_file(), "{page}");
        }
        assert!(written > 20, "{written}");
    }
}
