//! Integration tests of the `sluice` binary: each test starts its own server process (random
//! port on 127.0.0.1, its own temp data dir) and talks to it over real sockets and through the
//! `sluice wal` command-line tools.
//!
//! - `support`: process harness, blocking HTTP/1.1 client, WAL tools, metrics parser.
//! - `ingest`: the 202 contract, triggers, token buckets, metrics, ops endpoints.
//! - `http_errors`: one test per error status of the HTTP codec and router.
//! - `http_features`: keep-alive, pipelining, `100-continue`, HTTP/1.0, chunked bodies.
//! - `connections`: slowloris and the per-core connection cap.
//! - `durability`: restart, crash (SIGKILL) mid-burst, durability modes, segment rollover.
//! - `wal_tools`: torn tails, corruption, `wal verify` / `wal inspect`.
//! - `shutdown`: graceful drain on SIGTERM.
//! - `drain_nginx`: a rolling restart behind a real nginx with upstream keep-alive: no `502`.
//! - `tools`: `sluice loadgen` and `sluice mock-downstream` (rate, concurrency cap, Retry-After).
//! - `faults` (`--features failpoints`): storage faults in a running server.
//! - `crash`: SIGKILL at random moments under load; redelivery bounds.
//! - `hostile`: slowloris, floods, garbage; a good client keeps its latency.
//! - `props`: proptest models of the codecs, the ring and the token bucket.
//! - `auth`: signature schemes, dedupe across a crash, the admin token.
//! - `flow`: per-trigger flow-control gates with a real downstream (`flow_gates`: bounds and
//!   restarts; `flow_reload`: reloads, acceptance order, supersession at the bound, crash).
//! - `budgets`: the in-flight body budget, unread responses, accepts at the fd limit (RSS).
//! - `returns`: the return schedule (`Retry-After` that schedules) with honouring and
//!   non-honouring clients against a real slow downstream.
//! - `dispatch_i12`: `circuit.on_open = "hold"`, bulk DLQ replay, adaptive permits.
//! - `dlq_corrupt`: a damaged DLQ entry among good ones.
//! - `absorb`: triggers whose senders never retry absorb past the backlog bound.
//! - `wal_probe` (`--features failpoints`): `/readyz` recovers from `wal_unavailable` alone.
//! - `wal_loss`: lost segment files and damaged acknowledged records are detected.
//! - `wal_manifest`: a deleted log or checkpoint of a multi-worker data dir is named, not recreated.
//! - `https`: HTTPS destinations against a local rustls server with a generated CA.
//! - `shared`: destination budgets shared by three nodes through a real `redis-server`.
//! - `check`: `sluice check` output fed back and served, its flags, its error prefixes.
//! - `ops`: `sluice check`, the systemd unit, CLI progress, the dashboard, hot reload.
//! - `dashboard`: the dashboard in Chromium at 1280 px under a refused trigger and a reload.
//! - `reload`: hot reload by SIGHUP and `POST /admin/reload` with traffic flowing.
//! - `fsync_failure` (`--features failpoints`): one failed `fdatasync` that drops its pages.
//! - `full_disk`: a node on a 100% full tmpfs (mounted by the test; root) restarts and drains.
//! - `powerloss`: the WAL and (`powerloss::dlq`) the DLQ over the simulated disk (`storage::sim`),
//!   power cut at seeded points.
//! - `replication`: a real 3-node nats-server JetStream cluster on loopback (`support::nats`):
//!   an R3 stream through the loss of one node and of the quorum.

mod support;

mod absorb;
mod auth;
mod batch;
mod browser;
mod budgets;
mod check;
mod connections;
mod crash;
mod dashboard;
mod defaults;
mod dispatch;
mod dispatch_i12;
mod dlq_corrupt;
mod downstream;
mod drain_nginx;
mod durability;
mod edge;
mod events;
#[cfg(feature = "failpoints")]
mod faults;
mod flow;
mod flow_gates;
mod flow_reload;
#[cfg(feature = "failpoints")]
mod fsync_failure;
mod full_disk;
mod hostile;
mod http_errors;
mod http_features;
mod https;
mod ingest;
mod io_backend;
pub(crate) mod isolation;
mod keys;
mod ops;
mod ordering;
mod percore;
mod powerloss;
mod props;
mod reads;
mod reload;
mod reload_dests;
mod replay_bulk;
mod replay_once;
mod replication;
mod replication_adopt;
mod replication_commit;
mod replication_retention;
mod returns;
mod shared;
mod shutdown;
mod tools;
mod wal_loss;
mod wal_manifest;
#[cfg(feature = "failpoints")]
mod wal_probe;
mod wal_tools;
