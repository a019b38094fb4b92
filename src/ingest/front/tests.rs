//! Unit tests of the ingest front without a loop: real connections on loopback sockets in a
//! real `Conns` table, requests parsed by the real codec, the pipeline over real buckets,
//! guards, dedupe index and backlog built from a manifest, and a fake [`Stage`] that records
//! what was staged and settled. Each test follows one request to its queued answer and checks
//! the accounting (backlog reservation, dedupe claim, replay record) it leaves behind.

use std::sync::Arc;

use hmac::{Hmac, Mac};

use super::*;
use crate::config::{Config, Overrides};
use crate::ingest::backlog::{trigger_shares, Backlog};
use crate::ingest::bucket::Admission;
use crate::ingest::respond::Refusal;
use crate::ingest::schedule::ReturnSchedule;
use crate::ingest::sources::SourceTable;
use crate::ingest::Guards;
use crate::metrics::Metrics;
use crate::net::budget::BodyBudget;
use crate::net::conn::Conn;
use crate::net::http::{Limits, ReadEvent, Request, RequestReader};
use crate::net::io::Stream;
use crate::sync::gcra::BucketParams;
use crate::wal::Lsn;

const SECRET: &str = "a front test secret";
const T0: u64 = 5_000_000_000;
const NOW: Now = Now {
    mono: T0,
    unix_ms: 1_750_000_000_000,
    unix_us: 1_750_000_000_000_000,
};
const PLAIN: &str = crate::ingest::router::DEFAULT_TRIGGER_ID;
const MANIFEST: &str = r#"
[ingest]
global_capacity = 1000
per_source_capacity = 100
refill_per_sec = 1

[[triggers]]
id = "gh"
provider = "github"
path = "/gh"
verify = "github"
secrets = [{ env = "GH_SECRET" }]
dedupe = true
"#;

/// The commit batch, faked: room is switched by the test; staged and settled tickets are kept.
#[derive(Default)]
struct FakeStage {
    full: bool,
    /// The core keeps nothing for the tickets (a client's event): no `settled` is expected.
    hold_none: bool,
    staged: Vec<u64>,
    admitted: Vec<u64>,
    settled: Vec<(u64, bool)>,
}

impl Stage for FakeStage {
    fn has_room(&self, _weight: usize) -> bool {
        !self.full
    }
    fn stage(&mut self, ticket: u64, record: wal::Record) {
        assert!(matches!(record, wal::Record::Event(_)));
        self.staged.push(ticket);
    }
    fn admitted(&mut self, ticket: u64) -> bool {
        self.admitted.push(ticket);
        !self.hold_none
    }
    fn settled(&mut self, ticket: u64, durable: bool) {
        self.settled.push((ticket, durable));
    }
}

struct Fx {
    config: Config,
    guards: Guards,
    admission: Admission,
    returns: ReturnSchedule,
    backlog: Backlog,
    metrics: CoreMetrics,
    front: Front,
    conns: Conns<PendingIngest>,
    stage: FakeStage,
    /// The client ends of the connections (kept open).
    peers: Vec<std::net::TcpStream>,
}

impl Fx {
    fn new(max_outstanding: usize) -> Fx {
        let env = |k: &str| (k == "GH_SECRET").then(|| SECRET.to_string());
        let raw = Config::parse_manifest(MANIFEST).unwrap();
        let config = Config::build(raw, &env, &Overrides::default()).unwrap();
        let ing = &config.ingest;
        let params = |cap| BucketParams::new(cap, ing.refill_per_sec).unwrap();
        let table = SourceTable::new(ing.max_sources, params(ing.per_source_capacity));
        let backlog = Backlog::with_wal_limit(100, 1 << 30, 0.9, 0.5, u64::MAX)
            .with_triggers(&trigger_shares(&config.ingest_triggers()), true, 0.0)
            .unwrap();
        Fx {
            guards: Guards::new(&config.ingest_triggers(), ing.dedupe_max_keys),
            admission: Admission::new(params(ing.global_capacity), T0),
            returns: ReturnSchedule::new(ing.refill_per_sec),
            backlog,
            metrics: Metrics::new(1).core(0),
            front: Front::new(0, SourceCache::new(Arc::new(table)), max_outstanding),
            conns: Conns::new(8),
            stage: FakeStage::default(),
            peers: Vec::new(),
            config,
        }
    }

