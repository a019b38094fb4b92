use super::*;
use crate::dispatch::dlq::bulk::{pick, ReplayFilter};
use crate::dispatch::dlq::entry::tests::sample_entry;
use crate::wal::group::{Item, Outcome};

/// A core's side: `room` events fit; what was staged and given back is recorded.
#[derive(Default)]
struct Port {
    room: usize,
    ids: u64,
    events: Vec<(u64, String)>,
    releases: Vec<(u64, String)>,
    done: usize,
    given_back: Vec<(String, u64)>,
}

impl ReplayPort for Port {
    fn new_id(&mut self, _received_at_us: u64) -> String {
        self.ids += 1;
        format!("new-{}", self.ids)
    }
    fn stage_event(&mut self, ticket: u64, record: Record, _trigger: &str, _cost: u64) -> bool {
        if self.room == 0 {
            return false;
        }
        self.room -= 1;
        let Record::Event(e) = record else {
            panic!("an event")
        };
        self.events
            .push((ticket, e.replay_of.expect("replay_of set")));
        true
    }
    fn stage_release(&mut self, ticket: u64, id: String) {
        self.releases.push((ticket, id));
    }
    fn event_done(&mut self, give_back: Option<(&str, u64)>) {
        self.done += 1;
        self.given_back
            .extend(give_back.map(|(t, c)| (t.to_owned(), c)));
    }
}

fn store_with(n: u64) -> (tempfile::TempDir, DlqStore, Vec<DlqEntry>) {
    let tmp = tempfile::tempdir().unwrap();
    let store = DlqStore::open(tmp.path(), 100).unwrap();
    let entries: Vec<DlqEntry> = (1..=n).map(sample_entry).collect();
    for e in &entries {
        store.put(e).unwrap();
    }
    (tmp, store, entries)
}

/// A batch back from its commit with `owner`'s appends and removals and their outcomes.
fn batch(appends: &[(u64, AppendOutcome)], releases: &[(u64, bool)]) -> Batch<DlqEntry, DlqError> {
    let mut b = Batch::default();
    for &(ticket, o) in appends {
        b.items.push(Item::Append {
            owner: Owner::Replay,
            log: 0,
            ticket,
            record: Record::Event(sample_entry(99).event),
        });
        b.outcomes.push(Outcome::Appended(o));
    }
    for &(ticket, ok) in releases {
        b.items.push(Item::Release {
            owner: Owner::Replay,
            ticket,
            id: String::new(),
        });
        let r = if ok {
            Ok(())
        } else {
            Err(DlqError::NotFound { id: String::new() })
        };
        b.outcomes.push(Outcome::Released(r));
    }
    b
}

#[test]
fn a_discard_is_checked_claimed_and_staged_and_its_claim_drops_when_the_removal_is_back() {
    let (_tmp, store, entries) = store_with(1);
    let (mut books, mut port) = (OnlineReplays::default(), Port::default());
    assert_eq!(books.discard(&store, "nope", &mut port).status, 400);
    let absent = crate::wal::event_id::encode(7);
    assert_eq!(books.discard(&store, &absent, &mut port).status, 404);
    assert!(!store.replays().is_claimed(&absent), "a 404 holds no claim");
    let id = &entries[0].id;
    let r = books.discard(&store, id, &mut port);
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(port.releases, [(1, id.clone())]);
    assert_eq!(books.discard(&store, id, &mut port).status, 409);
    books.settle(&batch(&[], &[(1, true)]), &mut port);
    assert!(!store.replays().is_claimed(id), "the claim dropped");
    assert!(books.is_idle());
}

#[test]
fn a_pick_is_staged_oldest_first_until_the_first_refusal_and_settles_by_outcome() {
    let (_tmp, store, entries) = store_with(3);
    let (mut books, mut port) = (OnlineReplays::default(), Port::default());
    port.room = 2;
    let p = pick(&store, &ReplayFilter::default()).unwrap();
    // The pick's order (oldest dead letter first, `bulk::pick`) is the order staged.
    let order: Vec<String> = p.entries.iter().map(|(_, e)| e.id.clone()).collect();
    let r = books.stage_pick(Ok(p), 1_800_000_000_000_000, &mut port);
    assert_eq!(
        (r.status, r.body.as_str()),
        (202, r#"{"status":"accepted","replayed":2,"remaining":1}"#)
    );
    let replayed: Vec<_> = port.events.iter().map(|(_, of)| of.clone()).collect();
    assert_eq!(replayed, order[..2]);
    assert!(
        !store.replays().is_claimed(&order[2]),
        "the rest of the pick gives its claim back"
    );
    let by_id = |id: &str| entries.iter().position(|e| e.id == id).unwrap();
    let entries: Vec<&DlqEntry> = order.iter().map(|id| &entries[by_id(id)]).collect();
    let (t1, t2) = (port.events[0].0, port.events[1].0);
    let failed = AppendOutcome::Unavailable;
    books.settle(
        &batch(
            &[(t1, AppendOutcome::Durable { lsn: 1 }), (t2, failed)],
            &[],
        ),
        &mut port,
    );
    assert_eq!(port.done, 2, "both places in the core's bound are free");
    assert_eq!(port.given_back.len(), 1, "the failed one's backlog share");
    assert_eq!(
        port.releases.len(),
        1,
        "the durable one's removal is staged"
    );
    assert_eq!(port.releases[0].1, entries[0].id);
    assert!(
        store.replays().is_claimed(&entries[0].id),
        "held until removed"
    );
    assert!(
        !store.replays().is_claimed(&entries[1].id),
        "failed: stays, unclaimed"
    );
    let release = port.releases[0].0;
    books.settle(&batch(&[], &[(release, true)]), &mut port);
    assert!(!store.replays().is_claimed(&entries[0].id));
    assert!(books.is_idle());
}

#[test]
fn a_pick_without_room_is_a_backlog_refusal_and_an_empty_one_a_200() {
    let (_tmp, store, _) = store_with(2);
    let (mut books, mut port) = (OnlineReplays::default(), Port::default());
    let p = pick(&store, &ReplayFilter::default()).map_err(|e| e.to_string());
    let r = books.stage_pick(p, 0, &mut port);
    assert_eq!((r.status, r.backlog_full), (503, true), "{}", r.body);
    assert!(r.body.contains(r#""remaining":2"#), "{}", r.body);
    let empty = Ok(Pick::default());
    assert_eq!(books.stage_pick(empty, 0, &mut port).status, 200);
    let broken = Err("no such directory".to_owned());
    assert_eq!(books.stage_pick(broken, 0, &mut port).status, 500);
}

#[test]
fn a_single_replay_holds_its_claim_by_ingest_ticket_until_its_removal_is_back() {
    let (_tmp, store, entries) = store_with(1);
    let (mut books, mut port) = (OnlineReplays::default(), Port::default());
    let id = &entries[0].id;
    let (claim, entry) = OnlineReplays::claim_one(&store, id).unwrap();
    assert_eq!(entry.id, *id);
    let again = OnlineReplays::claim_one(&store, id).unwrap_err();
    assert_eq!(again.status, 409);
    books.hold(77, claim);
    books.settled_single(5, true); // another ticket: nothing
    assert!(port.releases.is_empty());
    books.settled_single(77, true);
    books.settle(&batch(&[], &[]), &mut port);
    assert_eq!(
        port.releases.len(),
        1,
        "its removal goes with the next commit"
    );
    assert!(store.replays().is_claimed(id));
    books.settle(&batch(&[], &[(port.releases[0].0, true)]), &mut port);
    assert!(!store.replays().is_claimed(id) && books.is_idle());
}
