//! The engine's one error type.
//!
//! Errors are classified where they are created, by what the caller should
//! do about them ([`Error::is_retryable`], [`Error::kind`]), never by
//! matching message text. The binary maps [`ErrorKind`] to exit codes.

use std::path::PathBuf;

use tern_proto::{DecodeError, ErrorCode};

/// Everything that can go wrong in a transfer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A source path does not exist.
    #[error("{}: no such file or directory", .0.display())]
    NotFound(PathBuf),
    /// A path is outside the allowed root, or the OS refused access.
    #[error("{path}: permission denied{}", if .why.is_empty() { String::new() } else { format!(" ({})", .why) })]
    PermissionDenied {
        /// The path concerned.
        path: String,
        /// Why, when more is known than the OS said.
        why: String,
    },
    /// The peer announced an entry that the transfer did not ask for (a
    /// pull receives only what it requested, [`crate::store::expect`]). Not an
    /// entry's own failure: it ends the session.
    #[error(
        "{path}: permission denied (the peer announced this name, which was not requested: {why})"
    )]
    NotRequested {
        /// The name announced, escaped for display.
        path: String,
        /// What is wrong with it, and what was asked for.
        why: String,
    },
    /// The destination file system is full.
    #[error("{}: no space left on device", .0.display())]
    NoSpace(PathBuf),
    /// A local I/O operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The request makes no sense (e.g. several sources into one file).
    #[error("{0}")]
    BadRequest(String),
    /// Nothing accepted the connection.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Where we tried to connect.
        addr: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// TLS setup or handshake failed.
    #[error("TLS: {0}")]
    Tls(String),
    /// The client did not prove it may use this server (a once server's
    /// one-time token was missing or wrong).
    #[error("not authorized: {0}")]
    Unauthorized(String),
    /// The server's certificate is not the one recorded or pinned.
    #[error("{}", fingerprint_mismatch(.host, .expected, .actual, .origin))]
    FingerprintMismatch {
        /// Host as written by the user.
        host: String,
        /// Fingerprint recorded or pinned.
        expected: String,
        /// Fingerprint presented.
        actual: String,
        /// Where the expected fingerprint came from.
        origin: PinOrigin,
    },
    /// The peer sent bytes that do not decode.
    #[error("protocol error: {0}")]
    Decode(#[from] DecodeError),
    /// The peer broke the protocol in a way that decodes but makes no sense.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The peer reported an error.
    #[error("peer: {message}")]
    Peer {
        /// The peer's code.
        code: ErrorCode,
        /// The peer's words.
        message: String,
    },
    /// The one entry of a copy failed, at either end (what an
    /// [`tern_session::EntryFailure`] says, as an error).
    #[error("{message}")]
    Entry {
        /// What kind of failure.
        code: ErrorCode,
        /// Which entry, and why.
        message: String,
    },
    /// A connection to the peer was lost.
    #[error("connection to the peer lost: {0}")]
    PeerGone(String),
    /// The whole-file digest did not match.
    #[error("{path}: digest mismatch (sender {sender}, receiver {receiver})")]
    DigestMismatch {
        /// File concerned.
        path: String,
        /// Sender's digest, hex.
        sender: String,
        /// Receiver's digest, hex.
        receiver: String,
    },
    /// Blocks stayed missing or corrupt after the repair limit.
    #[error("{path}: blocks still bad after {rounds} repair rounds")]
    TooManyRetries {
        /// File concerned.
        path: String,
        /// Rounds tried.
        rounds: u32,
    },
    /// The transfer was interrupted on purpose.
    #[error("interrupted")]
    Aborted,
}

/// Where a fingerprint a client expected came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinOrigin {
    /// Recorded in this `known_hosts` file at an earlier contact.
    KnownHosts(String),
    /// Given with `--fingerprint`.
    Flag,
    /// Printed by the `tern serve --once` that ssh started.
    Ssh,
}

/// The message of [`Error::FingerprintMismatch`]: what happened and what
/// to do, which differs between a fingerprint recorded in `known_hosts`
/// (the server changed since), one the user pinned (the pin or the server
/// is wrong) and one ssh carried (the connection is not the one ssh saw).
fn fingerprint_mismatch(host: &str, expected: &str, actual: &str, origin: &PinOrigin) -> String {
    match origin {
        PinOrigin::KnownHosts(file) => format!(
            "the certificate of {host} has changed: expected {expected}, got {actual}.\n\
             If the server was reinstalled or its state dir was reset, remove the line for \
             {host} from {file} (or pin the new one with --fingerprint {actual}); otherwise \
             someone may be intercepting the connection."
        ),
        PinOrigin::Ssh => format!(
            "{host} presented the certificate {actual}, but the tern serve --once that ssh \
             started there announced {expected}: the connection did not reach the tern that \
             ssh started; someone may be intercepting it."
        ),
        PinOrigin::Flag => format!(
            "{host} presented the certificate {actual}, but --fingerprint named {expected}.\n\
             Compare both with the fingerprint the daemon prints when it starts (\"tern serve: \
             certificate fingerprint SHA256:…\"): if it is {actual}, the --fingerprint given \
             is wrong or out of date (the daemon's state dir was reset) and {actual} is the one \
             to pin; if it is {expected}, someone may be intercepting the connection."
        ),
    }
}

