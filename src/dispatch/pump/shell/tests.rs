//! The pump's shell without threads or sockets: a real log and DLQ on disk, the core's batch
//! committed by `wal::group::process` as the commit helper would, a manual clock and a fake
//! durable queue.

use std::sync::Mutex;

use super::*;
use crate::dispatch::job::event_key;
use crate::sync::clock::ManualClock;
use crate::wal::format::tests::sample_event;
use crate::wal::group::{process, Log};
use crate::wal::recover::tests::test_cfg;
use crate::wal::{DispatchRecovery, WritePath};

/// What the shell gave back to the durable queue.
#[derive(Debug, Default)]
struct Queue {
    released: Mutex<Vec<(usize, u64, u64)>>,
    drained: Mutex<u64>,
    wal_bytes: Mutex<u64>,
}

impl DurableQueue for Queue {
    fn trigger_slot(&self, trigger: &str) -> usize {
        usize::from(trigger != "a")
    }
    fn recovered_slot(&self) -> usize {
        9
    }
    fn release_done(&self, slot: usize, events: u64, bytes: u64) {
        self.released.lock().unwrap().push((slot, events, bytes));
    }
    fn note_drained(&self, events: u64) {
        *self.drained.lock().unwrap() += events;
    }
    fn update_drain_rate(&self, _: f64) {}
    fn adjust_wal_bytes(&self, old: u64, new: u64) {
        let mut b = self.wal_bytes.lock().unwrap();
        *b = *b + new - old;
    }
}

/// A core's pump over one fresh log on disk, its log for the commits, its DLQ and its queue.
struct Rig {
    pump: CorePump,
    log: Log,
    dlq: DlqStore,
    queue: Arc<Queue>,
    clock: Arc<ManualClock>,
    staging: Staging,
    _tmp: tempfile::TempDir,
}

impl Rig {
    fn new() -> Rig {
        let tmp = tempfile::tempdir().unwrap();
        let mut cfg = test_cfg(&tmp.path().join("core-0"), WritePath::Pwrite);
        cfg.durability = crate::wal::Durability::Fsync;
        let (mut wal, _) = crate::wal::open(&cfg).unwrap();
        let shared = Arc::new(WalShared::new());
        wal.attach_shared(shared.clone());
        let queue = Arc::new(Queue::default());
        let clock = Arc::new(ManualClock::new(1_000));
        let routes = Routes {
            handlers: vec![("a".into(), Some(0))],
            destinations: vec![crate::dispatch::pump::Route {
                owner: 0,
                uri: "http://127.0.0.1:9/".into(),
            }],
            default_trigger: "default",
        };
        let parts = PumpParts {
            clock: clock.clone(),
            queue: queue.clone(),
            metrics: Arc::new(DispatchMetrics::new(&[])),
            caps: Arc::new(TriggerCaps::new(&["a"], "default", 8, 1)),
            wal: vec![shared.clone()],
            retention: Duration::from_secs(86_400),
            routes,
        };
        let log = PumpLog {
            index: 0,
            name: "core-0".into(),
            dir: cfg.dir.clone(),
            own: true,
            durable: 0,
            recovered: DispatchRecovery {
                pending: Default::default(),
                done_cursor: 1,
                next_lsn: 1,
                ledger: Default::default(),
                outcomes: Default::default(),
            },
        };
        let outstanding = Arc::new(Outstanding::new(8));
        let pump = CorePump::new(0, parts, vec![log], outstanding, Vec::new(), 1_000).unwrap();
        Rig {
            pump,
            log: Log { wal, shared },
            dlq: DlqStore::open(&tmp.path().join("dlq"), 10).unwrap(),
            queue,
            clock,
            staging: Staging::new(8),
            _tmp: tmp,
        }
    }

