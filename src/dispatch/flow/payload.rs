//! Held events by reference: the bodies of the events the gates of one core hold are kept in
//! memory up to `[flow] max_held_bytes`; past it, a newly held event's body is dropped (the gate
//! keeps its key, flow keys and metadata) and read back from the log that holds it when the gate
//! releases it ([`Payloads::restore`]). Superseded or skipped events are never read back. The
//! waiters `throttle` and `concurrency` keep past their bounds are not even kept in part: only a
//! reference (`dispatch::flow::waiters`), and the whole record is read back ([`Payloads::read`]).
//!
//! The log's segments stay on disk while the event is held: it is pending (its `Live` entry
//! keeps the log's done cursor at or below it, so retention keeps its segment).
//!
//! A read-back reads the log forward from where the last one of that log stopped (a
//! [`WalTail`] kept per log, at most [`MAX_READERS`] per core, each closed after
//! [`READER_IDLE`] without use), skipping the records before the event by their headers; a
//! reader already past the event (an older event of that log released after a newer one) is
//! replaced by a new one opened at the event's LSN, which lists the segments, opens the one
//! holding it and skips the records before it by their headers. So a stalled key's events,
//! released in acceptance order (LSN order within each log), cost about one read-ahead window
//! each (at most 256 KiB, `wal::read::tail`), and any read costs at most one segment's worth of
//! reads, on the core's loop thread — the same kind of I/O as the pump's own read-back. Memory:
//! each reader's read-ahead window (≤ 256 KiB). A read-back that fails (the log is damaged
//! below its durable LSN, or the record is not the event) leaves the event pending without an
//! outcome: it is reported on stderr, counted (`sluice_flow_read_back_failures_total`), and
//! evaluated again after a restart, when recovery decides about the damage — as the pump does
//! with a log it cannot read.
#![forbid(unsafe_code)]

use std::path::Path;
use std::sync::Arc;

use crate::dispatch::job::Job;
use crate::wal::key::split_key;
use crate::wal::{EventRecord, Lsn, Record, WalError, WalTail};

/// Most logs one core keeps a read-back position in (module docs).
pub const MAX_READERS: usize = 4;
/// A read-back position unused this long (clock nanos) is closed: 1 s.
pub const READER_IDLE: u64 = 1_000_000_000;

/// A log being read back, where the last read-back of it stopped.
#[derive(Debug)]
struct Reader {
    dir: Arc<Path>,
    tail: WalTail,
    used_at: u64,
}

/// The bodies held in memory by one core's gates, and the logs' read-back positions.
#[derive(Debug)]
pub struct Payloads {
    /// `[flow] max_held_bytes`.
    budget: u64,
    /// Bytes of the bodies of held events kept in memory.
    bytes: u64,
    /// At most [`MAX_READERS`].
    readers: Vec<Reader>,
    /// The clock at the engine's last tick ([`Payloads::tick`]).
    now: u64,
}

impl Payloads {
    pub fn new(budget: u64) -> Payloads {
        Payloads {
            budget,
            bytes: 0,
            readers: Vec::new(),
            now: 0,
        }
    }

    /// The engine's tick at `now` (clock nanos): closes the readers idle for [`READER_IDLE`].
    pub fn tick(&mut self, now: u64) {
        self.now = now;
        self.readers
            .retain(|r| now.saturating_sub(r.used_at) < READER_IDLE);
    }

    /// Logs with a read-back position kept (≤ [`MAX_READERS`]).
    pub fn readers(&self) -> usize {
        self.readers.len()
    }

    /// A held event's whole record was read back and is about to leave the gates: its body
    /// counts in memory until [`Payloads::restore`] (or [`Payloads::forget`]) with `dropped`
    /// false, which every caller does at once.
    pub fn adopt(&mut self, job: &Job) {
        self.bytes += job.event.body.len() as u64;
    }

    /// The record of event `id` at event key `key` of the log in `dir`, read forward from the
    /// log's last read-back position when that is not past it (module docs).
    pub fn read(&mut self, dir: &Arc<Path>, key: Lsn, id: &str) -> Result<EventRecord, WalError> {
        let lsn = split_key(key).1;
        let kept = self.readers.iter().position(|r| r.dir == *dir);
        let reader = match kept.map(|i| self.readers.swap_remove(i)) {
            Some(r) if r.tail.next_lsn() <= lsn => Some(r),
            _ => None,
        };
        let mut reader = match reader {
            Some(r) => r,
            None => Reader {
                dir: Arc::clone(dir),
                tail: WalTail::open(dir, lsn)?,
                used_at: 0,
            },
        };
        reader.tail.skip_to(lsn);
        let event = event_at(&mut reader.tail, dir, lsn, id)?;
        reader.used_at = self.now;
        if self.readers.len() >= MAX_READERS {
            let oldest = (0..self.readers.len()).min_by_key(|&i| self.readers[i].used_at);
            if let Some(i) = oldest {
                self.readers.swap_remove(i);
            }
        }
        self.readers.push(reader);
        Ok(event)
    }

