//! The connection deadlines, checked on the sweep (every `SWEEP_EVERY`): a client that stops
//! reading its responses (`body_timeout`), a head or a body that does not arrive in time
//! (`header_timeout`, `body_timeout`: `408` and close), an idle keep-alive connection
//! (`idle_timeout`: a half-close), a lingering one past `LINGER`, and during the drain a
//! silent one (`drain.rs`). Which deadline passed is `net::conns::Timeouts`' decision; what
//! follows (a `408`, a half-close, a close) is decided here.

use super::*;
use crate::net::conns::{Expired, Timeouts};

impl Worker {
    pub(super) fn sweep(&mut self, now: u64) {
        self.reactor.sweep();
        let body = self.shared.ingest().body_budget.in_use();
        self.trimmer.sweep(self.conns.open(), body, now);
        let cfg = &self.shared.config.server;
        let timeouts = Timeouts::new(cfg.header_timeout, cfg.body_timeout, cfg.idle_timeout);
        // Idle connections are ended only once no client has sent anything for a while
        // (`drain::node_quiet`).
        let draining = self
            .draining_since
            .is_some_and(|since| drain::node_quiet(&self.shared, now, since));
        for idx in 0..self.conns.slots() {
            let Some(conn) = self.conns.get(idx) else {
                continue;
            };
            let expired = timeouts.check_conn(conn, now);
            let age = now.saturating_sub(conn.phase_since);
            // The drain ends a silent connection by half-closing it (`drain.rs`).
            let silent = matches!(conn.phase, Phase::Idle | Phase::Head);
            if expired != Some(Expired::Write) && silent && drain::may_end(conn, draining, age) {
                self.linger(idx, now);
                continue;
            }
            match expired {
                Some(Expired::Write) => {
                    // The client stopped reading its responses.
                    self.metrics.incr_timeout(TimeoutKind::Write);
                    self.close(idx);
                }
                Some(Expired::Header) => {
                    self.metrics.incr_timeout(TimeoutKind::Header);
                    self.timeout_408(idx);
                }
                Some(Expired::Body) => {
                    self.metrics.incr_timeout(TimeoutKind::Body);
                    self.timeout_408(idx);
                }
                Some(Expired::Linger) => self.close(idx),
                Some(Expired::Idle) => {
                    self.metrics.incr_timeout(TimeoutKind::Idle);
                    // A half-close: a request that crossed our FIN is dropped, not reset.
                    self.linger(idx, now);
                }
                None => {}
            }
        }
    }

    pub(super) fn timeout_408(&mut self, idx: usize) {
        if let Some(conn) = self.conns.get_mut(idx) {
            if conn.closing {
                return self.close(idx);
            }
            conn.reader = http::RequestReader::new(self.limits.clone()).with_body_gate();
            conn.body.release();
            conn.rbuf.clear();
        }
        self.push_ready(
            idx,
            Route::Unmatched,
            408,
            &[("Content-Type", http::TEXT_PLAIN)],
            b"request timeout\n",
            false,
            false,
        );
        self.flush(idx);
    }
}
