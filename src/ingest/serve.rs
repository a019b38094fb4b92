//! The core's handler of the requests its server frames (`net::server::Handler`), owned by
//! ingest: [`Serve`] routes each request, runs an ingest request through the core's
//! [`Front`] and decides the body gate with the pipeline; every other route (ops, admin, DLQ
//! replays) goes to the core around it, [`Rest::other`]. The core provides, through [`Rest`],
//! what ingest cannot name: the generation it routes by (a reload is followed before each
//! request), the node's shared state, the staging of appends ([`Stage`]: the core's commit batch, which the front pushes into itself) and the drain.
//!
//! Generic over the core (monomorphised): no dynamic dispatch on the request path.

use std::sync::Arc;

use crate::ingest::front::{Env, Front};
use crate::ingest::pending::PendingIngest;
use crate::ingest::pipeline::{Arrival, Node, Now};
use crate::ingest::router::{RouteMatch, Router};
use crate::ingest::stage::Stage;
use crate::metrics::Route;
use crate::net::http::RequestHead;
use crate::net::server::{Ctx, Handler};

/// What the core around the ingest front provides to [`Serve`].
pub trait Rest {
    /// The core's stage for appends (its group commit).
    type Stage<'s>: Stage
    where
        Self: 's;
    /// Before a request is routed: the core switches to the newest published generation.
    fn follow_reload(&mut self);
    /// The router of the generation the core runs.
    fn router(&self) -> &Arc<Router>;
    /// The core's front, the node it reads and the stage, side by side.
    fn parts(&mut self) -> (&mut Front, Node<'_>, Self::Stage<'_>);
    /// A request for any route but ingest, answered through `cx`.
    fn other(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        route: RouteMatch<'_>,
        head: &RequestHead,
        keep_alive: bool,
    );
    /// The loop turn's clock reading (nanos): admission decisions use it.
    fn turn_now(&self) -> u64;
    /// The node is draining (every answer closes its connection).
    fn draining(&self) -> bool;
    /// A client's bytes arrived at `at` while draining.
    fn note_input(&mut self, at: u64);
}

/// The ingest handler over the core `R` (module docs).
#[derive(Debug)]
pub struct Serve<R>(pub R);

impl<R: Rest> Serve<R> {
    /// The refused body's route, from the head waiting in the connection's reader.
    fn pending_route(&self, cx: &mut Ctx<'_, PendingIngest>) -> Route {
        let router = self.0.router();
        match cx.conn().and_then(|c| c.reader.pending_head()) {
            Some(head) => match router.route(head.method.as_str(), head.path()) {
                RouteMatch::Ingest { .. } => Route::Webhook,
                RouteMatch::Admin(_) => Route::Admin,
                _ => Route::Unmatched,
            },
            None => Route::Unmatched,
        }
    }
}

impl<R: Rest> Handler<PendingIngest> for Serve<R> {
    fn on_request(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        head: &RequestHead,
        body: Vec<u8>,
        keep_alive: bool,
    ) {
        // A reload's answer is a barrier: a request sent after it is routed by the new
        // generation, even on a core that was mid-turn when it was published.
        self.0.follow_reload();
        let router = self.0.router().clone();
        let (trigger_id, source) = match router.route(head.method.as_str(), head.path()) {
            RouteMatch::Ingest { trigger_id, source } => (trigger_id, source),
            other => return self.0.other(cx, other, head, keep_alive),
        };
        // The loop turn's clock reading (one `Instant::now()` per turn, not per request).
        let now = Now::wall(self.0.turn_now());
        let arrival = Arrival {
            head,
            body,
            trigger_id,
            source,
        };
        let (front, node, mut stage) = self.0.parts();
        let env = Env {
            node,
            metrics: cx.metrics,
            date: cx.date,
        };
        front.ingest(cx.conns, cx.idx, arrival, keep_alive, now, &mut stage, &env);
    }

    /// The ingest pipeline's body gate on the connection's share
    /// ([`crate::ingest::pipeline::Pipeline::gate_body`]); refused: `503 body_budget` under
    /// the head's route.
    fn gate_body(&mut self, cx: &mut Ctx<'_, PendingIngest>, want: u64) -> bool {
        let router = self.0.router().clone();
        let metrics = cx.metrics;
        let Some(conn) = cx.conns.get_mut(cx.idx) else {
            return false;
        };
        let (front, node, _) = self.0.parts();
        let mut pipeline = front.pipeline(node, metrics);
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
        let (_, node, _) = self.0.parts();
        let env = Env {
            node,
            metrics,
            date: cx.date,
        };
        crate::ingest::front::respond(cx.conns, cx.idx, route, refused, false, &env);
        false
    }

    fn on_close(&mut self, pending: &PendingIngest) {
        let (front, node, mut stage) = self.0.parts();
        front.on_close(pending, &mut stage, &node);
    }

    fn draining(&self) -> bool {
        self.0.draining()
    }

    fn note_input(&mut self, at: u64) {
        self.0.note_input(at);
    }
}
