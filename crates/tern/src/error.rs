//! The errors the binary itself raises (the libraries bring their own).
//! A leaf: it imports nothing of this crate, so that both the modules
//! that raise these errors and [`crate::exit`], which maps them to exit
//! codes, can depend on it.

/// A usage error found by tern itself (not by clap).
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// A usage error (exit code 2).
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(msg.into()))
}

/// A copy that completed except for `0` entries, listed in its report.
#[derive(Debug)]
pub struct Partial(pub usize);

impl std::fmt::Display for Partial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries = if self.0 == 1 { "entry" } else { "entries" };
        write!(
            f,
            "{} {entries} could not be copied (listed above); everything else was",
            self.0
        )
    }
}

impl std::error::Error for Partial {}

/// Whether trying again later may work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// ssh itself failed: the network, or a login that may succeed later.
    May,
    /// A missing or broken remote tern: it stays so.
    Futile,
}

/// ssh could not log in, or the remote tern could not be started.
#[derive(Debug)]
pub struct SshFailure {
    /// What happened, with ssh's words.
    pub message: String,
    /// Whether trying again later may work.
    pub retry: Retry,
}

impl SshFailure {
    /// A failure described by `message`.
    pub fn new(message: String, retry: Retry) -> SshFailure {
        SshFailure { message, retry }
    }
}

impl std::fmt::Display for SshFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SshFailure {}
