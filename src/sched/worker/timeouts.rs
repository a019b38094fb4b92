//! The sweep (every `SWEEP_EVERY`): the reactor's own housekeeping, the allocator trim, and
//! the connection deadlines, which are `net::server::Server::sweep`'s; the worker only says
//! whether the drain may end silent connections yet (`drain::node_quiet`).

use super::*;

impl Worker {
    pub(super) fn sweep(&mut self, now: u64) {
        self.reactor.sweep();
        let body = self.shared.ingest().body_budget.in_use();
        self.trimmer.sweep(self.server.conns().open(), body, now);
        // Idle connections are ended only once no client has sent anything for a while
        // (`drain::node_quiet`).
        let drain_quiet = self
            .draining_since
            .is_some_and(|since| drain::node_quiet(&self.shared, now, since));
        let (server, mut net, mut core) = self.split();
        server.sweep(&mut net, &mut core, now, drain_quiet);
    }
}
