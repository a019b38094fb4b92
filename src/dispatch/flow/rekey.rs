//! Re-keying the gates for a reload's configuration (`ops::reload`) without losing a held event.
//!
//! [`FlowEngine::rekey`] takes every event a gate holds (batch members not yet flushed, the
//! latest event of each debounce key, throttle and concurrency waiters) out of the old state —
//! their `sluice_flow_held` counts go down as they leave — builds the gates of the new
//! configuration, carries over what still applies, and offers the taken events to the new gates
//! again, oldest first (by event key). Nothing is dropped: an event either is held by a new gate
//! (counted in `sluice_flow_held` again), goes on to its destination, or is skipped by a new
//! gate's rule (`rate_limit`, `debounce`, `singleton`), which is that gate's ordinary, durable
//! outcome. A trigger that no longer has gates (or no longer exists) lets its held events go on.
//!
//! A taken event stays *held* in the dispatch-window sense: it gave its `max_outstanding` slot
//! back when a gate first held it, so it is not reported in [`FlowOut::held`] again and, when it
//! goes on, it leaves through [`FlowOut::resumed`] (it takes a slot then). Its body, if it was
//! dropped ([`super::payload`]), is read back first — the new gates' keys may read it — and held
//! under the `[flow] max_held_bytes` budget again; an unreadable one leaves as
//! [`FlowOut::lost`] (pending in its log, as at any release).
//!
//! Carried over: the `rate_limit`/`throttle` windows of a trigger whose gate is unchanged (a
//! changed gate starts with an empty window); the holds of events in progress (passed
//! `singleton`/`concurrency`, not yet finished) under their old keys, when the trigger still has
//! that gate, so `max` counts them until they finish; the window-state store, the held-bodies
//! budget and the timers' sequence. A taken concurrency waiter's own singleton hold is given
//! back before it is offered (it meets its singleton gate again).
//!
//! Counting (`sluice_flow_control_total`, one decision per event per gate it reaches): a taken
//! event leaves its old gate as `wait` (it was held, then went on — to the new gates), and its
//! re-offer reaches the new gates as a new arrival, counted there again. So for every gate
//! `pass + wait + skip + held` stays the number of events that reached it.

use super::*;

impl FlowEngine {
    /// Replaces the gates with those of `config` (see the module docs); decisions go to `out`.
    /// `now`: the injected clock, as for [`FlowEngine::offer`].
    pub fn rekey(&mut self, config: Arc<Config>, now: u64, out: &mut FlowOut) {
        // Windows saved before the restart belong to the old gates: restore them first.
        let now = self.restore_once(now);
        let mut taken = self.take_held();
        taken.sort_by_key(|p| p.job.lsn);
        let old_config = Arc::clone(&self.config);
        let mut old_gates: HashMap<String, TriggerGates> = old_config
            .triggers
            .iter()
            .map(|t| t.id.clone())
            .zip(std::mem::take(&mut self.gates))
            .collect();
        let mut holds = std::mem::take(&mut self.holds);
        // A waiter's own holds (a concurrency waiter passed `singleton`) are not in progress.
        for p in &taken {
            holds.remove(&p.job.lsn);
        }
        let mut next = FlowEngine::new(config, Arc::clone(&self.metrics), self.store.take());
        next.seq = self.seq;
        next.payloads = std::mem::replace(&mut self.payloads, payload::Payloads::new(0));
        next.sweep_at = self.sweep_at;
        next.idle_sweep_at = self.idle_sweep_at;
        let new_config = Arc::clone(&next.config);
        for (t, tc) in new_config.triggers.iter().enumerate() {
            let Some(old) = old_config.triggers.iter().find(|o| o.id == tc.id) else {
                continue;
            };
            let Some(g) = old_gates.remove(&tc.id) else {
                continue;
            };
            if old.flow.rate_limit.is_some() && old.flow.rate_limit == tc.flow.rate_limit {
                next.window_keys += g.rate_limit.len();
                next.gates[t].rate_limit = g.rate_limit;
            }
            if old.flow.throttle.is_some() && old.flow.throttle == tc.flow.throttle {
                // Its waiters were taken above; a carried window key has no timer.
                next.window_keys += g.throttle.len();
                next.gates[t].throttle = g.throttle;
            }
        }
        for (lsn, h) in holds {
            let Some(id) = old_config.triggers.get(h.trigger).map(|t| t.id.as_str()) else {
                continue;
            };
            let Some(&t) = next.by_id.get(id) else {
                continue;
            };
            let f = &new_config.triggers[t].flow;
            let mut hold = Hold {
                trigger: t,
                singleton: None,
                concurrency: None,
            };
            if let (Some(k), Some(_)) = (h.singleton, &f.singleton) {
                next.gates[t].singleton.insert(k.clone());
                hold.singleton = Some(k);
            }
            if let (Some(k), Some(_)) = (h.concurrency, &f.concurrency) {
                next.gates[t]
                    .concurrency
                    .entry(k.clone())
                    .or_default()
                    .active += 1;
                hold.concurrency = Some(k);
            }
            if hold.singleton.is_some() || hold.concurrency.is_some() {
                next.holds.insert(lsn, hold);
            }
        }
        *self = next;
        for p in taken {
            self.reoffer(p, now, out);
        }
    }