    /// Opens a connection (a real loopback socket) in the table: its slot.
    fn connect(&mut self) -> usize {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (ours, _) = l.accept().unwrap();
        ours.set_nonblocking(true).unwrap();
        let stream = Stream::Mio(mio::net::TcpStream::from_std(ours));
        let budget = Arc::new(BodyBudget::new(1 << 20));
        let conn = Conn::new(stream, RequestReader::new(Limits::default()), budget, 0);
        let idx = self.conns.reserve();
        self.conns.put(idx, conn);
        self.peers.push(peer);
        idx
    }

    /// Runs one request through the front on connection `idx` at `now`.
    fn ingest_at(
        &mut self,
        idx: usize,
        trigger: &str,
        headers: &[(&str, &str)],
        now: Now,
    ) -> Option<u64> {
        let Request { head, body } = parse(headers, r#"{"n":1}"#);
        let arrival = Arrival {
            head: &head,
            body,
            trigger_id: trigger,
            source: "acme",
        };
        let env = Env {
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
            metrics: &self.metrics,
            date: "Thu, 01 Jan 2026 00:00:00 GMT",
        };
        let (front, conns, stage) = (&mut self.front, &mut self.conns, &mut self.stage);
        front.ingest(conns, idx, arrival, true, now, stage, &env)
    }

    fn ingest(&mut self, idx: usize, trigger: &str, headers: &[(&str, &str)]) -> Option<u64> {
        self.ingest_at(idx, trigger, headers, NOW)
    }

    /// Calls `f` with the front, the table, the stage and the node.
    fn with<R>(
        &mut self,
        f: impl FnOnce(&mut Front, &mut Conns<PendingIngest>, &mut FakeStage, &Env<'_>) -> R,
    ) -> R {
        let env = Env {
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
            metrics: &self.metrics,
            date: "Thu, 01 Jan 2026 00:00:00 GMT",
        };
        f(&mut self.front, &mut self.conns, &mut self.stage, &env)
    }

    fn done(&mut self, ticket: u64, outcome: AppendOutcome) -> Option<usize> {
        self.with(|front, conns, stage, env| front.ingest_done(conns, ticket, outcome, stage, env))
    }

    /// The queued answers of connection `idx`, as text; `None` for a pending reply.
    fn answers(&self, idx: usize) -> Vec<Option<String>> {
        let conn = self.conns.get(idx).unwrap();
        conn.slots
            .iter()
            .map(|s| match s {
                Slot::Ready { bytes, .. } => Some(String::from_utf8_lossy(bytes).into_owned()),
                Slot::Pending(_) => None,
                other => panic!("unexpected slot {other:?}"),
            })
            .collect()
    }
}

const DURABLE: AppendOutcome = AppendOutcome::Durable { lsn: 7 as Lsn };

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

/// A signed `gh` request with delivery id `delivery` (dedupe key).
fn gh_headers(delivery: &str) -> Vec<(String, String)> {
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    m.update(br#"{"n":1}"#);
    let hex: String = m
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    vec![
        ("X-Hub-Signature-256".into(), format!("sha256={hex}")),
        ("X-GitHub-Delivery".into(), delivery.into()),
    ]
}

fn refs(h: &[(String, String)]) -> Vec<(&str, &str)> {
    h.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect()
}

#[test]
fn an_admitted_request_is_staged_and_answered_202_in_its_slot_once_durable() {
    let mut fx = Fx::new(4);
    let idx = fx.connect();
    let ticket = fx.ingest(idx, PLAIN, &[]).expect("an append");
    assert_eq!(
        ticket >> TICKET_SEQ_BITS,
        idx as u64,
        "the ticket names its connection"
    );
    assert_eq!(fx.stage.admitted, vec![ticket]);
    assert_eq!(fx.stage.staged, vec![ticket], "room: staged at once");
    assert_eq!(
        (fx.front.in_flight(), fx.front.offers_waiting()),
        (1, false)
    );
    assert_eq!(
        fx.answers(idx),
        vec![None],
        "the reply waits in request order"
    );
    assert_eq!(fx.done(ticket, DURABLE), Some(idx));
    let answers = fx.answers(idx);
    let text = answers[0].as_deref().expect("answered");
    assert!(text.starts_with("HTTP/1.1 202"), "{text}");
    assert!(text.contains("Date: Thu, 01 Jan 2026"), "{text}");
    assert!(text.contains(r#""status":"accepted""#), "{text}");
    assert_eq!(fx.stage.settled, vec![(ticket, true)]);
    assert_eq!(fx.front.in_flight(), 0);
    assert_eq!(
        fx.backlog.pending_events(),
        1,
        "the pump releases it, not the 202"
    );
}

#[test]
fn a_ticket_the_core_does_not_hold_is_never_settled_with_it_and_its_answer_is_listed() {
    let mut fx = Fx::new(4);
    fx.stage.hold_none = true;
    let idx = fx.connect();
    let t1 = fx.ingest(idx, PLAIN, &[]).expect("an append");
    let t2 = fx.ingest(idx, PLAIN, &[]).expect("an append");
    assert_eq!(fx.stage.admitted, vec![t1, t2], "asked once per append");
    assert_eq!(fx.done(t1, DURABLE), Some(idx));
    assert_eq!(fx.done(t2, DURABLE), Some(idx));
    assert!(
        fx.stage.settled.is_empty(),
        "a client's event does not call the core's holds"
    );
    let mut answered = Vec::new();
    fx.conns.take_answered(&mut answered);
    assert_eq!(
        answered,
        vec![idx],
        "the server writes the connection, once"
    );
    // A closed connection: one event staged (an orphan), one never staged. Neither is held.
    let idx = fx.connect();
    let staged = fx.ingest(idx, PLAIN, &[]).unwrap();
    fx.stage.full = true;
    let waiting = fx.ingest(idx, PLAIN, &[]).unwrap();
    let conn = fx.conns.take(idx).unwrap();
    fx.with(|f, _, s, e| {
        for slot in &conn.slots {
            if let Slot::Pending(p) = slot {
                f.on_close(p, s, &e.node);
            }
        }
    });
    assert_eq!(fx.done(staged, DURABLE), None);
    assert!(fx.stage.settled.is_empty(), "{waiting}: never held");
    assert_eq!(
        fx.backlog.pending_events(),
        3,
        "the never-staged one's went back"
    );
}

#[test]
fn an_immediate_refusal_is_queued_and_stages_nothing() {
    let mut fx = Fx::new(4);
    let idx = fx.connect();
    // A bad signature: 401 from the pipeline, nothing reserved, staged or claimed.
    let bad = [
        ("X-Hub-Signature-256", "sha256=00"),
        ("X-GitHub-Delivery", "d-x"),
    ];
    assert_eq!(fx.ingest(idx, "gh", &bad), None);
    let answers = fx.answers(idx);
    assert!(answers[0].as_deref().unwrap().starts_with("HTTP/1.1 401"));
    assert!(fx.stage.staged.is_empty() && fx.stage.admitted.is_empty());
    assert_eq!(fx.backlog.pending_events(), 0);
}

#[test]
fn the_dedupe_claim_is_held_until_the_answer_and_confirmed_when_durable() {
    let mut fx = Fx::new(4);
    let idx = fx.connect();
    let h = gh_headers("d-1");
    let t = fx.ingest(idx, "gh", &refs(&h)).expect("an append");
    // The same delivery while the first is in flight: 503 duplicate_in_flight.
    assert_eq!(fx.ingest(idx, "gh", &refs(&h)), None);
    assert!(fx.answers(idx)[1]
        .as_deref()
        .unwrap()
        .starts_with("HTTP/1.1 503"));
    fx.done(t, DURABLE);
    // Confirmed: now a duplicate, answered 200 without an append.
    assert_eq!(fx.ingest(idx, "gh", &refs(&h)), None);
    let third = fx.answers(idx)[2].clone().unwrap();
    assert!(
        third.starts_with("HTTP/1.1 200") && third.contains("duplicate"),
        "{third}"
    );
}

#[test]
fn a_failed_append_answers_503_wal_unavailable_and_releases_claim_and_reservation() {
    let mut fx = Fx::new(4);
    let idx = fx.connect();
    let h = gh_headers("d-2");
    let t = fx.ingest(idx, "gh", &refs(&h)).unwrap();
    assert_eq!(fx.backlog.pending_events(), 1);
    fx.done(t, AppendOutcome::Unavailable);
    let text = fx.answers(idx)[0].clone().unwrap();
    assert!(
        text.starts_with("HTTP/1.1 503") && text.contains("wal_unavailable"),
        "{text}"
    );
    assert!(text.contains("Retry-After: 1"), "{text}");
    assert_eq!(
        fx.backlog.pending_events(),
        0,
        "the reservation is given back"
    );
    assert_eq!(fx.stage.settled, vec![(t, false)]);
    // The claim was released: the same delivery is admitted again.
    assert!(fx.ingest(idx, "gh", &refs(&h)).is_some());
}

#[test]
fn a_request_held_past_replication_is_answered_503_now_and_its_event_settles_with_its_batch() {
    let mut fx = Fx::new(4);
    let idx = fx.connect();
    let h = gh_headers("d-9");
    let t = fx.ingest(idx, "gh", &refs(&h)).unwrap();
    let answered = fx.with(|front, conns, _, env| {
        front.answer_held(conns, t, Refusal::ReplicationUnavailable, env)
    });
    assert_eq!(answered, Some(idx));
    let text = fx.answers(idx)[0].clone().unwrap();
    assert!(
        text.starts_with("HTTP/1.1 503") && text.contains("replication_unavailable"),
        "{text}"
    );
    assert!(text.contains("Retry-After: 2"), "{text}");
    assert_eq!(
        fx.backlog.pending_events(),
        1,
        "the event stays reserved: it is in the log"
    );
    // The same delivery is not admitted twice meanwhile: its claim waits for the batch.
    assert!(fx.ingest(idx, "gh", &refs(&h)).is_none());
    // Its batch is replicated later: settled (claim confirmed), not answered again.
    assert_eq!(fx.done(t, DURABLE), None, "no connection answered twice");
    assert_eq!(
        fx.answers(idx).len(),
        2,
        "the 503, then the duplicate's answer"
    );
    assert_eq!(
        fx.backlog.pending_events(),
        1,
        "the event is pending until delivered"
    );
}

#[test]
fn without_room_the_connection_waits_in_order_and_is_refused_wal_busy_at_its_deadline() {
    let mut fx = Fx::new(4);
    let (a, b) = (fx.connect(), fx.connect());
    fx.stage.full = true;
    let ta = fx.ingest(a, PLAIN, &[]).unwrap();
    let tb = fx.ingest(b, PLAIN, &[]).unwrap();
    assert!(fx.stage.staged.is_empty() && fx.front.offers_waiting());
    // Room again: both are staged, in arrival order, and both connections are touched.
    fx.stage.full = false;
    let mut touched = Vec::new();
    fx.with(|f, c, s, e| f.retry_offers(c, T0 + 1, s, e, &mut touched));
    assert_eq!(fx.stage.staged, vec![ta, tb]);
    assert_eq!(touched, vec![a, b]);
    assert!(!fx.front.offers_waiting());
    // No room again until past the offer deadline (50 ms by default): 503 wal_busy.
    fx.stage.full = true;
    let tc = fx.ingest(a, PLAIN, &[]).unwrap();
    let later = T0 + 50_000_000;
    touched.clear();
    fx.with(|f, c, s, e| f.retry_offers(c, later, s, e, &mut touched));
    let text = fx.answers(a)[1].clone().expect("refused");
    assert!(
        text.starts_with("HTTP/1.1 503") && text.contains("wal_busy"),
        "{text}"
    );
    assert_eq!(fx.stage.settled, vec![(tc, false)]);
    assert!(!fx.front.offers_waiting());
    assert_eq!(fx.front.in_flight(), 2, "the refused one never went out");
    assert_eq!(
        fx.backlog.pending_events(),
        2,
        "its reservation is given back"
    );
}

#[test]
fn at_max_outstanding_nothing_more_is_staged_until_an_answer_comes() {
    let mut fx = Fx::new(1);
    let idx = fx.connect();
    let t1 = fx.ingest(idx, PLAIN, &[]).unwrap();
    let t2 = fx.ingest(idx, PLAIN, &[]).unwrap();
    assert_eq!(fx.stage.staged, vec![t1]);
    assert!(fx.front.at_bound() && fx.front.offers_waiting());
    let rec = wal::Record::Event(crate::wal::EventRecord {
        event_id: "x".into(),
        trigger_id: PLAIN.into(),
        source: "s".into(),
        received_at_ms: 0,
        headers: vec![],
        body: vec![],
        replay_of: None,
        body_json: Default::default(),
    });
    let staged = fx.with(|f, _, s, _| f.stage_direct(s, 99, rec));
    assert!(!staged, "a bulk replay respects the bound too");
    fx.done(t1, DURABLE);
    let mut touched = Vec::new();
    fx.with(|f, c, s, e| f.retry_offers(c, T0, s, e, &mut touched));
    assert_eq!(fx.stage.staged, vec![t1, t2]);
}

#[test]
fn a_connection_closed_before_staging_settles_at_once_and_after_staging_when_answered() {
    let mut fx = Fx::new(4);
    let idx = fx.connect();
    let h1 = gh_headers("d-3");
    let staged = fx.ingest(idx, "gh", &refs(&h1)).unwrap();
    fx.stage.full = true;
    let h2 = gh_headers("d-4");
    let waiting = fx.ingest(idx, "gh", &refs(&h2)).unwrap();
    assert_eq!(fx.backlog.pending_events(), 2);
    let conn = fx.conns.take(idx).unwrap();
    fx.with(|f, _, s, e| {
        for slot in &conn.slots {
            if let Slot::Pending(p) = slot {
                f.on_close(p, s, &e.node);
            }
        }
    });
    // The one never staged: claim and reservation released now.
    assert_eq!(fx.stage.settled, vec![(waiting, false)]);
    assert_eq!(fx.backlog.pending_events(), 1);
    // The staged one's failure comes later: nobody to answer, the reservation goes back.
    assert_eq!(fx.done(staged, AppendOutcome::Unavailable), None);
    assert_eq!(fx.stage.settled, vec![(waiting, false), (staged, false)]);
    assert_eq!(fx.backlog.pending_events(), 0);
    assert_eq!(fx.front.in_flight(), 0);
    // Both claims were released: both deliveries are admitted again on a new connection.
    fx.stage.full = false;
    let idx = fx.connect();
    assert!(fx.ingest(idx, "gh", &refs(&h1)).is_some());
    assert!(fx.ingest(idx, "gh", &refs(&h2)).is_some());
}

// ----- the core's handler (`ingest::serve`) over the front -----------------------------------

use crate::ingest::router::{RouteMatch, Router};
use crate::ingest::serve::{Rest, Serve};
use crate::net::server::{Ctx, Handler};

/// The core around the front, faked: it records the routes that are not ingest's.
struct FakeRest<'a> {
    fx: &'a mut Fx,
    router: Arc<Router>,
    others: Vec<String>,
    reloads: usize,
}

impl Rest for FakeRest<'_> {
    type Stage<'s>
        = &'s mut FakeStage
    where
        Self: 's;

    fn follow_reload(&mut self) {
        self.reloads += 1;
    }
    fn router(&self) -> &Arc<Router> {
        &self.router
    }
    fn parts(&mut self) -> (&mut Front, Node<'_>, &mut FakeStage) {
        let fx = &mut *self.fx;
        let node = Node {
            ingest: &fx.config.ingest,
            segment_bytes: fx.config.wal.segment_bytes,
            guards: &fx.guards,
            table: fx.guards.start_table(),
            admission: &fx.admission,
            returns: &fx.returns,
            backlog: &fx.backlog,
            replication: None,
        };
        (&mut fx.front, node, &mut fx.stage)
    }
    fn other(
        &mut self,
        cx: &mut Ctx<'_, PendingIngest>,
        route: RouteMatch<'_>,
        head: &http::RequestHead,
        keep_alive: bool,
    ) {
        self.others.push(format!("{route:?} {}", head.path()));
        cx.respond(Route::Healthz, 200, &[], b"ok\n", keep_alive, false);
    }
    fn turn_now(&self) -> u64 {
        T0
    }
    fn draining(&self) -> bool {
        false
    }
    fn note_input(&mut self, _at: u64) {}
}

/// Parses `GET`/`POST` `path` with `headers` through the real codec.
fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> Request {
    let body = if method == "POST" { r#"{"n":1}"# } else { "" };
    let mut text = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n",
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

#[test]
fn the_handler_runs_ingest_routes_through_the_front_and_hands_every_other_route_to_the_core() {
    let mut fx = Fx::new(4);
    let idx = fx.connect();
    let router = Arc::new(Router::new(
        &fx.config.ingest_triggers(),
        fx.config.ingest.default_route,
    ));
    let metrics = Metrics::new(1).core(0);
    let mut conns = std::mem::replace(&mut fx.conns, Conns::new(8));
    let mut serve = Serve(FakeRest {
        fx: &mut fx,
        router,
        others: Vec::new(),
        reloads: 0,
    });
    let date = "Thu, 01 Jan 2026 00:00:00 GMT";
    let signed = gh_headers("d-9");
    for (method, path) in [("POST", "/gh"), ("GET", "/healthz")] {
        let Request { head, body } = request(method, path, &refs(&signed));
        let mut cx = Ctx {
            conns: &mut conns,
            idx,
            date,
            metrics: &metrics,
        };
        serve.on_request(&mut cx, &head, body, true);
    }
    let rest = serve.0;
    assert_eq!(
        rest.reloads, 2,
        "a reload is followed before each request is routed"
    );
    assert_eq!(rest.others.len(), 1, "{:?}", rest.others);
    assert!(rest.others[0].ends_with("/healthz"), "{:?}", rest.others);
    assert_eq!(rest.fx.stage.staged.len(), 1, "the webhook was staged");
    let slots = &conns.get(idx).unwrap().slots;
    assert!(
        matches!(slots[0], Slot::Pending(_)),
        "the 202 waits for the commit"
    );
    assert!(
        matches!(slots[1], Slot::Ready { .. }),
        "answered by the core"
    );
}

#[test]
fn a_refused_body_is_answered_503_body_budget_and_the_connection_closes_after_it() {
    let mut fx = Fx::new(4);
    let idx = fx.connect();
    // A head waiting for its 5-byte body, on a budget of 1 byte.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let _peer = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (ours, _) = l.accept().unwrap();
    ours.set_nonblocking(true).unwrap();
    let stream = Stream::Mio(mio::net::TcpStream::from_std(ours));
    let budget = Arc::new(BodyBudget::new(1));
    let reader = RequestReader::new(Limits::default()).with_body_gate();
    let mut conn = Conn::new(stream, reader, budget, 0);
    conn.rbuf
        .extend_from_slice(b"POST /gh HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\n");
    let mut held = None;
    assert!(matches!(
        conn.reader.poll_reusing(&mut conn.rbuf, &mut held),
        ReadEvent::HeadReady { .. }
    ));
    let _ = fx.conns.take(idx);
    let idx = fx.conns.reserve();
    fx.conns.put(idx, conn);
    let router = Arc::new(Router::new(
        &fx.config.ingest_triggers(),
        fx.config.ingest.default_route,
    ));
    let metrics = Metrics::new(1).core(0);
    let mut conns = std::mem::replace(&mut fx.conns, Conns::new(8));
    let mut serve = Serve(FakeRest {
        fx: &mut fx,
        router,
        others: Vec::new(),
        reloads: 0,
    });
    let mut cx = Ctx {
        conns: &mut conns,
        idx,
        date: "Thu, 01 Jan 2026 00:00:00 GMT",
        metrics: &metrics,
    };
    assert!(
        !serve.gate_body(&mut cx, 5),
        "1 byte of budget cannot cover 5"
    );
    let Slot::Ready { bytes, close } = &conns.get(idx).unwrap().slots[0] else {
        panic!("no answer queued");
    };
    let text = String::from_utf8_lossy(bytes);
    assert!(
        text.starts_with("HTTP/1.1 503") && text.contains("body_budget"),
        "{text}"
    );
    assert!(*close, "the connection closes after it");
}
