//! Delivery to destinations: permits, retries, circuits, the dead-letter queue.
//!
//! What dispatch is told is its own: [`spec`] defines the destinations, the triggers' routes and
//! the flow gates (`config` validates the manifest into them and dispatch imports nothing of
//! `config`). Each destination (a trigger handler URI) is owned by one worker core
//! ([`placement`]), so its policy state is plain single-threaded data: no atomics, no locks, and
//! every decision is a pure function of the state and the caller's `now` (nanoseconds on the
//! injected clock's scale, [`crate::sync::clock::Clock`]).
//!
//! Policy modules (core-local state machines):
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
//! | [`flow`] | per-trigger gates: batch, debounce, rate_limit, throttle, singleton, concurrency | state bounded by held jobs and `max_gate_keys` |
//! | [`batch`] | a batching destination's batch being filled: members in, calls out, on the injected clock | ≤ `max_events` members; body ≤ `max_bytes` unless one event alone is larger; closed ≤ `linger` after its first member |
//! | [`placement`] | a destination's owner core: FNV-1a of `http:` + uri, modulo the cores | one owner per destination for the run |
//!
//! The pump window shared by all cores is [`outstanding`] (`max_outstanding` jobs admitted and not
//! finished, one padded atomic word; loom model `loom-tests/tests/outstanding.rs`).
//!
//! The delivery runtime builds on these: [`dispatcher`] (the decisions: queues, gates, retry
//! timers, outcomes) drives the core's outbound pool ([`crate::net::outbound`], the I/O: connections,
//! keep-alive reuse, request and response; `classify` maps what it reports to an attempt result). The DLQ is [`dlq`] (entries and their format) stored by [`dlq_store`] as group-committed
//! batch files ([`dlq_batch`]) under an in-memory index ([`dlq_index`]) (bulk replay selection:
//! [`bulk_replay`]); the dispatch metric families are [`metrics`] (built from the
//! leaf [`crate::metrics`] toolkit). Every policy module is `#![forbid(unsafe_code)]`.

pub mod adaptive;
pub mod batch;
pub mod batch_metrics;
pub mod bulk_replay;
pub mod circuit;
pub mod classify;
pub mod destination;
pub mod dispatcher;
pub mod dlq;
pub mod dlq_batch;
pub mod dlq_entry;
pub mod dlq_index;
pub mod dlq_store;
pub mod dlq_tools;
pub mod event_tools;
pub mod flow;
pub mod job;
pub mod ledger;
pub mod metrics;
pub mod outstanding;
pub mod permits;
pub mod placement;
pub mod pump;
pub mod pump_shell;
pub mod rate;
pub mod replay_claims;
pub mod request;
pub mod retry;
pub mod rng;
pub mod spec;
pub mod trigger_caps;
