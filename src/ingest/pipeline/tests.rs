//! Unit tests of the ingest pipeline without sockets: requests parsed by the real sans-IO codec,
//! decided over real buckets, guards, dedupe index, backlog and body budget built from a real
//! manifest. Each test asserts the decision and the accounting it leaves behind.

use hmac::{Hmac, Mac};

use super::*;
use crate::config::{Config, Overrides};
use crate::ingest::backlog::{trigger_shares, Backlog};
use crate::ingest::respond::accepted_body;
use crate::ingest::sources::SourceTable;
use crate::metrics::Metrics;
use crate::net::budget::BodyBudget;
use crate::net::http::{Limits, ReadEvent, Request, RequestReader};
use crate::sync::gcra::BucketParams;
use crate::wal::BodyJson;

const SECRET: &str = "a pipeline test secret";
const T0: u64 = 5_000_000_000;
const NOW: Now = Now {
    mono: T0,
    unix_ms: 1_750_000_000_000,
    unix_us: 1_750_000_000_000_000,
};

/// Tokens of every per-source bucket (refilled at 1/s; the tests' clock does not move).
const CAP: usize = 4;
/// The default route's trigger id: its events are bucketed and counted per source.
const PLAIN: &str = crate::ingest::router::DEFAULT_TRIGGER_ID;

/// `gh` verifies GitHub signatures and dedupes on `X-GitHub-Delivery` (its requests share the
/// trigger's bucket and counters, whatever the source); the default route does neither.
const MANIFEST: &str = r#"
[ingest]
global_capacity = 1000
per_source_capacity = 4
refill_per_sec = 1

[[triggers]]
id = "gh"
provider = "github"
path = "/gh"
verify = "github"
secrets = [{ env = "GH_SECRET" }]
dedupe = true
"#;

/// The node's shared state and one core's parts, as the runtime builds them.
struct Fx {
    config: Config,
    guards: Guards,
    admission: Admission,
    returns: ReturnSchedule,
    backlog: Backlog,
    sources: SourceCache,
    ids: EventIdGen,
    metrics: CoreMetrics,
}

impl Fx {
    /// A node whose backlog holds `max_events` events and whose disk bound is `max_wal_bytes`.
    fn new(max_events: u64, max_wal_bytes: u64) -> Fx {
        Fx::with_manifest(MANIFEST, max_events, max_wal_bytes)
    }

    /// [`Fx::new`] for another manifest.
    fn with_manifest(manifest: &str, max_events: u64, max_wal_bytes: u64) -> Fx {
        let env = |k: &str| (k == "GH_SECRET").then(|| SECRET.to_string());
        let raw = Config::parse_manifest(manifest).unwrap();
        let config = Config::build(raw, &env, &Overrides::default()).unwrap();
        let ing = &config.ingest;
        let params = |cap| BucketParams::new(cap, ing.refill_per_sec).unwrap();
        let table = SourceTable::new(ing.max_sources, params(ing.per_source_capacity))
            .with_triggers(
                config
                    .triggers
                    .iter()
                    .map(|t| (t.id.as_str(), t.provider.as_str())),
            );
        let backlog = Backlog::with_wal_limit(max_events, 1 << 30, 0.9, 0.5, max_wal_bytes)
            .with_triggers(&trigger_shares(&config.ingest_triggers()), true, 0.0)
            .unwrap();
        Fx {
            guards: Guards::new(&config.ingest_triggers(), ing.dedupe_max_keys),
            admission: Admission::new(params(ing.global_capacity), T0),
            returns: ReturnSchedule::new(ing.refill_per_sec),
            backlog,
            sources: SourceCache::new(Arc::new(table)),
            ids: EventIdGen::new(0),
            metrics: Metrics::new(1).core(0),
            config,
        }
    }

