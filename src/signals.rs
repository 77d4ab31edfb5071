//! The signals that stop a run: Ctrl-C (SIGINT), SIGTERM (`timeout`, a
//! cancelled CI job, `docker stop`) and SIGHUP (the terminal went away).
//! Every command that handles them listens through [`Signals`], so that the
//! three are treated alike everywhere and a run they end exits with 128 +
//! the signal's number, as shells and CI runners report a process a signal
//! ended.

use std::future::poll_fn;
use std::task::Poll;

use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Signal {
    Hangup,
    Interrupt,
    Terminate,
}

impl Signal {
    /// In the order of their numbers, as exit codes are listed.
    pub const ALL: [Signal; 3] = [Signal::Hangup, Signal::Interrupt, Signal::Terminate];

    pub fn number(self) -> i32 {
        match self {
            Signal::Hangup => libc::SIGHUP,
            Signal::Interrupt => libc::SIGINT,
            Signal::Terminate => libc::SIGTERM,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Signal::Hangup => "SIGHUP",
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        }
    }

    /// The exit code of a run this signal ended.
    pub fn exit_code(self) -> i32 {
        128 + self.number()
    }

    fn kind(self) -> SignalKind {
        SignalKind::from_raw(self.number())
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// SIGINT, SIGTERM and SIGHUP as one stream of the signals that arrive.
pub struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    /// Starts listening (within a tokio runtime). From this moment on the
    /// process is no longer ended by these signals: they arrive here, for
    /// the rest of its life (the OS handler stays installed).
    pub fn listen() -> std::io::Result<Self> {
        let streams = Signal::ALL
            .into_iter()
            .map(|s| signal(s.kind()).map(|stream| (s, stream)))
            .collect::<std::io::Result<_>>()?;
        Ok(Signals { streams })
    }

    /// The next signal to arrive.
    pub async fn next(&mut self) -> Signal {
        poll_fn(|cx| {
            for (which, stream) in &mut self.streams {
                // `None` only once the runtime shuts down: nothing more arrives.
                if let Poll::Ready(Some(())) = stream.poll_recv(cx) {
                    return Poll::Ready(*which);
                }
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_128_plus_the_signal_number() {
        let codes: Vec<(&str, i32)> = Signal::ALL
            .iter()
            .map(|s| (s.name(), s.exit_code()))
            .collect();
        assert_eq!(codes, [("SIGHUP", 129), ("SIGINT", 130), ("SIGTERM", 143)]);
    }

    #[tokio::test]
    async fn each_signal_arrives_as_itself() {
        let mut signals = Signals::listen().unwrap();
        for which in Signal::ALL {
            // SAFETY: raising a signal this process now handles.
            unsafe {
                libc::raise(which.number());
            }
            let got = tokio::time::timeout(std::time::Duration::from_secs(5), signals.next())
                .await
                .expect("the signal arrives");
            assert_eq!(got, which);
        }
        // The test binary goes back to being ended by them (Ctrl-C on
        // `cargo test`); no other test here listens.
        for which in Signal::ALL {
            // SAFETY: restores the default disposition of a signal.
            unsafe {
                libc::signal(which.number(), libc::SIG_DFL);
            }
        }
    }
}
