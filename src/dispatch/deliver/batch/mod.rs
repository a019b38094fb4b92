//! Batched deliveries: a destination with `batch = { max_events, max_bytes, linger }`
//! gets several events per call. This is the pure part: members in, calls out, on an injected
//! clock; the dispatcher ([`crate::dispatch::deliver::dispatcher`]) feeds it the events that passed their flow
//! gates and took their slot, queues the calls it closes, and wakes it at its deadline.
//!
//! A call's body, `application/json` (the format README "Batched deliveries" documents, kept
//! stable):
//!
//! ```text
//! {"batch_id":"batch_…","events":[{"id":"…","trigger":"…","source":"…","received_at":<unix ms>,
//!   "headers":{"content-type":"…",…},"body":<the body's JSON value>},…]}
//! ```
//!
//! An event whose body is not one JSON value has `"body_base64"` (standard alphabet, padded)
//! instead of `"body"`. `headers` are the event's stored headers (`ingest.stored_headers`) by
//! name, repeated names joined with `", "`, sluice's own `x-sluice-*` bookkeeping left out; a
//! value that is not UTF-8 is read byte per character (ISO-8859-1). The request is signed once
//! over that body (Standard Webhooks, `webhook-id` = `batch_id`, `crate::dispatch::deliver::request`).
//!
//! Rules (Vector's `sinks/util/batch.rs` shape): a batch closes when it holds `max_events`
//! members, when its body reaches `max_bytes`, or `linger` after its first member joined,
//! whichever comes first; an event that would take the body past `max_bytes` closes the batch
//! and starts the next one; an event larger than `max_bytes` on its own is sent alone (never
//! refused: it was accepted, and the downstream may take it). The body is built as members join,
//! each member's JSON written once (twice for the one that overflows a batch).
//!
//! A closed batch is a *carrier* [`Job`] (the shape `flow::batch` carriers have): its `batch`
//! lists the members, its event is the call's (`event_id` = the batch id, the JSON body, an
//! `application/json` content type), its `lsn` and `dest` the first member's, its attempt the
//! largest of the members'. The carrier is the unit of every attempt: retried whole, with the
//! same id and body; each member gets the call's outcome under its own key.
//!
//! Bound: the batch being filled holds at most `max_events` members and about `max_bytes` of
//! body (`sluice_dispatch_batch_open_events`); one batcher per batching destination on its owner
//! core.
#![forbid(unsafe_code)]

use base64::Engine as _;

use crate::dispatch::job::Job;
use crate::dispatch::spec::BatchSpec;
use crate::wal::format::json::push_string;
use crate::wal::EventRecord;

/// The closing bytes of a body.
const CLOSE: &[u8] = b"]}";

/// One batching destination's batch being filled.
#[derive(Debug)]
pub struct Batcher {
    spec: BatchSpec,
    open: Option<Open>,
}

#[derive(Debug)]
struct Open {
    id: String,
    members: Vec<Job>,
    /// `{"batch_id":…,"events":[` and the members so far, without [`CLOSE`].
    body: Vec<u8>,
    /// When the batch closes however full it is (clock nanoseconds).
    deadline: u64,
}

impl Open {
    fn new(id: String, deadline: u64) -> Open {
        let mut body = Vec::with_capacity(256);
        body.extend_from_slice(b"{\"batch_id\":");
        push_string(&mut body, &id);
        body.extend_from_slice(b",\"events\":[");
        Open {
            id,
            members: Vec::new(),
            body,
            deadline,
        }
    }

    /// Appends `event`'s JSON object (after a comma unless it is the first); its bytes.
    fn write(&mut self, event: &EventRecord) -> usize {
        let start = self.body.len();
        if !self.members.is_empty() {
            self.body.push(b',');
        }
        write_member(&mut self.body, event);
        self.body.len() - start
    }

    /// Room for the rest of a batch whose first member took `first` bytes: as many again for
    /// each member it may still take, within `max_bytes`, so the body grows by one allocation
    /// instead of doublings that copy it (and can hold twice it while they do).
    fn reserve_like(&mut self, first: usize, spec: BatchSpec) {
        let room = spec.max_bytes.saturating_sub(self.body.len()) + CLOSE.len();
        let rest = (first + 1).saturating_mul(spec.max_events.saturating_sub(1)) + CLOSE.len();
        self.body.reserve(rest.min(room));
    }

    /// The body's length once closed.
    fn closed_len(&self) -> usize {
        self.body.len() + CLOSE.len()
    }
}

impl Batcher {
    pub fn new(spec: BatchSpec) -> Batcher {
        Batcher { spec, open: None }
    }

    pub fn spec(&self) -> BatchSpec {
        self.spec
    }

    /// Members of the batch being filled (at most `max_events`).
    pub fn held(&self) -> usize {
        self.open.as_ref().map_or(0, |o| o.members.len())
    }

    /// When the batch being filled closes at the latest; `None` when there is none.
    pub fn deadline(&self) -> Option<u64> {
        self.open.as_ref().map(|o| o.deadline)
    }