    fn pipeline(&mut self) -> Pipeline<'_> {
        Pipeline {
            node: Node {
                ingest: &self.config.ingest,
                segment_bytes: self.config.wal.segment_bytes,
                guards: &self.guards,
                table: self.guards.start_table(),
                admission: &self.admission,
                returns: &self.returns,
                backlog: &self.backlog,
                replication: None,
            },
            sources: &mut self.sources,
            ids: &mut self.ids,
            metrics: &self.metrics,
        }
    }

    fn ingest(
        &mut self,
        trigger: &str,
        source: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Output {
        let Request { head, body } = parse(headers, body);
        let arrival = Arrival {
            head: &head,
            body,
            trigger_id: trigger,
            source,
        };
        self.pipeline().ingest(arrival, NOW)
    }

    fn source_refusals(&mut self, source: &str, reason: Refusal) -> u64 {
        self.sources.get(source).refusals(reason)
    }
}

/// Parses one `POST` through the real request codec.
fn parse(headers: &[(&str, &str)], body: &str) -> Request {
    let mut text = format!(
        "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        text.push_str(&format!("{n}: {v}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    let mut buf = text.into_bytes();
    match RequestReader::new(Limits::default()).poll(&mut buf) {
        ReadEvent::Request(r) => r,
        other => panic!("the codec did not produce a request: {other:?}"),
    }
}

fn github_sig(body: &str) -> String {
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    m.update(body.as_bytes());
    let tag = m.finalize().into_bytes();
    let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

fn append(d: Output) -> Append {
    match d {
        Output::Append(a) => a,
        Output::Respond(r) => panic!(
            "expected an append, got {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        ),
    }
}

fn respond(d: Output) -> Response {
    match d {
        Output::Respond(r) => r,
        Output::Append(a) => panic!("expected a response, got an append of {:?}", a.record),
    }
}

#[test]
fn admit_appends_the_record_and_answers_202_once_durable() {
    let mut fx = Fx::new(100, u64::MAX);
    let body = r#"{"n":1}"#;
    let h = [("Content-Type", "application/json"), ("X-Unstored", "no")];
    let a = append(fx.ingest(PLAIN, "acme", &h, body));
    let r = &a.record;
    assert_eq!((r.trigger_id.as_str(), r.source.as_str()), (PLAIN, "acme"));
    assert_eq!(
        (r.body.as_slice(), r.received_at_ms),
        (body.as_bytes(), NOW.unix_ms)
    );
    assert_eq!(
        r.headers,
        vec![("content-type".to_string(), b"application/json".to_vec())]
    );
    assert_eq!(r.replay_of, None);
    assert!(a.claim.is_none(), "plain does not dedupe");
    assert_eq!(
        a.offer_deadline,
        T0 + 50_000_000,
        "offer_timeout defaults to 50ms"
    );
    assert_eq!(a.reply.event_id.as_str(), r.event_id);
    assert_eq!(a.reply.cost, wal::event_cost(r));
    assert_eq!(fx.backlog.pending_events(), 1, "the reservation is held");
    assert_eq!(fx.backlog.pending_bytes(), a.reply.cost);
    let p = fx.pipeline();
    let mut body = String::from("left from an earlier answer");
    let done = p.node.complete(a.reply.as_ref(), Ok(()), &mut body);
    assert_eq!(done.status, 202);
    assert_eq!(body, accepted_body(&r.event_id, PLAIN));
    assert_eq!(done.retry_after, None);
    assert_eq!(fx.sources.get("acme").accepted(), 1);
    // Durable: the reservation stays until the pump makes the event done.
    assert_eq!(fx.backlog.pending_events(), 1);
}

#[test]
fn a_failed_append_answers_503_and_gives_the_reservation_back() {
    let mut fx = Fx::new(100, u64::MAX);
    for reason in [Refusal::WalBusy, Refusal::WalUnavailable] {
        let a = append(fx.ingest(PLAIN, &format!("s-{}", reason.as_str()), &[], "x"));
        assert_eq!(fx.backlog.pending_events(), 1);
        let p = fx.pipeline();
        let mut body = String::new();
        let done = p.node.complete(a.reply.as_ref(), Err(reason), &mut body);
        assert_eq!((done.status, done.retry_after), (503, Some("1")));
        assert_eq!(body, refused_body(reason, 1));
        assert_eq!(fx.backlog.pending_events(), 0, "{reason:?} released");
        assert_eq!(fx.backlog.refusals(PLAIN, reason), 1);
        assert_eq!(
            fx.source_refusals(&format!("s-{}", reason.as_str()), reason),
            1
        );
    }
}

#[test]
fn stored_headers_past_the_wal_bound_are_refused_431_before_any_token() {
    let mut fx = Fx::new(100, u64::MAX);
    let long = "u".repeat(wal::MAX_HEADER_VALUE_BYTES + 1);
    let r = respond(fx.ingest(PLAIN, "acme", &[("User-Agent", &long)], "x"));
    assert_eq!(
        (r.status, r.content_type, r.retry_after),
        (431, http::TEXT_PLAIN, None)
    );
    // No token spent: the source's tokens still admit as many requests.
    for i in 0..CAP {
        append(fx.ingest(PLAIN, "acme", &[], &i.to_string()));
    }
    assert_eq!(fx.backlog.pending_events(), CAP as u64);
}

#[test]
fn ingest_saturated_when_the_source_bucket_is_empty() {
    let mut fx = Fx::new(100, u64::MAX);
    for i in 0..CAP {
        append(fx.ingest(PLAIN, "acme", &[], &i.to_string()));
    }
    let r = respond(fx.ingest(PLAIN, "acme", &[], "one more"));
    assert_eq!((r.status, r.refusal), (503, Some(Refusal::IngestSaturated)));
    let ra = r.retry_after.expect("a Retry-After");
    assert!((1..=60).contains(&ra), "{ra}");
    assert_eq!(
        r.body,
        refused_body(Refusal::IngestSaturated, ra).into_bytes()
    );
    assert_eq!(fx.source_refusals("acme", Refusal::IngestSaturated), 1);
    assert_eq!(
        fx.backlog.pending_events(),
        CAP as u64,
        "nothing reserved for the refusal"
    );
    assert_eq!(
        fx.sources.get("acme").accepted(),
        0,
        "counted when durable, not here"
    );
    // Another source has its own bucket.
    append(fx.ingest(PLAIN, "other", &[], "4"));
}

#[test]
fn queue_full_when_the_trigger_share_and_pool_are_used() {
    // One event of backlog in all: the second is refused.
    let mut fx = Fx::new(1, u64::MAX);
    append(fx.ingest(PLAIN, "acme", &[], "1"));
    let r = respond(fx.ingest(PLAIN, "other", &[], "2"));
    assert_eq!((r.status, r.refusal), (503, Some(Refusal::QueueFull)));
    let ra = r.retry_after.unwrap();
    assert_eq!(r.body, refused_body(Refusal::QueueFull, ra).into_bytes());
    assert_eq!(fx.backlog.refusals(PLAIN, Refusal::QueueFull), 1);
    assert_eq!(fx.source_refusals("other", Refusal::QueueFull), 1);
    assert_eq!(fx.backlog.pending_events(), 1);
}

#[test]
fn wal_full_when_the_disk_bound_is_reached() {
    // Room for the logs' 1 MiB plus one more (default, 64 MiB) segment.
    let mut fx = Fx::new(100, (1 << 20) + (64 << 20));
    assert_eq!(fx.config.wal.segment_bytes, 64 << 20);
    fx.backlog.set_wal_bytes(1 << 20);
    append(fx.ingest(PLAIN, "acme", &[], "fits"));
    // The pumps measured the logs a byte larger: one more segment would pass the bound.
    fx.backlog.set_wal_bytes((1 << 20) + 1);
    let r = respond(fx.ingest(PLAIN, "acme", &[], "1"));
    assert_eq!((r.status, r.refusal), (503, Some(Refusal::WalFull)));
    assert!(r.retry_after.is_some());
    assert_eq!(fx.backlog.refusals(PLAIN, Refusal::WalFull), 1);
    assert_eq!(fx.backlog.pending_events(), 1);
    fx.backlog.set_wal_bytes(0);
    append(fx.ingest(PLAIN, "acme", &[], "2"));
}

#[test]
fn a_bad_signature_is_refused_401_before_buckets_and_dedupe() {
    let mut fx = Fx::new(100, u64::MAX);
    let body = r#"{"zen":"x"}"#;
    let forged = [
        ("X-Hub-Signature-256", github_sig("another body")),
        ("X-GitHub-Delivery", "d-1".to_string()),
    ];
    let forged: Vec<(&str, &str)> = forged.iter().map(|(n, v)| (*n, v.as_str())).collect();
    for _ in 0..3 {
        let r = respond(fx.ingest("gh", "github", &forged, body));
        assert_eq!((r.status, r.content_type), (401, "application/json"));
        assert_eq!(
            r.body,
            verify::unauthorized_body("bad_signature").into_bytes()
        );
    }
    let missing = respond(fx.ingest("gh", "github", &[], body));
    assert_eq!(
        missing.body,
        verify::unauthorized_body("missing_signature").into_bytes()
    );
    // Neither a token nor the delivery id was taken: the signed request is admitted.
    let sig = github_sig(body);
    let signed = [
        ("X-Hub-Signature-256", sig.as_str()),
        ("X-GitHub-Delivery", "d-1"),
    ];
    let a = append(fx.ingest("gh", "github", &signed, body));
    assert!(a.claim.is_some());
    assert_eq!(fx.backlog.pending_events(), 1);
}

#[test]
fn dedupe_hit_answers_duplicate_or_in_flight_and_stores_the_key() {
    let mut fx = Fx::new(100, u64::MAX);
    let body = r#"{"a":1}"#;
    let sig = github_sig(body);
    let h = [
        ("X-Hub-Signature-256", sig.as_str()),
        ("X-GitHub-Delivery", "d-7"),
    ];
    let first = append(fx.ingest("gh", "github", &h, body));
    let key = (first.record.headers.iter()).find(|(n, _)| n == DEDUPE_KEY_HEADER);
    assert_eq!(key.map(|(_, v)| v.as_slice()), Some(b"d-7".as_slice()));
    // Claimed, not yet durable: a second delivery is told to come back.
    let r = respond(fx.ingest("gh", "github", &h, body));
    assert_eq!((r.status, r.retry_after), (503, Some(1)));
    assert_eq!(r.body, dedupe::IN_FLIGHT_BODY.as_bytes());
    // Durable: a second delivery is dropped, naming the original event.
    fx.guards.settle(first.claim.unwrap(), true);
    let r = respond(fx.ingest("gh", "github", &h, body));
    assert_eq!((r.status, r.retry_after), (200, None));
    let want = dedupe::duplicate_body("gh", &first.record.event_id);
    assert_eq!(r.body, want.into_bytes());
    assert_eq!(fx.backlog.pending_events(), 1, "duplicates reserve nothing");
}

#[test]
fn a_backlog_refusal_releases_the_dedupe_claim() {
    let mut fx = Fx::new(1, u64::MAX);
    append(fx.ingest(PLAIN, "acme", &[], "fills the backlog"));
    let body = r#"{"b":2}"#;
    let sig = github_sig(body);
    let h = [
        ("X-Hub-Signature-256", sig.as_str()),
        ("X-GitHub-Delivery", "d-9"),
    ];
    let r = respond(fx.ingest("gh", "github", &h, body));
    assert_eq!(r.refusal, Some(Refusal::QueueFull));
    // The sender's retry is not "in flight": the claim went back with the refusal.
    let r = respond(fx.ingest("gh", "github", &h, body));
    assert_eq!(
        r.refusal,
        Some(Refusal::QueueFull),
        "{:?}",
        String::from_utf8_lossy(&r.body)
    );
}

#[test]
fn body_budget_refuses_what_the_budget_cannot_cover() {
    let mut fx = Fx::new(100, u64::MAX);
    let budget = Arc::new(BodyBudget::new(1000));
    let mut a = Reservation::new(budget.clone());
    let mut b = Reservation::new(budget.clone());
    let mut p = fx.pipeline();
    assert_eq!(
        p.gate_body(&mut a, 600, || panic!("not asked when admitted")),
        Ok(())
    );
    let r = p.gate_body(&mut b, 600, || Some("acme")).unwrap_err();
    assert_eq!((r.status, r.refusal), (503, Some(Refusal::BodyBudget)));
    assert_eq!(r.retry_after, Some(BODY_BUDGET_RETRY_AFTER_SECS));
    assert_eq!(budget.in_use(), 600, "the refused body holds nothing");
    // Not an ingest route: refused the same, counted for no source.
    assert!(p.gate_body(&mut b, 500, || None).is_err());
    // Room again once the first body is released.
    a.release();
    assert_eq!(p.gate_body(&mut b, 600, || None), Ok(()));
    assert_eq!(fx.source_refusals("acme", Refusal::BodyBudget), 1);
}

#[test]
fn a_replay_gets_a_new_id_and_names_the_entry_in_its_202() {
    let mut fx = Fx::new(100, u64::MAX);
    let original = append(fx.ingest(PLAIN, "acme", &[], "again")).record;
    let mut p = fx.pipeline();
    let a = append(p.replay(original.clone(), original.event_id.clone(), NOW));
    assert_ne!(a.record.event_id, original.event_id);
    assert_eq!(
        a.record.replay_of.as_deref(),
        Some(original.event_id.as_str())
    );
    assert_eq!(a.record.body, original.body);
    let mut body = String::new();
    let done = p.node.complete(a.reply.as_ref(), Ok(()), &mut body);
    assert_eq!(done.status, 202);
    assert!(
        body.ends_with(&format!(",\"replay_of\":\"{}\"}}", original.event_id)),
        "{body}"
    );
}

/// `gate` batches with a `batch` flow gate, `dest` through its handler's `batch` destination;
/// `plain` reaches no batch.
const BATCHING: &str = r#"
[[triggers]]
id = "gate"
provider = "p"
path = "/gate"
handler = "http://h/one"
batch = { size = 2, timeout = "1s" }

[[triggers]]
id = "dest"
provider = "p"
path = "/dest"
handler = "http://h/batched"

[[triggers]]
id = "plain"
provider = "p"
path = "/plain"
handler = "http://h/one"

[[destinations]]
uri = "http://h/batched"
batch = {}
"#;

#[test]
fn ingest_decides_json_for_a_batching_trigger_only() {
    let mut fx = Fx::with_manifest(BATCHING, 100, u64::MAX);
    for (trigger, body, want) in [
        ("gate", "{\"a\":1}", BodyJson::Json),
        ("gate", "not json", BodyJson::NotJson),
        ("dest", "[1, 2]", BodyJson::Json),
        ("dest", "{", BodyJson::NotJson),
        ("plain", "{\"a\":1}", BodyJson::Undecided),
        ("plain", "not json", BodyJson::Undecided),
    ] {
        let a = append(fx.ingest(trigger, "acme", &[], body));
        assert_eq!(a.record.body_json, want, "{trigger} {body}");
        // The backlog reservation is the record as logged, flags byte included.
        assert_eq!(a.reply.cost, wal::event_cost(&a.record));
    }
    // A replay keeps a decision, and decides for a batching trigger when there was none.
    let mut p = fx.pipeline();
    let mut undecided = EventRecord {
        trigger_id: "gate".into(),
        body: b"{}".to_vec(),
        ..EventRecord::default()
    };
    let a = append(p.replay(undecided.clone(), "e0".into(), NOW));
    assert_eq!(a.record.body_json, BodyJson::Json);
    undecided.body_json = BodyJson::NotJson;
    let a = append(p.replay(undecided.clone(), "e1".into(), NOW));
    assert_eq!(
        a.record.body_json,
        BodyJson::NotJson,
        "kept, not parsed again"
    );
    undecided.trigger_id = "plain".into();
    undecided.body_json = BodyJson::Undecided;
    let a = append(p.replay(undecided, "e2".into(), NOW));
    assert_eq!(a.record.body_json, BodyJson::Undecided);
}
