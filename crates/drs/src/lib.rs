//! Dynamic right-sizing (DRS): passive measurement of TCP streams and the
//! diagnosis of what limits them.
//!
//! Layout follows the DESIGN: a pure core that is tested with recorded or
//! synthetic `TCP_INFO` samples ([`estimate`], [`diagnose`]), and a thin
//! adapter that reads the kernel ([`tcp_info`], [`host`]).
//!
//! It measures, explains, and grows send buffers that limit a stream
//! ([`policy`]); stream-count control is not built yet.

pub mod diagnose;
pub mod estimate;
pub mod ffi;
pub mod host;
pub mod policy;
pub mod pool;
pub mod socket;
pub mod streams;
pub mod tcp_info;
pub mod tuner;

pub use diagnose::{Diagnosis, diagnose};
pub use estimate::{Interval, Limit, StreamEstimate, StreamEstimator};
pub use host::HostCaps;
pub use streams::{StreamChange, StreamController, StreamStep};
pub use tcp_info::TcpInfo;
pub use tuner::{Direction, SocketTuner, TunerConfig, WindowMode};
