//! Where a `tern cp` argument points: a local path, a daemon's
//! `tern://HOST[:PORT]/PATH`, or scp's `[USER@]HOST:PATH` (reached by
//! starting `tern serve --once` over ssh).
//!
//! The scp rule decides between a path and a host: a colon before the first
//! slash means a host (`host:x`, `user@host:`, `[::1]:x`, `user@[::1]:x`);
//! `./a:b`, `/x:y` and `:x` stay local paths.

use std::path::PathBuf;

use tern_engine::client::Endpoint;

/// One side of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A path on this machine.
    Local(PathBuf),
    /// A path under a daemon's root.
    Remote {
        /// The daemon.
        endpoint: Endpoint,
        /// Path relative to its root (`""` for the root itself).
        path: String,
    },
    /// A path on a host reached through ssh.
    Ssh {
        /// Who and where to log in.
        target: SshTarget,
        /// Relative to the remote home (`""` for the home itself), or absolute.
        path: String,
    },
}

/// `[USER@]HOST` of an ssh location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    /// Login name; ssh's default when absent.
    pub user: Option<String>,
    /// Host name or address (IPv6 without brackets).
    pub host: String,
}

impl SshTarget {
    /// The destination argument for ssh: `USER@HOST` or `HOST`.
    pub fn destination(&self) -> String {
        match &self.user {
            Some(u) => format!("{u}@{}", self.host),
            None => self.host.clone(),
        }
    }
}

/// Parses a `tern://` URL, an scp-style `[USER@]HOST:PATH`, or takes the
/// argument as a local path.
pub fn parse(arg: &str) -> Result<Location, String> {
    let Some(rest) = arg.strip_prefix("tern://") else {
        if arg.contains("://") {
            return Err(format!(
                "'{arg}': only tern:// URLs, [USER@]HOST:PATH and local paths are understood"
            ));
        }
        if let Some(colon) = host_colon(arg) {
            let target = parse_ssh_target(&arg[..colon]).map_err(|e| format!("'{arg}': {e}"))?;
            return Ok(Location::Ssh {
                target,
                path: arg[colon + 1..].to_string(),
            });
        }
        return Ok(Location::Local(PathBuf::from(arg)));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    Ok(Location::Remote {
        endpoint: parse_endpoint(authority).map_err(|e| format!("'{arg}': {e}"))?,
        path: path.to_string(),
    })
}

/// A hint for an scp-style argument whose path starts with what looks
/// like a port (`HOST:4800/x`): scp's rule reads it as the path `4800/x`
/// on HOST over ssh, while the user may have meant a daemon's port.
pub fn port_like_hint(arg: &str) -> Option<String> {
    if arg.contains("://") {
        return None;
    }
    let colon = host_colon(arg)?;
    let (host, path) = (&arg[..colon], &arg[colon + 1..]);
    let digits = path.split('/').next().unwrap_or("");
    let port_like = !digits.is_empty()
        && digits.len() <= 5
        && digits.bytes().all(|b| b.is_ascii_digit())
        && digits
            .parse::<u32>()
            .is_ok_and(|p| (1..=65535).contains(&p));
    port_like.then(|| {
        format!(
            "'{arg}' is read as scp reads it: host {host} over ssh, path {path}; for a daemon \
             on port {digits}, write tern://{host}:{path}"
        )
    })
}

/// Where the colon that ends `[USER@]HOST` is, if `arg` names a host (as
/// scp decides: a colon before any slash, and brackets around IPv6).
fn host_colon(arg: &str) -> Option<usize> {
    if arg.starts_with(':') {
        return None;
    }
    let mut bracketed = arg.starts_with('[');
    let bytes = arg.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'@' if bytes.get(i + 1) == Some(&b'[') => bracketed = true,
            b']' if bracketed && bytes.get(i + 1) == Some(&b':') => return Some(i + 1),
            b':' if !bracketed => return Some(i),
            b'/' => return None,
            _ => {}
        }
    }
    None
}

/// Parses `[USER@]HOST` or `[USER@][V6]`.
fn parse_ssh_target(text: &str) -> Result<SshTarget, String> {
    let (user, host) = match text.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, text),
    };
    let host = match host.strip_prefix('[') {
        Some(v6) => v6
            .strip_suffix(']')
            .ok_or("missing ']' after an IPv6 address")?,
        None => host,
    };
    if host.is_empty() {
        return Err("missing host".into());
    }
    // ssh would take these for options (or worse: -oProxyCommand=…).
    if host.starts_with('-') || user.is_some_and(|u| u.starts_with('-')) {
        return Err("a host or user may not start with '-'".into());
    }
    if user == Some("") {
        return Err("empty user name before '@'".into());
    }
    Ok(SshTarget {
        user: user.map(str::to_string),
        host: host.to_string(),
    })
}

