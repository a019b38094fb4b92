//! The memory budgets of a worker's connections, and the accept retry at the fd limit.
//!
//! - **In-flight bodies.** The reader stops after every head with a body (its body gate); the
//!   connection's share of the process-wide budget ([`crate::net::budget`]) then grows to the
//!   declared `Content-Length` ([`Worker::admit_body`]), or, for a chunked body, to what its
//!   buffer has grown to after each read ([`Worker::charge_body`]); the decision is the ingest
//!   pipeline's ([`Pipeline::gate_body`]). A body the budget cannot cover is answered `503 body_budget` + `Retry-After` at once, unread, and the connection
//!   closes (after the usual linger, which discards input). The share is released when the
//!   request is complete, and by its `Drop` when the connection goes.
//! - **Queued responses.** `read_and_handle` stops reading a connection whose queued
//!   responses reach `max_pipeline_depth` slots or `max_queued_response_bytes` bytes
//!   ([`Worker::read_paused`]).
//! - **Shared `/metrics`.** A scrape queues a [`Slot::Deferred`]; before the loop sleeps,
//!   [`Worker::finish_scrapes`] gets one rendering for every scrape read in the turn
//!   ([`crate::metrics::shared`]) and queues it on each connection by reference.
//! - **Accept at the fd limit.** With an edge-triggered listener, a failed `accept` (EMFILE,
//!   ENFILE, ENOBUFS, ENOMEM) would not be retried until another connection arrives; the
//!   worker retries every [`ACCEPT_RETRY`] instead, while the limit lasts.

use super::*;
use crate::ingest::pipeline::{Pipeline, Response};
use crate::metrics::PauseBound;

