//! The connection deadlines, checked on the sweep (every `SWEEP_EVERY`): a client that stops
//! reading its responses (`body_timeout`), a head or a body that does not arrive in time
//! (`header_timeout`, `body_timeout`: `408` and close), an idle keep-alive connection
//! (`idle_timeout`: a half-close), a lingering one past `LINGER`, and during the drain a
//! silent one (`drain.rs`).

use super::*;

impl Worker {
    pub(super) fn sweep(&mut self, now: u64) {
        self.reactor.sweep();
        let body = self.shared.body_budget.in_use();
        self.trimmer.sweep(self.open, body, now);
        let cfg = &self.shared.config.server;
        let (head_t, body_t, idle_t) = (
            cfg.header_timeout.as_nanos() as u64,
            cfg.body_timeout.as_nanos() as u64,
            cfg.idle_timeout.as_nanos() as u64,
        );
        let draining = self.draining_since.is_some();
        for idx in 0..self.conns.len() {
            let Some(conn) = self.conns[idx].as_ref() else {
                continue;
            };
            if conn.unwritten() > 0 && now.saturating_sub(conn.write_since) > body_t {
                // The client stopped reading its responses.
                self.metrics.incr_timeout(TimeoutKind::Write);
                self.close(idx);
                continue;
            }
            let age = now.saturating_sub(conn.phase_since);
            match conn.phase {
                // The drain ends a silent connection by half-closing it (`drain.rs`).
                Phase::Idle | Phase::Head if drain::may_end(conn, draining, age) => {
                    self.linger(idx, now)
                }
                Phase::Head if age > head_t => {
                    self.metrics.incr_timeout(TimeoutKind::Header);
                    self.timeout_408(idx);
                }
                Phase::Body if age > body_t => {
                    self.metrics.incr_timeout(TimeoutKind::Body);
                    self.timeout_408(idx);
                }
                Phase::Linger if age > LINGER.as_nanos() as u64 => self.close(idx),
                Phase::Idle if age > idle_t => {
                    self.metrics.incr_timeout(TimeoutKind::Idle);
                    // A half-close: a request that crossed our FIN is dropped, not reset.
                    self.linger(idx, now);
                }
                _ => {}
            }
        }
    }

    pub(super) fn timeout_408(&mut self, idx: usize) {
        if let Some(conn) = self.conns.get_mut(idx).and_then(Option::as_mut) {
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
