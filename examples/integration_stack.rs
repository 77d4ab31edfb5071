//! Using devstack from a Rust integration test suite: bring a stack up,
//! run code against LocalStack and the cluster, and let the guard take it
//! down, even when the code under test panics.
//!
//!     cargo run --example integration_stack -- [PROFILE] [--keep]
//!
//! PROFILE is a profile file or a shipped name (default `ci`); `--keep`
//! leaves the stack running. Offline, set DEVSTACK_BUNDLE to a bundle made
//! by `make kit`. CI runs this example (tests/run.sh, cluster group).

use devstack::stack::{Stack, StackGuard, UpOptions};

#[tokio::main]
async fn main() -> devstack::Result<()> {
    let mut args = std::env::args().skip(1);
    let profile = args.next().unwrap_or_else(|| "ci".into());
    let keep = args.any(|a| a == "--keep");
    let stack = Stack::from_profile(Some(&profile), &Default::default())?;
    let (guard, up) = StackGuard::up(stack, UpOptions::default()).await?;
    println!(
        "stack `{}` up in {} ms, round trip verified: {}",
        up.stack,
        up.elapsed_ms,
        up.verify.as_ref().is_some_and(|v| v.passed)
    );
    // The provider the library chose, as `devstack up` would: the profile's,
    // the stack's existing one, Kind, or K3s when no kind CLI is usable.
    println!(
        "provider: {} ({:?})",
        up.provider.as_str(),
        up.choice.reason
    );
    run(&guard).await?;
    if keep {
        let stack = guard.keep();
        println!("kept stack `{}`", stack.name());
    }
    // Otherwise the guard takes the stack down here.
    Ok(())
}

async fn run(stack: &Stack) -> devstack::Result<()> {
    // What the code under test needs: an AWS endpoint and a kubeconfig.
    for (name, value) in stack.env() {
        if !name.contains("SECRET") {
            println!("{name}={value}");
        }
    }
    let client = stack.kube_client().await?;
    let version = client
        .apiserver_version()
        .await
        .map_err(|e| devstack::Error::internal(format!("API server: {e}")))?;
    println!("Kubernetes {}.{}", version.major, version.minor);
    // `up` returned settled; a suite that changes the stack waits like this.
    let health = stack.wait_settled(std::time::Duration::from_secs(60)).await;
    println!("healthy: {}, settled: {}", health.healthy, health.settled);
    let report = stack.verify(Default::default()).await?;
    println!("{}", report.summary());
    Ok(())
}
