//! netlab: emulated WAN paths for tests and benchmarks.
//!
//! This kernel has no netem, so netlab emulates paths in user space: two
//! network namespaces (hosts A and B) each get a TUN device per path, and
//! an emulator process moves packets between them, applying per direction
//! a one-way delay, serialization at the link rate, a drop-tail queue,
//! random loss and an MTU. netlab is test infrastructure; it is never in
//! tern's data path. See `docs/NETLAB.md`.

pub mod emulator;
pub mod gso;
pub mod lab;
pub mod link;
pub mod sys;