/// What an error means to a caller; each maps to one documented exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// Bad arguments or request.
    Usage,
    /// A source is missing.
    NotFound,
    /// Access refused, or a path escapes its root.
    Permission,
    /// The destination is full.
    NoSpace,
    /// Other local I/O failure.
    Io,
    /// Could not reach the peer.
    Connect,
    /// TLS or server identity failure.
    Security,
    /// The connection broke during the transfer.
    Network,
    /// Data could not be verified (digest or repair limit).
    Integrity,
    /// The peer spoke nonsense.
    Protocol,
    /// Interrupted.
    Aborted,
}

impl Error {
    /// Wraps an I/O error with context, classifying `ENOSPC`, `EACCES` and
    /// `ENOENT` into their own variants.
    pub fn io(
        context: impl Into<String>,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Error {
        let path = path.into();
        match source.kind() {
            std::io::ErrorKind::StorageFull => Error::NoSpace(path),
            std::io::ErrorKind::NotFound => Error::NotFound(path),
            std::io::ErrorKind::PermissionDenied => Error::PermissionDenied {
                path: path.display().to_string(),
                why: String::new(),
            },
            _ if source.raw_os_error() == Some(libc::EDQUOT) => Error::NoSpace(path),
            _ if source.raw_os_error() == Some(libc::EROFS) => Error::PermissionDenied {
                path: path.display().to_string(),
                why: "read-only file system".into(),
            },
            _ => Error::Io {
                context: format!("{}: {}", path.display(), context.into()),
                source,
            },
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::PermissionDenied { .. } | Error::NotRequested { .. } => ErrorKind::Permission,
            Error::NoSpace(_) => ErrorKind::NoSpace,
            Error::Io { .. } => ErrorKind::Io,
            Error::BadRequest(_) => ErrorKind::Usage,
            Error::Connect { .. } => ErrorKind::Connect,
            Error::Tls(_) | Error::FingerprintMismatch { .. } | Error::Unauthorized(_) => {
                ErrorKind::Security
            }
            Error::Decode(_) | Error::Protocol(_) => ErrorKind::Protocol,
            Error::PeerGone(_) => ErrorKind::Network,
            Error::DigestMismatch { .. } | Error::TooManyRetries { .. } => ErrorKind::Integrity,
            Error::Aborted => ErrorKind::Aborted,
            Error::Peer { code, .. } | Error::Entry { code, .. } => match code {
                ErrorCode::NotFound => ErrorKind::NotFound,
                ErrorCode::PermissionDenied => ErrorKind::Permission,
                ErrorCode::NoSpace => ErrorKind::NoSpace,
                ErrorCode::Io => ErrorKind::Io,
                ErrorCode::BadRequest => ErrorKind::Usage,
                ErrorCode::DigestMismatch | ErrorCode::TooManyRetries => ErrorKind::Integrity,
                ErrorCode::Protocol => ErrorKind::Protocol,
                ErrorCode::Aborted => ErrorKind::Aborted,
            },
        }
    }

    /// True when running the same transfer again may succeed (the network
    /// broke, or the peer went away); false when it would fail the same way.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::Network | ErrorKind::Connect | ErrorKind::Aborted
        )
    }

    /// True when this error concerns one entry of a tree and the rest can
    /// still be copied (a name the destination refuses, a file that cannot
    /// be read or created there); false when it concerns the whole
    /// transfer (no space, the network, the peer, data integrity).
    pub fn is_per_entry(&self) -> bool {
        match self {
            Error::NotFound(_) | Error::PermissionDenied { .. } | Error::BadRequest(_) => true,
            Error::Io { source, .. } => source.raw_os_error() != Some(libc::EIO),
            _ => false,
        }
    }

    /// The code to tell the peer about this error.
    pub fn wire_code(&self) -> ErrorCode {
        match self.kind() {
            ErrorKind::NotFound => ErrorCode::NotFound,
            ErrorKind::Permission | ErrorKind::Security => ErrorCode::PermissionDenied,
            ErrorKind::NoSpace => ErrorCode::NoSpace,
            ErrorKind::Io | ErrorKind::Connect | ErrorKind::Network => ErrorCode::Io,
            ErrorKind::Usage => ErrorCode::BadRequest,
            ErrorKind::Integrity => match self {
                Error::TooManyRetries { .. } => ErrorCode::TooManyRetries,
                _ => ErrorCode::DigestMismatch,
            },
            ErrorKind::Protocol => ErrorCode::Protocol,
            ErrorKind::Aborted => ErrorCode::Aborted,
        }
    }

    /// Of two errors from parallel parts of one transfer, the one worth
    /// reporting: a concrete cause (disk full, digest mismatch, the peer's
    /// own error) beats its consequence (a connection that then broke).
    pub fn more_interesting(self, other: Error) -> Error {
        fn rank(e: &Error) -> u8 {
            match e {
                Error::PeerGone(_) => 0,
                Error::Aborted => 1,
                Error::Decode(_) | Error::Protocol(_) => 2,
                Error::Io { .. } => 3,
                _ => 4,
            }
        }
        if rank(&other) > rank(&self) {
            other
        } else {
            self
        }
    }
}