/// How often `accept` is retried while the process is at its fd limit.
pub(super) const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// The `accept` errors that mean "out of descriptors or memory for now".
fn at_fd_limit(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

impl Worker {
    /// The body gate: reserves the declared body of the request whose head just arrived.
    /// Returns false (after queueing the 503 and closing the reader) if the budget refused.
    pub(super) fn admit_body(&mut self, idx: usize) -> bool {
        let Some(conn) = self.conns.get(idx) else {
            return false;
        };
        let want = conn.reader.declared_length().unwrap_or(0);
        self.gate_body(idx, want)
    }

    /// After a read into a chunked body: its buffer must stay covered by the budget.
    pub(super) fn charge_body(&mut self, idx: usize) -> bool {
        let Some(conn) = self.conns.get(idx) else {
            return false;
        };
        let want = conn.reader.body_capacity() as u64;
        self.gate_body(idx, want)
    }

    /// The pipeline's body gate on connection `idx`'s share ([`Pipeline::gate_body`]).
    fn gate_body(&mut self, idx: usize, want: u64) -> bool {
        let shared = Arc::clone(&self.shared);
        let router = self.view.router().clone();
        let Some(conn) = self.conns.get_mut(idx) else {
            return false;
        };
        let mut pipeline = Pipeline {
            node: crate::ingest::pipeline::Node {
                table: self.view.guards(),
                ..ingest::node(&shared)
            },
            sources: &mut self.sources,
            ids: &mut self.ids,
            metrics: &self.metrics,
        };
        let reader = &conn.reader;
        let source = || match reader.pending_head() {
            Some(head) => match router.route(head.method.as_str(), head.path()) {
                RouteMatch::Ingest { source, .. } => Some(source),
                _ => None,
            },
            None => None,
        };
        match pipeline.gate_body(&mut conn.body, want, source) {
            Ok(()) => true,
            Err(refused) => {
                self.refuse_body(idx, refused);
                false
            }
        }
    }

    /// `503 body_budget` (the pipeline's answer): counted per core; the body read so far is
    /// dropped and the connection closes after the answer.
    fn refuse_body(&mut self, idx: usize, refused: Response) {
        let Some(conn) = self.conns.get_mut(idx) else {
            return;
        };
        let route = match conn.reader.pending_head() {
            Some(head) => match self.view.router().route(head.method.as_str(), head.path()) {
                RouteMatch::Ingest { .. } => Route::Webhook,
                RouteMatch::Admin(_) => Route::Admin,
                _ => Route::Unmatched,
            },
            None => Route::Unmatched,
        };
        conn.reader = http::RequestReader::new(self.limits.clone()).with_body_gate();
        conn.body.release();
        conn.closing = true;
        self.metrics.incr_body_budget_refused();
        self.respond(idx, route, refused, false);
    }

    /// True (and counted) when `conn`'s queued responses reached a bound: stop reading it.
    pub(super) fn read_paused(&self, idx: usize) -> bool {
        let Some(conn) = self.conns.get(idx) else {
            return false;
        };
        let cfg = &self.shared.config.server;
        let bound = if conn.slots.len() >= cfg.max_pipeline_depth {
            PauseBound::PipelineDepth
        } else if conn.queued_bytes() >= cfg.max_queued_response_bytes {
            PauseBound::ResponseBytes
        } else {
            return false;
        };
        self.metrics.incr_read_paused(bound);
        true
    }

    /// `GET /metrics`: a placeholder answered by [`finish_scrapes`](Self::finish_scrapes).
    pub(super) fn defer_scrape(&mut self, idx: usize, keep_alive: bool, head_only: bool) {
        let Some(conn) = self.conns.get_mut(idx) else {
            return;
        };
        conn.push(Slot::Deferred {
            keep_alive,
            head_only,
            charge: self.shared.scrapes().last_len(),
        });
        if !keep_alive {
            conn.closing = true;
        }
        self.edge.scrapes_read_at = self.edge.scrapes_read_at.max(conn.read_at);
        if self.edge.scrapes.last() != Some(&idx) {
            self.edge.scrapes.push(idx);
        }
    }

    /// True while scrapes wait for their rendering (the loop must not sleep).
    pub(super) fn scrapes_pending(&self) -> bool {
        !self.edge.scrapes.is_empty()
    }

    /// Answers every deferred scrape with one shared rendering. Scrapes read while doing so
    /// (a connection read again after its answers were written) wait for the next call.
    pub(super) fn finish_scrapes(&mut self) {
        if self.edge.scrapes.is_empty() {
            return;
        }
        let waiting = std::mem::take(&mut self.edge.scrapes);
        let not_before = std::mem::take(&mut self.edge.scrapes_read_at);
        let now = self.now();
        let shared = Arc::clone(&self.shared);
        let body = shared.scrapes().get(not_before, now, || {
            crate::sched::exposition::render_metrics(&shared)
        });
        let mut headers: Vec<(&str, &str)> = vec![("Date", &self.date)];
        headers.push(("Content-Type", "text/plain; version=0.0.4"));
        for &idx in &waiting {
            let Some(conn) = self.conns.get_mut(idx) else {
                continue;
            };
            for pos in 0..conn.slots.len() {
                let Slot::Deferred {
                    keep_alive,
                    head_only,
                    ..
                } = conn.slots[pos]
                else {
                    continue;
                };
                let mut head = Vec::with_capacity(160);
                http::write_response(&mut head, 200, &headers, &body, keep_alive, true);
                let close = !keep_alive;
                let slot = if head_only {
                    Slot::Ready { bytes: head, close }
                } else {
                    let body = Arc::clone(&body);
                    Slot::Shared { head, body, close }
                };
                conn.fill_slot(pos, slot);
                self.metrics.incr_http(Route::Metrics, 200);
            }
        }
        for idx in waiting {
            self.drive(idx);
        }
    }

    /// An `accept` error: at the fd limit, retry on the timer; anything else waits for the
    /// next readiness event. Counted either way.
    pub(super) fn accept_failed(&mut self, e: &io::Error) {
        if !at_fd_limit(e) {
            self.metrics
                .incr_connections_refused(ConnRefusal::AcceptError);
            eprintln!("sluice: worker {}: accept failed: {e}", self.id);
            return;
        }
        self.metrics.incr_connections_refused(ConnRefusal::FdLimit);
        if !std::mem::replace(&mut self.edge.fd_limit_logged, true) {
            eprintln!(
                "sluice: worker {}: accept failed: {e}; retrying every {:?} while at the limit",
                self.id, ACCEPT_RETRY
            );
        }
        self.edge.accept_retry_at = Some(self.now() + ACCEPT_RETRY.as_nanos() as u64);
    }

    /// Called once per loop turn: retries `accept` when the fd-limit timer is due.
    pub(super) fn retry_accept(&mut self, now: u64) {
        if self.edge.accept_retry_at.is_some_and(|at| now >= at) {
            self.edge.accept_retry_at = None;
            self.accept_all();
            if self.edge.accept_retry_at.is_none() {
                self.edge.fd_limit_logged = false;
            }
        }
    }

    /// The poll timeout, shortened for a pending accept retry or deferred scrapes.
    pub(super) fn edge_timeout(&self, timeout: Duration, now: u64) -> Duration {
        if self.scrapes_pending() {
            return Duration::ZERO;
        }
        match self.edge.accept_retry_at {
            Some(at) => timeout.min(Duration::from_nanos(at.saturating_sub(now))),
            None => timeout,
        }
    }
}
