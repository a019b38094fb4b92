//! Delivery to destinations: the pump, permits, retries, circuits, the dead-letter queue.
//!
//! What dispatch is told is its own: [`spec`] defines the destinations, the triggers' routes and
//! the flow gates (`config` validates the manifest into them and dispatch imports nothing of
//! `config`). Each destination (a trigger handler URI) is owned by one worker core
//! ([`placement`]), so its policy state is plain single-threaded data: no atomics, no locks, and
//! every decision is a pure function of the state and the caller's `now` (nanoseconds on the
//! injected clock's scale, [`crate::sync::clock::Clock`]).
//!
//! The rooms, in the order an event meets them:
//!
//! | room | what | entry |
//! |---|---|---|
//! | [`pump`] | reads each core's log behind the durable LSN, admits events into the window shared by all cores ([`outstanding`], its per-trigger shares [`trigger_caps`]), records outcomes (`Done`, attempts) | [`pump::PumpCore`] (pure), [`pump::shell`] (its I/O) |
//! | [`flow`] | per-trigger gates: batch, debounce, rate_limit, throttle, singleton, concurrency | state bounded by held jobs and `max_gate_keys` |
//! | [`deliver`] | one job to its destination: the dispatcher and the per-destination policy state machines (permits, circuit, rate, retry, batches) | [`deliver::dispatcher`] |
//! | [`dlq`] | dead letters: entry format, batch files, index, store, bulk replay selection and claims, online replay and discard | [`dlq::DlqStore`], [`dlq::online`] |
//!
//! Between them, once per loop turn: [`exchange`] (jobs from the pump to the dispatcher of the
//! destination's core, outcomes back to the pump of the event's log, over the rings between
//! cores; placed by [`placement`]). Beside them: [`outstanding`] and [`trigger_caps`] (the pump window, taken by the pump and given back by delivery; loom model `loom-tests/tests/outstanding.rs`), [`job`] (messages between the pump and the destination-owning cores),
//! [`ledger`] (per-trigger counts over the logs' lives), [`metrics`] (the dispatch metric
//! families, built from the leaf [`crate::metrics`] toolkit) and [`event_tools`] (the offline
//! `sluice events` answers). Every policy module is `#![forbid(unsafe_code)]`.

pub mod deliver;
pub mod dlq;
pub mod event_tools;
pub mod exchange;
pub mod flow;
pub mod horizon;
pub mod id_map;
pub mod job;
pub mod ledger;
pub mod metrics;
pub mod outstanding;
pub mod placement;
pub mod pump;
pub mod spec;
pub mod trigger_caps;
