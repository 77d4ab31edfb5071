//! Using devstack from a Rust integration test suite: bring a stack up,
//! run code against LocalStack and the cluster, tear it down.
//!
//!     cargo run --example integration_stack -- [PROFILE]
//!
//! PROFILE is a profile file or a shipped name (default `ci`). Offline, set
//! DEVSTACK_BUNDLE to a bundle made by `make kit`.

use devstack::stack::{Stack, UpOptions};

#[tokio::main]
async fn main() -> devstack::Result<()> {
    let profile = std::env::args().nth(1).unwrap_or_else(|| "ci".into());
    let stack = Stack::from_profile(Some(&profile), &Default::default())?;
    // Tear down even when the code under test fails.
    let outcome = run(&stack).await;
    stack.down().await?;
    outcome
}

async fn run(stack: &Stack) -> devstack::Result<()> {
    let up = stack.up(UpOptions::default()).await?;
    println!(
        "stack `{}` up in {} ms, round trip verified: {}",
        up.stack,
        up.elapsed_ms,
        up.verify.as_ref().is_some_and(|v| v.passed)
    );
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
    let report = stack.verify(Default::default()).await?;
    println!("{}", report.summary());
    Ok(())
}
