//! The batcher on a manual clock: members in, calls out.

use std::time::Duration;

use serde_json::Value;

use super::*;
use crate::wal::BodyJson;

const MS: u64 = 1_000_000;

fn spec(max_events: usize, max_bytes: usize, linger_ms: u64) -> BatchSpec {
    BatchSpec {
        max_events,
        max_bytes,
        linger: Duration::from_millis(linger_ms),
    }
}

fn job(lsn: u64, body: &[u8]) -> Job {
    Job::new(
        lsn,
        EventRecord {
            event_id: format!("evt_{lsn}"),
            trigger_id: "t".into(),
            source: "src".into(),
            received_at_ms: 1_000 + lsn,
            headers: vec![("content-type".into(), b"application/json".to_vec())],
            body: body.to_vec(),
            replay_of: None,
            body_json: Default::default(),
        },
        2,
        1,
        0,
    )
}

/// Names batches `b1`, `b2`, … in the order they open.
fn ids() -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format!("b{n}")
    }
}

fn lsns(call: &Job) -> Vec<u64> {
    call.batch.iter().map(|m| m.lsn).collect()
}

fn parse(call: &Job) -> Value {
    serde_json::from_slice(&call.event.body).expect("a batch body is JSON")
}

#[test]
fn closes_at_max_events_and_keeps_order() {
    let mut b = Batcher::new(spec(3, 1 << 20, 5));
    let (mut id, mut out) = (ids(), Vec::new());
    for lsn in 1..=7 {
        b.push(job(lsn, b"{}"), 0, &mut id, &mut out);
    }
    assert_eq!(out.len(), 2, "two full batches, the third still filling");
    assert_eq!(lsns(&out[0]), vec![1, 2, 3]);
    assert_eq!(lsns(&out[1]), vec![4, 5, 6]);
    assert_eq!(b.held(), 1);
    assert_eq!(
        (out[0].lsn, out[0].dest),
        (1, 2),
        "the first member's key and destination"
    );
    assert_eq!(out[0].event.event_id, "b1");
    assert_eq!(out[1].event.event_id, "b2");
    let v = parse(&out[1]);
    assert_eq!(v["batch_id"], "b2");
    let ids: Vec<&str> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["evt_4", "evt_5", "evt_6"]);
}

