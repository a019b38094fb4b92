//! Admission: the next durable events of each log, and the parked ones whose trigger has room
//! again, each into a job holding a dispatch slot (and its trigger's window cap), a `Done`
//! entry (no handler; done before a restart), or the log's parked events (its trigger at its
//! cap). Parked events go first, in LSN order per log.
#![forbid(unsafe_code)]

use super::source::{LogTail, REOPEN_MAX_DELAY};
use super::triggers::{Resolved, Slots, Triggers};
use super::{Admit, Live, PumpCore, PumpEnv, MAX_DONE_ENTRIES, PARK_PER_TURN};
use crate::dispatch::job::{event_key, Job};
use crate::dispatch::trigger_caps::TriggerCaps;
use crate::wal::{DoneEntry, DoneStatus, EventRecord, Lsn, Record, WalError};
use std::path::Path;

impl<E: PumpEnv> PumpCore<E> {
    pub(super) fn admit(&mut self, jobs: &mut Vec<(usize, Job)>, now: u64) {
        self.more_to_read = false;
        if !self.admit_parked(jobs, now) {
            return;
        }
        for slot in 0..self.logs.len() {
            // Parking never stops a log (`pump_parked`); a turn parks at most
            // [`PARK_PER_TURN`] events per log, and asks for another turn when it stopped there.
            let mut parked = 0;
            while self.room_to_admit(slot) {
                if parked >= PARK_PER_TURN {
                    self.more_to_read = true;
                    break;
                }
                if !self.slots.window.acquire(self.core) {
                    return;
                }
                let (lsn, event, row) = match self.logs[slot].next_event() {
                    Ok(Some(e)) => e,
                    Ok(None) => {
                        self.release_slot();
                        break;
                    }
                    Err(e) => {
                        // The log below the durable LSN is unreadable: stop reading it (its
                        // events stay pending and are retried after a restart) and say so.
                        self.release_slot();
                        eprintln!("sluice: pump: reading {}: {e}", self.logs[slot].name);
                        break;
                    }
                };
                // Read back: its trigger's row is found here, once (from memory it has one).
                let row = row.unwrap_or_else(|| self.ledger.slot(&event.trigger_id));
                if !self.place(slot, lsn, event, row, jobs, false) {
                    parked += 1;
                }
            }
        }
    }

    /// Whether log `slot`'s pump may admit: its `Done` entries queued below
    /// [`MAX_DONE_ENTRIES`], and the outcomes awaiting their commit below
    /// [`PumpCore::max_awaiting`] (module docs, "Redeliveries").
    fn room_to_admit(&self, slot: usize) -> bool {
        self.logs[slot].done_queue.len() < MAX_DONE_ENTRIES && self.awaiting < self.max_awaiting()
    }

    /// Admits the parked events whose trigger has room in the window again, in LSN order per
    /// trigger and log (one parked by reference is read back from the log first). False when
    /// the dispatch slots (`max_outstanding`) are exhausted.
    fn admit_parked(&mut self, jobs: &mut Vec<(usize, Job)>, now: u64) -> bool {
        for slot in 0..self.logs.len() {
            if now < self.logs[slot].parked_retry_at {
                continue;
            }
            for row in self.logs[slot].parked.rows() {
                while self.room_to_admit(slot) {
                    let Some((_, first)) = self.logs[slot].parked.first_of(row) else {
                        break;
                    };
                    let name = first.unwrap_or(self.ledger.name(row)).to_owned();
                    let r = resolve(&mut self.triggers, &self.slots.caps, &self.env, row, &name);
                    // A trigger a reload added has flow cells but the default route's cap slot.
                    let capless = r.at.gated;
                    if !capless && !self.slots.caps.room(r.at.caps)
                        || gates_full(&self.env, &r, &name)
                    {
                        break;
                    }
                    if !self.slots.window.acquire(self.core) {
                        return false;
                    }
                    let Some((lsn, at, event)) = self.logs[slot].parked.take(row) else {
                        self.release_slot();
                        break;
                    };
                    self.slots.caps.note_parked(r.at.caps, -1);
                    let event = match event {
                        Some(e) => e,
                        None => match self.read_parked(slot, lsn, now) {
                            Some(e) => e,
                            None => {
                                // Unreadable for now: back in its place, retried later.
                                self.logs[slot].parked.put_back(lsn, at, None, row);
                                self.slots.caps.note_parked(r.at.caps, 1);
                                self.release_slot();
                                break;
                            }
                        },
                    };
                    // Parked again (lost the room to another core): back in its place.
                    if !self.place(slot, lsn, event, row, jobs, true) {
                        break;
                    }
                }
            }
        }
        true
    }

