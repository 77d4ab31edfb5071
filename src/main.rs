//! The `devstack` binary: parse arguments, run the command, map the error
//! to an exit code.

use clap::Parser;

use devstack::cli::Cli;
use devstack::error::Error;
use devstack::ui::Ui;

fn main() {
    // SIGPIPE stays ignored, as Rust leaves it: a reader gone away ends the
    // output where stdout is written (`devstack::ui`), instead of a signal
    // killing a run half-way through changing a stack.
    let cli = Cli::parse();
    let ui = Ui::new(cli.global.quiet, cli.global.verbose, cli.global.json);
    init_logging(cli.global.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            ui.error(&Error::internal(format!(
                "cannot start the async runtime: {e}"
            )));
            std::process::exit(1);
        }
    };
    let code = match runtime.block_on(devstack::commands::run(cli, ui.clone())) {
        Ok(code) => code,
        Err(err) => {
            ui.error(&err);
            err.kind().exit_code()
        }
    };
    drop(runtime);
    std::process::exit(code);
}

/// Logs go to stderr. `-v` shows devstack's info, `-vv` debug; RUST_LOG
/// overrides both.
fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        // kube-client logs every failed request at error level, including the
        // ones devstack retries while an API server starts; devstack reports
        // the failures that matter itself.
        0 => "warn,kube_client=off",
        1 => "warn,kube_client=off,devstack=info",
        _ => "info,devstack=debug",
    };
    let filter = EnvFilter::try_from_env(devstack::envvars::RUST_LOG)
        .unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .try_init();
}