/// Parses `HOST`, `HOST:PORT`, `[V6]` or `[V6]:PORT`.
pub fn parse_endpoint(authority: &str) -> Result<Endpoint, String> {
    let default = tern_proto::DEFAULT_PORT;
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let end = v6.find(']').ok_or("missing ']' after an IPv6 address")?;
        let host = &v6[..end];
        let port = match &v6[end + 1..] {
            "" => default,
            p => p
                .strip_prefix(':')
                .ok_or("expected ':PORT' after ']'")?
                .parse()
                .map_err(|_| format!("bad port '{}'", &p[1..]))?,
        };
        (host.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (
                h.to_string(),
                p.parse().map_err(|_| format!("bad port '{p}'"))?,
            ),
            None => (authority.to_string(), default),
        }
    };
    if host.is_empty() {
        return Err("missing host".into());
    }
    Ok(Endpoint { host, port })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(host: &str, port: u16, path: &str) -> Location {
        Location::Remote {
            endpoint: Endpoint {
                host: host.into(),
                port,
            },
            path: path.into(),
        }
    }

    #[test]
    fn a_port_after_the_host_colon_gets_a_hint_towards_tern_urls() {
        let hint = port_like_hint("127.0.0.1:4800/x").expect("a hint");
        assert!(hint.contains("tern://127.0.0.1:4800/x"), "{hint}");
        assert!(port_like_hint("127.0.0.1:4800").is_some());
        assert_eq!(port_like_hint("dtn:data/x"), None);
        assert_eq!(port_like_hint("dtn:99999/x"), None);
        assert_eq!(port_like_hint("tern://h:4800/x"), None);
        assert_eq!(port_like_hint("./local/4800"), None);
    }

    #[test]
    fn urls_and_paths_parse() {
        assert_eq!(
            parse("tern://h/data/x").unwrap(),
            remote("h", 4747, "data/x")
        );
        assert_eq!(parse("tern://h:99/").unwrap(), remote("h", 99, ""));
        assert_eq!(
            parse("tern://[::1]:4747/p").unwrap(),
            remote("::1", 4747, "p")
        );
        assert_eq!(
            parse("tern://[fe80::1]").unwrap(),
            remote("fe80::1", 4747, "")
        );
        assert_eq!(parse("./a:b").unwrap(), Location::Local("./a:b".into()));
        assert!(parse("http://x/y").is_err());
        assert!(parse("tern://h:notaport/x").is_err());
        assert!(parse("tern://[::1/x").is_err());
        assert!(parse("tern:///x").is_err());
    }

    fn ssh(user: Option<&str>, host: &str, path: &str) -> Location {
        Location::Ssh {
            target: SshTarget {
                user: user.map(str::to_string),
                host: host.into(),
            },
            path: path.into(),
        }
    }

    #[test]
    fn a_colon_before_any_slash_means_ssh_as_with_scp() {
        assert_eq!(parse("h:data/x").unwrap(), ssh(None, "h", "data/x"));
        assert_eq!(
            parse("ada@h.example.org:").unwrap(),
            ssh(Some("ada"), "h.example.org", "")
        );
        assert_eq!(parse("h:/abs/x:y").unwrap(), ssh(None, "h", "/abs/x:y"));
        assert_eq!(parse("[::1]:x").unwrap(), ssh(None, "::1", "x"));
        assert_eq!(
            parse("ada@[fe80::1]:/d").unwrap(),
            ssh(Some("ada"), "fe80::1", "/d")
        );
        assert_eq!(parse("a@b@h:x").unwrap(), ssh(Some("a@b"), "h", "x"));
        assert_eq!(
            SshTarget {
                user: Some("ada".into()),
                host: "h".into()
            }
            .destination(),
            "ada@h"
        );
    }

    #[test]
    fn paths_with_a_slash_or_a_leading_colon_stay_local() {
        for local in [
            "./a:b", "/x:y", ":x", "dir/a:b", "plain", "a@b", "[::1]", "[::1:x",
        ] {
            assert_eq!(
                parse(local).unwrap(),
                Location::Local(local.into()),
                "{local}"
            );
        }
    }

    #[test]
    fn hosts_ssh_would_misread_are_refused() {
        for bad in [
            "-oProxyCommand=x:y",
            "-h:x",
            "@h:x",
            "-u@h:x",
            "ada@:x",
            "ada@[]:x",
        ] {
            assert!(parse(bad).is_err(), "{bad} accepted");
        }
    }
}
