//! Delivery: one job to its destination and back. The decisions live in [`dispatcher`] (queues,
//! gates, retry timers, outcomes) over the per-destination policy state machines below, each
//! owned by the destination's core and `#![forbid(unsafe_code)]`:
//!
//! | module | what | invariant |
//! |---|---|---|
//! | [`permits`] | the permit set, the only home of `max_in_flight` | in flight ≤ max, always (also while `set_max` shrinks it) |
//! | [`adaptive`] | `max_in_flight = "auto"`: gradient on latency vs the observed minimum, decrease on overload | limit ∈ `[min_in_flight, max_in_flight_cap]` |
//! | [`circuit`] | closed / open / half-open breaker | exactly one probe per open window |
//! | [`rate`] | optional GCRA rate budget (plain `u64` TAT) | ≤ burst back to back, then 1 per `1/per_sec` |
//! | [`retry`] | exponential backoff, full jitter | delay ∈ [0, min(cap, base·2^(n-2))]; none past `max_attempts` |
//! | [`rng`] | SplitMix64 for jitter | deterministic per seed |
//! | [`classify`] | attempt result → delivered / retryable (+ pause) / permanent | only 429/503 pause |
//! | [`destination`] | the gate: circuit, pause, rate, permits, in that order | nothing consumed unless `Go`; `on_open = "hold"` waits instead of failing fast |
//! | [`batch`] | a batching destination's batch being filled: members in, calls out, on the injected clock | ≤ `max_events` members; body ≤ `max_bytes` unless one event alone is larger; closed ≤ `linger` after its first member |
//!
//! [`request`] builds the outbound request of one job; the I/O (connections, keep-alive reuse,
//! request and response) is the core's outbound pool, [`crate::net::outbound`].

pub mod adaptive;
pub mod batch;
pub mod circuit;
pub mod classify;
pub mod destination;
pub mod dispatcher;
pub mod permits;
pub mod rate;
pub mod request;
pub mod retry;
pub mod rng;
