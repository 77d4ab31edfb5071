//! `devstack completions SHELL`: a shell completion script, from the CLI's
//! own definition.

use clap::CommandFactory;

use crate::cli::Cli;
use crate::error::Error;

pub fn run(shell: clap_complete::Shell) -> Result<i32, Error> {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, "devstack", &mut std::io::stdout());
    Ok(0)
}
