//! `StackGuard`: a stack taken down when a test that holds it ends.

use super::{Stack, UpOptions, UpReport};
use crate::error::Error;

/// A stack that is taken down when the guard is dropped, even when the code
/// under test panics: what a Rust test suite holds for the length of a test.
/// `keep()` hands the stack back and leaves it running.
///
/// ```no_run
/// # async fn demo() -> devstack::Result<()> {
/// use devstack::stack::{Stack, StackGuard};
/// let stack = Stack::from_profile(Some("ci"), &Default::default())?;
/// let (guard, report) = StackGuard::up(stack, Default::default()).await?;
/// let client = guard.kube_client().await?;
/// // ... the test; the stack goes down when `guard` is dropped.
/// # Ok(()) }
/// ```
pub struct StackGuard {
    stack: Option<Stack>,
}

impl StackGuard {
    /// Brings the stack up (as [`Stack::up`]) and guards it; a failed `up`
    /// has already rolled back what it created.
    pub async fn up(stack: Stack, options: UpOptions) -> Result<(StackGuard, UpReport), Error> {
        let report = stack.up(options).await?;
        Ok((StackGuard { stack: Some(stack) }, report))
    }

    /// Guards a stack that is already up.
    pub fn new(stack: Stack) -> StackGuard {
        StackGuard { stack: Some(stack) }
    }

    /// Leaves the stack running and gives it back.
    pub fn keep(mut self) -> Stack {
        self.stack
            .take()
            .expect("a guard holds its stack until dropped")
    }
}

impl std::ops::Deref for StackGuard {
    type Target = Stack;
    fn deref(&self) -> &Stack {
        self.stack
            .as_ref()
            .expect("a guard holds its stack until dropped")
    }
}

impl Drop for StackGuard {
    fn drop(&mut self) {
        let Some(stack) = self.stack.take() else {
            return;
        };
        // Drop cannot await, and may run inside the caller's runtime (where
        // blocking on it would deadlock a current-thread one): take the
        // stack down on a thread with a runtime of its own.
        let name = stack.name().to_string();
        // The command that reaches this stack: its profile, and its name
        // when the profile does not give it.
        let mut flags = stack.settings().cli_flags();
        if !flags.contains(" --name ") {
            flags.push_str(&format!(" --name {name}"));
        }
        let outcome = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| Error::internal(format!("runtime for `down`: {e}")))?
                .block_on(stack.down())
        })
        .join();
        match outcome {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => eprintln!(
                "devstack: taking stack `{name}` down failed: {}; `devstack{flags} down` removes it",
                e.message()
            ),
            Err(_) => eprintln!(
                "devstack: taking stack `{name}` down panicked; `devstack{flags} down` removes it"
            ),
        }
    }
}
