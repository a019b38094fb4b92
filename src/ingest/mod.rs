//! Ingest: routes, admission, signatures, dedupe and the refusal policy.
//!
//! - [`bucket`]: GCRA token bucket in one atomic word (global and per-source admission).
//! - [`sources`]: bounded per-source registry, per-core caches, refusal counters, and the
//!   all-or-nothing [`sources::Admission`].

pub mod bucket;
pub mod sources;
