//! Addresses given on the command line.

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
}
