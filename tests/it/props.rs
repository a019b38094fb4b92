//! Property tests (proptest): codec round trips at arbitrary split points, the ring against a
//! `VecDeque` model, the token bucket against a continuous-refill reference model on a manual
//! clock. `PROPTEST_CASES` raises the case count (default 256 per property).

use std::collections::VecDeque;

use proptest::prelude::*;
use sluice::net::http::client::{
    write_request, ClientLimits, OutboundRequest, ResponseEvent, ResponseReader,
};
use sluice::net::http::{write_response, Limits, ReadEvent, RequestReader};
use sluice::ring::{self, PushError};
use sluice::sync::gcra::{BucketParams, TokenBucket};

/// Header names that carry no framing or connection semantics (`x-` + token characters).
fn header_name() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop::sample::select(b"abcdefghijklmnopqrstuvwxyz0123456789-_!#$%&'*+.^`|~".to_vec()),
        1..16,
    )
    .prop_map(|b| format!("x-{}", String::from_utf8(b).unwrap()))
}

/// Field values: visible ASCII, inner spaces and tabs, obs-text; no leading/trailing whitespace
/// (it is not part of the value, RFC 9110 §5.5).
fn header_value() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![8 => 0x21u8..=0x7e, 1 => Just(b' '), 1 => Just(b'\t'), 1 => 0x80u8..=0xff],
        0..40,
    )
    .prop_map(|mut v| {
        while v.last().is_some_and(|b| *b == b' ' || *b == b'\t') {
            v.pop();
        }
        while v.first().is_some_and(|b| *b == b' ' || *b == b'\t') {
            v.remove(0);
        }
        v
    })
}

fn path() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop::sample::select(b"abcdefghijklmnopqrstuvwxyzABCXYZ0123456789/_.-~%?=&".to_vec()),
        0..60,
    )
    .prop_map(|b| format!("/{}", String::from_utf8(b).unwrap()))
}

/// Feeds `bytes` to `step` in pieces cut at `cuts` (positions modulo the length); collects the
/// events that are not `Incomplete`.
fn feed<E>(
    bytes: &[u8],
    cuts: &[usize],
    mut step: impl FnMut(&mut Vec<u8>) -> Option<E>,
) -> Vec<E> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.push(bytes.len());
    points.sort_unstable();
    let mut buf = Vec::new();
    let mut at = 0;
    let mut out = Vec::new();
    for p in points {
        buf.extend_from_slice(&bytes[at..p]);
        at = p;
        // Poll until nothing more comes out of what is buffered (bounded by the byte count).
        for _ in 0..=bytes.len() {
            match step(&mut buf) {
                Some(e) => out.push(e),
                None => break,
            }
        }
    }
    out
}

