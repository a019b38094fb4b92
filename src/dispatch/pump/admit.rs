//! Admission: the next durable events of each log, and the parked ones whose trigger has room
//! again, each into a job holding a dispatch slot (and its trigger's window cap), a `Done`
//! entry (no handler; done before a restart), or the log's parked events (its trigger at its
//! cap). Parked events go first, in LSN order per log.
#![forbid(unsafe_code)]

use super::triggers::{Resolved, Slots, Triggers};
use super::{Admit, Live, PumpCore, PumpEnv, MAX_DONE_ENTRIES};
use crate::dispatch::job::{event_key, Job};
use crate::dispatch::trigger_caps::TriggerCaps;
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
                let at = self.logs[slot].parked.len();
                self.place(slot, at, lsn, event, row, jobs);
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
                let Some((trigger, row)) = self.logs[slot].parked.get(i) else {
                    break;
                };
                let r = resolve(
                    &mut self.triggers,
                    &self.slots.caps,
                    &self.env,
                    row,
                    trigger,
                );
                // A trigger a reload added has flow cells but the default route's cap slot.
                if !self.slots.caps.room(r.at.caps) || gates_full(&self.env, &r, trigger) {
                    i += 1;
                    continue;
                }
                if !self.slots.window.acquire(self.core) {
                    return false;
                }
                let Some((lsn, event, row)) = self.logs[slot].parked.take(i) else {
                    self.release_slot();
                    break;
                };
                self.slots.caps.note_parked(-1);
                // Parked again (lost the room to another core): back in its place, passed.
                if !self.place(slot, i, lsn, event, row, jobs) {
                    i += 1;
                }
            }
        }
        true
    }

    /// Admits one event (of the trigger at ledger row `row`) that holds a dispatch slot: a job
    /// keeps it; otherwise it goes back, and an event whose trigger is at its cap is parked at
    /// position `at`. False when parked.
    // Every argument is a distinct part of the event's place; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    fn place(
        &mut self,
        slot: usize,
        at: usize,
        lsn: Lsn,
        event: EventRecord,
        row: usize,
        jobs: &mut Vec<(usize, Job)>,
    ) -> bool {
        match self.admit_one(slot, lsn, event, row) {
            Admit::Job(job) => jobs.push(job),
            Admit::Done => self.release_slot(),
            Admit::Park(lsn, event, row) => {
                self.logs[slot].parked.put(at, lsn, event, row);
                self.slots.caps.note_parked(1);
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
        let window = match dest {
            Some(_) => {
                // Its gates hold `[flow] max_held` (dispatch::flow "Bounds"): it waits here.
                let full = gates_full(&self.env, &r, &event.trigger_id);
                if full || !self.slots.caps.take(r.at.caps) {
                    return Admit::Park(lsn, event, row);
                }
                Some(r.at.caps)
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

/// The trigger at ledger row `row`, named `name` (`pump_triggers`: looked up by name only when
/// the row is stale).
fn resolve(
    triggers: &mut Triggers,
    caps: &TriggerCaps,
    env: &impl PumpEnv,
    row: usize,
    name: &str,
) -> Resolved {
    triggers.get(row, name, |name| Slots {
        caps: caps.slot(name),
        backlog: env.trigger_slot(name),
        cells: env.gate_cells(name),
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
