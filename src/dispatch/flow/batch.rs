//! A batch's request: one [`Job`] carrying its members.
//!
//! The body is a JSON array, one object per member in arrival order:
//! `{"event_id","source","received_at","body"}` where `received_at` is Unix milliseconds and
//! `body` is the member's body verbatim when it is a JSON document; otherwise the object has
//! `"body_base64"` (standard alphabet, padded) instead of `"body"`. The request's content type is
//! `application/json`; its `webhook-id` is the first member's event id.
//!
//! The carrier job's `lsn`, `dest` and identity are the first member's; its attempt number and
//! recovered due time are the largest of the members'. Every member gets the carrier's outcome
//! (see `Dispatcher`).
#![forbid(unsafe_code)]

use base64::Engine as _;

use crate::dispatch::job::Job;
use crate::wal::format::json::push_string;

/// Builds the carrier of `members` (at least one).
pub fn carrier(members: Vec<Job>) -> Job {
    let body = body(&members);
    let id = members[0].event.event_id.clone();
    let due = members.iter().map(|m| m.due_at_ms).max().unwrap_or(0);
    Job::carrier(id, body, members, due)
}

/// The JSON array of the members.
pub fn body(members: &[Job]) -> Vec<u8> {
    let size: usize = members
        .iter()
        .map(|m| m.event.body.len() * 4 / 3 + 128)
        .sum();
    let mut out = Vec::with_capacity(size + 2);
    out.push(b'[');
    for (i, m) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let e = &m.event;
        out.extend_from_slice(b"{\"event_id\":");
        push_string(&mut out, &e.event_id);
        out.extend_from_slice(b",\"source\":");
        push_string(&mut out, &e.source);
        out.extend_from_slice(b",\"received_at\":");
        let mut digits = [0u8; 20];
        out.extend_from_slice(crate::net::http::decimal(&mut digits, e.received_at_ms).as_bytes());
        // Decided once at ingest (`wal::BodyJson`); parsed here only when it was not.
        if e.body_json.is_json(&e.body) {
            out.extend_from_slice(b",\"body\":");
            out.extend_from_slice(&e.body);
        } else {
            out.extend_from_slice(b",\"body_base64\":\"");
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(&e.body)
                    .as_bytes(),
            );
            out.push(b'"');
        }
        out.push(b'}');
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::{BodyJson, EventRecord};
    use serde_json::Value;

    fn job(lsn: u64, id: &str, body: &[u8], attempt: u32) -> Job {
        Job {
            lsn,
            event: EventRecord {
                event_id: id.into(),
                trigger_id: "t".into(),
                source: "gh\"x".into(),
                received_at_ms: 1000 + lsn,
                headers: vec![],
                body: body.to_vec(),
                replay_of: None,
                body_json: Default::default(),
            },
            dest: 3,
            attempt,
            due_at_ms: lsn,
            batch: Vec::new(),
            log_dir: None,
            capless: false,
        }
    }

    #[test]
    fn json_and_binary_members() {
        let c = carrier(vec![
            job(7, "a", br#" {"k": [1, 2]} "#, 1),
            job(9, "b", b"\xff\x00raw", 3),
            job(8, "c", b"", 1),
        ]);
        assert_eq!((c.lsn, c.dest, c.attempt, c.due_at_ms), (7, 3, 3, 9));
        assert_eq!(c.event.event_id, "a");
        assert_eq!(c.batch.len(), 3);
        let v: Value = serde_json::from_slice(&c.event.body).unwrap();
        let a = v.as_array().unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a[0]["event_id"], "a");
        assert_eq!(a[0]["source"], "gh\"x");
        assert_eq!(a[0]["received_at"], 1007);
        assert_eq!(a[0]["body"]["k"][1], 2);
        assert_eq!(a[1]["body_base64"], "/wByYXc=");
        assert!(a[1].get("body").is_none());
        assert_eq!(a[2]["body_base64"], "", "an empty body is not JSON");
    }

    #[test]
    fn a_stored_json_decision_is_obeyed_without_parsing() {
        let flagged = |lsn, body: &[u8], body_json| {
            let mut j = job(lsn, "e", body, 1);
            j.event.body_json = body_json;
            j
        };
        let members = vec![
            flagged(1, br#"{"a":1}"#, BodyJson::NotJson),
            flagged(2, b" [1,  2] ", BodyJson::Json),
            flagged(3, b"[1,", BodyJson::Json),
            flagged(4, b"\xff", BodyJson::Undecided),
        ];
        let text = String::from_utf8(body(&members)).unwrap();
        // Not JSON, though the bytes parse: base64 (no second look).
        assert!(text.contains(r#""body_base64":"eyJhIjoxfQ==""#), "{text}");
        // JSON: the stored bytes verbatim, even ones that would not parse (trusted, not checked).
        assert!(text.contains(r#""body": [1,  2] }"#), "{text}");
        assert!(text.contains(r#""body":[1,}"#), "{text}");
        // Undecided: parsed, as before the flag.
        assert!(text.contains(r#""body_base64":"/w==""#), "{text}");
    }
}
