//! The core around its ingest handler: the server's handler is `ingest::serve::Serve` (routing,
//! ingest through the core's front, the body gate); [`Core`] is what it asks the core for
//! (`ingest::serve::Rest`) — the reload to follow before routing, the node and the stage, the
//! drain — and answers every route but ingest as `ops::routes` plans it (the DLQ's admin routes
//! through `replay.rs`, reads through `reads.rs`, scrapes through `budgets.rs`). [`Core`] borrows the worker's parts a request may touch, for one call of the
//! server ([`Worker::split`]).

use super::*;
use crate::ingest::pipeline::Node;
use crate::ingest::router::Router;
use crate::ingest::serve::{Rest, Serve};
use crate::net::server::{Ctx, Net, Server};
use crate::ops::routes::{self, Plan};

/// What a request may touch of the core, borrowed beside its server (module docs).
pub(super) struct Core<'a> {
    pub(super) shared: &'a Arc<Shared>,
    pub(super) view: &'a mut crate::ops::reload::CoreView,
    pub(super) front: &'a mut Front,
    pub(super) committer: &'a mut Committer,
    pub(super) replays: &'a mut crate::dispatch::dlq::online::OnlineReplays,
    pub(super) edge: &'a mut books::Edge,
    pub(super) pump: &'a mut CorePump,
    pub(super) dispatcher: &'a mut Dispatcher,
    pub(super) reads: &'a mut crate::sched::readers::ReadLink,
    /// The injected clock read once per loop turn (nanos): token-bucket decisions use it.
    pub(super) turn_now: u64,
}

/// A reload: the core switches to the newest published generation; the pump learns the new
/// trigger → destination map, the dispatcher the new destinations (limits, retry, timeouts,
/// gates). Called at the top of a turn, before each request is routed and before the turn's
/// jobs are judged (`Worker::follow_reload`).
pub(super) fn follow_reload(
    view: &mut crate::ops::reload::CoreView,
    shared: &Shared,
    pump: &mut CorePump,
    dispatcher: &mut Dispatcher,
    now: u64,
) {
    if let Some(next) = view.pick_up(shared.reload()) {
        let draining = shared.accepting_stopped(now);
        let config = &next.value.config;
        let spec = Arc::new(config.dispatch_spec());
        pump.learn_routes(&spec);
        dispatcher.reconfigure(spec, now, draining);
    }
}

impl Worker {
    /// A reload: this core switches to the newest published generation here, at the top of a
    /// turn and again before each request is routed (`serve.rs`). The second check (one
    /// `Acquire` load) makes a reload's answer a barrier: a request sent after `POST
    /// /admin/reload` answered, or after `sluice_config_generation` showed the new number, is
    /// routed by it, even on a core that was mid-turn when the reload was published.
    pub(super) fn follow_reload(&mut self) {
        let (view, shared) = (&mut self.view, &self.shared);
        let (pump, dispatcher) = (&mut self.pump, &mut self.dispatcher);
        follow_reload(view, shared, pump, dispatcher, self.turn_now);
    }

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
            edge,
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
            edge,
            pump,
            dispatcher,
            reads,
            turn_now: *turn_now,
        };
        (server, net, Serve(core))
    }
}

impl Rest for Core<'_> {
    type Stage<'s>
        = stage::CoreStage<'s>
    where
        Self: 's;

    fn follow_reload(&mut self) {
        follow_reload(
            self.view,
            self.shared,
            self.pump,
            self.dispatcher,
            self.turn_now,
        );
    }

    fn router(&self) -> &Arc<Router> {
        self.view.router()
    }

    fn parts(&mut self) -> (&mut Front, Node<'_>, stage::CoreStage<'_>) {
        let stage = stage::core_stage(&mut *self.committer, &mut *self.replays, None);
        (&mut *self.front, stage::node(self.shared, self.view), stage)
    }

    /// Ops, admin and the answers of the router itself, as `ops::routes` plans them.
    fn other(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        route: RouteMatch<'_>,
        head: &http::RequestHead,
        keep_alive: bool,
    ) {
        let head_only = head.method.as_str() == "HEAD";
        let auth = head.header("authorization");
        let token = self.shared.config.admin_token.as_ref();
        let shared = self.shared;
        match routes::plan(route, head.path(), auth, token, || {
            shared.not_ready_reason()
        }) {
            Plan::Answer(a) => {
                let body = &a.body[..];
                cx.respond(a.route, a.status, &a.headers, body, keep_alive, head_only)
            }
            // Log scans and state renderings run on the readers (`reads.rs`).
            Plan::Read(ep) => self.defer_read(cx, ep, head, keep_alive, head_only),
            Plan::Page => {
                let view = self.shared.ops_view();
                let a = crate::ops::dashboard::answer(&view, OpsEndpoint::Ui, auth);
                let h = a.headers();
                cx.respond(Route::Ui, a.status, &h, &a.body, keep_alive, head_only)
            }
            // Rendered once for every scrape of this loop turn (`budgets.rs`).
            Plan::Scrape => self.defer_scrape(cx, keep_alive, head_only),
            Plan::ReplayOne(id) => self.replay_dead_letter(cx, id, keep_alive),
            Plan::BulkReplay => self.bulk_replay(cx, head, keep_alive),
            Plan::Discard(id) => {
                let (replays, mut port) = self.replays();
                let reply = replays.discard(&shared.dispatch().dlq, id, &mut port);
                self.answer_admin(cx, reply, keep_alive)
            }
            Plan::Reload => {
                let (status, body) = crate::ops::reload::admin_answer(self.shared.reload());
                let json = [("Content-Type", "application/json")];
                cx.respond(
                    Route::Admin,
                    status,
                    &json,
                    body.as_bytes(),
                    keep_alive,
                    false,
                )
            }
            // Handled by `ingest::serve::Serve` before it asks the core.
            Plan::Ingest => {}
        }
    }

    fn turn_now(&self) -> u64 {
        self.turn_now
    }

    fn draining(&self) -> bool {
        self.shared.phase() == Lifecycle::Draining
    }

    fn note_input(&mut self, at: u64) {
        self.shared.note_drain_input(at);
    }
}
