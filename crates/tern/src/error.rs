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

/// A run stopped by SIGINT or SIGTERM.
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted: partial files are kept, and the same command resumes")
    }
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

/// The error and its causes for people, `: `-joined as anyhow's `{:#}`
/// does, without a cause whose words the text already has (a library
/// error that names its source, as `cannot connect to …: {source}` does,
/// would otherwise say it twice).
pub fn describe(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let words = cause.to_string();
        if text.contains(&words) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&words);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[derive(Debug)]
    struct Connect(std::io::Error);

    impl std::fmt::Display for Connect {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot connect to 127.0.0.1:4801: {}", self.0)
        }
    }

    impl std::error::Error for Connect {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_the_message_already_names_is_said_once() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let words = refused.to_string();
        let e = anyhow::Error::new(Connect(refused));
        let text = describe(&e);
        assert_eq!(text.matches(&words).count(), 1, "{text}");
        assert!(
            text.starts_with("cannot connect to 127.0.0.1:4801: "),
            "{text}"
        );
        // Context that adds words keeps them.
        let e = anyhow::Error::new(std::io::Error::other("disk full")).context("writing x");
        assert_eq!(describe(&e), "writing x: disk full");
    }
}
