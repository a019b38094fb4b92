//! Tests of `dispatch::deliver::dispatcher` (kept apart: the module itself is long): its decisions
//! without sockets. Jobs are held (`draining`), attempts taken through the destination's gate
//! as `pump_dest` would, and the pool's reports fed to `finish` as the pool would hand them
//! over.
use super::*;
use crate::config::{Config, Overrides};
use crate::dispatch::metrics::DispatchMetrics;
use crate::metrics::counter::Metrics;
use crate::wal::EventRecord;
use std::time::Duration;

use mio::Poll;

use crate::net::io::Backend;
use crate::sync::clock::{ManualClock, MANUAL_EPOCH_MS};

const SECOND: u64 = 1_000_000_000;

struct Rig {
    d: Dispatcher,
    /// The dispatcher's outbound streams register here.
    _poll: Poll,
    /// The dispatcher's clock (wall time of retry schedules and stamps).
    clock: Arc<ManualClock>,
    /// What the dispatcher's spec was built from (a reload is laid out against it).
    config: Config,
}

/// A dispatcher for one trigger whose destination has `dest` settings.
fn rig(dest: &str) -> Rig {
    let text = format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\n\
         handler = \"http://127.0.0.1:9/h\"\n\
         [[destinations]]\nuri = \"http://127.0.0.1:9/h\"\n{dest}\n"
    );
    let config = Config::build(
        Config::parse_manifest(&text).unwrap(),
        &|_: &str| None,
        &Overrides::default(),
    )
    .unwrap();
    let metrics = CoreDispatchMetrics {
        core: Metrics::new(1).core(0),
        shared: Arc::new(DispatchMetrics::new(&[("http://127.0.0.1:9/h".into(), 4)])),
    };
    let poll = Poll::new().unwrap();
    let clock = Arc::new(ManualClock::new(0));
    let mut d = Dispatcher::new(
        0,
        Arc::new(config.dispatch_spec()),
        metrics,
        super::Slots {
            window: Arc::new(crate::dispatch::outstanding::Outstanding::new(64)),
            caps: Arc::new(crate::dispatch::trigger_caps::TriggerCaps::new(
                &[],
                "default",
                64,
                0,
            )),
        },
        clock.clone(),
    );
    d.attach(Clients::new(
        Backend::Mio,
        Some(poll.registry().try_clone().unwrap()),
    ));
    Rig {
        d,
        _poll: poll,
        clock,
        config,
    }
}

fn job(lsn: u64) -> Job {
    let event = EventRecord {
        event_id: format!("evt_{lsn}"),
        trigger_id: "t".into(),
        source: "s".into(),
        received_at_ms: 1_000,
        headers: vec![("content-type".into(), b"application/json".to_vec())],
        body: b"{}".to_vec(),
        replay_of: None,
        body_json: Default::default(),
    };
    Job::new(lsn, event, 0, 1, 0)
}

impl Rig {
    /// Holds `job` (draining: queued, not started).
    fn hold(&mut self, job: Job, now: u64) {
        self.d.accept(job, now, true);
    }

    /// Takes the next queued job through the gate, as `pump_dest` does before `start`.
    fn take(&mut self, now: u64) -> Attempt {
        let dest = self.d.dest(0);
        let Gate::Go { permit, .. } = dest.state.gate(now) else {
            panic!("gate closed");
        };
        let job = dest.queue.pop_front().expect("a queued job");
        Attempt {
            job,
            permit,
            started: now,
        }
    }

    /// The pool's report of a finished attempt, as `finish` settles it (its `Exchange`
    /// mapped to the attempt result).
    fn report(&mut self, attempt: Attempt, result: AttemptResult, now: u64) {
        self.report_body(attempt, result, b"", now)
    }

    /// [`report`](Self::report) of a response whose body began with `prefix`.
    fn report_body(&mut self, attempt: Attempt, result: AttemptResult, prefix: &[u8], now: u64) {
        self.d.settle(0, attempt, (result, prefix.to_vec()), now);
    }

    fn outcomes(&mut self) -> Vec<JobOutcome> {
        self.d.take_outcomes().collect()
    }

