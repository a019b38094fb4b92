//! The event reader over real segment files: several segments, attempts and outcomes written
//! after their events (some in later segments), retention's gap at the head.

use super::*;
use crate::wal::event_id::EventIdGen;
use crate::wal::{open, AttemptsRecord, DoneEntry, DoneRecord, Durability, RetryRecord, WalConfig};

const BODY: usize = 3000;

fn cfg(data: &Path) -> WalConfig {
    WalConfig {
        segment_bytes: crate::wal::min_segment_bytes_for(BODY),
        max_body_bytes: BODY,
        durability: Durability::Os,
        ..WalConfig::new(data.join("wal").join("core-0"))
    }
}

fn event(id: String, trigger: &str, at: u64) -> Record {
    Record::Event(EventRecord {
        event_id: id,
        trigger_id: trigger.into(),
        source: "s".into(),
        received_at_ms: at,
        headers: Vec::new(),
        body: vec![b'x'; BODY],
        replay_of: None,
        body_json: Default::default(),
    })
}

fn call(lsn: Lsn, attempt: u32, code: u16) -> AttemptEntry {
    AttemptEntry {
        event_lsn: lsn,
        attempt,
        at_ms: 2_000_000 + u64::from(attempt),
        destination: 0,
        outcome: AttemptOutcome::Status(code),
        latency_us: 1500,
        retry_after_ms: None,
        response_prefix: Vec::new(),
    }
}

fn attempts(entries: Vec<AttemptEntry>) -> Record {
    Record::Attempts(AttemptsRecord { entries })
}

fn done(lsn: Lsn, status: DoneStatus, attempts: u32) -> Record {
    Record::Done(DoneRecord {
        entries: vec![DoneEntry {
            event_lsn: lsn,
            status,
            attempts,
        }],
    })
}

/// 900 events (LSNs 1..=900, triggers "a" and "b" alternating) over several segments; then
/// outcomes: event 10 answered 500, 500, 200; event 11 410 (dead-lettered); event 12 retrying;
/// every other event below 800 delivered; 800..=900 pending. Returns the ids by LSN.
fn fixture(data: &Path) -> Vec<String> {
    let (mut wal, _) = open(&cfg(data)).unwrap();
    let mut gen = EventIdGen::new(0);
    let ids: Vec<String> = (0..=900u64).map(|i| gen.next(1_000_000 + i)).collect();
    let evs: Vec<Record> = (1..=900u64)
        .map(|l| {
            event(
                ids[l as usize].clone(),
                ["a", "b"][l as usize % 2],
                1_000_000 + l,
            )
        })
        .collect();
    for chunk in evs.chunks(100) {
        wal.append(chunk).unwrap();
    }
    let dead = AttemptEntry {
        outcome: AttemptOutcome::DeadLettered(3),
        ..call(11, 1, 0)
    };
    let mut later = vec![
        attempts(vec![
            AttemptEntry {
                response_prefix: b"oops\n\\\xff".to_vec(),
                ..call(10, 1, 500)
            },
            call(11, 1, 410),
            dead,
            call(12, 1, 503),
        ]),
        Record::Retry(RetryRecord {
            event_lsn: 12,
            next_attempt: 2,
            due_at_ms: 3_000_000,
            last_error: "503".into(),
        }),
        attempts(vec![call(10, 2, 500)]),
        done(11, DoneStatus::DeadLettered, 1),
        attempts(vec![call(10, 3, 200)]),
    ];
    for l in (1..800).filter(|l| ![11, 12].contains(l)) {
        later.push(done(l, DoneStatus::Delivered, 1));
    }
    wal.append(&later).unwrap();
    drop(wal);
    assert!(
        list_segments(&cfg(data).dir).unwrap().len() >= 3,
        "several segments"
    );
    ids
}

