//! Event records kept for reuse on the thread that finished them (issue 43: an accepted event
//! allocates no strings and no header list on its way in).
//!
//! An [`EventRecord`] owns three strings, a list of header names and values, and its body. When
//! the pump finishes an event without a delivery (no handler), or a dispatcher finishes a
//! delivered one, the record is [`give`]n to its thread's shelf instead of dropped: its
//! strings, its header list and each header's name and value keep their allocations (the body
//! is freed; its buffer came from the connection). Ingest [`build`]s the next record in a
//! shelved one's storage, so a steady stream of events allocates only its body. Each core's loop
//! is one thread and does both, so records circulate within a core; a record a core's dispatcher
//! finishes for another core's log lands on the dispatcher's shelf, which its own ingest uses.
//!
//! Only [`build`] takes a record off the shelf, and it sets every field, so what a shelved
//! record held (its old strings and headers) never reaches anyone.
//!
//! # Bounds
//!
//! - At most [`SHELF_RECORDS`] records per thread; a record given to a full shelf is dropped.
//! - A record is kept only if each of its strings has at most [`MAX_ID_BYTES`] of capacity, its
//!   header list at most [`MAX_HEADERS`] entries and its headers at most [`KEEP_HEADER_BYTES`]
//!   of capacity together; a larger one is dropped.
//! - So a thread's shelf holds at most `SHELF_RECORDS × (3 × MAX_ID_BYTES + KEEP_HEADER_BYTES +
//!   MAX_HEADERS × 48 + 200)` bytes, about 2.7 MiB; records of a few short headers hold ~300
//!   bytes each.
//! - Gauge: `sluice_event_shelf_records{core}`, set by each core's loop every turn ([`shelved`]).
#![forbid(unsafe_code)]

use std::cell::RefCell;

use super::record::{BodyJson, EventRecord, MAX_HEADERS, MAX_ID_BYTES};

/// Most records one thread's shelf keeps.
pub const SHELF_RECORDS: usize = 256;
/// Most bytes of header capacity (names and values) a shelved record keeps.
pub const KEEP_HEADER_BYTES: usize = 8 * 1024;

thread_local! {
    static SHELF: RefCell<Vec<EventRecord>> = const { RefCell::new(Vec::new()) };
}

/// What an accepted event is made of (its id, trigger and source, receive time, stored
/// headers, body and JSON decision); [`build`] copies the borrowed parts.
#[derive(Debug)]
pub struct Parts<'a, H> {
    pub event_id: &'a str,
    pub trigger_id: &'a str,
    pub source: &'a str,
    pub received_at_ms: u64,
    pub headers: H,
    pub body: Vec<u8>,
    pub body_json: BodyJson,
}

/// A new record of `parts` (never a replay), built in a shelved record's storage when the
/// thread's shelf has one, else allocated.
pub fn build<'a, H>(parts: Parts<'a, H>) -> EventRecord
where
    H: IntoIterator<Item = (&'a str, &'a [u8])>,
{
    let mut ev = SHELF.with_borrow_mut(Vec::pop).unwrap_or_default();
    for (s, v) in [
        (&mut ev.event_id, parts.event_id),
        (&mut ev.trigger_id, parts.trigger_id),
        (&mut ev.source, parts.source),
    ] {
        s.clear();
        s.push_str(v);
    }
    ev.received_at_ms = parts.received_at_ms;
    let mut n = 0;
    for (name, value) in parts.headers {
        match ev.headers.get_mut(n) {
            Some((nm, v)) => {
                nm.clear();
                nm.push_str(name);
                v.clear();
                v.extend_from_slice(value);
            }
            None => ev.headers.push((name.to_owned(), value.to_vec())),
        }
        n += 1;
    }
    ev.headers.truncate(n);
    ev.body = parts.body;
    ev.replay_of = None;
    ev.body_json = parts.body_json;
    ev
}

