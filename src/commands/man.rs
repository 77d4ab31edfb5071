//! `devstack man [COMMAND...]`: man pages (roff) from the CLI's own
//! definition, one for devstack and one for each command.

use std::path::Path;

use clap_mangen::roff::{Roff, bold, italic, roman};

use crate::cli::ManArgs;
use crate::commands::Context;
use crate::envvars;
use crate::error::{Error, ResultExt};

pub fn run(ctx: &Context, args: ManArgs) -> Result<i32, Error> {
    if let Some(dir) = &args.out_dir {
        let written = write_all(dir)?;
        ctx.ui
            .info(format!("wrote {written} man pages to {}", dir.display()));
        return Ok(0);
    }
    let page = render(&args.command)?;
    ctx.ui.print(String::from_utf8_lossy(&page));
    Ok(0)
}

/// The page of the command at `path` (`[]`: devstack itself; `["snapshot",
/// "save"]`), named `devstack-snapshot-save` as its file would be.
pub fn render(path: &[String]) -> Result<Vec<u8>, Error> {
    // Built: each subcommand is named `devstack-...` and has the global options.
    let command = crate::cli::documented_command();
    let mut found = &command;
    for (depth, name) in path.iter().enumerate() {
        found = found.find_subcommand(name).ok_or_else(|| {
            let known: Vec<&str> = found.get_subcommands().map(|c| c.get_name()).collect();
            Error::user(format!(
                "`devstack {}` is not a command",
                path[..=depth].join(" ")
            ))
            .with_hint(format!("commands there: {}", known.join(", ")))
        })?;
    }
    let mut page = Vec::new();
    render_page(found, path.is_empty(), &mut page)
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
    fn write(command: &clap::Command, root: bool, dir: &Path) -> std::io::Result<usize> {
        let mut written = 0;
        for sub in command.get_subcommands().filter(|c| !c.is_hide_set()) {
            written += write(sub, false, dir)?;
        }
        let file = dir.join(page_of(command).get_filename());
        render_page(command, root, &mut std::fs::File::create(file)?)?;
        Ok(written + 1)
    }
    write(&crate::cli::documented_command(), true, dir).map_err(unwritable)
}

/// Renders `command`'s page. devstack's own (`root`) also has the sections
/// of a program's page clap knows nothing of, before VERSION: EXIT STATUS,
/// ENVIRONMENT and FILES; its EXTRA section keeps only the examples, the
/// exit codes of `--help` having their own section.
fn render_page(
    command: &clap::Command,
    root: bool,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    if !root {
        return page_of(command).render(out);
    }
    let mut page = Vec::new();
    page_of(&command.clone().after_help(crate::cli::EXAMPLES)).render(&mut page)?;
    let page = String::from_utf8_lossy(&page);
    let sections = program_sections().render();
    // Past the preamble every rendering starts with.
    let sections = &sections[sections.find(".SH ").unwrap_or(0)..];
    let at = page.find("\n.SH VERSION\n").map_or(page.len(), |at| at + 1);
    out.write_all(page[..at].as_bytes())?;
    out.write_all(sections.as_bytes())?;
    out.write_all(page[at..].as_bytes())
}

/// EXIT STATUS (every code the binary uses), ENVIRONMENT (every variable
/// devstack reads) and FILES (what devstack keeps on the machine).
fn program_sections() -> Roff {
    fn entry(roff: &mut Roff, term: &str, text: &str) {
        roff.control("TP", []);
        roff.text([bold(term)]);
        roff.text([roman(text)]);
    }
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    for (code, meaning) in crate::cli::exit_codes() {
        entry(&mut roff, &code.to_string(), meaning);
    }
    roff.control("SH", ["ENVIRONMENT"]);
    roff.text([roman(
        "A flag wins over its variable, a variable over the profile, the profile over the default.",
    )]);
    for (name, meaning) in envvars::ALL {
        entry(&mut roff, name, meaning);
    }
    roff.control("SH", ["FILES"]);
    roff.text([
        roman(
            "Besides the files you name (up --timings, pull --bundle, snapshot export, man \
             --out-dir), everything devstack writes is below its state directory, ",
        ),
        italic("$DEVSTACK_HOME"),
        roman(", and a context in your kubeconfig. "),
        bold("devstack down"),
        roman(" removes a stack's files; the caches and snapshots stay until you delete them."),
    ]);
    for (path, what) in FILES {
        entry(&mut roff, path, what);
    }
    roff.control("PP", []);
    roff.text([roman(
        "In Docker, a stack's containers, networks and volumes carry devstack's labels; \
         devstack down --all removes them, and nothing else.",
    )]);
    roff
}

/// What devstack keeps on a machine, by path (see `crate::state`,
/// `Settings::artifact_cache`, `snapshot::store_dir`).
const FILES: &[(&str, &str)] = &[
    (
        "$DEVSTACK_HOME",
        "the state directory: DEVSTACK_HOME when it is set, else $XDG_STATE_HOME/devstack, else \
         ~/.local/state/devstack",
    ),
    (
        "$DEVSTACK_HOME/stacks/NAME/",
        "one stack's files: its kubeconfig (mode 0600), its record stack.json (provider, host \
         ports; what devstack list reads) and what creating its cluster needs; devstack down \
         removes it",
    ),
    (
        "$DEVSTACK_HOME/locks/",
        "the lock files of runs that change a stack, and of the caches",
    ),
    (
        "$DEVSTACK_HOME/cache/",
        "artifacts fetched and checked against their pins (cache/artifacts, in the offline \
         bundle's format, Flux's install manifests among them), shared by every stack",
    ),
    (
        "$DEVSTACK_HOME/image-cache/",
        "images from the local Docker image store saved for images.preload",
    ),
    (
        "$DEVSTACK_HOME/snapshots/NAME/",
        "snapshots (devstack snapshot): a cluster's state with its credentials and synced \
         Secrets; private",
    ),
    (
        "~/.kube/config",
        "(the first file of $KUBECONFIG) gets the context devstack-NAME unless \
         cluster.kubeconfig.merge is false; devstack down removes it",
    ),
];

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
