//! The dispatcher with a batching destination, without sockets (the rig of
//! `tests.rs`): calls are carriers, the gate counts calls, outcomes stay per event.
use super::*;

const MS: u64 = 1_000_000;

fn batching() -> Rig {
    rig("max_in_flight = 4\nbatch = { max_events = 3, linger = \"5ms\" }\nretry = { max_attempts = 3, base = \"1s\", cap = \"1s\" }")
}

fn member_lsns(a: &Attempt) -> Vec<u64> {
    a.job.batch.iter().map(|m| m.lsn).collect()
}

#[test]
fn held_events_become_calls_of_max_events_and_linger_closes_the_rest() {
    let mut r = batching();
    for lsn in 1..=7 {
        r.hold(job(lsn), MS);
    }
    assert_eq!(r.d.held(), 7, "events, whatever their calls");
    assert_eq!(r.d.dest(0).queue.len(), 2, "two full calls queued");
    assert_eq!(r.d.dest(0).batcher.as_ref().unwrap().held(), 1);
    assert_eq!(r.d.next_deadline(), Some(6 * MS), "the linger timer");
    let a = r.take(MS);
    assert_eq!(member_lsns(&a), [1, 2, 3]);
    assert!(a.job.event.event_id.starts_with("batch_"));
    assert_eq!(r.in_flight(), 1, "one permit for three events");
    r.d.close_lingered(0, 6 * MS - 1);
    assert_eq!(r.d.dest(0).queue.len(), 1, "not before the linger");
    r.d.close_lingered(0, 6 * MS);
    assert_eq!(
        r.d.dest(0).queue.len(),
        1,
        "a call queued ahead: the batch could not leave, so it goes on filling"
    );
    r.hold(job(8), 7 * MS);
    assert_eq!(r.d.dest(0).batcher.as_ref().unwrap().held(), 2);
    let _ = r.take(7 * MS);
    r.d.close_lingered(0, 7 * MS);
    assert_eq!(
        r.d.dest(0).queue.len(),
        1,
        "nothing ahead, a permit free: closed"
    );
    let last = r.take(7 * MS);
    assert_eq!(member_lsns(&last), [7, 8]);
}

#[test]
fn a_paused_destination_fills_its_batch_past_the_linger_and_wakes_at_the_pause_end() {
    let mut r = rig("max_in_flight = 4\nbatch = { max_events = 50, linger = \"5ms\" }");
    // A call answered with `Retry-After: 1`: the destination pauses until 1 s.
    let state = &mut r.d.dest(0).state;
    let Gate::Go { permit, .. } = state.gate(0) else {
        panic!("gate closed");
    };
    let pause = Some(std::time::Duration::from_secs(1));
    state.complete(permit, 0, &Class::Retryable { pause });
    for lsn in 1..=20 {
        r.hold(job(lsn), MS);
    }
    r.d.close_lingered(0, 10 * MS);
    assert!(
        r.d.dest(0).queue.is_empty(),
        "paused: nothing closes at the linger"
    );
    assert_eq!(r.d.dest(0).batcher.as_ref().unwrap().held(), 20);
    assert_eq!(r.d.dest(0).wake_at, SECOND, "woken when the pause ends");
    for lsn in 21..=30 {
        r.hold(job(lsn), 500 * MS);
    }
    r.d.close_lingered(0, SECOND);
    let a = r.take(SECOND);
    assert_eq!(
        member_lsns(&a),
        (1..=30).collect::<Vec<_>>(),
        "one call of all 30"
    );
}

