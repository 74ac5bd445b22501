//! The once line: what `tern serve --once` tells the client through ssh.
//!
//! `tern cp FILE USER@HOST:PATH` starts `tern serve --once` on the far side
//! over ssh. That server prints exactly one line on its stdout, which ssh
//! carries back to the client over the channel it authenticated: where to
//! connect, the one-time token the client must present (`TokenAuth`), and
//! the certificate fingerprint to pin. Nothing else is needed, because ssh
//! already proved who both ends are.
//!
//! ```text
//! TERN-ONCE 1 port=40123 addr=192.0.2.7 token=AAECAwQFBgcICQoLDA0ODw fingerprint=SHA256:…
//! ```
//!
//! The line is printable ASCII. Fields are separated by one space: the magic word, the line's version,
//! then `key=value` pairs in any order. Unknown keys are ignored (a newer
//! server may add some); `token` and `fingerprint` are required; `port` is
//! absent when the server connects out to the client (reverse mode). The
//! token is 16 bytes in unpadded standard base64.

use std::net::IpAddr;

use base64::Engine as _;

use crate::{DecodeError, TOKEN_LEN, Token};

/// The word that opens a once line.
pub const ONCE_MAGIC: &str = "TERN-ONCE";

/// Version of the once line this build writes and reads.
pub const ONCE_VERSION: u16 = 1;

/// Longest once line a reader accepts, in bytes (without the newline).
pub const MAX_ONCE_LINE: usize = 1024;

/// What `tern serve --once` tells its client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnceLine {
    /// The port the server listens on; `None` when it connects out instead.
    pub port: Option<u16>,
    /// The address the ssh connection came in on, as the server saw it
    /// (the client's fallback when its own name for the host does not
    /// resolve, e.g. an ssh alias).
    pub addr: Option<IpAddr>,
    /// The secret the client presents in `TokenAuth`.
    pub token: Token,
    /// The server certificate's fingerprint, `SHA256:…`.
    pub fingerprint: String,
}

fn bad(why: impl Into<String>) -> DecodeError {
    DecodeError::OnceLine(why.into())
}

impl OnceLine {
    /// The line, without its terminating newline.
    pub fn encode(&self) -> String {
        let mut out = format!("{ONCE_MAGIC} {ONCE_VERSION}");
        if let Some(port) = self.port {
            out.push_str(&format!(" port={port}"));
        }
        if let Some(addr) = self.addr {
            out.push_str(&format!(" addr={addr}"));
        }
        let token = base64::engine::general_purpose::STANDARD_NO_PAD.encode(self.token);
        out.push_str(&format!(" token={token} fingerprint={}", self.fingerprint));
        out
    }

    /// Reads a line (a trailing `\n` or `\r\n` is allowed).
    pub fn decode(line: &str) -> Result<OnceLine, DecodeError> {
        let line = match line.strip_suffix('\n') {
            Some(l) => l.strip_suffix('\r').unwrap_or(l),
            None => line,
        };
        if line.len() > MAX_ONCE_LINE {
            return Err(DecodeError::TooLong {
                len: line.len() as u64,
                max: MAX_ONCE_LINE as u64,
            });
        }
        if !line.bytes().all(|b| (b' '..=b'~').contains(&b)) {
            return Err(bad("not printable ASCII"));
        }
        let mut words = line.split(' ');
        if words.next() != Some(ONCE_MAGIC) {
            return Err(bad(format!("does not start with {ONCE_MAGIC}")));
        }
        match words.next().map(str::parse::<u16>) {
            Some(Ok(ONCE_VERSION)) => {}
            Some(Ok(v)) => {
                return Err(bad(format!("version {v}; this build reads {ONCE_VERSION}")));
            }
            _ => return Err(bad("no version")),
        }
        let (mut port, mut addr, mut token, mut fingerprint) = (None, None, None, None);
        for word in words {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| bad(format!("'{word}' is not key=value")))?;
            let dup = |k: &str| bad(format!("{k} given twice"));
            match key {
                "port" => {
                    let p = Some(value)
                        .filter(|v| v.bytes().all(|b| b.is_ascii_digit()))
                        .and_then(|v| v.parse::<u16>().ok())
                        .filter(|p| *p != 0)
                        .ok_or_else(|| bad(format!("bad port '{value}'")))?;
                    if port.replace(p).is_some() {
                        return Err(dup(key));
                    }
                }
                "addr" => {
                    let a = value
                        .parse::<IpAddr>()
                        .map_err(|_| bad(format!("bad address '{value}'")))?;
                    if addr.replace(a).is_some() {
                        return Err(dup(key));
                    }
                }
                "token" => {
                    let t = decode_token(value)?;
                    if token.replace(t).is_some() {
                        return Err(dup(key));
                    }
                }
                "fingerprint" => {
                    if !value.starts_with("SHA256:") || value.len() <= "SHA256:".len() {
                        return Err(bad(format!("bad fingerprint '{value}'")));
                    }
                    if fingerprint.replace(value.to_string()).is_some() {
                        return Err(dup(key));
                    }
                }
                _ => {}
            }
        }
        Ok(OnceLine {
            port,
            addr,
            token: token.ok_or_else(|| bad("no token"))?,
            fingerprint: fingerprint.ok_or_else(|| bad("no fingerprint"))?,
        })
    }
}

fn decode_token(text: &str) -> Result<Token, DecodeError> {
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(text)
        .map_err(|_| bad("token is not unpadded base64"))?;
    <[u8; TOKEN_LEN]>::try_from(bytes.as_slice()).map_err(|_| {
        bad(format!(
            "token of {} bytes; {TOKEN_LEN} expected",
            bytes.len()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> OnceLine {
        OnceLine {
            port: Some(40123),
            addr: Some("2001:db8::7".parse().unwrap()),
            token: std::array::from_fn(|i| i as u8),
            fingerprint: "SHA256:abc".into(),
        }
    }

    #[test]
    fn a_line_round_trips_and_tolerates_unknown_keys() {
        let line = example().encode();
        assert_eq!(OnceLine::decode(&format!("{line}\r\n")).unwrap(), example());
        let newer = format!("{line} colour=blue");
        assert_eq!(OnceLine::decode(&newer).unwrap(), example());
        let reverse = OnceLine {
            port: None,
            addr: None,
            ..example()
        };
        assert_eq!(OnceLine::decode(&reverse.encode()).unwrap(), reverse);
    }

    #[test]
    fn malformed_lines_are_refused() {
        let good = example().encode();
        for bad in [
            String::new(),
            "Last login: today".into(),
            good.replace("TERN-ONCE 1", "TERN-ONCE 2"),
            good.replace("TERN-ONCE 1 ", "TERN-ONCE "),
            good.replace("port=40123", "port=0"),
            good.replace("port=40123", "port=+40123"),
            good.replace("port=40123", "port=70000"),
            good.replace("port=40123", "port=1 port=2"),
            good.replace("addr=2001:db8::7", "addr=host"),
            good.replace("token=", "token=x"),
            good.replace("token=AAECAwQFBgcICQoLDA0ODw", "token=AAEC"),
            good.replace(" token=AAECAwQFBgcICQoLDA0ODw", ""),
            good.replace("fingerprint=SHA256:abc", "fingerprint=MD5:abc"),
            good.replace(" fingerprint=SHA256:abc", ""),
            good.replace(' ', "  "),
            good.replace("SHA256:abc", "SHA256:a\tc"),
            format!("{good}\n\n"),
            format!("{good} {}", "x".repeat(MAX_ONCE_LINE)),
        ] {
            assert!(OnceLine::decode(&bad).is_err(), "accepted {bad:?}");
        }
    }
}