#[test]
fn show_finds_an_event_with_its_attempts_in_order_and_its_fate() {
    let tmp = tempfile::tempdir().unwrap();
    let ids = fixture(tmp.path());
    let r = show(tmp.path(), &ids[10]).unwrap();
    assert_eq!((r.lsn, r.fate), (10, Fate::Delivered));
    let codes: Vec<AttemptOutcome> = r.attempts.iter().map(|a| a.outcome).collect();
    use AttemptOutcome::Status;
    assert_eq!(codes, [Status(500), Status(500), Status(200)]);
    let dead = show(tmp.path(), &ids[11]).unwrap();
    let reason = Some("permanent_failure");
    assert_eq!(dead.fate, Fate::DeadLettered { reason });
    assert_eq!(dead.attempts.len(), 1, "the dead-lettering is not a call");
    let retrying = show(tmp.path(), &ids[12]).unwrap().fate;
    let next = 3_000_000;
    assert_eq!(
        retrying,
        Fate::Retrying {
            next_attempt_at_ms: next
        }
    );
    // In the last segment, and in the first.
    assert_eq!(show(tmp.path(), &ids[900]).unwrap().fate, Fate::Pending);
    assert_eq!(show(tmp.path(), &ids[1]).unwrap().fate, Fate::Delivered);
    let json = report_json(&r, false);
    assert_eq!(json["status"], "delivered");
    assert_eq!(json["attempts"][2]["status"], 200);
    assert_eq!(json["attempts"][0]["latency_ms"], 1.5);
    // Printable-escaped: a newline, a backslash and a byte that is not UTF-8.
    assert_eq!(json["attempts"][0]["response_prefix"], "oops\\x0a\\\\\\xff");
    assert!(json["attempts"][1].get("response_prefix").is_none());
    assert!(json.get("body").is_none());
    assert_eq!(report_json(&r, true)["body"].as_str().unwrap().len(), BODY);
    // Bounded: the 410's Done entry lies ~890 records after event 11 (the later events first).
    let early = show_bounded(tmp.path(), &ids[11], 2).unwrap();
    assert!(early.bounded);
    assert_eq!(
        early.fate,
        Fate::Pending,
        "its Done entry lies past the bound"
    );
    assert_eq!(report_json(&early, false)["outcome_search"], "bounded");
    assert!(!show_bounded(tmp.path(), &ids[11], 2000).unwrap().bounded);
}

#[test]
fn unknown_and_malformed_ids_are_told_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let ids = fixture(tmp.path());
    let mut other = EventIdGen::new(0);
    // Inside the log's time range, but never written.
    let missing = other.next(1_000_400);
    assert!(matches!(
        show(tmp.path(), &missing),
        Err(ShowError::NotFound {
            maybe_retired: false
        })
    ));
    assert!(matches!(show(tmp.path(), "nope"), Err(ShowError::BadId(_))));
    // Retention deletes the first segment: an id older than what is left may have been there.
    let first = list_segments(&cfg(tmp.path()).dir).unwrap()[0].1.clone();
    std::fs::remove_file(first).unwrap();
    assert!(matches!(
        show(tmp.path(), &ids[1]),
        Err(ShowError::NotFound {
            maybe_retired: true
        })
    ));
    assert_eq!(show(tmp.path(), &ids[900]).unwrap().lsn, 900);
}

#[test]
fn the_ledger_balances_per_trigger() {
    let tmp = tempfile::tempdir().unwrap();
    fixture(tmp.path());
    let l = ledger(tmp.path()).unwrap();
    let (a, b) = (l.triggers["a"], l.triggers["b"]);
    assert_eq!(a.accepted + b.accepted, 900);
    assert_eq!(a.delivered + b.delivered, 797);
    assert_eq!(a.dead_lettered + b.dead_lettered, 1);
    assert_eq!(a.pending + b.pending, 102);
    assert!(a.balances() && b.balances(), "{a:?} {b:?}");
    assert_eq!(l.since_ms, Some(1_000_001));
}

#[test]
fn list_is_newest_first_filtered_and_limited() {
    let tmp = tempfile::tempdir().unwrap();
    let ids = fixture(tmp.path());
    let f = ListFilter {
        limit: 5,
        ..ListFilter::default()
    };
    let got: Vec<Lsn> = list(tmp.path(), &f)
        .unwrap()
        .iter()
        .map(|r| r.lsn)
        .collect();
    assert_eq!(got, [900, 899, 898, 897, 896]);
    let f = ListFilter {
        status: Some("dead_lettered".into()),
        limit: 10,
        ..ListFilter::default()
    };
    let dead = list(tmp.path(), &f).unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].event.event_id, ids[11]);
    let f = ListFilter {
        trigger: Some("a".into()),
        since_ms: Some(1_000_000 + 890),
        limit: 100,
        ..ListFilter::default()
    };
    let got: Vec<Lsn> = list(tmp.path(), &f)
        .unwrap()
        .iter()
        .map(|r| r.lsn)
        .collect();
    assert_eq!(got, [900, 898, 896, 894, 892, 890]);
}

