//! Re-keying the gates for a reload's configuration (`ops::reload`) without losing a waiting
//! event.
//!
//! [`FlowEngine::rekey`] takes every event waiting in a gate (batch members not yet flushed, the
//! latest event of each debounce key, throttle and concurrency waiters) out of the old state,
//! builds the gates of the new configuration, carries over what still applies, and offers the
//! taken events to the new gates again, oldest first (by event key). Nothing is dropped: an event
//! either waits in a new gate, passes to its destination's queue, or is skipped by a new gate's
//! rule (`rate_limit`, `debounce`, `singleton`), which is that gate's ordinary, durable outcome.
//!
//! Carried over: the `rate_limit`/`throttle` windows of a trigger whose gate is unchanged (a
//! changed gate starts with an empty window); the holds of events in progress (passed
//! `singleton`/`concurrency`, not yet finished) under their old keys, when the trigger still has
//! that gate, so `max` counts them until they finish. Re-offered events are counted again in
//! `sluice_flow_control_total` (each evaluation is a decision).

use super::*;

impl FlowEngine {
    /// Replaces the gates with those of `config` (see the module docs); decisions go to `out`.
    pub fn rekey(&mut self, config: Arc<Config>, now: u64, out: &mut FlowOut) {
        let mut waiting: Vec<Job> = Vec::new();
        let mut taken = Vec::new();
        for (t, g) in self.gates.iter_mut().enumerate() {
            let before = waiting.len();
            for (_, b) in g.batch.drain() {
                waiting.extend(b.members);
            }
            for (_, d) in g.debounce.drain() {
                waiting.push(d.latest.job);
            }
            for w in g.throttle.values_mut() {
                waiting.extend(w.waiters.drain(..).map(|p| p.job));
                w.armed = false;
            }
            for c in g.concurrency.values_mut() {
                waiting.extend(std::mem::take(&mut c.waiters).into_values().map(|p| p.job));
            }
            taken.push((t, (waiting.len() - before) as i64));
        }
        for (t, n) in taken {
            self.note_waiting(t, -n);
        }
        waiting.sort_by_key(|j| j.lsn);
        let old_config = Arc::clone(&self.config);
        let mut old_gates: HashMap<&str, TriggerGates> = old_config
            .triggers
            .iter()
            .map(|t| t.id.as_str())
            .zip(std::mem::take(&mut self.gates))
            .collect();
        let holds = std::mem::take(&mut self.holds);
        let mut next = FlowEngine::new(config, Arc::clone(&self.metrics));
        next.seq = self.seq;
        let new_config = Arc::clone(&next.config);
        for (t, tc) in new_config.triggers.iter().enumerate() {
            let Some(old) = old_config.triggers.iter().find(|o| o.id == tc.id) else {
                continue;
            };
            let Some(g) = old_gates.remove(tc.id.as_str()) else {
                continue;
            };
            if old.flow.rate_limit.is_some() && old.flow.rate_limit == tc.flow.rate_limit {
                next.window_keys += g.rate_limit.len();
                next.gates[t].rate_limit = g.rate_limit;
            }
            if old.flow.throttle.is_some() && old.flow.throttle == tc.flow.throttle {
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
        for job in waiting {
            self.offer(job, now, out);
        }
    }
}
