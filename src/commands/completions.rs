//! `devstack completions SHELL`: a shell completion script, from the CLI's
//! own definition.

use crate::commands::Context;
use crate::error::Error;

pub fn run(ctx: &Context, shell: clap_complete::Shell) -> Result<i32, Error> {
    let mut command = crate::cli::command();
    // clap_complete panics when a write fails: it writes to memory, which
    // cannot fail, and the UI's stdout deals with a reader gone away.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "devstack", &mut script);
    ctx.ui.print(String::from_utf8_lossy(&script));
    Ok(0)
}