    /// The event at `lsn` of log `slot`, parked by reference, read back from the log
    /// (`pump_parked`): forward from where the log's last parked read-back stopped, or from a
    /// reader opened at `lsn`. `None` when it cannot be read: said on stderr and counted, and
    /// the log's parked events wait [`REOPEN_MAX_DELAY`] before the next try (they stay
    /// pending in the log).
    fn read_parked(&mut self, slot: usize, lsn: Lsn, now: u64) -> Option<EventRecord> {
        let log = &mut self.logs[slot];
        let (env, dir) = (&self.env, &log.dir);
        let open = |at| env.open(dir, at);
        let got = read_at(open, dir, &mut log.parked_reader, lsn, log.durable);
        match got {
            Ok(e) => Some(e),
            Err(e) => {
                log.parked_reader = None;
                log.parked_retry_at = now.saturating_add(REOPEN_MAX_DELAY);
                self.metrics.readback_open_failed();
                eprintln!(
                    "sluice: pump: reading parked event {lsn} of {} back: {e} (it stays \
                     pending; retried in a second)",
                    log.name
                );
                None
            }
        }
    }

    /// Admits one event (of the trigger at ledger row `row`) that holds a dispatch slot: a job
    /// keeps it; otherwise it goes back, and an event whose trigger is at its cap is parked:
    /// after the others of its trigger, or, `front` (just taken from the front of its parked
    /// line), back there. False when parked.
    fn place(
        &mut self,
        slot: usize,
        lsn: Lsn,
        event: EventRecord,
        row: usize,
        jobs: &mut Vec<(usize, Job)>,
        front: bool,
    ) -> bool {
        match self.admit_one(slot, lsn, event, row) {
            Admit::Job(job) => jobs.push(job),
            Admit::Done => self.release_slot(),
            Admit::Park(lsn, event, row, caps) => {
                let ordered = self.triggers.has_gates(row);
                let parked = &mut self.logs[slot].parked;
                match front {
                    true => parked.put_back(lsn, 0, Some(event), row),
                    false => parked.put(lsn, event, row, ordered),
                }
                self.slots.caps.note_parked(caps, 1);
                self.release_slot();
                return false;
            }
        }
        true
    }

    /// Admits one event of the trigger at ledger row `row`: a job if it goes to a destination
    /// (and takes its trigger's window cap), `Park` if its trigger is at its cap. Its trigger is
    /// looked up by row (`pump_triggers`), not by name.
    fn admit_one(&mut self, slot: usize, lsn: Lsn, event: EventRecord, row: usize) -> Admit {
        let log = &self.logs[slot];
        let recovered = lsn < log.recovered.next_lsn;
        if recovered && !log.recovered.pending.contains_key(&lsn) {
            crate::wal::shelf::give(event);
            return Admit::Done; // done before the restart
        }
        let r = resolve(
            &mut self.triggers,
            &self.slots.caps,
            &self.env,
            row,
            &event.trigger_id,
        );
        let dest = r.dest;
        let mut capless = false;
        let window = match dest {
            Some(_) => {
                // Its gates hold `[flow] max_held` (dispatch::flow "Bounds"): it waits here.
                if gates_full(&self.env, &r, &event.trigger_id) {
                    return Admit::Park(lsn, event, row, r.at.caps);
                }
                match self.slots.caps.take(r.at.caps) {
                    true => Some(r.at.caps),
                    // A trigger with gates is never parked at its cap: its events reach the
                    // gates in order, and one that passes them takes its cap there
                    // (`Job::capless`, the dispatcher's slot wait), so the gates' order per
                    // key holds across the logs and cores (issue 38).
                    false if r.at.gated => {
                        capless = true;
                        None
                    }
                    false => return Admit::Park(lsn, event, row, r.at.caps),
                }
            }
            None => None,
        };
        let log = &mut self.logs[slot];
        let (attempt, due_at_ms) = match log.recovered.pending.remove(&lsn) {
            Some(meta) if recovered => (meta.next_attempt.max(1), meta.due_at_ms),
            _ => (1, 0),
        };
        // Recovered events were counted in the recovered slot (`Backlog::preload`).
        let backlog_slot = match recovered {
            true => self.env.recovered_slot(),
            false => r.at.backlog,
        };
        let live = Live {
            cost: crate::wal::event_cost(&event),
            slot: backlog_slot,
            window,
            received_at_ms: event.received_at_ms,
            outstanding: dest.is_some(),
            trigger: row,
            held: None,
        };
        log.live.insert(lsn, live);
        let Some(dest) = dest else {
            // No handler: stored, and done at once; its record goes back to ingest's shelf.
            log.done_queue.push(DoneEntry {
                event_lsn: lsn,
                status: DoneStatus::NoHandler,
                attempts: 0,
            });
            crate::wal::shelf::give(event);
            return Admit::Done;
        };
        let owner = self.routes.destinations.get(dest).map_or(0, |r| r.owner);
        let key = event_key(log.index, lsn);
        let mut job = Job::new(key, event, dest, attempt, due_at_ms).from_log(log.dir.clone());
        job.capless = capless;
        Admit::Job((owner, job))
    }
}