    /// The filling batch committed as the helper would, and back on the core.
    fn commit(&mut self) -> Vec<(Owner, u64, AppendOutcome)> {
        let mut batch = self.staging.take_batch(false).expect("something to commit");
        let logs = std::slice::from_mut(&mut self.log);
        process(logs, 0, &mut batch, &self.dlq, &mut Vec::new());
        let appended = batch.appended().collect();
        self.pump.on_commit(batch, 0);
        appended
    }

    /// One turn of the pump: the jobs it admitted, as (owner, event key).
    fn turn(&mut self) -> Vec<(usize, u64)> {
        let mut jobs = Vec::new();
        let now = self.clock.now_nanos();
        self.pump.turn(now, false, &mut self.staging, &mut jobs);
        jobs.into_iter().map(|(o, j)| (o, j.lsn)).collect()
    }

    fn cursor(&self) -> Lsn {
        self.pump.pump.cursors().next().unwrap().2
    }
}

#[test]
fn a_durable_event_reaches_the_pump_from_memory_and_its_done_record_moves_the_cursor() {
    let mut r = Rig::new();
    assert!(r.turn().is_empty(), "an empty log");
    let mut event = sample_event(1, 64);
    event.trigger_id = "a".into();
    let cost = crate::wal::event_cost(&event);
    r.staging
        .port(Owner::Ingest)
        .event(0, 77, Record::Event(event));
    let appended = r.commit();
    assert_eq!(
        appended,
        [(Owner::Ingest, 77, AppendOutcome::Durable { lsn: 1 })]
    );
    assert_eq!(r.turn(), [(0, event_key(0, 1))], "a job for the owner core");
    assert!(r.staging.is_empty(), "nothing to write yet");
    let delivered = JobOutcome::Delivered {
        lsn: event_key(0, 1),
        attempts: 1,
        received_at_ms: 0,
        attempt: crate::dispatch::job::AttemptFacts {
            at_ms: 1_700_000_000_000,
            destination: 0,
            outcome: crate::wal::AttemptOutcome::Status(200),
            latency_us: 1500,
            retry_after_ms: None,
            response_prefix: Vec::new(),
        },
    };
    r.pump.on_outcome(delivered, 0, &mut r.staging);
    r.turn();
    assert_eq!(
        r.staging.len(),
        2,
        "the attempt's record and the Done record in the core's next batch"
    );
    assert_eq!(r.cursor(), 1, "not done before its record is durable");
    let appended = r.commit();
    let durable: Vec<_> = appended.iter().map(|(_, _, o)| *o).collect();
    assert_eq!(
        durable,
        [
            AppendOutcome::Durable { lsn: 2 },
            AppendOutcome::Durable { lsn: 3 }
        ]
    );
    assert!(
        appended.iter().all(|(owner, _, _)| *owner == Owner::Pump),
        "the pump's own items"
    );
    assert_eq!(
        r.cursor(),
        4,
        "event 1 is done: nothing below its records is needed"
    );
    assert_eq!(*r.queue.released.lock().unwrap(), [(0, 1, cost)]);
    r.turn();
    assert_eq!(*r.queue.drained.lock().unwrap(), 1, "the drain rate is fed");
    assert!(r.pump.is_flushed());
}

#[test]
fn retention_measures_the_logs_on_disk_for_the_bound_on_the_shells_clock() {
    let mut r = Rig::new();
    r.turn();
    let first = *r.queue.wal_bytes.lock().unwrap();
    assert!(first > 0, "the segment's size on disk is counted");
    r.staging
        .port(Owner::Ingest)
        .event(0, 1, Record::Event(sample_event(1, 64)));
    r.commit();
    r.turn();
    assert_eq!(
        *r.queue.wal_bytes.lock().unwrap(),
        first,
        "measured again only after RETAIN_EVERY"
    );
    r.clock.advance(Duration::from_nanos(RETAIN_EVERY));
    r.turn();
    assert_eq!(
        *r.queue.wal_bytes.lock().unwrap(),
        first,
        "a preallocated segment: same size, counted once, not twice"
    );
}
