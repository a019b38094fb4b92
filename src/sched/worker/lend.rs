//! The loop's one lending function: the worker's parts borrowed side by side for one call of
//! its server — the server, what the server uses of the core (`net::server::Net`), and the
//! core's handler side (`sched::handler::Core` inside `ingest::serve::Serve`). Every step of
//! the loop that reaches the handler side goes through [`Worker::split`].

use super::Worker;
use crate::ingest::pending::PendingIngest;
use crate::ingest::serve::Serve;
use crate::net::server::{Net, Server};
use crate::sched::handler::Core;

impl Worker {
    /// The server, what its calls use of the core, and the handler, borrowed side by side.
    pub(super) fn split(&mut self) -> (&mut Server<PendingIngest>, Net<'_>, Serve<Core<'_>>) {
        let Worker {
            reactor,
            server,
            shared,
            metrics,
            front,
            committer,
            pump,
            dispatcher,
            replays,
            scrapes,
            view,
            turn_now,
            reads,
            ..
        } = self;
        let net = Net {
            reactor,
            metrics,
            clock: &*shared.clock,
        };
        let core = Core {
            shared,
            view,
            front,
            committer,
            replays,
            scrapes,
            pump,
            dispatcher,
            reads,
            turn_now: *turn_now,
        };
        (server, net, Serve(core))
    }

    /// A reload, at the top of a turn and before the turn's jobs are judged
    /// (`sched::handler::Core::follow_reload` says why there, and before each request).
    pub(super) fn follow_reload(&mut self) {
        self.split().2 .0.follow_reload();
    }
}