    fn in_flight(&mut self) -> usize {
        self.d.dest(0).state.in_flight()
    }
}

fn status(code: u16) -> AttemptResult {
    AttemptResult::Status {
        code,
        retry_after: None,
    }
}

#[test]
fn a_2xx_is_delivered_and_frees_the_permit() {
    let mut r = rig("");
    r.hold(job(5), 0);
    assert_eq!((r.d.held(), r.d.in_flight()), (1, 0));
    let a = r.take(0);
    assert_eq!(r.in_flight(), 1);
    r.report(a, status(204), SECOND);
    assert_eq!(r.in_flight(), 0);
    assert_eq!(r.d.held(), 0);
    let out = r.outcomes();
    assert!(
        matches!(
            out[..],
            [JobOutcome::Delivered {
                lsn: 5,
                attempts: 1,
                received_at_ms: 1_000,
                attempt: crate::dispatch::job::AttemptFacts {
                    destination: 0,
                    outcome: crate::wal::AttemptOutcome::Status(204),
                    latency_us: 1_000_000,
                    retry_after_ms: None,
                    ..
                },
            }]
        ),
        "{out:?}"
    );
}

#[test]
fn each_attempt_carries_its_facts_in_its_outcome() {
    use crate::wal::AttemptOutcome as O;
    let mut r = rig("retry = { max_attempts = 2, base = \"1s\", cap = \"1s\" }");
    r.hold(job(7), 0);
    let a = r.take(0);
    // The injected clock gives the wall time of the stamp and of the retry schedule.
    r.clock.set(SECOND / 2);
    r.report_body(
        a,
        AttemptResult::Status {
            code: 500,
            retry_after: Some(std::time::Duration::from_secs(3)),
        },
        b"busy",
        SECOND / 2,
    );
    let out = r.outcomes();
    let [JobOutcome::RetryScheduled {
        attempt, due_at_ms, ..
    }] = &out[..]
    else {
        panic!("{out:?}");
    };
    assert_eq!(
        (attempt.outcome, attempt.latency_us, attempt.retry_after_ms),
        (O::Status(500), 500_000, Some(3000))
    );
    assert_eq!(
        attempt.response_prefix, b"busy",
        "the body prefix is carried"
    );
    assert_eq!(
        attempt.at_ms,
        MANUAL_EPOCH_MS + 500,
        "the clock's wall time"
    );
    let now = r.d.next_deadline().expect("a retry timer");
    assert_eq!(
        *due_at_ms - attempt.at_ms,
        (now - SECOND / 2) / 1_000_000,
        "the recorded due time is the timer's, on the clock's wall time"
    );
    r.d.on_tick(now, true);
    let a = r.take(now);
    r.report(a, AttemptResult::Timeout, now + 2 * SECOND);
    let out = r.outcomes();
    let [JobOutcome::DeadLetter {
        attempts: 2,
        attempt: Some(attempt),
        ..
    }] = &out[..]
    else {
        panic!("{out:?}");
    };
    assert_eq!(
        (attempt.outcome, attempt.latency_us),
        (O::Timeout, 2_000_000)
    );
}

#[test]
fn a_5xx_schedules_a_retry_that_the_tick_queues_again() {
    let mut r = rig("retry = { max_attempts = 3, base = \"1s\", cap = \"1s\" }");
    r.hold(job(7), 0);
    let a = r.take(0);
    r.report(a, status(503), 10 * SECOND);
    let out = r.outcomes();
    let [JobOutcome::RetryScheduled {
        lsn: 7,
        next_attempt: 2,
        ref last_error,
        ..
    }] = out[..]
    else {
        panic!("{out:?}");
    };
    assert_eq!(last_error, "http://127.0.0.1:9/h answered 503");
    assert_eq!(r.d.held(), 1, "a retry is not terminal");
    let due = r.d.next_deadline().expect("a retry timer");
    assert!((10 * SECOND..=11 * SECOND).contains(&due), "{due}");
    r.d.on_tick(due, true);
    let a = r.take(due);
    assert_eq!((a.job.lsn, a.job.attempt), (7, 2));
    // The last allowed attempt fails too: dead-lettered, retries exhausted.
    r.report(a, AttemptResult::Timeout, due);
    let a = {
        let due = r.d.next_deadline().unwrap();
        r.d.on_tick(due, true);
        r.take(due)
    };
    r.report(a, AttemptResult::Io, 20 * SECOND);
    let out = r.outcomes();
    assert!(
        matches!(
            out[..],
            [
                JobOutcome::RetryScheduled {
                    next_attempt: 3,
                    ..
                },
                JobOutcome::DeadLetter {
                    reason: DlqReason::RetryExhausted,
                    attempts: 3,
                    ..
                }
            ]
        ),
        "{out:?}"
    );
    assert_eq!(r.d.held(), 0);
}

