//! The sweep of a core's connections ([`Worker::sweep`]), the drain of them, and how a
//! connection ends without a reset.
//!
//! Once accepting stops (SIGTERM/SIGINT plus `drain_grace`) the core stops its listener from
//! taking new handshakes (`net::listen::stop_admitting`: new SYNs are dropped) and keeps
//! accepting for [`HANDSHAKE_SETTLE`], so that handshakes the kernel was completing at that
//! moment (a proxy counts the connection as open at the SYN-ACK and may have sent its request
//! already) end up in the accept queue and are served; then it takes what is queued and only
//! then closes the listener: a connection still queued, or still in its handshake, would
//! otherwise be reset with the request a proxy already sent on it. Requests
//! that arrive on open connections are still answered (`Connection: close`, README
//! "Draining behind a load balancer") and their connections half-closed after the answer.
//!
//! A connection between requests is ended by a half-close (`net::server::Server::linger`; the
//! mechanism is `net::conn`'s): FIN, then its input is read and dropped until the client closes, within
//! [`crate::net::conn::LINGER`] and [`crate::net::conn::LINGER_MAX_BYTES`]. Not at once: a
//! proxy reuses the connection it got back last first (nginx's keep-alive cache is a stack),
//! so a connection that has just answered is the one a request is most likely crossing our
//! FIN on. It is ended once it has been silent for [`DRAIN_IDLE`] (checked on the sweep,
//! every 100 ms) and no client has sent a byte to any core of the node for as long
//! ([`node_quiet`]); a request that comes first is answered, with `Connection: close`. The
//! second condition is for the drain itself: every answer now closes its connection, so the
//! proxy takes the connections below on its stack one after another, the idle ones last. A
//! connection that is idle only because the ones above it were busy is about to be taken,
//! and a FIN on it then crosses the request (seen with nginx: a FIN 205 ms into the silence,
//! the request 123 µs later, a `502`). While the proxy is still sending it is left to carry
//! its one more request; once nothing arrives anywhere, the proxy is not about to use it. A
//! connection accepted but still silent is treated the same way (a proxy sends its request
//! right after connecting). The worker exits when no connection is left (or at
//! `shutdown_timeout`).

use std::time::Duration;

use super::Worker;
use crate::net::server::DRAIN_IDLE;
use crate::sched::state::Shared;

/// How long a listener that stopped admitting keeps accepting before it closes: time for the
/// handshakes under way when it stopped to finish (a round trip; a proxy is near its upstream).
pub(super) const HANDSHAKE_SETTLE: Duration = Duration::from_millis(200);

/// True once no core has read a client's bytes for [`DRAIN_IDLE`], counted from the later of
/// the last such read and `since` (when this core's drain began: what came before it is not
/// recorded): the drain ends idle connections only then (module docs;
/// `net::server::may_end` is the per-connection half).
pub(super) fn node_quiet(shared: &Shared, now: u64, since: u64) -> bool {
    let last = shared.drain_input_at().max(since);
    now.saturating_sub(last) >= DRAIN_IDLE.as_nanos() as u64
}

impl Worker {
    /// The sweep (every `SWEEP_EVERY`): the reactor's own housekeeping, the allocator trim, and
    /// the connection deadlines, which are `net::server::Server::sweep`'s; the worker only says
    /// whether the drain may end silent connections yet (`drain::node_quiet`).
    pub(super) fn sweep(&mut self, now: u64) {
        self.reactor.sweep();
        let body = self.shared.ingest().body_budget.in_use();
        self.trimmer.sweep(self.server.conns().open(), body, now);
        let drain_quiet =
            (self.draining_since).is_some_and(|since| node_quiet(&self.shared, now, since));
        let (server, mut net, mut core) = self.split();
        server.sweep(&mut net, &mut core, now, drain_quiet);
    }

    /// One step of the drain. Returns true when the worker may exit.
    pub(super) fn drain_step(&mut self, now: u64) -> bool {
        if self.draining_since.is_none() {
            self.draining_since = Some(now);
            // No new handshake starts; those under way complete and are accepted as usual
            // until the listener closes below (`net::listen::stop_admitting`).
            if let Some(l) = self.server.listener() {
                if let Err(e) = crate::net::listen::stop_admitting(l) {
                    eprintln!("sluice: worker {}: filtering the listener: {e}", self.id);
                }
            }
            let (server, mut net, mut core) = self.split();
            server.accept_all(&mut net, &mut core);
            // Idle connections are half-closed by the sweep, once the node has been quiet for
            // `DRAIN_IDLE` counted from now (`node_quiet`).
        }
        let started = self.draining_since.unwrap_or(now);
        if self.server.listener().is_some()
            && now.saturating_sub(started) >= HANDSHAKE_SETTLE.as_nanos() as u64
        {
            // What the kernel completed is taken before the listener closes.
            let (server, mut net, mut core) = self.split();
            server.accept_all(&mut net, &mut core);
            self.server.close_listener(self.reactor.registry());
        }
        let limit = self.shared.config.server.shutdown_timeout.as_nanos() as u64;
        // On io_uring, closed connections may still be sending their last response.
        let sending = self.reactor.closing_sends();
        let quiet = self.server.listener().is_none()
            && self.server.conns().open() == 0
            && sending == 0
            && self.front.in_flight() == 0
            && self.dispatcher.in_flight() == 0;
        if quiet && !std::mem::replace(&mut self.reported_quiet, true) {
            self.links.report_quiet();
        }
        // Outcomes of other cores' deliveries may still arrive until every core is quiet; then
        // the last records are made durable before the core stops.
        let done = quiet && self.links.all_quiet() && self.settled();
        done || now.saturating_sub(started) > limit
    }
}
