//! Storage: where blocks come from and where they land.
//!
//! - [`fsio`]: sources and sinks behind one pair of traits (files beneath
//!   a root, opened without following links; generated data; the discard
//!   sink), partial files, deferred directory and link metadata;
//! - [`blockbuf`]: block buffers aligned for direct I/O;
//! - [`commit`]: received files made durable as a group, then renamed
//!   into place, and write-behind of big files;
//! - [`journal`]: which blocks of a partial file are verified, for resume;
//! - [`skip`]: files the destination already has;
//! - [`expect`]: a pull receives only the names it asked for.

pub mod blockbuf;
pub mod commit;
pub mod expect;
pub mod fsio;
pub mod journal;
pub mod skip;
mod writeback;
