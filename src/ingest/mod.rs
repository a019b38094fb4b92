//! Ingest: routes, admission, signatures, dedupe and the refusal policy.
//!
//! - [`router`]: path + method → ops endpoint, trigger or the default route.
//! - [`bucket`]: GCRA token bucket in one atomic word, and the all-or-nothing
//!   [`bucket::Admission`] through the global and a per-source bucket.
//! - [`sources`]: bounded per-source registry, per-core caches, per-source refusal counters.
//! - [`respond`]: the 202/503 bodies; [`event_id`]: ULID-shaped event ids.

pub mod bucket;
pub mod event_id;
pub mod respond;
pub mod router;
pub mod sources;
