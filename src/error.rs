//! One error type for the whole crate. Each error carries a [`Kind`] that
//! decides the process exit code, an optional `hint:` with the fix, and the
//! underlying cause. Messages name the object they are about and never carry
//! secret values (callers pass names, not values).

use std::fmt;

use crate::signals::Signal;

/// What class of failure this is; maps one-to-one to an exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The user asked for something invalid: bad profile, bad flag, bad input file.
    User,
    /// The machine lacks something the profile needs: Docker, a binary, a free port.
    Prerequisite,
    /// The stack exists but is not healthy (status, verify).
    Unhealthy,
    /// Something devstack waited for did not happen within its deadline.
    Timeout,
    /// Interrupted by a signal: Ctrl-C (SIGINT), SIGTERM or SIGHUP.
    Interrupted,
    /// Anything unexpected: an API failed, a bug.
    Internal,
}

impl Kind {
    /// The exit code of an error of this kind. An interrupt exits with its
    /// signal's code, 128 plus its number ([`Error::exit_code`]); 130,
    /// Ctrl-C's, is the code of one no signal caused (a library caller
    /// cancelled the run).
    pub fn exit_code(self) -> i32 {
        match self {
            Kind::Internal => 1,
            Kind::User => 2,
            Kind::Prerequisite => 3,
            Kind::Unhealthy => 4,
            Kind::Timeout => 5,
            Kind::Interrupted => Signal::Interrupt.exit_code(),
        }
    }
}

pub struct Error {
    kind: Kind,
    message: String,
    hint: Option<String>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    /// The signal that interrupted the run, which decides its exit code.
    signal: Option<Signal>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            hint: None,
            source: None,
            signal: None,
        }
    }
    pub fn user(message: impl Into<String>) -> Self {
        Self::new(Kind::User, message)
    }
    pub fn prerequisite(message: impl Into<String>) -> Self {
        Self::new(Kind::Prerequisite, message)
    }
    pub fn unhealthy(message: impl Into<String>) -> Self {
        Self::new(Kind::Unhealthy, message)
    }
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(Kind::Timeout, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Kind::Internal, message)
    }
    pub fn interrupted() -> Self {
        Self::new(Kind::Interrupted, "interrupted").with_hint(
            "run the same command again to converge, or `devstack down` to remove what was created",
        )
    }

    /// Says which signal interrupted the run (an [`Kind::Interrupted`]
    /// error only: another error keeps its own code).
    pub fn interrupted_by(self, signal: Signal) -> Self {
        if self.kind != Kind::Interrupted {
            return self;
        }
        let mut err = self.context(signal);
        err.signal = Some(signal);
        err
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }
    /// Prefixes the message with what was being done, keeping kind and hint.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }

    /// Makes every `devstack ...` command quoted in the message and hint
    /// carry `flags` (the ones that select the stack), so that a command
    /// pasted from an error reaches the same stack. Library code names
    /// plain commands; the CLI adds its flags once, here.
    pub fn with_command_flags(mut self, flags: &str) -> Self {
        if flags.is_empty() {
            return self;
        }
        let quoted = format!("`devstack{flags} ");
        self.message = self.message.replace("`devstack ", &quoted);
        self.hint = self.hint.map(|hint| hint.replace("`devstack ", &quoted));
        self
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }
    /// The process's exit code for this error: its kind's, or 128 + the
    /// number of the signal that interrupted it.
    pub fn exit_code(&self) -> i32 {
        match self.signal {
            Some(signal) => signal.exit_code(),
            None => self.kind.exit_code(),
        }
    }
    pub fn signal(&self) -> Option<Signal> {
        self.signal
    }
    pub fn message(&self) -> &str {
        &self.message
    }
    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }
    /// The chain of causes below this error, outermost first.
    pub fn causes(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut next: Option<&(dyn std::error::Error + 'static)> =
            self.source.as_deref().map(|e| e as _);
        while let Some(err) = next {
            let text = err.to_string();
            if !text.is_empty() && !self.message.contains(&text) && out.last() != Some(&text) {
                out.push(text);
            }
            next = err.source();
        }
        out
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)?;
        for cause in self.causes() {
            write!(f, "\n  caused by: {cause}")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as _)
    }
}

/// Attaches context to foreign errors as an [`Error`] of a given kind.
pub trait ResultExt<T> {
    fn or_kind(self, kind: Kind, what: impl FnOnce() -> String) -> Result<T>;
    fn internal(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E> ResultExt<T> for std::result::Result<T, E>
where
    E: std::error::Error + Send + Sync + 'static,
{
    fn or_kind(self, kind: Kind, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::new(kind, what()).with_source(e))
    }
    fn internal(self, what: impl FnOnce() -> String) -> Result<T> {
        self.or_kind(Kind::Internal, what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupt_exits_with_its_signals_code_and_names_it() {
        assert_eq!(Error::interrupted().exit_code(), 130, "no signal: Ctrl-C's");
        let err = Error::interrupted()
            .context("rolled back")
            .interrupted_by(Signal::Terminate);
        assert_eq!(err.exit_code(), 143);
        assert_eq!(err.message(), "SIGTERM: rolled back: interrupted");
        assert_eq!(err.kind(), Kind::Interrupted);
        let other = Error::timeout("slow").interrupted_by(Signal::Hangup);
        assert_eq!(other.exit_code(), 5, "an error a signal did not cause");
        assert_eq!(other.message(), "slow");
    }
}
