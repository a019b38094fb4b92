//! The dashboard: `GET /ui`, one self-contained HTML page embedded in the binary (inline CSS and
//! script, no outside asset, a `Content-Security-Policy` that forbids loading any), fed every
//! second by `GET /api/v1/state`, a JSON snapshot of the backpressure chain:
//!
//! ```text
//! sender → buckets → WAL → backlog → pump → destinations
//! ```
//!
//! **Gathering without blocking a loop.** The snapshot is read on the core that serves the
//! request, from the same shared cells `/metrics` renders (`sched::exposition::render_metrics`): the
//! per-core counter shards summed ([`crate::metrics::Metrics`]), the sources' counters (the
//! source table's lock is held only while its entries are collected, as for `/metrics`), the
//! backlog and body-budget atomics, and the dispatch cells each destination's owner core
//! publishes after every gate decision ([`crate::dispatch::metrics::DestSnapshot`]). Nothing is
//! asked of another core, so a stalled core cannot stall the dashboard, and the dashboard costs
//! no core a turn. Cells are read `Relaxed` one by one: the snapshot is not atomic across
//! cells (a count may be one event ahead of another), which a once-a-second view tolerates.
//!
//! **What a reload removed stays on the page until it is done**: a destination no trigger uses
//! any more is listed (`"removed": true`) while it has calls in flight or queued, a removed
//! trigger while it holds events or dispatch jobs (`ops::dashboard::backlog`), so every event
//! `backlog.events` counts is on a row (a trigger added by a reload shows the default route's
//! slot, which it shares).
//!
//! **Access** (`server.ui`, [`crate::config::ui`]): `public` serves both; `token` serves the
//! static page and requires `Authorization: Bearer <admin token>` for the state; `off` is 404.

#![forbid(unsafe_code)]

pub(super) mod backlog;
use serde_json::{json, Value};

use crate::config::ui::UiMode;
use crate::config::Config;
use crate::dispatch::deliver::circuit::CircuitState;
use crate::dispatch::dlq::DlqReason;
use crate::ingest::respond::Refusal;
use crate::ingest::router::OpsEndpoint;
use crate::metrics::counter::{Action, Dimension};
use crate::ops::view::OpsView;

/// The page, embedded at build time.
pub const PAGE: &str = include_str!("ui.html");

/// Nothing may be loaded from anywhere: inline style and script only, data from this origin.
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; \
                       connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'";

/// A ready answer for the worker to queue.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: &'static str,
    /// `Content-Security-Policy` for the page.
    pub csp: bool,
    /// `WWW-Authenticate: Bearer` on a 401.
    pub challenge: bool,
    pub body: Vec<u8>,
}

impl Answer {
    /// The response headers (besides the framing ones the worker writes).
    pub fn headers(&self) -> Vec<(&'static str, &'static str)> {
        let mut h = vec![
            ("Content-Type", self.content_type),
            ("Cache-Control", "no-store"),
        ];
        if self.csp {
            h.push(("Content-Security-Policy", CSP));
        }
        if self.challenge {
            h.push(("WWW-Authenticate", "Bearer"));
        }
        h
    }

    pub(crate) fn json(status: u16, body: Vec<u8>) -> Answer {
        Answer {
            status,
            content_type: "application/json",
            csp: false,
            challenge: status == 401,
            body,
        }
    }
}

/// Answers `GET /ui`, `GET /api/v1/state` or `GET /api/v1/ledger` (`ep`, the last two under
/// the same access rule), `authorization` being the request's header.
pub fn answer(node: &OpsView<'_>, ep: OpsEndpoint, authorization: Option<&[u8]>) -> Answer {
    let config = node.config;
    let mode = config.server.ui;
    if mode == UiMode::Off {
        return Answer {
            status: 404,
            content_type: "text/plain",
            csp: false,
            challenge: false,
            body: b"not found\n".to_vec(),
        };
    }
    match ep {
        OpsEndpoint::Ui => Answer {
            status: 200,
            content_type: "text/html; charset=utf-8",
            csp: true,
            challenge: false,
            body: PAGE.as_bytes().to_vec(),
        },
        _ => {
            let allowed = mode == UiMode::Public
                || config
                    .admin_token
                    .as_ref()
                    .is_some_and(|t| crate::ingest::verify::bearer_matches(t, authorization));
            if !allowed {
                return Answer::json(
                    401,
                    br#"{"status":"refused","reason":"unauthorized"}"#.to_vec(),
                );
            }
            let doc = match ep {
                OpsEndpoint::Ledger => node.dispatch.ledger.json(),
                _ => state(node),
            };
            Answer::json(200, serde_json::to_vec(&doc).unwrap_or_default())
        }
    }
}

