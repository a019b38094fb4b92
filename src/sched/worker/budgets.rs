//! Shared `/metrics` scrapes: a scrape queues a `Slot::Deferred` ([`Core::defer_scrape`]);
//! before the loop sleeps, [`Worker::finish_scrapes`] gets one rendering for every scrape read in
//! the turn ([`crate::metrics::shared`]) and queues it on each connection by reference. The
//! connections' own budgets (the body gate, the pipelining bounds, the accept retry at the fd
//! limit) are `net::server`'s.

use super::serve::Core;
use super::*;
use crate::net::conn::Slot;
use crate::net::server::Ctx;

impl Core<'_> {
    /// `GET /metrics`: a placeholder answered by [`Worker::finish_scrapes`].
    pub(super) fn defer_scrape(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        keep_alive: bool,
        head_only: bool,
    ) {
        let charge = self.shared.scrapes().last_len();
        let idx = cx.idx;
        let Some(conn) = cx.conn() else {
            return;
        };
        conn.push(Slot::Deferred {
            keep_alive,
            head_only,
            charge,
            ticket: 0,
        });
        if !keep_alive {
            conn.closing = true;
        }
        self.edge.scrapes_read_at = self.edge.scrapes_read_at.max(conn.read_at);
        if self.edge.scrapes.last() != Some(&idx) {
            self.edge.scrapes.push(idx);
        }
    }
}

impl Worker {
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
        let (server, mut net, mut serve) = self.split();
        server.answer(&mut net, &mut serve, |_, mut answers| {
            let text = "text/plain; version=0.0.4";
            for &idx in &waiting {
                answers.fill_shared(idx, 0, Route::Metrics, text, &body);
            }
        });
    }

    /// The poll timeout, shortened for a pending accept retry or deferred scrapes.
    pub(super) fn edge_timeout(&self, timeout: Duration, now: u64) -> Duration {
        if self.scrapes_pending() {
            return Duration::ZERO;
        }
        self.server.accept_timeout(timeout, now)
    }
}