/// Puts a finished record on this thread's shelf, its body freed; dropped instead when the
/// shelf is full or the record is larger than a shelf keeps (module docs, "Bounds").
pub fn give(mut ev: EventRecord) {
    let header_bytes: usize = (ev.headers.iter())
        .map(|(n, v)| n.capacity() + v.capacity())
        .sum();
    let small = [&ev.event_id, &ev.trigger_id, &ev.source]
        .iter()
        .all(|s| s.capacity() <= MAX_ID_BYTES)
        && ev.headers.capacity() <= MAX_HEADERS
        && header_bytes <= KEEP_HEADER_BYTES;
    if !small {
        return;
    }
    ev.body = Vec::new();
    ev.replay_of = None;
    SHELF.with_borrow_mut(|shelf| {
        if shelf.len() < SHELF_RECORDS {
            shelf.push(ev);
        }
    });
}

/// Records on this thread's shelf (the gauge).
pub fn shelved() -> usize {
    SHELF.with_borrow(Vec::len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts<'a>(
        id: &'a str,
        headers: &'a [(&'a str, &'a [u8])],
        body: &[u8],
    ) -> Parts<'a, impl Iterator<Item = (&'a str, &'a [u8])>> {
        Parts {
            event_id: id,
            trigger_id: "orders",
            source: "shop",
            received_at_ms: 7,
            headers: headers.iter().copied(),
            body: body.to_vec(),
            body_json: BodyJson::Json,
        }
    }

    fn drain() {
        SHELF.with_borrow_mut(Vec::clear);
    }

    #[test]
    fn a_record_built_on_a_shelved_one_holds_only_its_own_fields_and_reuses_its_storage() {
        drain();
        let first = build(parts(
            "evt-1",
            &[
                ("content-type", b"application/json".as_slice()),
                ("x-a", b"1".as_slice()),
            ],
            b"{}",
        ));
        let id_buf = first.event_id.as_ptr();
        let name_buf = first.headers[0].0.as_ptr();
        give(first);
        assert_eq!(shelved(), 1);
        let second = build(parts("evt-2", &[("x-b", b"22".as_slice())], b"[1]"));
        assert_eq!(shelved(), 0);
        let want = EventRecord {
            event_id: "evt-2".into(),
            trigger_id: "orders".into(),
            source: "shop".into(),
            received_at_ms: 7,
            headers: vec![("x-b".into(), b"22".to_vec())],
            body: b"[1]".to_vec(),
            replay_of: None,
            body_json: BodyJson::Json,
        };
        assert_eq!(second, want, "nothing of the first record is left");
        assert_eq!(
            second.event_id.as_ptr(),
            id_buf,
            "the id's storage is reused"
        );
        assert_eq!(
            second.headers[0].0.as_ptr(),
            name_buf,
            "a header's storage is reused"
        );
        // A replay given back comes out as a plain event.
        let mut replay = second;
        replay.replay_of = Some("evt-0".into());
        give(replay);
        assert_eq!(build(parts("evt-3", &[], b"x")).replay_of, None);
    }

    #[test]
    fn the_shelf_keeps_at_most_its_bound_and_no_oversized_record() {
        drain();
        let ids: Vec<String> = (0..SHELF_RECORDS + 10)
            .map(|i| format!("evt-{i}"))
            .collect();
        let records: Vec<EventRecord> = ids.iter().map(|id| build(parts(id, &[], b""))).collect();
        records.into_iter().for_each(give);
        assert_eq!(shelved(), SHELF_RECORDS);
        drain();
        let big = "t".repeat(MAX_ID_BYTES + 1);
        let mut ev = build(parts("evt", &[], b""));
        ev.trigger_id = big;
        give(ev);
        let value = vec![b'v'; KEEP_HEADER_BYTES + 1];
        give(build(parts("evt", &[("x-big", value.as_slice())], b"")));
        let many: Vec<(&str, &[u8])> = vec![("x", b"1".as_slice()); MAX_HEADERS + 1];
        give(build(parts("evt", &many, b"")));
        assert_eq!(shelved(), 0, "oversized records are dropped, not kept");
    }
}
