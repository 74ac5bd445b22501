//! The tern advisor: tuning advice for any path from a measurement
//! archive — the Enable service (LBNL, 2001), rebuilt.
//!
//! A data server knows the paths to its clients best. The advisor keeps a
//! list of targets (from a config file, the API, and the daemon's own
//! completed transfers), measures them within a load budget when real
//! transfers have not (active probes, [`probe`], run by the [`scheduler`]),
//! keeps every number in a [`store`] (SQLite or PostgreSQL), and answers
//! "what buffer size and how many streams for this host?" over an HTTP
//! [`api`]: RTT × bottleneck from robust [`estimate`]s, shaped by the
//! host's socket-buffer caps ([`advice`]), with the evidence it rests on.
//!
//! Layers, bottom up: [`model`] and [`estimate`], [`aggregate`] and
//! [`advice`] are pure; [`store`] and [`probe`] do I/O; [`scheduler`] and
//! [`service`] tie them together; [`api`] and [`client`] speak HTTP.
//! The engine never imports this crate: the binary asks the advisor for a
//! starting point, hands it to the engine, and reports what it achieved.

pub mod adapters;
pub mod advice;
pub mod aggregate;
pub mod alerts;
pub mod api;
pub mod client;
pub mod error;
pub mod estimate;
pub mod events;
pub mod mesh;
pub mod model;
pub mod probe;
pub mod report;
pub mod scheduler;
pub mod service;
pub mod store;
pub mod tomography;

pub use adapters::{EngineSweep, EngineThroughput, UdpEchoLoss, UdpTraceRoute, UdpTrainCapacity};
pub use advice::Advice;
pub use client::AdvisorClient;
pub use error::Error;
pub use model::{Kind, Measurement, Origin, Sample, Target, TargetSource};
pub use probe::{Concurrency, Grant, Probe, ProbeError, ProbeFuture, ProbeTarget};
pub use report::TransferReport;
pub use service::{Advisor, AdvisorOptions, Service};