    /// Every event the gates hold, taken out (the held counts follow); throttle keys disarmed.
    fn take_held(&mut self) -> Vec<Pending> {
        let mut taken: Vec<Pending> = Vec::new();
        let mut left: Vec<(usize, Stage, usize)> = Vec::new();
        for (t, g) in self.gates.iter_mut().enumerate() {
            let mut n = 0;
            for (_, b) in g.batch.drain() {
                n += b.members.len();
                taken.extend(b.members.into_iter().map(|(job, dropped)| Pending {
                    job,
                    keys: Box::default(),
                    held: true,
                    dropped,
                }));
            }
            left.push((t, Stage::Batch, n));
            let n = g.debounce.len();
            taken.extend(g.debounce.drain().map(|(_, d)| d.latest));
            left.push((t, Stage::Debounce, n));
            let mut n = 0;
            for w in g.throttle.values_mut() {
                n += w.waiters.len();
                taken.extend(w.waiters.drain(..));
                w.armed = false;
            }
            left.push((t, Stage::Throttle, n));
            let mut n = 0;
            for c in g.concurrency.values_mut() {
                n += c.waiters.len();
                taken.extend(std::mem::take(&mut c.waiters).into_values());
            }
            left.push((t, Stage::Concurrency, n));
        }
        for (t, stage, n) in left {
            if n > 0 {
                // They leave the old gate having waited: one decision each, so the old gate's
                // `pass + wait + skip + held` still equals the events that reached it.
                self.unheld(t, stage, n);
                let m = self.cell(t);
                self.metrics
                    .flow
                    .incr_n(m, stage as usize, Decision::Wait as usize, n);
            }
        }
        taken
    }

    /// Offers a taken event to the new gates: its keys resolved again (its body read back
    /// first if it was dropped), its body held under the budget again.
    fn reoffer(&mut self, mut p: Pending, now: u64, out: &mut FlowOut) {
        let Some(&t) = self.by_id.get(p.job.event.trigger_id.as_str()) else {
            // No gates any more: it goes on (its body read back if it was dropped).
            self.leave(p, out);
            return;
        };
        if p.dropped {
            if let Err(e) = self.payloads.restore(&mut p.job, true) {
                self.lost(p.job.lsn, &e, out);
                return;
            }
        } else {
            // Released from the budget here, held under it again below.
            self.payloads.forget(&p.job, false);
        }
        p.keys = Box::new(resolve(&self.config.triggers[t].flow, &p.job.event));
        p.dropped = self.payloads.hold(&mut p.job);
        self.run(t, p, Stage::Batch, now, out);
    }
}