proptest! {
    #[test]
    fn client_request_round_trips_through_the_server_reader(
        method in prop::sample::select(vec!["POST", "PUT", "PATCH", "DELETE", "GET"]),
        path in path(),
        headers in proptest::collection::vec((header_name(), header_value()), 0..8),
        body in proptest::collection::vec(any::<u8>(), 0..3000),
        requests in 1usize..3,
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let hdrs: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
        let req = OutboundRequest { method, authority: "127.0.0.1:9", path: &path, headers: &hdrs, body: &body };
        let mut wire = Vec::new();
        for _ in 0..requests {
            write_request(&mut wire, &req).expect("valid request");
        }
        let mut reader = RequestReader::new(Limits::default());
        let events = feed(&wire, &cuts, |buf| match reader.poll(buf) {
            ReadEvent::Incomplete => None,
            ReadEvent::HeadReady { .. } => Some(None),
            ReadEvent::Request(r) => Some(Some(Ok(r))),
            ReadEvent::Error(e) => Some(Some(Err(e))),
        });
        let got: Vec<_> = events.into_iter().flatten().collect();
        prop_assert_eq!(got.len(), requests, "{:?}", got);
        for r in got {
            let r = r.map_err(|e| TestCaseError::fail(format!("server refused: {e}")))?;
            prop_assert_eq!(r.head.method.as_str(), method);
            prop_assert_eq!(r.head.target(), path.as_str());
            prop_assert_eq!(&r.body, &body);
            prop_assert_eq!(r.head.header("host"), Some(&b"127.0.0.1:9"[..]));
            let theirs: Vec<(String, Vec<u8>)> = r.head.headers()
                .filter(|(n, _)| n.starts_with("x-"))
                .map(|(n, v)| (n.to_string(), v.to_vec()))
                .collect();
            prop_assert_eq!(&theirs, &headers);
        }
    }

    #[test]
    fn server_response_round_trips_through_the_client_reader(
        status in prop_oneof![200u16..204, 205u16..304, 305u16..600],
        headers in proptest::collection::vec(
            (header_name(), proptest::collection::vec(0x21u8..=0x7e, 0..30)), 0..8),
        body in proptest::collection::vec(any::<u8>(), 0..6000),
        keep_alive in any::<bool>(),
        responses in 1usize..3,
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let values: Vec<String> = headers.iter().map(|(_, v)| String::from_utf8(v.clone()).unwrap()).collect();
        let hdrs: Vec<(&str, &str)> = headers.iter().zip(&values).map(|((n, _), v)| (n.as_str(), v.as_str())).collect();
        let mut wire = Vec::new();
        for _ in 0..responses {
            write_response(&mut wire, status, &hdrs, &body, keep_alive, false);
        }
        let limits = ClientLimits::default();
        let keep = limits.max_body_keep;
        let mut reader = ResponseReader::new(limits);
        let got = feed(&wire, &cuts, |buf| match reader.poll(buf) {
            ResponseEvent::Incomplete => None,
            other => Some(other),
        });
        prop_assert_eq!(got.len(), responses, "{:?}", got);
        for ev in got {
            let ResponseEvent::Response(r) = ev else {
                return Err(TestCaseError::fail(format!("client refused: {ev:?}")));
            };
            prop_assert_eq!(r.status, status);
            prop_assert_eq!(r.body_len, body.len() as u64);
            prop_assert_eq!(&r.body_prefix[..], &body[..body.len().min(keep)]);
            prop_assert_eq!(r.keep_alive, keep_alive);
            for ((n, _), v) in headers.iter().zip(&values) {
                prop_assert!(r.headers.iter().any(|(hn, hv)| hn == n && hv == v.as_bytes()), "{} missing", n);
            }
        }
    }
}

#[derive(Debug, Clone)]
enum RingOp {
    Push(u32),
    Pop,
    Close,
}

fn ring_op() -> impl Strategy<Value = RingOp> {
    prop_oneof![6 => any::<u32>().prop_map(RingOp::Push), 5 => Just(RingOp::Pop), 1 => Just(RingOp::Close)]
}

proptest! {
    #[test]
    fn ring_behaves_like_a_bounded_vecdeque(
        capacity in 0usize..20,
        ops in proptest::collection::vec(ring_op(), 0..300),
    ) {
        let (tx, mut rx) = ring::channel::<u32>(capacity);
        let cap = tx.capacity();
        prop_assert!(cap >= capacity.max(1) && cap.is_power_of_two());
        let mut model: VecDeque<u32> = VecDeque::new();
        let mut closed = false;
        for op in ops {
            match op {
                RingOp::Push(v) => {
                    let got = tx.try_push(v);
                    match got {
                        Ok(()) => {
                            prop_assert!(!closed && model.len() < cap);
                            model.push_back(v);
                        }
                        Err(PushError::Closed(x)) => prop_assert!(closed && x == v),
                        Err(PushError::Full(x)) => prop_assert!(!closed && model.len() == cap && x == v),
                    }
                }
                RingOp::Pop => prop_assert_eq!(rx.try_pop(), model.pop_front()),
                RingOp::Close => {
                    if capacity % 2 == 0 { tx.close() } else { rx.close() }
                    closed = true;
                }
            }
            prop_assert_eq!(tx.len(), model.len());
            prop_assert_eq!(rx.len(), model.len());
            prop_assert_eq!(tx.is_closed(), closed);
            prop_assert_eq!(rx.is_closed(), closed);
        }
        while let Some(v) = model.pop_front() {
            prop_assert_eq!(rx.try_pop(), Some(v));
        }
        prop_assert_eq!(rx.try_pop(), None);
    }
}

