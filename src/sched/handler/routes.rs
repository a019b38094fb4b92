//! The server's questions to the core (`ingest::serve::Rest` for [`Core`]): the reload to
//! follow before routing, the router, the node and the stage, the drain, and every route but
//! ingest, as `ops::routes` plans it.

use std::sync::Arc;

use super::lent::Core;
use super::stage::{self, CoreStage};
use crate::ingest::front::Front;
use crate::ingest::pending::PendingIngest;
use crate::ingest::pipeline::Node;
use crate::ingest::router::{OpsEndpoint, RouteMatch, Router};
use crate::ingest::serve::Rest;
use crate::metrics::Route;
use crate::net::http;
use crate::net::server::Ctx;
use crate::ops::routes::{self, Plan};
use crate::sched::state::Phase;

impl Rest for Core<'_> {
    type Stage<'s>
        = CoreStage<'s>
    where
        Self: 's;

    fn follow_reload(&mut self) {
        Core::follow_reload(self);
    }

    fn router(&self) -> &Arc<Router> {
        self.view.router()
    }

    fn parts(&mut self) -> (&mut Front, Node<'_>, CoreStage<'_>) {
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
            Plan::Read(ep) => self.defer_read(cx, ep, head, keep_alive, head_only),
            Plan::Page => {
                let view = self.shared.ops_view();
                let a = crate::ops::dashboard::answer(&view, OpsEndpoint::Ui, auth);
                let h = a.headers();
                cx.respond(Route::Ui, a.status, &h, &a.body, keep_alive, head_only)
            }
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
                let body = body.as_bytes();
                cx.respond(Route::Admin, status, &json, body, keep_alive, false)
            }
            // Handled by `ingest::serve::Serve` before it asks the core.
            Plan::Ingest => {}
        }
    }

    fn turn_now(&self) -> u64 {
        self.turn_now
    }

    fn draining(&self) -> bool {
        self.shared.phase() == Phase::Draining
    }

    fn note_input(&mut self, at: u64) {
        self.shared.note_drain_input(at);
    }
}
