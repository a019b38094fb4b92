//! `GET /api/v1/events/{id}[?body=1]`: one event's status and attempts, online; and
//! `GET /api/v1/events?…`: recent events, a page at a time ([`answer_list`]).
//!
//! **From the files, on a reader thread, bounded.** The lookup is `wal::events::show_indexed`
//! over the node's data dir — read-only maps, no lock the writer takes — done on the node's
//! reader thread (`sched::readers`), never on a core's loop: a binary search over each log's
//! segments on their first event ids (`O(log segments)` maps and one record each) and a
//! bisection inside one segment find the event; its status comes from the log's outcome index
//! (`wal::outcomes`, fed by the log's writer as outcomes commit: exact however late the outcome
//! landed), its attempts from the records the index names, at most [`MAX_RECORDS_AFTER`] of
//! them (past that the first ones and the last, with `"attempts_search": "bounded"`). A log
//! without a running index is read as the offline `sluice events show` reads it, the forward
//! scan bounded by [`MAX_RECORDS_AFTER`] (`"outcome_search": "bounded"`). Only for callers
//! allowed to see `/api/v1/state`.
//!
//! **Status** is the log's: `pending`, `retrying` (with `next_attempt_at`), `delivered`,
//! `dead_lettered` and `skipped` (with `reason`), `no_handler`; an event the log says is
//! pending is `in_flight` or `held` when its pump's last published live states
//! (`dispatch::ledger::LiveState`, at most 100 ms old) say so; `held` comes with `gate`, the
//! name of the flow gate holding it (`batch`, `debounce`, `rate_limit`, `throttle`,
//! `singleton`, `concurrency`: the dispatcher reports each gate that holds it to the pump).
//!
//! **The list** is `wal::events::list_indexed`, the code of the offline `sluice events list`
//! with the outcome index: per log, segments from the newest back, those wholly after the upper
//! bound (`until`, the cursor — the last id of the page before; ids start with their
//! millisecond) not read at all, stopping at the segment that fills `limit` (≤ 1,000) or starts
//! before `since`. So its cost is the segments holding the page's events.
//!
//! **Access**: as `/api/v1/state` (`server.ui`); the body (`?body=1`) only with
//! `Authorization: Bearer <SLUICE_ADMIN_TOKEN>`, whatever `server.ui` says (`403` otherwise).
#![forbid(unsafe_code)]

use crate::config::ui::UiMode;
use crate::dispatch::event_tools::parse_list_query;
use crate::dispatch::ledger::LiveState;
use crate::ops::dashboard::Answer;
use crate::ops::view::OpsView;
use crate::wal::layout::LogDir;
use crate::wal::outcomes::SharedIndex;
use crate::wal::read::events::{list_indexed, report_json, show_indexed};
use crate::wal::read::events::{EventReport, Fate, ShowError};

/// Records read past the event in search of its outcome, at most.
pub const MAX_RECORDS_AFTER: u64 = 20_000;

fn refused(status: u16, reason: &str) -> Answer {
    let body = serde_json::json!({ "status": "refused", "reason": reason });
    Answer::json(status, body.to_string().into_bytes())
}

/// The running outcome index of the log `log` (by its name), if this run writes it.
fn index_of<'a>(node: &OpsView<'a>, log: &LogDir) -> Option<&'a SharedIndex> {
    let wal: &'a [std::sync::Arc<crate::wal::WalShared>] = node.wal;
    let w = wal.iter().find(|w| w.name == log.name)?;
    Some(&w.outcomes)
}

/// Whether `query` asks for the body (`body=1`).
fn wants_body(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|kv| kv == "body=1"))
}

/// `/api/v1/state`'s access rule: `Ok(admin)` (whether the admin token was given), or the
/// refusal.
fn access(node: &OpsView<'_>, authorization: Option<&[u8]>) -> Result<bool, Answer> {
    let config = node.config;
    let admin = config
        .admin_token
        .as_ref()
        .is_some_and(|t| crate::ingest::verify::bearer_matches(t, authorization));
    match config.server.ui {
        UiMode::Off => Err(Answer::json(404, br#"{"status":"not_found"}"#.to_vec())),
        UiMode::Token if !admin => Err(refused(401, "unauthorized")),
        _ => Ok(admin),
    }
}

/// `report` as JSON, where an event the log says is pending gets the status its pump's
/// memory gives (`in_flight`, `held`).
fn live_json(node: &OpsView<'_>, report: &EventReport, with_body: bool) -> serde_json::Value {
    let mut v = report_json(report, with_body);
    if report.fate == Fate::Pending {
        match node.dispatch.ledger.live_state(&report.log, report.lsn) {
            Some(LiveState::InFlight) => v["status"] = "in_flight".into(),
            Some(LiveState::Held(gate)) => {
                v["status"] = "held".into();
                v["gate"] = gate.into();
            }
            None => {}
        }
    }
    v
}

/// Answers `GET /api/v1/events?trigger=&status=&since=&until=&limit=&cursor=`: the newest
/// events first, each as the single lookup gives it (attempts included: the scan reads them
/// anyway; no body), `{"events": […], "next_cursor": ID | null}`. A malformed query is a
/// `400` naming the parameter (`dispatch::event_tools::parse_list_query`); a limit out of
/// 1..=1000 is refused, not clamped.
pub fn answer_list(
    node: &OpsView<'_>,
    query: Option<&str>,
    authorization: Option<&[u8]>,
) -> Answer {
    if let Err(refusal) = access(node, authorization) {
        return refusal;
    }
    let filter = match parse_list_query(query.unwrap_or("")) {
        Ok(f) => f,
        Err(e) => {
            let body = serde_json::json!({ "status": "bad_request", "reason": e.msg });
            return Answer::json(400, body.to_string().into_bytes());
        }
    };
    let index_of = |log: &LogDir| index_of(node, log);
    match list_indexed(&node.config.server.data_dir, &filter, &index_of) {
        Ok(found) => {
            let full = found.len() == filter.limit;
            let next = found
                .last()
                .filter(|_| full)
                .map(|r| r.event.event_id.clone());
            let events: Vec<_> = found.iter().map(|r| live_json(node, r, false)).collect();
            let body = serde_json::json!({ "events": events, "next_cursor": next });
            Answer::json(200, body.to_string().into_bytes())
        }
        Err(e) => {
            let body = serde_json::json!({ "status": "error", "error": e.to_string() });
            Answer::json(500, body.to_string().into_bytes())
        }
    }
}

/// Answers `GET /api/v1/events/{id}`: the request's path, query and `Authorization` header.
pub fn answer(
    node: &OpsView<'_>,
    path: &str,
    query: Option<&str>,
    authorization: Option<&[u8]>,
) -> Answer {
    let admin = match access(node, authorization) {
        Ok(admin) => admin,
        Err(refusal) => return refusal,
    };
    let config = node.config;
    let with_body = wants_body(query);
    if with_body && !admin {
        return refused(403, "body_needs_admin_token");
    }
    // Event ids are ULIDs, case-insensitive: the logs hold them upper-case.
    let id = path
        .strip_prefix("/api/v1/events/")
        .unwrap_or_default()
        .to_ascii_uppercase();
    let index_of = |log: &LogDir| index_of(node, log);
    match show_indexed(&config.server.data_dir, &id, MAX_RECORDS_AFTER, &index_of) {
        Ok(report) => {
            let v = live_json(node, &report, with_body);
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
