//! The operational and admin endpoints a core answers itself: `/healthz`, `/readyz`, `/metrics`
//! (rendered once per loop turn for all scrapes, `budgets.rs`) and `/admin/…` behind the bearer
//! token; `POST /admin/dlq/{id}/discard` is here, the replays are `replay.rs`.

use super::serve::Core;
use super::*;
use crate::dispatch::dlq::claims::ClaimRefused;
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
                let (status, body) = self.discard_dead_letter(id);
                return cx.respond(
                    Route::Admin,
                    status,
                    &[json],
                    body.as_bytes(),
                    keep_alive,
                    false,
                );
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

    /// `POST /admin/dlq/{id}/discard`: the entry leaves the DLQ undelivered (an operator's
    /// skip; an `ordering` key stopped on it moves on, `dispatch::flow::ordering`). Claimed
    /// like a replay (a replay or discard of it on its way is `409 in_progress`), its removal
    /// goes with the core's next commit (`Item::Release`, on the commit helper, never on this
    /// loop) and the answer is `202` at once: a crash before that commit leaves the entry in
    /// the DLQ. `404` absent, `400` a malformed id, `503` when the claim set is full.
    pub(super) fn discard_dead_letter(&mut self, id: &str) -> (u16, String) {
        let refused = |status: u16, reason: &str| {
            (
                status,
                format!("{{\"status\":\"error\",\"reason\":\"{reason}\"}}"),
            )
        };
        let dlq = &self.shared.dispatch().dlq;
        if !crate::dispatch::dlq::valid_id(id) {
            return refused(400, "invalid_id");
        }
        let claim = match dlq.replays().claim(id) {
            Ok(c) => c,
            Err(ClaimRefused::InFlight) => return refused(409, "in_progress"),
            Err(ClaimRefused::Full) => return refused(503, "queue_full"),
        };
        // Claimed first, then looked up in the index (no file read): present and claimed, it
        // stays until its removal.
        if !dlq.is_live(id) {
            return refused(404, "not_found");
        }
        let ticket = self.replays.next_ticket();
        let mut port = self
            .committer
            .staging()
            .port(crate::sched::commit::Owner::Replay);
        port.release(ticket, id.to_owned());
        self.replays.releasing.insert(ticket, claim);
        // A valid id is 26 characters [0-9A-Z]: nothing to escape.
        (
            202,
            format!("{{\"status\":\"accepted\",\"discarding\":\"{id}\"}}"),
        )
    }
}