#[test]
fn a_2xx_delivers_every_member_under_its_own_key() {
    let mut r = batching();
    for lsn in 1..=3 {
        r.hold(job(lsn), 0);
    }
    let a = r.take(0);
    r.report(a, status(200), SECOND);
    let out = r.outcomes();
    let delivered: Vec<u64> = out
        .iter()
        .map(|o| match o {
            JobOutcome::Delivered {
                lsn, attempts: 1, ..
            } => *lsn,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(delivered, [1, 2, 3]);
    assert_eq!((r.d.held(), r.in_flight()), (0, 0));
}

#[test]
fn a_retryable_failure_retries_the_same_batch() {
    let mut r = batching();
    for lsn in 1..=3 {
        r.hold(job(lsn), 0);
    }
    let a = r.take(0);
    let (id, body) = (a.job.event.event_id.clone(), a.job.event.body.clone());
    r.report(a, status(500), 0);
    let out = r.outcomes();
    assert_eq!(out.len(), 3, "the schedule reported per member: {out:?}");
    assert!(out.iter().all(|o| matches!(
        o,
        JobOutcome::RetryScheduled {
            next_attempt: 2,
            ..
        }
    )));
    // Due (the backoff is at most 1 s): back in the queue as the same call, not re-batched.
    r.d.on_tick(2 * SECOND, true);
    assert_eq!(r.d.dest(0).batcher.as_ref().unwrap().held(), 0);
    let again = r.take(2 * SECOND);
    assert_eq!(again.job.event.event_id, id, "same batch id");
    assert_eq!(again.job.event.body, body, "same body");
    assert_eq!(member_lsns(&again), [1, 2, 3], "same members");
    assert_eq!(again.job.attempt, 2);
    r.report(again, status(204), 2 * SECOND);
    let out = r.outcomes();
    assert!(
        matches!(
            out[..],
            [
                JobOutcome::Delivered {
                    lsn: 1,
                    attempts: 2,
                    ..
                },
                JobOutcome::Delivered {
                    lsn: 2,
                    attempts: 2,
                    ..
                },
                JobOutcome::Delivered {
                    lsn: 3,
                    attempts: 2,
                    ..
                }
            ]
        ),
        "{out:?}"
    );
    assert_eq!(r.d.held(), 0);
}

#[test]
fn a_permanent_failure_dead_letters_every_member() {
    let mut r = batching();
    for lsn in 1..=3 {
        r.hold(job(lsn), 0);
    }
    let a = r.take(0);
    r.report(a, status(422), 0);
    let out = r.outcomes();
    let dead: Vec<(u64, String)> = out
        .iter()
        .map(|o| match o {
            JobOutcome::DeadLetter {
                job,
                reason: DlqReason::PermanentFailure,
                attempts: 1,
                ..
            } => {
                assert!(job.batch.is_empty(), "each entry is the member's own event");
                (job.lsn, job.event.event_id.clone())
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        dead,
        [
            (1, "evt_1".into()),
            (2, "evt_2".into()),
            (3, "evt_3".into())
        ]
    );
    assert_eq!(r.d.held(), 0);
}

#[test]
fn a_reload_that_drops_batching_sends_the_batch_being_filled() {
    let mut r = batching();
    r.hold(job(1), 0);
    r.hold(job(2), 0);
    assert!(r.d.dest(0).queue.is_empty());
    let mut next = (*r.d.config).clone();
    next.destinations[0].batch = None;
    r.d.reconfigure(Arc::new(next), 0, true);
    assert!(r.d.dest(0).batcher.is_none());
    // The reload pumps the destination: what was filling went out as one last call.
    assert_eq!((r.d.in_flight(), r.in_flight()), (1, 1));
    assert!(r.d.dest(0).queue.is_empty());
    assert_eq!(r.d.held(), 2);
    r.hold(job(3), 0);
    let single = r.take(0);
    assert!(
        single.job.batch.is_empty(),
        "one event per call from now on"
    );
}

#[test]
fn the_batched_request_is_signed_over_its_body_with_the_batch_id() {
    let mut r = batching();
    let mut cfg = r.d.config.destinations[0].clone();
    cfg.signing_key = Some(crate::ingest::secrets::Secret::new(b"k3y".to_vec()));
    for lsn in 1..=3 {
        r.hold(job(lsn), 0);
    }
    let a = r.take(0);
    let mut req = Vec::new();
    encode(
        &cfg,
        &template(&cfg).unwrap(),
        &a.job,
        1_700_000_000,
        &mut req,
    )
    .unwrap();
    let text = String::from_utf8(req).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let id = &a.job.event.event_id;
    let sig = crate::sign::standard_webhooks::sign(b"k3y", id, 1_700_000_000, body.as_bytes());
    for h in [
        "content-type: application/json".to_string(),
        format!("webhook-id: {id}"),
        format!("webhook-signature: {sig}"),
    ] {
        assert!(head.contains(&h), "missing {h:?} in {head}");
    }
    assert!(!head.contains("x-sluice-trigger"), "{head}");
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["batch_id"], id.as_str());
    assert_eq!(v["events"].as_array().unwrap().len(), 3);
}

#[test]
fn a_reload_that_adds_batching_batches_the_next_events() {
    let mut r = rig("max_in_flight = 4");
    r.hold(job(1), 0);
    assert!(r.d.dest(0).batcher.is_none());
    let mut next = (*r.d.config).clone();
    next.destinations[0].batch = Some(crate::dispatch::spec::BatchSpec {
        max_events: 2,
        max_bytes: 1 << 20,
        linger: Duration::from_millis(5),
    });
    r.d.reconfigure(Arc::new(next), 0, true);
    // The job queued before stays one call (the reload pumped it out).
    assert_eq!(r.d.in_flight(), 1);
    r.hold(job(2), 0);
    r.hold(job(3), 0);
    let a = r.take(0);
    assert_eq!(member_lsns(&a), [2, 3]);
}