#[test]
fn a_4xx_is_dead_lettered_at_once() {
    let mut r = rig("");
    r.hold(job(1), 0);
    let a = r.take(0);
    r.report(a, status(404), 0);
    let out = r.outcomes();
    let [JobOutcome::DeadLetter {
        reason: DlqReason::PermanentFailure,
        attempts: 1,
        ref last_error,
        ..
    }] = out[..]
    else {
        panic!("{out:?}");
    };
    assert_eq!(last_error, "http://127.0.0.1:9/h answered 404");
    assert_eq!((r.d.held(), r.in_flight()), (0, 0));
}

#[test]
fn the_failure_that_opens_the_circuit_dead_letters_and_new_jobs_fail_fast() {
    let mut r = rig("circuit = { failures = 2, open_for = \"30s\" }\nretry = { max_attempts = 5 }");
    r.hold(job(1), 0);
    r.hold(job(2), 0);
    // Both taken before any report: settling pumps the queue, which must stay empty here
    // (a start would open a socket).
    let (a, b) = (r.take(0), r.take(0));
    r.report(a, AttemptResult::ConnectError, SECOND);
    assert!(matches!(
        r.outcomes()[..],
        [JobOutcome::RetryScheduled { lsn: 1, .. }]
    ));
    // The second consecutive failure opens the circuit: that job is dead-lettered.
    r.report(b, AttemptResult::ConnectError, SECOND);
    let out = r.outcomes();
    let [JobOutcome::DeadLetter {
        reason: DlqReason::CircuitOpen,
        attempts: 1,
        ref last_error,
        ..
    }] = out[..]
    else {
        panic!("{out:?}");
    };
    assert!(
        last_error.contains("after 2 consecutive failures"),
        "{last_error}"
    );
    // A new job while the circuit is open fails fast, without an attempt.
    r.d.accept(job(3), 2 * SECOND, false);
    let out = r.outcomes();
    assert!(
        matches!(
            out[..],
            [JobOutcome::DeadLetter {
                reason: DlqReason::CircuitOpen,
                attempts: 0,
                ..
            }]
        ),
        "{out:?}"
    );
    assert_eq!(r.d.in_flight(), 0);
    assert_eq!(r.d.held(), 1, "the first job waits for its retry");
}

#[test]
fn a_stale_connection_sends_the_job_again_without_counting_an_attempt() {
    let mut r = rig("max_in_flight = 2");
    r.hold(job(1), 0);
    r.hold(job(2), 0);
    let (a, b) = (r.take(0), r.take(0));
    // A 429 with Retry-After pauses the destination, so nothing starts (no socket).
    let pause = AttemptResult::Status {
        code: 429,
        retry_after: Some(Duration::from_secs(30)),
    };
    r.report(a, pause, SECOND);
    let f = Finished::Stale {
        dest: 0,
        payload: b,
    };
    r.d.finish(f, SECOND);
    let out = r.outcomes();
    assert!(
        matches!(out[..], [JobOutcome::RetryScheduled { lsn: 1, .. }]),
        "nothing reported for the stale one: {out:?}"
    );
    assert_eq!(r.in_flight(), 0, "its permit is back");
    let q = &r.d.dest(0).queue;
    assert_eq!(q.len(), 1);
    assert_eq!((q[0].lsn, q[0].attempt), (2, 1));
    assert_eq!(r.d.held(), 2);
}