impl From<tern_session::Error> for Error {
    /// The protocol logic's errors keep their names and words.
    fn from(e: tern_session::Error) -> Error {
        use tern_session::Error as S;
        match e {
            S::Protocol(m) => Error::Protocol(m),
            S::BadRequest(m) => Error::BadRequest(m),
            S::Unauthorized(m) => Error::Unauthorized(m),
            S::Peer { code, message } => Error::Peer { code, message },
            S::PeerGone(m) => Error::PeerGone(m),
            S::DigestMismatch {
                path,
                sender,
                receiver,
            } => Error::DigestMismatch {
                path,
                sender,
                receiver,
            },
            S::TooManyRetries { path, rounds } => Error::TooManyRetries { path, rounds },
        }
    }
}

impl Error {
    /// An entry's failure that a session can go on without: only when the
    /// session `reports_entries` (`ENTRIES` was negotiated) and the error
    /// concerns this entry alone; else the error itself, which ends it.
    pub fn for_entry(self, reports_entries: bool) -> Result<tern_session::Problem> {
        if reports_entries && self.is_per_entry() {
            Ok(self.problem())
        } else {
            Err(self)
        }
    }

    /// What the peer is told about this error when it concerns one entry.
    pub fn problem(&self) -> tern_session::Problem {
        tern_session::Problem {
            code: self.wire_code(),
            message: self.to_string(),
        }
    }
}

/// Result with the engine's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_mismatch_advises_by_where_the_fingerprint_came_from() {
        let mismatch = |known_hosts: Option<&str>| {
            let origin = match known_hosts {
                Some(file) => PinOrigin::KnownHosts(file.to_string()),
                None => PinOrigin::Flag,
            };
            Error::FingerprintMismatch {
                host: "srv:4747".into(),
                expected: "SHA256:want".into(),
                actual: "SHA256:got".into(),
                origin,
            }
            .to_string()
        };
        let recorded = mismatch(Some("/home/u/.config/tern/known_hosts"));
        assert!(
            recorded.contains("remove the line for srv:4747 from /home/u/.config/tern/known_hosts"),
            "{recorded}"
        );
        let pinned = mismatch(None);
        assert!(
            pinned.contains(
                "srv:4747 presented the certificate SHA256:got, but --fingerprint named SHA256:want"
            ),
            "{pinned}"
        );
        assert!(
            pinned.contains("the fingerprint the daemon prints"),
            "{pinned}"
        );
        assert!(!pinned.contains("remove the line"), "{pinned}");
    }

    #[test]
    fn enospc_is_classified_as_no_space() {
        let e = Error::io(
            "write",
            "/x",
            std::io::Error::from_raw_os_error(libc::ENOSPC),
        );
        assert_eq!(e.kind(), ErrorKind::NoSpace);
        assert!(!e.is_retryable());
    }

    #[test]
    fn a_cause_beats_the_broken_connection_it_caused() {
        let cause = Error::NoSpace("/x".into());
        let consequence = Error::PeerGone("reset".into());
        assert_eq!(
            consequence.more_interesting(cause).kind(),
            ErrorKind::NoSpace
        );
        let cause = Error::NoSpace("/x".into());
        let consequence = Error::PeerGone("reset".into());
        assert_eq!(
            cause.more_interesting(consequence).kind(),
            ErrorKind::NoSpace
        );
    }

    #[test]
    fn a_failure_that_concerns_the_whole_transfer_still_ends_it() {
        let full = Error::NoSpace("a".into());
        assert_eq!(full.for_entry(true).unwrap_err().kind(), ErrorKind::NoSpace);
        let denied = Error::io("read", "b", std::io::Error::from_raw_os_error(libc::EACCES));
        let problem = denied.for_entry(true).unwrap();
        assert_eq!(problem.code, ErrorCode::PermissionDenied);
        assert_eq!(problem.message, "b: permission denied");
        let denied = Error::io("read", "b", std::io::Error::from_raw_os_error(libc::EACCES));
        assert!(
            denied.for_entry(false).is_err(),
            "without ENTRIES an entry's failure ends the session"
        );
    }

    #[test]
    fn peer_errors_keep_their_kind() {
        let e = Error::Peer {
            code: ErrorCode::NoSpace,
            message: "full".into(),
        };
        assert_eq!(e.kind(), ErrorKind::NoSpace);
        assert_eq!(e.wire_code(), ErrorCode::NoSpace);
    }
}
