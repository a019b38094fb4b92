//! sluice: a webhook ingest and dispatch server with end-to-end backpressure.
//!
//! The architecture, the backpressure chain and the module map are described in `DESIGN.md`
//! (kept beside the README). In brief: worker threads (`sched`) each run an event loop with their
//! own listener; the sans-IO HTTP/1.1 codec (`net::http`) turns bytes into requests; `ingest`
//! routes them and admits them through token buckets; accepted events travel through a bounded
//! lock-free ring (`ring`) to the single WAL writer (`wal`), which group-commits them and reports
//! back; only then does the worker answer 202.
#![warn(missing_debug_implementations)]

pub mod cluster;
pub mod config;
pub mod dispatch;
pub mod ingest;
pub mod metrics;
pub mod net;
pub mod ops;
pub mod ring;
pub mod sched;
pub mod sign;
pub mod storage;
pub mod sync;
pub mod tools;
pub mod wal;
