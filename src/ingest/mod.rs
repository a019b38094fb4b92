//! Ingest: routes, admission, signatures, dedupe and the refusal policy.
//!
//! - [`router`]: path + method → ops endpoint, trigger or the default route.
//! - [`respond`]: the 202/503 bodies; [`event_id`]: ULID-shaped event ids.
//! - [`bucket`]: GCRA token bucket in one atomic word (global and per-source admission).
//! - [`sources`]: bounded per-source registry, per-core caches, refusal counters, and the
//!   all-or-nothing [`sources::Admission`].

pub mod bucket;
pub mod sources;
pub mod event_id;
pub mod respond;
pub mod router;