#[test]
fn outcomes_are_taken_in_order_and_once() {
    let mut r = rig("max_in_flight = 4");
    for lsn in 1..=3 {
        r.hold(job(lsn), 0);
    }
    let taken: Vec<Attempt> = (0..3).map(|_| r.take(0)).collect();
    for a in taken {
        r.report(a, status(200), 0);
    }
    let lsns: Vec<u64> = r.outcomes().iter().map(JobOutcome::lsn).collect();
    assert_eq!(lsns, [1, 2, 3]);
    assert!(r.outcomes().is_empty(), "taken once");
}

#[test]
fn the_request_carries_standard_webhooks_headers_and_a_verifiable_signature() {
    let r = rig("");
    let mut cfg = r.d.config.destinations[0].clone();
    cfg.signing_key = Some(crate::ingest::secrets::Secret::new(b"k3y".to_vec()));
    let mut j = job(9);
    j.attempt = 3;
    j.event.replay_of = Some("evt_0".into());
    cfg.headers = vec![("x-tenant".into(), "acme".into())];
    let mut req = b"left over".to_vec();
    req.clear();
    encode(&cfg, &template(&cfg).unwrap(), &j, 1_700_000_000, &mut req).unwrap();
    let text = String::from_utf8(req).unwrap();
    let sig = crate::sign::standard_webhooks::sign(b"k3y", "evt_9", 1_700_000_000, b"{}");
    assert!(text.starts_with("POST /h HTTP/1.1\r\n"), "{text}");
    for h in [
        "content-type: application/json\r\n".to_string(),
        "webhook-id: evt_9\r\n".into(),
        "webhook-timestamp: 1700000000\r\n".into(),
        "x-sluice-attempt: 3\r\n".into(),
        "x-sluice-trigger: t\r\n".into(),
        "x-sluice-replay-of: evt_0\r\n".into(),
        format!("webhook-signature: {sig}\r\n"),
    ] {
        assert!(text.contains(&h), "missing {h:?} in {text}");
    }
    assert!(text.ends_with("x-tenant: acme\r\n\r\n{}"), "{text}");
    assert!(text.contains("\r\ncontent-length: 2\r\n"), "{text}");
}

#[test]
fn a_bad_configured_header_fails_the_template_and_the_event_names_it() {
    let r = rig("");
    let mut cfg = r.d.config.destinations[0].clone();
    cfg.headers = vec![("bad name".into(), "v".into())];
    assert_eq!(template(&cfg), Err(RequestError::HeaderName { index: 0 }));
}

/// A job for a destination id this core's generation does not know yet (a pump on another core
/// picked the reload up first) waits aside, then goes to that destination once this core
/// reconfigures to the generation that has it.
#[test]
fn a_job_for_a_destination_not_known_yet_waits_for_the_reload() {
    let mut r = rig("");
    let mut early = job(7);
    early.dest = 1;
    r.d.accept(early, 0, false);
    assert_eq!((r.d.held(), r.d.early.len()), (1, 1));
    assert!(
        !r.d.dests.contains_key(&1),
        "no state for an id not known yet"
    );
    let text = "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\nhandler = \"http://127.0.0.1:9/h\"\n\
                [[triggers]]\nid = \"n\"\nprovider = \"p\"\npath = \"/n\"\nhandler = \"http://127.0.0.1:9/new\"\n";
    let next = Config::build(
        Config::parse_manifest(text).unwrap(),
        &|_: &str| None,
        &Overrides::default(),
    )
    .unwrap();
    let next = crate::ops::reload::ids::assign(&r.config, next, 1).unwrap();
    assert_eq!(next.destinations[1].handler.uri, "http://127.0.0.1:9/new");
    r.d.reconfigure(Arc::new(next.dispatch_spec()), SECOND, false);
    assert!(r.d.early.is_empty());
    assert_eq!(r.d.held(), 1, "counted once");
    assert!(
        r.d.dests.contains_key(&1),
        "the new destination's state, from its config"
    );
}

#[path = "batch_tests.rs"]
mod batched;
