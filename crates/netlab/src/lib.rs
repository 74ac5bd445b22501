//! netlab: emulated WAN paths for tests and benchmarks.
//!
//! This kernel has no netem, so netlab emulates paths in user space: two
//! or three network namespaces (hosts A, B and C) each get a TUN device
//! per path that joins them, and an emulator process moves packets between
//! them, applying per direction a one-way delay, serialization at the link
//! rate, a drop-tail queue, random loss and an MTU, and answering for the
//! routers along a path when a packet's TTL runs out. netlab is test
//! infrastructure; it is never in tern's data path. See `docs/NETLAB.md`.

pub mod emulator;
pub mod gso;
pub mod hops;
pub mod lab;
pub mod link;
pub mod spec;
pub mod status;
pub mod sys;
