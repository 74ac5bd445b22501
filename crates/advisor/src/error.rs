//! The advisor's one error type, classified where errors are made by what
//! the caller should do: fix the request, look elsewhere, or try again
//! later. The HTTP API turns each class into its status code.

/// Everything that can go wrong in the advisor.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request makes no sense (bad host name, negative rate, …).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The host or target is not known, or nothing was measured yet.
    #[error("{0}")]
    NotFound(String),
    /// The store cannot be reached or is busy (locked, gone, restarting);
    /// the same request may succeed later.
    #[error("the measurement store is unavailable: {0}")]
    Unavailable(String),
    /// The store answered with something unexpected.
    #[error("store error: {0}")]
    Store(String),
    /// The advisor could not be reached or answered badly (client side).
    #[error("advisor at {url}: {message}")]
    Client {
        /// Where it was asked.
        url: String,
        /// What went wrong.
        message: String,
        /// The HTTP status, when there was an answer.
        status: Option<u16>,
    },
    /// Configuration (options, targets file) is wrong.
    #[error("configuration: {0}")]
    Config(String),
    /// A socket or file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        source: std::io::Error,
    },
}

impl Error {
    /// Whether the same request may succeed later without changes.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Unavailable(_) => true,
            Error::Client { status, .. } => status.is_none_or(|s| s >= 500),
            _ => false,
        }
    }

    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<sqlx::Error> for Error {
    /// Sorts database errors into "try again later" (the database is
    /// locked, restarting or unreachable) and everything else.
    fn from(e: sqlx::Error) -> Error {
        let transient = match &e {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_) => true,
            sqlx::Error::Database(db) => db.code().is_some_and(|c| transient_code(&c)),
            _ => false,
        };
        if transient {
            Error::Unavailable(e.to_string())
        } else {
            Error::Store(e.to_string())
        }
    }
}

/// PostgreSQL SQLSTATEs (always five characters): connection exceptions
/// (class 08), operator intervention (57: shutdown, crash recovery) and
/// insufficient resources (53). SQLite result codes (numbers below
/// 10 000; the low byte of an extended code is the primary one): BUSY and
/// LOCKED, and CANTOPEN and IOERR, the file or its disk gone for now.
fn transient_code(code: &str) -> bool {
    if code.len() == 5 {
        return ["08", "57", "53"]
            .iter()
            .any(|class| code.starts_with(class));
    }
    code.parse::<u32>()
        .is_ok_and(|n| matches!(n & 0xff, 5 | 6 | 10 | 14))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_codes_are_classified() {
        assert!(transient_code("5")); // SQLITE_BUSY
        assert!(transient_code("517")); // SQLITE_BUSY_SNAPSHOT
        assert!(transient_code("6")); // SQLITE_LOCKED
        assert!(!transient_code("19")); // SQLITE_CONSTRAINT
        assert!(transient_code("14")); // SQLITE_CANTOPEN
        assert!(transient_code("266")); // SQLITE_IOERR_READ
        assert!(!transient_code("1")); // SQLITE_ERROR
        assert!(transient_code("57P01")); // admin_shutdown
        assert!(transient_code("08006")); // connection_failure
        assert!(!transient_code("23505")); // unique_violation
        assert!(transient_code("53300")); // too_many_connections
        assert!(Error::from(sqlx::Error::PoolTimedOut).is_retryable());
        assert!(!Error::from(sqlx::Error::RowNotFound).is_retryable());
    }
}
