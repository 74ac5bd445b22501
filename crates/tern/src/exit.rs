//! Exit codes: one enum whose discriminants are the codes, the
//! "Exit codes:" table of `tern --help` made from it, and the mapping from
//! an error to its code.

use std::process::ExitCode;

use tern_engine::ErrorKind;

use crate::error::{Partial, SshFailure, Usage};

/// Declares [`Exit`] with one description per variant, and the list of
/// all of them (so none can be left out of the table).
macro_rules! exit_codes {
    ($($(#[$doc:meta])* $name:ident = $code:literal: $description:literal,)*) => {
        /// What became of a run, as the process's exit code.
        #[repr(u8)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Exit {
            $($(#[$doc])* $name = $code,)*
        }

        impl Exit {
            /// Every exit code, in the order of the table.
            pub const ALL: &'static [Exit] = &[$(Exit::$name),*];

            /// What the code means, as `--help` says it.
            pub fn description(self) -> &'static str {
                match self {
                    $(Exit::$name => $description,)*
                }
            }
        }
    };
}

exit_codes! {
    Success = 0: "success",
    General = 1: "unexpected internal error",
    Usage = 2: "usage: bad arguments or a request that makes no sense",
    NotFound = 3: "a source, or the directory of the destination, does not exist",
    Permission = 4: "permission denied, or a path outside the served root",
    NoSpace = 5: "no space left at the destination",
    Io = 6: "other I/O error",
    Connect = 7: "cannot connect (nothing listening, name does not resolve)",
    Security = 8: "security: TLS failure or server fingerprint mismatch",
    ConnectionLost = 9: "connection lost during the transfer (partial files are kept)",
    Integrity = 10: "integrity: digest mismatch, or blocks still bad after repairs",
    Protocol = 11: "protocol error: the peer sent something invalid",
    Ssh = 12: "ssh: could not log in, or could not start tern on the remote host",
    /// As rsync's 23: the copy completed except for the entries listed.
    Partial = 23: "partial: some entries could not be copied (listed); everything else was",
    Interrupted = 130: "interrupted",
}

impl Exit {
    /// The number the process exits with.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The "Exit codes:" table at the end of `tern --help`.
    pub fn help_table() -> String {
        let mut table = String::from("Exit codes:");
        for e in Exit::ALL {
            table.push_str(&format!("\n  {:<3} {}", e.code(), e.description()));
        }
        table
    }

    /// The exit code for an error.
    pub fn of(e: &anyhow::Error) -> Exit {
        if e.downcast_ref::<Usage>().is_some() {
            return Exit::Usage;
        }
        if e.downcast_ref::<Partial>().is_some() {
            return Exit::Partial;
        }
        if e.downcast_ref::<SshFailure>().is_some() {
            return Exit::Ssh;
        }
        if let Some(probe) = e.downcast_ref::<tern_probe::Error>() {
            return Exit::of_probe(probe);
        }
        if let Some(advisor) = e.downcast_ref::<tern_advisor::Error>() {
            return Exit::of_advisor(advisor);
        }
        match e.downcast_ref::<tern_engine::Error>() {
            Some(engine) => Exit::of_kind(engine.kind()),
            None => Exit::General,
        }
    }

    fn of_probe(e: &tern_probe::Error) -> Exit {
        match e {
            tern_probe::Error::Engine(engine) => Exit::of_kind(engine.kind()),
            tern_probe::Error::BadOptions(_) => Exit::Usage,
            tern_probe::Error::Io { .. } => Exit::Io,
            tern_probe::Error::Resolve { .. }
            | tern_probe::Error::Connect { .. }
            | tern_probe::Error::NoResponder { .. } => Exit::Connect,
        }
    }

    fn of_advisor(e: &tern_advisor::Error) -> Exit {
        match e {
            tern_advisor::Error::BadRequest(_) | tern_advisor::Error::Config(_) => Exit::Usage,
            tern_advisor::Error::NotFound(_) => Exit::NotFound,
            tern_advisor::Error::Client { status, .. } => match status {
                None => Exit::Connect,
                Some(400) => Exit::Usage,
                Some(404) => Exit::NotFound,
                Some(_) => Exit::General,
            },
            _ => Exit::General,
        }
    }

    fn of_kind(kind: ErrorKind) -> Exit {
        match kind {
            ErrorKind::Usage => Exit::Usage,
            ErrorKind::NotFound => Exit::NotFound,
            ErrorKind::Permission => Exit::Permission,
            ErrorKind::NoSpace => Exit::NoSpace,
            ErrorKind::Io => Exit::Io,
            ErrorKind::Connect => Exit::Connect,
            ErrorKind::Security => Exit::Security,
            ErrorKind::Network => Exit::ConnectionLost,
            ErrorKind::Integrity => Exit::Integrity,
            ErrorKind::Protocol => Exit::Protocol,
            ErrorKind::Aborted => Exit::Interrupted,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The table as it was written by hand before it was generated.
    const WRITTEN: &str = "\
Exit codes:
  0   success
  1   unexpected internal error
  2   usage: bad arguments or a request that makes no sense
  3   a source, or the directory of the destination, does not exist
  4   permission denied, or a path outside the served root
  5   no space left at the destination
  6   other I/O error
  7   cannot connect (nothing listening, name does not resolve)
  8   security: TLS failure or server fingerprint mismatch
  9   connection lost during the transfer (partial files are kept)
  10  integrity: digest mismatch, or blocks still bad after repairs
  11  protocol error: the peer sent something invalid
  12  ssh: could not log in, or could not start tern on the remote host
  23  partial: some entries could not be copied (listed); everything else was
  130 interrupted";

    #[test]
    fn the_help_shows_the_table_made_from_the_enum() {
        let table = Exit::help_table();
        assert_eq!(table, WRITTEN);
        let help = crate::cli::Cli::command().render_long_help().to_string();
        assert!(
            help.trim_end().ends_with(&table),
            "--help does not end with the table:\n{help}"
        );
    }

    #[test]
    fn every_code_appears_in_the_table_once_with_its_description() {
        let table = Exit::help_table();
        let rows: Vec<&str> = table.lines().skip(1).collect();
        assert_eq!(rows.len(), Exit::ALL.len());
        for (row, e) in rows.iter().zip(Exit::ALL) {
            assert_eq!(
                row.split_whitespace().next(),
                Some(e.code().to_string().as_str())
            );
            assert!(row.ends_with(e.description()), "{row}");
        }
        let mut codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        codes.dedup();
        assert_eq!(codes.len(), Exit::ALL.len(), "codes ascend, none twice");
        assert!(codes.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn errors_map_to_their_codes() {
        let of = |e: anyhow::Error| Exit::of(&e).code();
        assert_eq!(of(crate::error::usage("x")), 2);
        assert_eq!(of(Partial(2).into()), 23);
        assert_eq!(
            of(SshFailure::new("x".into(), crate::error::Retry::May).into()),
            12
        );
        assert_eq!(of(tern_engine::Error::NoSpace("/x".into()).into()), 5);
        assert_eq!(of(anyhow::anyhow!("something else")), 1);
    }
}
