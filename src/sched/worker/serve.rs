//! The core's handler of the requests its server frames (`net::server::Handler`): it routes
//! each request — ingest to the core's ingest front (`ingest::front`), ops and admin endpoints
//! to `ops.rs` and `replay.rs` — and decides the body gate. [`Core`] borrows the worker's
//! parts a request may touch, for one call of the server ([`Worker::split`]).

use super::*;
use crate::net::server::{Ctx, Handler, Net, Server};
use mio::Registry;

/// What a request may touch of the core, borrowed beside its server (module docs).
pub(super) struct Core<'a> {
    pub(super) shared: &'a Arc<Shared>,
    pub(super) view: &'a mut crate::ops::reload::CoreView,
    pub(super) front: &'a mut Front,
    pub(super) committer: &'a mut Committer,
    pub(super) replays: &'a mut books::Replays,
    pub(super) edge: &'a mut books::Edge,
    pub(super) pump: &'a mut CorePump,
    pub(super) dispatcher: &'a mut Dispatcher,
    pub(super) metrics: &'a CoreMetrics,
    /// The core's poll registry (a clone: the reactor is borrowed by the server call).
    pub(super) registry: &'a Registry,
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
    registry: &Registry,
    now: u64,
) {
    if let Some(next) = view.pick_up(&shared.reload) {
        let draining = shared.accepting_stopped(now);
        let config = &next.value.config;
        pump.learn_handlers(config);
        let spec = Arc::new(config.dispatch_spec());
        dispatcher.reconfigure(spec, now, registry, draining);
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
        follow_reload(
            view,
            shared,
            pump,
            dispatcher,
            &self.registry,
            self.turn_now,
        );
    }

    /// The server, what its calls use of the core, and the handler, borrowed side by side.
    pub(super) fn split(&mut self) -> (&mut Server<PendingIngest>, Net<'_>, Core<'_>) {
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
            registry,
            turn_now,
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
            metrics,
            registry,
            turn_now: *turn_now,
        };
        (server, net, core)
    }
}

impl Core<'_> {
    /// The refused body's route, from the head waiting in the connection's reader.
    fn pending_route(&self, cx: &mut Ctx<'_, PendingIngest>) -> Route {
        let router = self.view.router();
        match cx.conn().and_then(|c| c.reader.pending_head()) {
            Some(head) => match router.route(head.method.as_str(), head.path()) {
                RouteMatch::Ingest { .. } => Route::Webhook,
                RouteMatch::Admin(_) => Route::Admin,
                _ => Route::Unmatched,
            },
            None => Route::Unmatched,
        }
    }

    fn route_request(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        head: &http::RequestHead,
        body: Vec<u8>,
        keep_alive: bool,
    ) {
        let head_only = head.method.as_str() == "HEAD";
        follow_reload(
            self.view,
            self.shared,
            self.pump,
            self.dispatcher,
            self.registry,
            self.turn_now,
        );
        let router = self.view.router().clone();
        let text = http::TEXT_PLAIN;
        match router.route(head.method.as_str(), head.path()) {
            RouteMatch::Ops(ep @ (OpsEndpoint::Ui | OpsEndpoint::State)) => {
                let auth = head.header("authorization");
                let a = crate::ops::dashboard::answer(self.shared, ep, auth);
                let h = a.headers();
                cx.respond(Route::Ui, a.status, &h, &a.body, keep_alive, head_only)
            }
            RouteMatch::Ops(ep) => self.handle_ops(cx, ep, keep_alive, head_only),
            RouteMatch::Admin(route) => self.handle_admin(cx, route, head, keep_alive, head_only),
            RouteMatch::MethodNotAllowed(allow) => cx.respond(
                Route::Unmatched,
                405,
                &[("Allow", allow), ("Content-Type", text)],
                b"method not allowed\n",
                keep_alive,
                head_only,
            ),
            RouteMatch::BadSource => cx.respond(
                Route::Webhook,
                400,
                &[("Content-Type", text)],
                b"invalid source: must match [A-Za-z0-9._-]{1,64}\n",
                keep_alive,
                head_only,
            ),
            RouteMatch::NotFound => cx.respond(
                Route::Unmatched,
                404,
                &[("Content-Type", text)],
                b"not found\n",
                keep_alive,
                head_only,
            ),
            RouteMatch::Ingest { trigger_id, source } => {
                // The loop turn's clock reading (one `Instant::now()` per turn, not per request).
                let now = Now::wall(self.turn_now);
                let arrival = Arrival {
                    head,
                    body,
                    trigger_id,
                    source,
                };
                let idx = cx.idx;
                let (front, conns, mut stage, env) = self.ingest_parts(cx, None);
                front.ingest(conns, idx, arrival, keep_alive, now, &mut stage, &env);
            }
        }
    }
}

impl Handler<PendingIngest> for Core<'_> {
    fn on_request(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        head: &http::RequestHead,
        body: Vec<u8>,
        keep_alive: bool,
    ) {
        self.route_request(cx, head, body, keep_alive);
    }

    /// The ingest pipeline's body gate on the connection's share
    /// ([`crate::ingest::pipeline::Pipeline::gate_body`]); refused: `503 body_budget` under
    /// the head's route.
    fn gate_body(&mut self, cx: &mut Ctx<'_, PendingIngest>, want: u64) -> bool {
        let (router, idx) = (self.view.router().clone(), cx.idx);
        let (front, conns, _, env) = self.ingest_parts(cx, None);
        let Some(conn) = conns.get_mut(idx) else {
            return false;
        };
        let mut pipeline = front.pipeline(env.node, env.metrics);
        let reader = &conn.reader;
        let source = || match reader.pending_head() {
            Some(head) => match router.route(head.method.as_str(), head.path()) {
                RouteMatch::Ingest { source, .. } => Some(source),
                _ => None,
            },
            None => None,
        };
        let Err(refused) = pipeline.gate_body(&mut conn.body, want, source) else {
            return true;
        };
        let route = self.pending_route(cx);
        self.respond(cx, route, refused, false);
        false
    }

    fn on_close(&mut self, pending: &PendingIngest) {
        // Fields side by side (the node reads `view` while the stage holds the commit batch).
        let mut stage = stage::CoreStage {
            committer: &mut *self.committer,
            single: &mut self.replays.single,
            claim: None,
            dlq: &self.shared.dlq,
        };
        let env = Env {
            node: stage::node(self.shared, self.view),
            metrics: self.metrics,
            date: "",
        };
        self.front.on_close(pending, &mut stage, &env);
    }

    fn draining(&self) -> bool {
        self.shared.phase() == Lifecycle::Draining
    }

    fn note_input(&mut self, at: u64) {
        self.shared.note_drain_input(at);
    }
}
