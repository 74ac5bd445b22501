//! Addresses given on the command line, and the paths to a daemon named
//! by hand (`--path [SRC=]DST[,rate=R]`).

use std::net::SocketAddr;

use anyhow::Result;

use crate::error::usage;

/// `--listen`: `ADDR:PORT`.
pub fn listen_addr(listen: &str) -> Result<SocketAddr> {
    listen.parse().map_err(|_| {
        usage(format!(
            "--listen wants ADDR:PORT (e.g. 0.0.0.0:4747 or [::]:4747), not '{listen}'"
        ))
    })
}

/// `--http`: `ADDR:PORT`, or a bare `PORT` on loopback.
pub fn http_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| {
        format!("--http wants ADDR:PORT or PORT (e.g. 4748, 127.0.0.1:4748, [::1]:4748), not '{s}'")
    })
}

/// `[SRC=]DST[,rate=R]`: IP addresses, and a reserved rate.
pub fn parse_path_spec(text: &str) -> Result<tern_engine::paths::PathSpec, String> {
    let (addresses, options) = match text.split_once(',') {
        Some((a, o)) => (a, Some(o)),
        None => (text, None),
    };
    let reserved_bps = match options {
        None => None,
        Some(o) => match o.split_once('=') {
            Some(("rate", r)) => Some(crate::size::parse_rate(r)?),
            _ => {
                return Err(format!(
                    "'{o}': the one thing a path takes after its address is rate=R, its reserved rate (e.g. 10.0.1.2,rate=300M)"
                ));
            }
        },
    };
    let (local, remote) = match addresses.split_once('=') {
        Some((src, dst)) => (Some(src), dst),
        None => (None, addresses),
    };
    let ip = |what: &str, s: &str| -> Result<std::net::IpAddr, String> {
        s.trim_matches(|c| c == '[' || c == ']')
            .parse()
            .map_err(|_| format!("{what} '{s}' is not an IP address"))
    };
    Ok(tern_engine::paths::PathSpec {
        remote: ip("the daemon's address", remote)?,
        local: local.map(|s| ip("the local address", s)).transpose()?,
        reserved_bps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_addresses() {
        assert_eq!(
            http_addr("4748").unwrap(),
            "127.0.0.1:4748".parse().unwrap()
        );
        assert_eq!(
            http_addr("0.0.0.0:80").unwrap(),
            "0.0.0.0:80".parse().unwrap()
        );
        assert_eq!(http_addr("[::1]:9").unwrap(), "[::1]:9".parse().unwrap());
        assert!(http_addr("localhost").is_err());
        assert!(http_addr("99999").is_err());
    }

    #[test]
    fn a_path_names_its_addresses_and_may_reserve_a_rate() {
        let p = parse_path_spec("10.0.0.1=10.47.1.2,rate=300M").unwrap();
        assert_eq!(p.local, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(p.remote, "10.47.1.2".parse::<std::net::IpAddr>().unwrap());
        assert_eq!(p.reserved_bps, Some(300_000_000));
        let plain = parse_path_spec("[2001:db8::2]").unwrap();
        assert_eq!((plain.local, plain.reserved_bps), (None, None));
        for (bad, says) in [
            ("10.47.1.2,rate=0", "a rate from"),
            ("10.47.1.2,rate=fast", "not a rate"),
            ("10.47.1.2,mtu=9000", "rate=R"),
            ("dtn1", "not an IP address"),
        ] {
            let e = parse_path_spec(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
