//! `GET /api/v1/events/{id}[?body=1]`: one event's status and attempts, online.
//!
//! **From the files, on the serving core, bounded.** The lookup is `wal::events::show_bounded`
//! over the node's data dir — read-only maps, no lock the writer takes — done on the core that
//! serves the request: a binary search over each log's segments on their first event ids
//! (`O(log segments)` maps and one record each), a scan of one segment up to the event, then at
//! most [`MAX_RECORDS_AFTER`] records past it in search of its outcome; a `Done` entry further
//! than that answers with what was read and `"outcome_search": "bounded"` (the offline
//! `sluice events show` has no bound). So a lookup costs the serving core a few milliseconds at
//! most (the bound's records decoded), and only for callers allowed to see `/api/v1/state`.
//!
//! **Status** is the log's: `pending`, `retrying` (with `next_attempt_at`), `delivered`,
//! `dead_lettered` and `skipped` (with `reason`), `no_handler`; an event the log says is
//! pending is `in_flight` or `held` when its pump's last published live states
//! (`dispatch::ledger::LiveState`, at most 100 ms old) say so. The gate that holds it is not
//! named yet (the dispatcher knows it, the pump does not).
//!
//! **Access**: as `/api/v1/state` (`server.ui`); the body (`?body=1`) only with
//! `Authorization: Bearer <SLUICE_ADMIN_TOKEN>`, whatever `server.ui` says (`403` otherwise).
#![forbid(unsafe_code)]

use crate::config::ui::UiMode;
use crate::dispatch::ledger::LiveState;
use crate::ops::dashboard::Answer;
use crate::ops::view::OpsView;
use crate::wal::events::{report_json, show_bounded, Fate, ShowError};

/// Records read past the event in search of its outcome, at most.
pub const MAX_RECORDS_AFTER: u64 = 20_000;

fn refused(status: u16, reason: &str) -> Answer {
    let body = serde_json::json!({ "status": "refused", "reason": reason });
    Answer::json(status, body.to_string().into_bytes())
}

/// Whether `query` asks for the body (`body=1`).
fn wants_body(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|kv| kv == "body=1"))
}

/// Answers `GET /api/v1/events/{id}`: the request's path, query and `Authorization` header.
pub fn answer(
    node: &OpsView<'_>,
    path: &str,
    query: Option<&str>,
    authorization: Option<&[u8]>,
) -> Answer {
    let config = node.config;
    let admin = config
        .admin_token
        .as_ref()
        .is_some_and(|t| crate::ingest::verify::bearer_matches(t, authorization));
    match config.server.ui {
        UiMode::Off => return Answer::json(404, br#"{"status":"not_found"}"#.to_vec()),
        UiMode::Token if !admin => return refused(401, "unauthorized"),
        _ => {}
    }
    let with_body = wants_body(query);
    if with_body && !admin {
        return refused(403, "body_needs_admin_token");
    }
    let id = path.strip_prefix("/api/v1/events/").unwrap_or_default();
    match show_bounded(&config.server.data_dir, id, MAX_RECORDS_AFTER) {
        Ok(report) => {
            let mut v = report_json(&report, with_body);
            // The log says pending: its pump's memory may say more.
            if report.fate == Fate::Pending {
                match node.dispatch.ledger.live_state(&report.log, report.lsn) {
                    Some(LiveState::InFlight) => v["status"] = "in_flight".into(),
                    Some(LiveState::Held) => v["status"] = "held".into(),
                    None => {}
                }
            }
            Answer::json(200, v.to_string().into_bytes())
        }
        Err(ShowError::BadId(_)) => refused(400, "bad_event_id"),
        Err(ShowError::NotFound { maybe_retired }) => {
            let body = serde_json::json!({ "status": "not_found", "maybe_retired": maybe_retired });
            Answer::json(404, body.to_string().into_bytes())
        }
        Err(ShowError::Wal(e)) => {
            let body = serde_json::json!({ "status": "error", "error": e.to_string() });
            Answer::json(500, body.to_string().into_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_body_1_asks_for_the_body() {
        assert!(wants_body(Some("body=1")));
        assert!(wants_body(Some("x=2&body=1")));
        for q in [
            None,
            Some(""),
            Some("body=0"),
            Some("body=10"),
            Some("nobody=1"),
        ] {
            assert!(!wants_body(q), "{q:?}");
        }
    }
}
