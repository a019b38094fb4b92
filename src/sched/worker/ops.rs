//! The operational and admin endpoints a core answers itself: `/healthz`, `/readyz`, `/metrics`
//! (rendered once per loop turn for all scrapes, `budgets.rs`) and `/admin/…` behind the bearer
//! token; the DLQ's replay and discard routes are `replay.rs`'s (`dispatch::dlq::online`).

use super::serve::Core;
use super::*;
use crate::net::server::Ctx;

impl Core<'_> {
    pub(super) fn handle_ops(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        ep: OpsEndpoint,
        keep_alive: bool,
        head_only: bool,
    ) {
        let text = [("Content-Type", http::TEXT_PLAIN)];
        match ep {
            OpsEndpoint::Healthz => {
                cx.respond(Route::Healthz, 200, &text, b"ok\n", keep_alive, head_only)
            }
            OpsEndpoint::Readyz => match self.shared.not_ready_reason() {
                None => cx.respond(Route::Readyz, 200, &text, b"ready\n", keep_alive, head_only),
                Some(reason) => {
                    let body = format!("{reason}\n");
                    cx.respond(
                        Route::Readyz,
                        503,
                        &text,
                        body.as_bytes(),
                        keep_alive,
                        head_only,
                    )
                }
            },
            // Rendered once for every scrape of this loop turn (`budgets.rs`).
            OpsEndpoint::Metrics => self.defer_scrape(cx, keep_alive, head_only),
            // Answered in `serve.rs` (the page) and by the readers (`reads.rs`).
            OpsEndpoint::Ui
            | OpsEndpoint::State
            | OpsEndpoint::Ledger
            | OpsEndpoint::Event
            | OpsEndpoint::Events => {}
        }
    }

    /// `/admin/…`: the bearer token first (`401` for any path without it), then the route.
    pub(super) fn handle_admin(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        route: AdminRoute,
        head: &http::RequestHead,
        keep_alive: bool,
        head_only: bool,
    ) {
        let authorized = self
            .shared
            .config
            .admin_token
            .as_ref()
            .is_some_and(|t| verify::bearer_matches(t, head.header("authorization")));
        let json = ("Content-Type", "application/json");
        let (status, extra, body): (u16, Option<(&str, &str)>, &[u8]) = match route {
            _ if !authorized => (
                401,
                Some(("WWW-Authenticate", "Bearer")),
                br#"{"status":"refused","reason":"unauthorized"}"#,
            ),
            AdminRoute::Ping => (200, None, br#"{"status":"ok"}"#),
            AdminRoute::DlqReplay => {
                let id = crate::ingest::router::dlq_replay_id(head.path())
                    .unwrap_or("")
                    .to_string();
                return self.replay_dead_letter(cx, &id, keep_alive);
            }
            AdminRoute::DlqBulkReplay => return self.bulk_replay(cx, head, keep_alive),
            AdminRoute::DlqDiscard => {
                let id = crate::ingest::router::dlq_discard_id(head.path()).unwrap_or("");
                let shared = self.shared;
                let (replays, mut port) = self.replays();
                let reply = replays.discard(&shared.dispatch().dlq, id, &mut port);
                return self.answer_admin(cx, reply, keep_alive);
            }
            AdminRoute::Reload => {
                let (status, body) = crate::ops::reload::admin_answer(self.shared.reload());
                let b = body.as_bytes();
                return cx.respond(Route::Admin, status, &[json], b, keep_alive, false);
            }
            AdminRoute::MethodNotAllowed(allow) => (405, Some(("Allow", allow)), b"{}"),
            AdminRoute::NotFound => (404, None, br#"{"status":"not_found"}"#),
        };
        let mut headers = vec![json];
        headers.extend(extra);
        cx.respond(Route::Admin, status, &headers, body, keep_alive, head_only);
    }
}
