//! Response bodies of the ingest edge. Kept in one place so the wire contract is easy to audit.
//!
//! - accepted: `202 {"status":"accepted","event_id":"…","trigger_id":"…"}`
//! - refused:  `503 {"status":"refused","reason":"…","retry_after":N}` + `Retry-After: N`
//!
//! Ids are `[A-Za-z0-9._-]` by construction (validated routes, generated event ids), so they
//! need no JSON escaping; [`json_str`] escapes anyway for defence in depth.

use crate::wal::event_id::EventId;

/// Why a request was refused: the `reason` of a `503` body and the `reason` label of
/// `sluice_ingest_refusals_total` (per source) and the backlog's per-trigger refusals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum Refusal {
    /// A token bucket (global or per-source) was empty: 503 + Retry-After.
    IngestSaturated,
    /// The core's next group-commit batch stayed full past `offer_timeout`.
    WalBusy,
    /// The WAL cannot accept writes (I/O error, writer stopped).
    WalUnavailable,
    /// Reserved: the durable backlog bound (`max_pending`) refused.
    QueueFull,
    /// Reserved: the server is draining for shutdown.
    Draining,
    /// The WAL's disk use reached `max_wal_bytes`.
    WalFull,
    /// The process-wide in-flight body budget (`max_inflight_body_bytes`) could not cover the
    /// declared body: refused before it was read.
    BodyBudget,
    /// `[replication]`: JetStream does not acknowledge this node's commits (no quorum,
    /// unreachable, or not within `ack_timeout`).
    ReplicationUnavailable,
    /// `[replication]`: another node adopted this node's logs; it accepts nothing until
    /// restarted.
    ReplicationFenced,
}

impl Refusal {
    /// Every reason, in rendering order (`ALL[r as usize] == r`).
    pub const ALL: [Refusal; 9] = [
        Refusal::IngestSaturated,
        Refusal::WalBusy,
        Refusal::WalUnavailable,
        Refusal::QueueFull,
        Refusal::Draining,
        Refusal::WalFull,
        Refusal::BodyBudget,
        Refusal::ReplicationUnavailable,
        Refusal::ReplicationFenced,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub const fn as_str(self) -> &'static str {
        match self {
            Refusal::IngestSaturated => "ingest_saturated",
            Refusal::WalBusy => "wal_busy",
            Refusal::WalUnavailable => "wal_unavailable",
            Refusal::QueueFull => "queue_full",
            Refusal::Draining => "draining",
            Refusal::WalFull => "wal_full",
            Refusal::BodyBudget => "body_budget",
            Refusal::ReplicationUnavailable => "replication_unavailable",
            Refusal::ReplicationFenced => "replication_fenced",
        }
    }
}

/// `{"status":"accepted",...}`
pub fn accepted_body(event_id: &str, trigger_id: &str) -> String {
    let mut s = String::with_capacity(96);
    push_accepted_body(&mut s, event_id, trigger_id);
    s
}

/// [`accepted_body`] appended to `out` (a reused buffer: no allocation once it is grown).
pub fn push_accepted_body(out: &mut String, event_id: &str, trigger_id: &str) {
    out.push_str("{\"status\":\"accepted\",\"event_id\":");
    json_str(out, event_id);
    out.push_str(",\"trigger_id\":");
    json_str(out, trigger_id);
    out.push('}');
}

/// [`push_accepted_body`] for an id minted here: its characters are ASCII letters and digits
/// ([`EventId`]), so it is written as it is, without [`json_str`]'s scan (the same bytes).
pub fn push_accepted(out: &mut String, event_id: &EventId, trigger_id: &str) {
    out.push_str("{\"status\":\"accepted\",\"event_id\":\"");
    out.push_str(event_id.as_str());
    out.push_str("\",\"trigger_id\":");
    json_str(out, trigger_id);
    out.push('}');
}

/// `{"status":"refused",...}`
pub fn refused_body(reason: Refusal, retry_after_secs: u64) -> String {
    let mut s = String::with_capacity(80);
    push_refused_body(&mut s, reason, retry_after_secs);
    s
}

/// [`refused_body`] appended to `out`.
pub fn push_refused_body(out: &mut String, reason: Refusal, retry_after_secs: u64) {
    out.push_str("{\"status\":\"refused\",\"reason\":\"");
    out.push_str(reason.as_str());
    out.push_str("\",\"retry_after\":");
    out.push_str(crate::net::http::decimal(&mut [0; 20], retry_after_secs));
    out.push('}');
}

/// Appends `value` as a JSON string literal (`wal::format::json::escape_pieces`: runs that
/// need no escape copied whole, for every 202).
pub fn json_str(out: &mut String, value: &str) {
    out.reserve(value.len() + 2);
    out.push('"');
    crate::wal::format::json::escape_pieces(value, |piece| out.push_str(piece));
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::event_id::EventIdGen;

    #[test]
    fn bodies_are_exact() {
        assert_eq!(
            accepted_body("01ABC", "default"),
            r#"{"status":"accepted","event_id":"01ABC","trigger_id":"default"}"#
        );
        assert_eq!(
            refused_body(Refusal::IngestSaturated, 3),
            r#"{"status":"refused","reason":"ingest_saturated","retry_after":3}"#
        );
        let mut s = String::new();
        json_str(&mut s, "a\"b\\c\n");
        assert_eq!(s, r#""a\"b\\c\u000a""#);
        let mut s = String::new();
        json_str(&mut s, "é\u{1}x\"\"ü\u{1f}");
        assert_eq!(s, r#""é\u0001x\"\"ü\u001f""#);
        // A minted id written as it is: the same bytes as the scanned form.
        let id = EventIdGen::new(0).next_id_us(1_700_000_000_000_000);
        for trigger in ["default", "a\"b"] {
            let mut s = String::new();
            push_accepted(&mut s, &id, trigger);
            assert_eq!(s, accepted_body(id.as_str(), trigger));
        }
        // Every string round-trips through a JSON parser.
        for v in ["", "plain", "\u{7f}€", "\\\\", "\"", "a\tb\rc", "日本\u{0}"] {
            let mut s = String::new();
            json_str(&mut s, v);
            let back: String = serde_json::from_str(&s).unwrap();
            assert_eq!(back, v);
        }
    }
}