/// The reference: a bucket of `f64` tokens refilled continuously at `1 / T` per nanosecond
/// (`T` = the emission interval the GCRA uses), capped at `capacity`, starting full.
struct ModelBucket {
    tokens: f64,
    capacity: f64,
    per_nano: f64,
    at: u64,
}

impl ModelBucket {
    fn advance(&mut self, now: u64) {
        self.tokens = (self.tokens + (now - self.at) as f64 * self.per_nano).min(self.capacity);
        self.at = now;
    }
}

proptest! {
    #[test]
    fn token_bucket_matches_a_continuous_refill_model(
        capacity in 1u64..50,
        refill in prop_oneof![1u64..10, 10u64..100_000, Just(1_000_000_000u64)],
        steps in proptest::collection::vec((0u64..3_000_000_000, 1usize..4), 1..200),
    ) {
        let params = BucketParams::new(capacity, refill).unwrap();
        let t = params.emission_nanos() as f64;
        let start = 1_000_000u64;
        let bucket = TokenBucket::new(params, start);
        let mut model = ModelBucket { tokens: capacity as f64, capacity: capacity as f64, per_nano: 1.0 / t, at: start };
        let mut now = start;
        // Steps are scaled to the refill time of one token, so both busy and idle phases occur.
        for (dt, tries) in steps {
            now += dt % (params.emission_nanos() * 4 + 1);
            model.advance(now);
            let avail = bucket.available(now);
            prop_assert!((avail - model.tokens).abs() < 1e-6 * capacity as f64 + 1e-9,
                "available {avail} vs model {}", model.tokens);
            for _ in 0..tries {
                let got = bucket.try_acquire(now);
                // Exactly at the boundary, f64 rounding may differ: follow the real decision.
                let ambiguous = (model.tokens - 1.0).abs() < 1e-9;
                match got {
                    Ok(()) => {
                        prop_assert!(ambiguous || model.tokens >= 1.0, "admitted with {} tokens", model.tokens);
                        model.tokens = (model.tokens - 1.0).max(0.0);
                    }
                    Err(retry) => {
                        prop_assert!(ambiguous || model.tokens < 1.0, "refused with {} tokens", model.tokens);
                        let want = (1.0 - model.tokens) * t;
                        let got = retry.as_nanos() as f64;
                        prop_assert!(got > 0.0 && (got - want).abs() <= 1.0 + 1e-9 * want,
                            "retry after {got} ns, model {want} ns");
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fuzz regressions (inputs found by `fuzz/`, kept as plain tests)

/// `fuzz/wal_recovery`, first run: a record with a valid length, CRC, kind and LSN whose event
/// payload does not decode (40 zero bytes: 20 trailing). `open` checks framing only and accepts
/// it; `wal verify` must report the corruption, and the dispatch recovery (the next start-up
/// step) must refuse rather than skip the event.
#[test]
fn fuzz_regression_valid_frame_with_undecodable_event_payload() {
    use sluice::wal::format::append_record;
    use sluice::wal::{self, Durability, RecordKind, WalConfig};
    let tmp = tempfile::tempdir().unwrap();
    let wal_dir = tmp.path().join("wal");
    std::fs::create_dir_all(&wal_dir).unwrap();
    let mut seg = Vec::new();
    append_record::<()>(&mut seg, 1, RecordKind::Event, |o| {
        o.extend_from_slice(&[0u8; 40]);
        Ok(())
    })
    .unwrap();
    std::fs::write(wal_dir.join(format!("{:020}.seg", 1)), &seg).unwrap();
    let cfg = WalConfig {
        segment_bytes: wal::MIN_SEGMENT_BYTES,
        max_body_bytes: 4096,
        durability: Durability::Os,
        ..WalConfig::new(&wal_dir)
    };
    let (log, report) = wal::open(&cfg).expect("framing is valid");
    drop(log);
    assert_eq!(report.records, 1);
    let v = wal::tools::verify(tmp.path()).unwrap();
    assert!(
        matches!(v.finding, Some(wal::tools::Finding::Corrupt { .. })),
        "{v}"
    );
    assert!(wal::recover_dispatch(&wal_dir).is_err());
}