    /// Bytes of held bodies in memory.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// A gate starts holding `job`: keeps its body if it fits in the budget, else drops it.
    /// Returns true when it was dropped (it must be [`Payloads::restore`]d).
    pub fn hold(&mut self, job: &mut Job) -> bool {
        let n = job.event.body.len() as u64;
        if job.log_dir.is_some() && self.bytes + n > self.budget {
            job.event.body = Vec::new();
            return true;
        }
        self.bytes += n;
        false
    }

    /// `job` leaves the gates without being delivered (skipped): its body is forgotten.
    pub fn forget(&mut self, job: &Job, dropped: bool) {
        if !dropped {
            self.bytes -= job.event.body.len() as u64;
        }
    }

    /// `job` leaves the hold to be delivered: its body is in memory again.
    pub fn restore(&mut self, job: &mut Job, dropped: bool) -> Result<(), WalError> {
        if !dropped {
            self.bytes -= job.event.body.len() as u64;
            return Ok(());
        }
        let Some(dir) = job.log_dir.clone() else {
            return Ok(());
        };
        job.event.body = self.read(&dir, job.lsn, &job.event.event_id)?.body;
        Ok(())
    }
}

/// The event record at `lsn` of the log in `dir`, which must be event `id`.
pub fn read_back(dir: &Path, lsn: Lsn, id: &str) -> Result<EventRecord, WalError> {
    event_at(&mut WalTail::open(dir, lsn)?, dir, lsn, id)
}

/// The next record of `tail`, which must be event `id` at `lsn` of the log in `dir`.
fn event_at(tail: &mut WalTail, dir: &Path, lsn: Lsn, id: &str) -> Result<EventRecord, WalError> {
    let mismatch = |what: String| WalError::Corrupt {
        segment: dir.to_path_buf(),
        offset: 0,
        reason: format!("reading held event {id} back at LSN {lsn}: {what}"),
    };
    match tail.next(lsn)? {
        Some((l, Record::Event(ev))) if l == lsn && ev.event_id == id => Ok(ev),
        Some((l, Record::Event(ev))) => {
            Err(mismatch(format!("found event {} at LSN {l}", ev.event_id)))
        }
        Some((l, _)) => Err(mismatch(format!("LSN {l} is not an event record"))),
        None => Err(mismatch("the log ends before it".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::format::tests::sample_event;
    use crate::wal::recover::tests::test_cfg;
    use crate::wal::{open, WritePath};

    #[test]
    fn bodies_past_the_budget_are_dropped_and_read_back_from_the_log() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
        let events: Vec<EventRecord> = (0..3).map(|i| sample_event(i, 100 + i as usize)).collect();
        let recs: Vec<Record> = events.iter().cloned().map(Record::Event).collect();
        open(&cfg).unwrap().0.append(&recs).unwrap();
        let dir: std::sync::Arc<Path> = cfg.dir.as_path().into();
        let job = |i: usize| {
            let key = crate::wal::key::event_key(3, i as u64 + 1);
            Job::new(key, events[i].clone(), 0, 1, 0).from_log(dir.clone())
        };
        let mut p = Payloads::new(250);
        let (mut a, mut b, mut c) = (job(0), job(1), job(2));
        assert!(!p.hold(&mut a), "100 bytes fit");
        assert!(!p.hold(&mut b), "201 bytes fit");
        assert!(p.hold(&mut c), "303 bytes do not: dropped");
        assert!(c.event.body.is_empty());
        assert_eq!(p.bytes(), 201);
        p.restore(&mut c, true).unwrap();
        assert_eq!(c.event.body, events[2].body, "read back from the log");
        p.restore(&mut a, false).unwrap();
        p.forget(&b, false);
        assert_eq!(p.bytes(), 0);
        // The wrong event at that LSN is an error, not a wrong delivery.
        let mut wrong = job(1);
        wrong.event.event_id = "other".into();
        assert!(!p.hold(&mut Job::new(0, events[0].clone(), 0, 1, 0)));
        let mut p0 = Payloads::new(0);
        assert!(p0.hold(&mut wrong));
        let e = p0.restore(&mut wrong, true).unwrap_err();
        assert!(e.to_string().contains("held event other"), "{e}");
    }
}
