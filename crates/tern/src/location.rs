//! Where a `tern cp` argument points: a local path or `tern://HOST[:PORT]/PATH`.

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
}

/// Parses a `tern://` URL or takes the argument as a local path.
pub fn parse(arg: &str) -> Result<Location, String> {
    let Some(rest) = arg.strip_prefix("tern://") else {
        if arg.contains("://") {
            return Err(format!(
                "'{arg}': only tern:// URLs and local paths are understood"
            ));
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
}
