//! Integration tests of the advisor: the store on every backend, the HTTP
//! API through its router, the scheduler with real and fake probes, and
//! the ageing of targets in a running advisor.
//!
//! Store and API tests run against SQLite always and against PostgreSQL
//! when `TERN_TEST_PG` holds a URL (scripts/test.sh starts a throwaway
//! cluster); without it they say so and run SQLite alone.

mod ageing;
mod api;
mod fixtures;
mod mesh;
mod scheduler;
mod store;
