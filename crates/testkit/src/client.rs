//! The engine's `ClientOptions` as the tests use them, built in this one
//! place (so a change to the struct is made here once): [`options`] for
//! what varies between tests, [`pinned`] and [`recording`] for how the
//! client trusts the daemon. Anything else a test changes it sets on the
//! value it gets (`o.rate_limit = …`, `o.wrap = …`).

use std::path::Path;
use std::time::Duration;

use tern_engine::client::{ClientOptions, Trust};
use tern_engine::tls::KnownHosts;
use tern_proto::{ChecksumAlg, Protect};

/// `streams` data streams (and no more), `protect`, blocks of
/// `block_size`, xxh3 digests, default tuning and choices, connect within
/// 5 s, silence tolerated 30 s; no rate limit, no wrapper, no callback,
/// no token, no client certificate; nothing pinned, recorded or checked
/// by a CA (the first certificate is taken as it comes).
pub fn options(streams: u16, protect: Protect, block_size: u32) -> ClientOptions {
    ClientOptions {
        streams,
        max_streams: streams,
        block_size,
        checksum: ChecksumAlg::Xxh3,
        protect,
        connect_timeout: Duration::from_secs(5),
        io_timeout: Duration::from_secs(30),
        ..ClientOptions::new(Trust::Any)
    }
}

/// `o` expecting the daemon's certificate to have `fingerprint`
/// (`--fingerprint`).
pub fn pinned(o: ClientOptions, fingerprint: &str) -> ClientOptions {
    ClientOptions {
        trust: Trust::Pinned(fingerprint.to_string()),
        ..o
    }
}

/// `o` recording first-seen fingerprints in the known-hosts file `path`
/// and checking them there later.
pub fn recording(o: ClientOptions, path: &Path) -> ClientOptions {
    ClientOptions {
        trust: Trust::KnownHosts(KnownHosts {
            path: path.to_path_buf(),
        }),
        ..o
    }
}