/// The trigger at ledger row `row`, named `name` (`pump_triggers`: looked up by name only when
/// the row is stale).
fn resolve(
    triggers: &mut Triggers,
    caps: &TriggerCaps,
    env: &impl PumpEnv,
    row: usize,
    name: &str,
) -> Resolved {
    triggers.get(row, name, |name| {
        let cells = env.gate_cells(name);
        Slots {
            caps: caps.slot(name),
            backlog: env.trigger_slot(name),
            cells,
            gated: cells.is_some_and(|t| env.gated(t)),
        }
    })
}

/// True while the gates of trigger `name` (resolved as `r`) hold `[flow] max_held` events: by
/// its cells if it had some when resolved, else by name (cells a reload claims later).
fn gates_full(env: &impl PumpEnv, r: &Resolved, name: &str) -> bool {
    match r.at.cells {
        Some(t) => env.cells_full(t),
        None => env.gates_full(name),
    }
}

/// The event record at `lsn` of the log in `dir`, read with `reader` (kept between calls: read
/// forward, skipping the records below `lsn` by their headers; replaced by one `open`ed at
/// `lsn` when there is none or it is already past it).
fn read_at<T: LogTail>(
    open: impl FnOnce(Lsn) -> Result<T, WalError>,
    dir: &Path,
    reader: &mut Option<T>,
    lsn: Lsn,
    durable: Lsn,
) -> Result<EventRecord, WalError> {
    if !reader.as_ref().is_some_and(|r| r.next_lsn() <= lsn) {
        *reader = Some(open(lsn)?);
    }
    let Some(tail) = reader.as_mut() else {
        unreachable!("set above");
    };
    tail.skip_to(lsn);
    loop {
        match tail.next(durable)? {
            Some((l, _)) if l < lsn => continue,
            Some((l, Record::Event(ev))) if l == lsn => return Ok(ev),
            other => {
                let found = match other {
                    Some((l, _)) => format!("the record at LSN {l}"),
                    None => "the end of what is durable".to_owned(),
                };
                return Err(WalError::Corrupt {
                    segment: dir.to_path_buf(),
                    offset: 0,
                    reason: format!("a parked event at LSN {lsn} was expected, found {found}"),
                });
            }
        }
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;
    use crate::wal::format::tests::sample_event;
    use crate::wal::{open, WalConfig, WalTail};

    /// Parked events by reference are read back forward with one reader, a new one opened only
    /// to go back; a record that is not the event asked for is an error naming both.
    #[test]
    fn parked_events_are_read_back_forward_and_a_wrong_record_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let (mut wal, _) = open(&WalConfig {
            segment_bytes: 1 << 20,
            max_body_bytes: 4096,
            ..WalConfig::new(&dir)
        })
        .unwrap();
        wal.append_events(&(1..=6).map(|i| sample_event(i, 10)).collect::<Vec<_>>())
            .unwrap();
        wal.sync().unwrap();
        let opens = std::cell::Cell::new(0);
        let mut reader: Option<WalTail> = None;
        let mut read = |lsn: Lsn| {
            let open = |at| {
                opens.set(opens.get() + 1);
                WalTail::open(&dir, at)
            };
            read_at(open, &dir, &mut reader, lsn, 6)
        };
        for lsn in [2, 3, 5] {
            assert_eq!(read(lsn).unwrap().event_id, sample_event(lsn, 10).event_id);
        }
        assert_eq!(opens.get(), 1, "forward: one reader");
        assert_eq!(read(1).unwrap().event_id, sample_event(1, 10).event_id);
        assert_eq!(opens.get(), 2, "back: a new reader");
        let e = read(9).unwrap_err().to_string();
        assert!(e.contains("a parked event at LSN 9 was expected"), "{e}");
    }
}
