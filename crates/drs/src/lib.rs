//! Dynamic right-sizing (DRS): passive measurement of TCP streams and the
//! diagnosis of what limits them.
//!
//! Layout (ARCHITECTURE.md): a pure core that is tested with recorded or
//! synthetic `TCP_INFO` samples ([`estimate`], [`diagnose`]), and a thin
//! adapter that reads the kernel ([`tcp_info`], [`host`]).
//!
//! It measures, explains, and grows send buffers that limit a stream
//! ([`policy`]), sizes the buffers of a session's streams together on long
//! paths ([`session`]), and decides how many streams to use ([`streams`]).

pub mod diagnose;
pub mod estimate;
pub mod ffi;
pub mod host;
pub mod policy;
pub mod pool;
pub mod session;
pub mod socket;
pub mod streams;
pub mod tcp_info;
pub mod tuner;

pub use diagnose::{Diagnosis, PathTuning, SharedSizing, diagnose, most_streams_limit};
pub use estimate::{Interval, Limit, StreamEstimate, StreamEstimator};
pub use host::HostCaps;
pub use streams::{StepReason, StreamChange, StreamController, StreamStep};
pub use tcp_info::TcpInfo;
pub use tuner::{Direction, SocketTuner, TunerConfig, WindowMode};