#[test]
fn linger_closes_a_partial_batch_on_the_clock() {
    let mut b = Batcher::new(spec(50, 1 << 20, 5));
    let (mut id, mut out) = (ids(), Vec::new());
    assert_eq!(b.deadline(), None, "no batch, no timer");
    b.push(job(1, b"{}"), 10 * MS, &mut id, &mut out);
    b.push(job(2, b"{}"), 13 * MS, &mut id, &mut out);
    assert_eq!(
        b.deadline(),
        Some(15 * MS),
        "linger counts from the first member, not the last"
    );
    b.poll(15 * MS - 1, &mut out);
    assert!(out.is_empty(), "not before the deadline");
    b.poll(15 * MS, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(lsns(&out[0]), vec![1, 2]);
    assert_eq!((b.held(), b.deadline()), (0, None));
    // The next member opens a new batch with its own deadline.
    b.push(job(3, b"{}"), 40 * MS, &mut id, &mut out);
    assert_eq!(b.deadline(), Some(45 * MS));
}

#[test]
fn max_bytes_bounds_every_batch_of_more_than_one() {
    let body = [b'7'; 300]; // a JSON number of 300 digits
    let max = 1024;
    let mut b = Batcher::new(spec(100, max, 5));
    let (mut id, mut out) = (ids(), Vec::new());
    for lsn in 1..=20 {
        b.push(job(lsn, &body), 0, &mut id, &mut out);
    }
    b.flush(&mut out);
    let mut seen = Vec::new();
    for call in &out {
        assert!(
            call.event.body.len() <= max,
            "{} bytes > {max}",
            call.event.body.len()
        );
        assert!(call.batch.len() > 1, "each of these fits with another");
        let v = parse(call);
        assert_eq!(v["events"].as_array().unwrap().len(), call.batch.len());
        seen.extend(lsns(call));
    }
    assert_eq!(
        seen,
        (1..=20).collect::<Vec<_>>(),
        "no member lost or reordered"
    );
    // The overflowing member started the next batch: every batch but the last is as full as
    // one more member would not allow.
    let one = out[0].event.body.len() / out[0].batch.len();
    assert!(out[0].event.body.len() + one > max);
}

#[test]
fn a_member_larger_than_max_bytes_goes_alone() {
    let mut big = vec![b'a'; 4096];
    (big[0], big[4095]) = (b'"', b'"'); // one JSON string
    let mut b = Batcher::new(spec(10, 1024, 5));
    let (mut id, mut out) = (ids(), Vec::new());
    b.push(job(1, b"{}"), 0, &mut id, &mut out);
    b.push(job(2, &big), 0, &mut id, &mut out);
    b.push(job(3, b"{}"), 0, &mut id, &mut out);
    assert_eq!(out.len(), 2, "the batch before it, then it alone");
    assert_eq!(lsns(&out[0]), vec![1]);
    assert_eq!(lsns(&out[1]), vec![2]);
    assert!(out[1].event.body.len() > 4096);
    let alone = parse(&out[1]);
    assert_eq!(
        alone["events"][0]["body"].as_str().map(str::len),
        Some(4094)
    );
    assert_eq!(b.held(), 1, "the next member is in a new batch");
    b.flush(&mut out);
    assert_eq!(lsns(&out[2]), vec![3]);
}

#[test]
fn member_fields_headers_and_binary_bodies() {
    let mut bin = job(2, b"\xff\x00raw");
    bin.event.headers = vec![
        ("content-type".into(), b"application/octet-stream".to_vec()),
        ("x-tag".into(), b"a".to_vec()),
        ("x-sluice-dedupe-key".into(), b"k".to_vec()),
        ("x-tag".into(), b"caf\xe9".to_vec()),
    ];
    let mut b = Batcher::new(spec(3, 1 << 20, 5));
    let (mut id, mut out) = (ids(), Vec::new());
    b.push(job(1, br#" {"k": [1, 2]} "#), 0, &mut id, &mut out);
    b.push(bin, 0, &mut id, &mut out);
    b.push(job(3, b""), 0, &mut id, &mut out);
    assert_eq!(out.len(), 1);
    let call = &out[0];
    assert_eq!(
        call.event.headers,
        vec![("content-type".to_string(), b"application/json".to_vec())]
    );
    let v = parse(call);
    let e = v["events"].as_array().unwrap();
    assert_eq!(e[0]["id"], "evt_1");
    assert_eq!(e[0]["trigger"], "t");
    assert_eq!(e[0]["source"], "src");
    assert_eq!(e[0]["received_at"], 1001);
    assert_eq!(e[0]["headers"]["content-type"], "application/json");
    assert_eq!(
        e[0]["body"]["k"][1], 2,
        "a JSON body is embedded as its value"
    );
    assert!(e[0].get("body_base64").is_none());
    assert_eq!(e[1]["body_base64"], "/wByYXc=");
    assert!(e[1].get("body").is_none());
    assert_eq!(
        e[1]["headers"]["x-tag"], "a, caf\u{e9}",
        "joined, ISO-8859-1"
    );
    assert!(e[1]["headers"].get("x-sluice-dedupe-key").is_none());
    assert_eq!(e[2]["body_base64"], "", "an empty body is not JSON");
}

#[test]
fn attempt_is_the_largest_and_flow_carriers_are_flattened() {
    let mut retried = job(5, b"1");
    retried.attempt = 4;
    let flow_carrier = crate::dispatch::flow::batch::carrier(vec![job(6, b"2"), job(7, b"3")]);
    let mut b = Batcher::new(spec(3, 1 << 20, 5));
    let (mut id, mut out) = (ids(), Vec::new());
    b.push(retried, 0, &mut id, &mut out);
    b.push(flow_carrier, 0, &mut id, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(lsns(&out[0]), vec![5, 6, 7]);
    assert_eq!(out[0].attempt, 4);
    assert!(out[0].batch.iter().all(|m| m.batch.is_empty()));
}

#[test]
fn batch_ids_differ_by_time_core_and_randomness() {
    let a = batch_id(1_700_000_000_000, 0, 1);
    assert!(a.starts_with("batch_"), "{a}");
    assert_ne!(a, batch_id(1_700_000_000_000, 1, 1));
    assert_ne!(a, batch_id(1_700_000_000_001, 0, 1));
    assert_ne!(a, batch_id(1_700_000_000_000, 0, 2));
}

#[test]
fn a_member_s_stored_json_decision_is_obeyed_without_parsing() {
    let mut b = Batcher::new(spec(4, 1 << 20, 5));
    let (mut id, mut out) = (ids(), Vec::new());
    let flagged = |lsn, body: &[u8], body_json| {
        let mut j = job(lsn, body);
        j.event.body_json = body_json;
        j
    };
    let members: [(&[u8], BodyJson); 4] = [
        (b"{\"a\": 1 }", BodyJson::NotJson),
        (b" [1,  2] ", BodyJson::Json),
        (b"{\"u\":0}", BodyJson::Undecided),
        (b"\xffraw", BodyJson::Undecided),
    ];
    for (lsn, (body, decision)) in (1..).zip(members) {
        b.push(flagged(lsn, body, decision), 0, &mut id, &mut out);
    }
    assert_eq!(out.len(), 1);
    let v = parse(&out[0]);
    let e = v["events"].as_array().unwrap();
    // Flagged not JSON: base64, although the bytes parse (no second look).
    assert_eq!(e[0]["body_base64"], "eyJhIjogMSB9");
    assert!(e[0].get("body").is_none());
    // Flagged JSON: the bytes verbatim.
    let text = String::from_utf8(out[0].event.body.clone()).unwrap();
    assert!(text.contains(",\"body\": [1,  2] }"), "{text}");
    // Undecided (a log from before the flag, a trigger that did not batch then): parsed.
    assert_eq!(e[2]["body"]["u"], 0);
    assert_eq!(e[3]["body_base64"], "/3Jhdw==");
}

#[test]
fn a_json_flag_is_trusted_so_the_body_is_copied_as_stored() {
    let mut b = Batcher::new(spec(1, 1 << 20, 5));
    let (mut id, mut out) = (ids(), Vec::new());
    let mut j = job(1, b"[1,");
    j.event.body_json = BodyJson::Json;
    b.push(j, 0, &mut id, &mut out);
    let text = String::from_utf8(out[0].event.body.clone()).unwrap();
    assert!(
        text.contains(",\"body\":[1,}"),
        "copied, not parsed: {text}"
    );
}

#[test]
fn a_batch_body_is_allocated_once_for_members_like_its_first_and_within_max_bytes() {
    let mut b = Batcher::new(spec(16, 1 << 20, 5));
    let (mut id, mut out) = (ids(), Vec::new());
    b.push(job(1, br#"{"n":1}"#), 0, &mut id, &mut out);
    let first = b
        .open
        .as_ref()
        .map(|o| (o.body.as_ptr(), o.body.capacity()));
    for lsn in 2..16 {
        b.push(job(lsn, br#"{"n":1}"#), 0, &mut id, &mut out);
        let now = b
            .open
            .as_ref()
            .map(|o| (o.body.as_ptr(), o.body.capacity()));
        assert_eq!(now, first, "member {lsn} grew the body: it was reserved");
    }
    b.push(job(16, br#"{"n":1}"#), 0, &mut id, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(lsns(&out[0]).len(), 16);
    assert!(parse(&out[0])["events"]
        .as_array()
        .is_some_and(|e| e.len() == 16));
    // A small `max_bytes` bounds the room taken, whatever `max_events` says.
    let mut b = Batcher::new(spec(10_000, 4096, 5));
    b.push(job(1, &[b'x'; 100]), 0, &mut id, &mut out);
    let cap = b.open.as_ref().map_or(0, |o| o.body.capacity());
    assert!(
        cap <= 4096 + 256,
        "reserved {cap} bytes for a batch of at most 4096"
    );
}

/// A body that is JSON-shaped but not valid UTF-8, or nested deeper than a strict parser takes
/// within a batch, travels as `body_base64`: the batch stays valid JSON (`serde_json` parses it
/// with its default nesting limit) and the bytes come back exactly.
#[test]
fn a_member_that_would_make_the_batch_invalid_json_goes_as_base64() {
    let deep = format!("{}{}", "[".repeat(101), "]".repeat(101));
    let ok = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let bodies: [&[u8]; 3] = [b"{\"a\":\"\xff\"}", deep.as_bytes(), ok.as_bytes()];
    let mut b = Batcher::new(spec(3, 1 << 20, 5));
    let (mut id, mut out) = (ids(), Vec::new());
    for (i, body) in bodies.iter().enumerate() {
        b.push(job(i as u64 + 1, body), 0, &mut id, &mut out);
    }
    assert_eq!(out.len(), 1);
    let batch = parse(&out[0]);
    let events = batch["events"].as_array().unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    for (e, body) in events.iter().zip(bodies).take(2) {
        assert!(e.get("body").is_none(), "{e}");
        assert_eq!(
            b64.decode(e["body_base64"].as_str().unwrap()).unwrap(),
            body
        );
    }
    assert_eq!(
        serde_json::to_vec(&events[2]["body"]).unwrap(),
        ok.as_bytes()
    );
}
