//! The `devstack` binary: parse arguments, run the command, map the error
//! to an exit code.

use clap::FromArgMatches;

use devstack::cli::Cli;
use devstack::error::Error;
use devstack::ui::Ui;

fn main() {
    // SIGPIPE stays ignored, as Rust leaves it: a reader gone away ends the
    // output where stdout is written (`devstack::ui`), instead of a signal
    // killing a run half-way through changing a stack.
    let matches = devstack::cli::command()
        .try_get_matches()
        .unwrap_or_else(|e| exit_after(e));
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let ui = Ui::new(cli.global.quiet, cli.global.verbose, cli.global.json);
    if let Err(err) = devstack::cli::refuse_unused_options(&matches) {
        ui.error(&err);
        std::process::exit(err.kind().exit_code());
    }
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
    let mut code = match runtime.block_on(devstack::commands::run(cli, ui.clone())) {
        Ok(code) => code,
        Err(err) => {
            ui.error(&err);
            err.exit_code()
        }
    };
    drop(runtime);
    // Output the user asked for was lost: a run that otherwise succeeded
    // must not say so.
    if let Some(err) = devstack::ui::stdout_failure() {
        ui.error(&err);
        if code == 0 {
            code = err.exit_code();
        }
    }
    std::process::exit(code);
}

/// What clap's own `exit` does for a usage error, `--help` or `--version`,
/// except that a failed write of help or version to stdout (other than a
/// reader gone away) is an error, as for every command's output.
fn exit_after(parse: clap::Error) -> ! {
    if parse.use_stderr() {
        let rendered = parse.render().to_string();
        eprint!("{}", devstack::cli::usage_error_with_hint(&rendered));
        std::process::exit(parse.exit_code());
    }
    let written = parse
        .print()
        .and_then(|()| std::io::Write::flush(&mut std::io::stdout()));
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            let err = devstack::ui::stdout_error(e);
            Ui::new(false, 0, false).error(&err);
            std::process::exit(err.exit_code());
        }
        _ => std::process::exit(parse.exit_code()),
    }
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
