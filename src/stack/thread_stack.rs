//! Polling a run on a thread stack deep enough for it (the thread's call
//! stack, not a devstack stack), whatever thread polls it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Stack left below which a poll moves to a segment of its own.
const RED_ZONE: usize = 4 << 20;
/// The size of that segment: what a debug build of `up` needs, and more.
const SEGMENT: usize = 16 << 20;

/// A run polled with at least [`RED_ZONE`] of stack: a debug build of
/// `up` nests poll frames of large futures deeper than the 2 MiB a test
/// thread has, and a Rust test suite is where the library runs most.
pub(super) struct DeepThreadStack<F>(Pin<Box<F>>);

impl<F: Future> DeepThreadStack<F> {
    pub(super) fn new(run: F) -> Self {
        DeepThreadStack(Box::pin(run))
    }
}

impl<F: Future> Future for DeepThreadStack<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let run = self.0.as_mut();
        stacker::maybe_grow(RED_ZONE, SEGMENT, || run.poll(cx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recursion that needs far more than a 2 MiB thread's stack.
    fn depth(n: u32) -> u64 {
        let frame = [n as u8; 4096];
        if n == 0 {
            frame[0] as u64
        } else {
            depth(n - 1) + std::hint::black_box(frame)[7] as u64
        }
    }

    #[test]
    fn a_poll_deeper_than_the_thread_s_stack_runs_on_a_segment_of_its_own() {
        let thread = std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                // Several MiB of frames on a 1 MiB thread.
                runtime.block_on(DeepThreadStack::new(async { depth(600) }))
            })
            .unwrap();
        assert!(thread.join().unwrap() > 0);
    }
}
