//! Connections and identity: who the peer is, how its connections reach
//! us, and how a session opens over them.
//!
//! - [`tls`]: certificates, fingerprints, the verifiers; [`known_hosts`]:
//!   trust on first use; [`trust`]: how a client recognises a daemon
//!   (one enum, and the command line's precedence);
//! - [`authz`]: a site daemon's authorization rules;
//! - [`net`]: socket options every connection gets; `records`: tern's
//!   own TLS 1.3 record layer, which `private` data connections switch to
//!   once rustls has done their handshake (`aligned` reads for it);
//! - [`open`]: the pump that runs `tern-session`'s opening state machines
//!   over a control channel, with one `expect(timeout)` and one `refuse`;
//! - [`route`]: where a client's connections go (dial out, or take those
//!   the far end dials back); [`paths`]: every path between two hosts,
//!   the addresses a daemon names and the path each data stream takes;
//! - [`client`], [`server`] (with its admission limits, data joins and
//!   roles), [`once`] (with the one-session gate): the three ends that
//!   open sessions; `server::observe`: what a daemon tells its owner
//!   about its sessions (each finished one, the running ones).

mod aligned;
pub mod authz;
pub mod client;
mod gate;
pub mod known_hosts;
pub mod net;
pub mod once;
pub mod open;
pub mod paths;
mod records;
pub mod route;
pub mod server;
pub mod tls;
pub mod tpc;
pub mod trust;