#[test]
fn list_pages_by_cursor_and_bounds_by_until() {
    let tmp = tempfile::tempdir().unwrap();
    let ids = fixture(tmp.path());
    let lsns = |f: &ListFilter| -> Vec<Lsn> {
        list(tmp.path(), f).unwrap().iter().map(|r| r.lsn).collect()
    };
    let page = ListFilter {
        before: Some(ids[896].clone()),
        limit: 5,
        ..ListFilter::default()
    };
    assert_eq!(lsns(&page), [895, 894, 893, 892, 891]);
    // `until` in the first segment: the newer ones are read for outcomes only, and the fates
    // found there still count.
    let early = ListFilter {
        until_ms: Some(1_000_000 + 12),
        limit: 3,
        ..ListFilter::default()
    };
    let got = list(tmp.path(), &early).unwrap();
    let fates: Vec<(Lsn, &str)> = got.iter().map(|r| (r.lsn, r.fate.as_str())).collect();
    assert_eq!(
        fates,
        [(12, "retrying"), (11, "dead_lettered"), (10, "delivered")]
    );
    assert_eq!(got[2].attempts.len(), 3, "attempts from later segments");
    // A cursor below every id: nothing, without reading an event.
    let none = ListFilter {
        before: Some("00000000000000000000000000".into()),
        limit: 3,
        ..ListFilter::default()
    };
    assert!(lsns(&none).is_empty());
}

/// Through the outcome index recovery builds, lookups and lists give what the offline scans
/// give: the same events in the same order, the same fates and attempts, for every filter.
#[test]
fn indexed_lookups_and_lists_match_the_offline_scans() {
    let tmp = tempfile::tempdir().unwrap();
    let ids = fixture(tmp.path());
    let index = SharedIndex::default();
    let recovered = crate::wal::recover_dispatch(&cfg(tmp.path()).dir).unwrap();
    index.seed(recovered.outcomes);
    let index_of = |_: &LogDir| Some(&index);
    for lsn in [1, 10, 11, 12, 13, 450, 799, 800, 900] {
        let id = &ids[lsn];
        let offline = show(tmp.path(), id).unwrap();
        let online = show_indexed(tmp.path(), id, 20_000, &index_of).unwrap();
        assert_eq!(
            (online.lsn, online.fate, &online.attempts),
            (offline.lsn, offline.fate, &offline.attempts),
            "LSN {lsn}"
        );
    }
    let filters = [
        ListFilter {
            limit: 5,
            ..ListFilter::default()
        },
        ListFilter {
            status: Some("dead_lettered".into()),
            limit: 10,
            ..ListFilter::default()
        },
        ListFilter {
            status: Some("retrying".into()),
            limit: 10,
            ..ListFilter::default()
        },
        ListFilter {
            status: Some("pending".into()),
            trigger: Some("b".into()),
            limit: 7,
            ..ListFilter::default()
        },
        ListFilter {
            trigger: Some("a".into()),
            since_ms: Some(1_000_000 + 890),
            limit: 100,
            ..ListFilter::default()
        },
        ListFilter {
            before: Some(ids[896].clone()),
            limit: 5,
            ..ListFilter::default()
        },
        ListFilter {
            until_ms: Some(1_000_000 + 12),
            limit: 3,
            ..ListFilter::default()
        },
        ListFilter {
            trigger: Some("nope".into()),
            limit: 3,
            ..ListFilter::default()
        },
        ListFilter {
            before: Some("00000000000000000000000000".into()),
            limit: 3,
            ..ListFilter::default()
        },
        ListFilter {
            status: Some("delivered".into()),
            trigger: Some("a".into()),
            limit: 1000,
            ..ListFilter::default()
        },
    ];
    for f in &filters {
        let key = |r: &EventReport| (r.lsn, r.fate, r.attempts.clone());
        let offline: Vec<_> = list(tmp.path(), f).unwrap().iter().map(key).collect();
        let online: Vec<_> = (list_indexed(tmp.path(), f, &index_of).unwrap().iter())
            .map(key)
            .collect();
        assert_eq!(online, offline, "{f:?}");
    }
}
