//! Admission: the next durable events of each log, and the parked ones whose trigger has room
//! again, each into a job holding a dispatch slot (and its trigger's window cap), a `Done`
//! entry (no handler; done before a restart), or the log's parked events (its trigger at its
//! cap). Parked events go first, in LSN order per log.
#![forbid(unsafe_code)]

use super::{Admit, Live, PumpCore, PumpEnv, MAX_DONE_ENTRIES};
use crate::dispatch::job::{event_key, Job};
use crate::wal::{DoneEntry, DoneStatus, EventRecord, Lsn};

impl<E: PumpEnv> PumpCore<E> {
    pub(super) fn admit(&mut self, jobs: &mut Vec<(usize, Job)>) {
        if !self.admit_parked(jobs) {
            return;
        }
        for slot in 0..self.logs.len() {
            while self.room_to_admit(slot) && !self.logs[slot].parked.full() {
                if !self.slots.window.acquire(self.core) {
                    return;
                }
                let (lsn, event) = match self.logs[slot].next_event() {
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
                let at = self.logs[slot].parked.len();
                self.place(slot, at, lsn, event, jobs);
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
    /// log. False when the dispatch slots (`max_outstanding`) are exhausted.
    fn admit_parked(&mut self, jobs: &mut Vec<(usize, Job)>) -> bool {
        for slot in 0..self.logs.len() {
            let mut i = 0;
            while self.room_to_admit(slot) {
                let Some((trigger, w)) = self.logs[slot].parked.get(i) else {
                    break;
                };
                // By id: a trigger a reload added has flow cells but the default slot.
                if !self.slots.caps.room(w) || self.env.gates_full(trigger) {
                    i += 1;
                    continue;
                }
                if !self.slots.window.acquire(self.core) {
                    return false;
                }
                let Some((lsn, event)) = self.logs[slot].parked.take(i) else {
                    self.release_slot();
                    break;
                };
                self.slots.caps.note_parked(-1);
                // Parked again (lost the room to another core): back in its place, passed.
                if !self.place(slot, i, lsn, event, jobs) {
                    i += 1;
                }
            }
        }
        true
    }

    /// Admits one event that holds a dispatch slot: a job keeps it; otherwise it goes back, and
    /// an event whose trigger is at its cap is parked at position `at`. False when parked.
    fn place(
        &mut self,
        slot: usize,
        at: usize,
        lsn: Lsn,
        event: EventRecord,
        jobs: &mut Vec<(usize, Job)>,
    ) -> bool {
        match self.admit_one(slot, lsn, event) {
            Admit::Job(job) => jobs.push(job),
            Admit::Done => self.release_slot(),
            Admit::Park(lsn, event, w) => {
                self.logs[slot].parked.put(at, lsn, event, w);
                self.slots.caps.note_parked(1);
                self.release_slot();
                return false;
            }
        }
        true
    }

    /// An event of a trigger this run's configurations never named: the default route's (no
    /// handler, by design), or one a manifest named before a restart, whose destination is then
    /// unknown. It is recorded `no_handler` like a default-route event (`sluice wal inspect`
    /// lists it; it can be posted again): said on stderr once per trigger id.
    fn unknown_trigger(&mut self, id: &str) -> Option<usize> {
        if id != self.routes.default_trigger && self.unknown.insert(id.to_string()) {
            eprintln!(
                "sluice: pump: events of trigger {id:?}, which the configuration does not name \
                 (removed before this start?), are recorded as no_handler: their destination is \
                 unknown"
            );
        }
        None
    }

    /// Admits one event: a job if it goes to a destination (and takes its trigger's window
    /// cap), `Park` if its trigger is at its cap.
    fn admit_one(&mut self, slot: usize, lsn: Lsn, event: EventRecord) -> Admit {
        let log = &self.logs[slot];
        let recovered = lsn < log.recovered.next_lsn;
        if recovered && !log.recovered.pending.contains_key(&lsn) {
            return Admit::Done; // done before the restart
        }
        let dest = match self.handlers.get(event.trigger_id.as_str()) {
            Some(d) => *d,
            None => self.unknown_trigger(&event.trigger_id),
        };
        let window = match dest {
            Some(_) => {
                let w = self.slots.caps.slot(&event.trigger_id);
                // Its gates hold `[flow] max_held` (dispatch::flow "Bounds"): it waits here.
                if self.env.gates_full(&event.trigger_id) || !self.slots.caps.take(w) {
                    return Admit::Park(lsn, event, w);
                }
                Some(w)
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
            false => self.env.trigger_slot(&event.trigger_id),
        };
        let live = Live {
            cost: crate::wal::event_cost(&event),
            slot: backlog_slot,
            window,
            received_at_ms: event.received_at_ms,
            outstanding: dest.is_some(),
            trigger: self.ledger.slot(&event.trigger_id),
            held: None,
        };
        log.live.insert(lsn, live);
        let Some(dest) = dest else {
            // No handler: stored, and done at once.
            log.done_queue.push(DoneEntry {
                event_lsn: lsn,
                status: DoneStatus::NoHandler,
                attempts: 0,
            });
            return Admit::Done;
        };
        let owner = self.routes.destinations.get(dest).map_or(0, |r| r.owner);
        let key = event_key(log.index, lsn);
        let job = Job::new(key, event, dest, attempt, due_at_ms).from_log(log.dir.clone());
        Admit::Job((owner, job))
    }
}