/// The `/api/v1/state` document (README "Dashboard" lists its fields).
pub fn state(node: &OpsView<'_>) -> Value {
    let generation = node.reload.current();
    let config = &generation.value.config;
    let now_ms = crate::sync::clock::unix_millis();
    let m = node.metrics;
    let d = node.dispatch;
    let oldest_age_s = d
        .oldest_pending_ms()
        .map_or(0.0, |ms| now_ms.saturating_sub(ms) as f64 / 1000.0);
    json!({
        "now_ms": now_ms,
        "config_generation": generation.number,
        "phase": node.not_ready_reason().unwrap_or("ready"),
        "ingest": ingest(node, config),
        "wal": {
            "healthy": node.wal_healthy(),
            "appends": node.wal_appends(),
            "commit_queued": (0..m.cores()).map(|c| m.commit_queued(c)).sum::<u64>(),
            "bytes": node.backlog.wal_bytes(),
            "max_bytes": config.dispatch.max_wal_bytes,
        },
        "replication": node.replication.map(replication),
        "backlog": backlog::backlog(node, config, oldest_age_s),
        "pump": backlog::pump(node, config),
        "destinations": destinations(node, config),
        "dlq": {
            "retry_exhausted": d.dead_lettered(DlqReason::RetryExhausted),
            "circuit_open": d.dead_lettered(DlqReason::CircuitOpen),
            "permanent_failure": d.dead_lettered(DlqReason::PermanentFailure),
        },
        "triggers": backlog::triggers(node, config),
    })
}

/// `replication` (`null` without `[replication]`): its state, the batches waiting for
/// JetStream, acknowledgements and their mean time, fences, the stream's size, adopted logs.
fn replication(r: &crate::replication::state::ReplicationState) -> Value {
    use std::sync::atomic::Ordering::Relaxed;
    let acks = r.ack_seconds.count();
    let mean_ms = if acks == 0 {
        0.0
    } else {
        r.ack_seconds.sum_nanos() as f64 / acks as f64 / 1e6
    };
    json!({
        "state": r.refusal().map_or("up", |why| why.as_str()),
        "inflight_batches": r.cores().iter().map(|c| c.waiting_batches()).sum::<u64>(),
        "acks": acks,
        "ack_mean_ms": mean_ms,
        "fenced_total": r.fenced_total.load(Relaxed),
        "stream_bytes": r.stream_bytes.load(Relaxed),
        "adopted_logs": r.adopted_logs.load(Relaxed),
        "adopted": r.adopted().into_iter().map(|(node, logs, at_ms)| json!({
            "node": node,
            "logs": logs,
            "at_ms": at_ms,
        })).collect::<Vec<_>>(),
    })
}

/// `ingest`: admitted and refused requests (all sources), the global bucket, the body budget.
fn ingest(node: &OpsView<'_>, config: &Config) -> Value {
    let m = node.metrics;
    let mut admitted = 0u64;
    let mut refused = [0u64; Refusal::COUNT];
    node.sources.for_each(|_, e| {
        admitted += e.accepted();
        for r in Refusal::ALL {
            refused[r as usize] += e.refusals(r);
        }
    });
    let refused: serde_json::Map<String, Value> = Refusal::ALL
        .iter()
        .map(|r| (r.as_str().to_string(), json!(refused[*r as usize])))
        .collect();
    let global = node.admission.global();
    json!({
        "admitted": admitted,
        "refused": refused,
        "admit_events": m.backpressure_events(Dimension::Ingest, Action::Admit),
        "reject_events": m.backpressure_events(Dimension::Ingest, Action::Reject),
        "global_bucket": {
            "capacity": config.ingest.global_capacity,
            "available": global.available(node.clock.now_nanos()).max(0.0).floor(),
            "refill_per_sec": config.ingest.refill_per_sec,
        },
        "body_budget": {
            "in_use": node.body_budget.in_use(),
            "limit": node.body_budget.limit(),
        },
    })
}

/// `destinations[]` by destination id: the ones a trigger uses, then the ones a reload removed
/// (kept to finish their events) while they still have calls in flight or queued
/// (`"removed": true`).
fn destinations(node: &OpsView<'_>, config: &Config) -> Vec<Value> {
    let now = node.clock.now_nanos();
    let used = crate::ops::reload::ids::in_use(config);
    let cells = node.dispatch.destinations();
    let all = cells.into_iter().zip(config.destinations.iter()).zip(used);
    let (active, removed): (Vec<_>, Vec<_>) = all.partition(|(_, used)| *used);
    let busy = |s: &crate::dispatch::metrics::DestSnapshot| s.in_flight > 0 || s.queued > 0;
    active
        .into_iter()
        .chain(removed.into_iter().filter(|((s, _), _)| busy(s)))
        .map(|((s, c), used)| {
            let paused_ms = s.paused_until.saturating_sub(now) / 1_000_000;
            json!({
                "uri": s.uri,
                "removed": !used,
                "in_flight": s.in_flight,
                "permits": s.permits,
                "max_in_flight": c.max_in_flight,
                "adaptive": c.adaptive.is_some(),
                "queued": s.queued,
                "circuit": match s.circuit {
                    CircuitState::Closed => "closed",
                    CircuitState::Open => "open",
                    CircuitState::HalfOpen => "half_open",
                },
                "paused": paused_ms > 0,
                "paused_for_ms": paused_ms,
                "rate": c.rate.map(|r| json!({"per_sec": r.per_sec, "burst": r.burst})),
                "delivered_total": s.delivered,
                "retryable_total": s.retryable,
                "permanent_total": s.permanent,
                "tls_error_total": s.tls_error,
            })
        })
        .collect()
}