    /// Adds `job`'s events (a `flow` batch carrier's members one by one: the gates already
    /// did their part per event) at `now`; every batch this closes goes to `out`, in order.
    /// `new_id` names each batch this opens.
    pub fn push(
        &mut self,
        job: Job,
        now: u64,
        new_id: &mut dyn FnMut() -> String,
        out: &mut Vec<Job>,
    ) {
        for member in job.into_members() {
            self.push_one(member, now, new_id, out);
        }
    }

    fn push_one(
        &mut self,
        member: Job,
        now: u64,
        new_id: &mut dyn FnMut() -> String,
        out: &mut Vec<Job>,
    ) {
        let deadline = now.saturating_add(self.spec.linger.as_nanos() as u64);
        let open = self
            .open
            .get_or_insert_with(|| Open::new(new_id(), deadline));
        let mark = open.body.len();
        let mut written = open.write(&member.event);
        if !open.members.is_empty() && open.closed_len() > self.spec.max_bytes {
            // Past `max_bytes` with it: the batch goes without it, it starts the next one.
            open.body.truncate(mark);
            out.extend(self.close());
            let open = self.open.insert(Open::new(new_id(), deadline));
            written = open.write(&member.event);
        }
        let open = self.open.as_mut().expect("opened above");
        if open.members.is_empty() {
            open.reserve_like(written, self.spec);
        }
        open.members.push(member);
        if open.members.len() >= self.spec.max_events || open.closed_len() >= self.spec.max_bytes {
            out.extend(self.close());
        }
    }

    /// Closes the batch being filled if its linger is over at `now`.
    pub fn poll(&mut self, now: u64, out: &mut Vec<Job>) {
        if self.deadline().is_some_and(|d| d <= now) {
            out.extend(self.close());
        }
    }

    /// Closes the batch being filled whatever its age (a reload that changes or removes the
    /// destination's `batch`).
    pub fn flush(&mut self, out: &mut Vec<Job>) {
        out.extend(self.close());
    }

    fn close(&mut self) -> Option<Job> {
        let mut open = self.open.take()?;
        open.body.extend_from_slice(CLOSE);
        Some(Job::carrier(open.id, open.body, open.members, 0))
    }
}

/// A batch id: `batch_` + the Unix milliseconds, the core and 64 random bits, in hex. Unique
/// across cores and restarts (a restart re-forms batches; a receiver deduplicating on
/// `webhook-id` must not take a new batch for an old one).
pub fn batch_id(unix_ms: u64, core: usize, random: u64) -> String {
    format!("batch_{unix_ms:x}_{core:x}_{random:016x}")
}

/// One member's JSON object.
fn write_member(out: &mut Vec<u8>, e: &EventRecord) {
    out.extend_from_slice(b"{\"id\":");
    push_string(out, &e.event_id);
    out.extend_from_slice(b",\"trigger\":");
    push_string(out, &e.trigger_id);
    out.extend_from_slice(b",\"source\":");
    push_string(out, &e.source);
    out.extend_from_slice(b",\"received_at\":");
    let mut buf = [0u8; 20];
    out.extend_from_slice(crate::net::http::decimal(&mut buf, e.received_at_ms).as_bytes());
    out.extend_from_slice(b",\"headers\":");
    write_headers(out, &e.headers);
    // Decided once at ingest when the trigger batched then; parsed here only when it was not.
    if e.body_json.is_json(&e.body) {
        out.extend_from_slice(b",\"body\":");
        out.extend_from_slice(&e.body);
    } else {
        out.extend_from_slice(b",\"body_base64\":\"");
        let b64 = base64::engine::general_purpose::STANDARD;
        let start = out.len();
        out.resize(start + e.body.len().div_ceil(3) * 4, 0);
        let n = b64
            .encode_slice(&e.body, &mut out[start..])
            .expect("sized for the padded encoding");
        out.truncate(start + n);
        out.push(b'"');
    }
    out.push(b'}');
}

/// The stored headers as one JSON object, in order of first appearance, repeated names joined.
fn write_headers(out: &mut Vec<u8>, headers: &[(String, Vec<u8>)]) {
    out.push(b'{');
    let shown = |n: &str| !n.starts_with("x-sluice-");
    let mut first = true;
    for (i, (name, _)) in headers.iter().enumerate() {
        let seen = headers[..i]
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name));
        if seen || !shown(name) {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        push_string(out, name);
        out.push(b':');
        // One field of the name, in UTF-8 (the common case): written as it is, no copy.
        let repeated = (headers[i + 1..].iter()).any(|(n, _)| n.eq_ignore_ascii_case(name));
        if let (false, Ok(s)) = (repeated, std::str::from_utf8(&headers[i].1)) {
            push_string(out, s);
            continue;
        }
        let mut value = String::new();
        for (_, v) in headers[i..]
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            if !value.is_empty() {
                value.push_str(", ");
            }
            match std::str::from_utf8(v) {
                Ok(s) => value.push_str(s),
                Err(_) => value.extend(v.iter().map(|&b| char::from(b))),
            }
        }
        push_string(out, &value);
    }
    out.push(b'}');
}

pub mod metrics;
#[cfg(test)]
mod tests;
