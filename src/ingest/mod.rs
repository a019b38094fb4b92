//! Ingest: routes, admission, signatures, dedupe and the refusal policy.
//!
//! - [`bucket`]: GCRA token bucket in one atomic word, and the all-or-nothing
//!   [`bucket::Admission`] through the global and a per-source bucket.
//! - [`sources`]: bounded per-source registry, per-core caches, per-source refusal counters.

pub mod bucket;
pub mod sources;
