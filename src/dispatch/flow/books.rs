//! The books of one core's gates: what they count and what they hold in memory.
//!
//! Every gate decision is counted here (`sluice_flow_control_total`), and every event a gate
//! holds is entered and left here: the `sluice_flow_held` gauge (which is also the `[flow]
//! max_held` bound the pumps check, [`super::metrics::FlowMetrics::full`]), the waiters held by
//! reference (`sluice_flow_held_in_log`), the engine's own count of held events, and the held
//! bodies' memory budget ([`Payloads`], `[flow] max_held_bytes`).
//!
//! **Invariants.** [`Books::waiting`] is the number of events this engine's gates hold: each
//! event is entered once per gate that holds it ([`Books::held`]) and left once
//! ([`Books::unheld`]), so it returns to zero when the gates are empty, and so do the engine's
//! shares of the gauges. A body is counted in the budget from the moment its event is first
//! held until it leaves the gates (delivered, skipped, or held by reference, which keeps no
//! body), never twice. An event is reported in [`FlowOut::held`] once per gate that holds it.
//!
//! The gauges' cells are those of the start-up triggers (`metrics::FlowMetrics::index_of`; a
//! reload may reorder the triggers), so the books map each trigger to its cell
//! ([`Books::cell`]) and a reload re-maps them ([`Books::rekey`]), carrying the held count and
//! the budget over: the events stay held across it.
#![forbid(unsafe_code)]

use std::sync::Arc;

use super::metrics::FlowMetrics;
use super::payload::Payloads;
use super::pending::{resolve, Decision, FlowOut, Pending, Stage, Waiter};
use super::spec::FlowSpec;
use super::waiters;
use crate::dispatch::job::SkipReason;
use crate::dispatch::metrics::DispatchMetrics;
use crate::dispatch::spec::DispatchSpec;
use crate::wal::{Lsn, WalError};

/// One core's counts and held bodies (module docs).
#[derive(Debug)]
pub(super) struct Books {
    config: Arc<DispatchSpec>,
    metrics: Arc<DispatchMetrics>,
    /// Indexed like `config.triggers`: the trigger's cells in `metrics.flow`, which are those of
    /// the start-up triggers (a reload may reorder them); `usize::MAX` (counted nowhere) for a
    /// trigger a reload added.
    cells: Vec<usize>,
    /// Events held in this engine's gates.
    waiting: usize,
    /// The bodies held in memory, within `[flow] max_held_bytes`.
    pub(super) payloads: Payloads,
}

/// Trigger by trigger, its cells in `metrics.flow`, each marked with the gates it has now.
fn cells(config: &DispatchSpec, flow: &FlowMetrics) -> Vec<usize> {
    let cell = |t: &crate::dispatch::spec::TriggerRoute| match flow.index_of(&t.id) {
        Some(m) => {
            flow.mark_configured(m, &t.flow);
            m
        }
        None => usize::MAX,
    };
    config.triggers.iter().map(cell).collect()
}

impl Books {
    /// Nothing held yet: `config`'s triggers' cells (each marked with its gates) and the bodies
    /// budget `[flow] max_held_bytes`.
    pub(super) fn new(config: &Arc<DispatchSpec>, metrics: Arc<DispatchMetrics>) -> Books {
        Books {
            cells: cells(config, &metrics.flow),
            payloads: Payloads::new(config.flow.max_held_bytes),
            config: Arc::clone(config),
            metrics,
            waiting: 0,
        }
    }

    /// The books of a reload's `config`: its triggers' cells; the held events and their bodies
    /// stay entered (those the reload takes out were left first, on the old cells).
    pub(super) fn rekey(&mut self, config: &Arc<DispatchSpec>) {
        self.cells = cells(config, &self.metrics.flow);
        self.config = Arc::clone(config);
    }

    /// Events held in this engine's gates.
    pub(super) fn waiting(&self) -> usize {
        self.waiting
    }

    /// The flow metric families (shared by every core).
    pub(super) fn flow(&self) -> &FlowMetrics {
        &self.metrics.flow
    }

    /// Trigger `t`'s cells in the flow metrics (`usize::MAX`: counted nowhere).
    #[inline]
    pub(super) fn cell(&self, t: usize) -> usize {
        self.cells.get(t).copied().unwrap_or(usize::MAX)
    }

    /// One event leaves `stage` of trigger `t` with decision `d`.
    pub(super) fn count(&self, t: usize, stage: Stage, d: Decision) {
        self.metrics
            .flow
            .incr(self.cell(t), stage as usize, d as usize);
    }

    /// `n` events leave `stage` of trigger `t` with decision `d`.
    pub(super) fn count_n(&self, t: usize, stage: Stage, d: Decision, n: usize) {
        let flow = &self.metrics.flow;
        flow.incr_n(self.cell(t), stage as usize, d as usize, n);
    }

    /// `p` goes on from `stage` at once: `pass`, or `wait` when a reload took it from this
    /// stage's old gate (it was held here).
    pub(super) fn passed(&self, t: usize, stage: Stage, p: &Pending) {
        let d = match p.retaken == Some(stage) {
            true => Decision::Wait,
            false => Decision::Pass,
        };
        self.count(t, stage, d);
    }

    /// A key of `stage` of trigger `t` was refused its own entry (a bound was reached).
    pub(super) fn overflowed(&self, t: usize, stage: Stage) {
        self.metrics.flow.overflowed(self.cell(t), stage as usize);
    }

    /// Events `stage` of trigger `t` holds now (every core's).
    pub(super) fn held_in(&self, t: usize, stage: Stage) -> usize {
        self.metrics.flow.held(self.cell(t), stage as usize) as usize
    }

    /// `p` is held by `stage`: reported once, so its dispatch slot is given back; its body
    /// may be dropped ([`super::payload`]).
    pub(super) fn held(&mut self, t: usize, stage: Stage, p: &mut Pending, out: &mut FlowOut) {
        self.waiting += 1;
        self.metrics.flow.held_add(self.cell(t), stage as usize, 1);
        if !std::mem::replace(&mut p.held, true) {
            p.dropped = self.payloads.hold(&mut p.job);
        }
        // Reported once per gate, so the pump can say which gate holds it.
        if p.held_at.replace(stage) != Some(stage) {
            out.held.push((p.job.lsn, stage));
        }
    }

    /// `n` events left `stage`'s hold.
    pub(super) fn unheld(&mut self, t: usize, stage: Stage, n: usize) {
        self.waiting -= n;
        self.metrics
            .flow
            .held_add(self.cell(t), stage as usize, -(n as i64));
    }

    /// `p` ends at `stage` without delivery.
    pub(super) fn skip(
        &mut self,
        t: usize,
        stage: Stage,
        p: Pending,
        why: SkipReason,
        out: &mut FlowOut,
    ) {
        if p.held {
            self.payloads.forget(&p.job, p.dropped);
        }
        self.count(t, stage, Decision::Skip);
        out.skipped.push((p.job, why));
    }

    /// `p` went through every gate: `ready` if never held, else `resumed` with its body back
    /// in memory. Its key and the error when the body cannot be read back (`lost`).
    pub(super) fn leave(
        &mut self,
        mut p: Pending,
        out: &mut FlowOut,
    ) -> Result<(), (Lsn, WalError)> {
        if !p.held {
            out.ready.push(p.job);
            return Ok(());
        }
        self.payloads
            .restore(&mut p.job, p.dropped)
            .map_err(|e| (p.job.lsn, e))?;
        out.resumed.push(p.job);
        Ok(())
    }

    /// The held event at `lsn` cannot be read back: it stays pending, reported `lost`.
    pub(super) fn lost(&self, lsn: Lsn, e: &WalError, out: &mut FlowOut) {
        eprintln!("sluice: flow: a held event stays pending: {e}");
        self.metrics.flow.read_back_failed();
        out.lost.push(lsn);
    }

    /// `p`, just held by `stage` of trigger `t` whose key holds `key_full` waiters in full, as
    /// a waiter: by reference past `[flow] max_held_per_key` or `max_held` ([`waiters`]).
    pub(super) fn waiter(&mut self, t: usize, stage: Stage, p: Pending, key_full: usize) -> Waiter {
        let (m, g) = (self.cell(t), stage as usize);
        let flow = &self.metrics.flow;
        // Held in full in the gate, `p` aside (it is counted held already).
        let gate_full = (flow.held(m, g).saturating_sub(flow.in_log(m, g) + 1)) as usize;
        let b = &self.config.flow;
        let why = waiters::bound(key_full, gate_full, b.max_held_per_key, b.max_held);
        let dir = p.job.log_dir.clone().filter(|_| p.job.batch.is_empty());
        let (Some(why), Some(dir)) = (why, dir) else {
            return Waiter::Full(Box::new(p));
        };
        self.payloads.forget(&p.job, p.dropped);
        flow.in_log_add(m, g, 1);
        flow.left_in_log(m, g, why as usize);
        Waiter::Ref(waiters::Thin::of(p.job, dir, p.retaken))
    }

    /// Waiter `w` leaves `stage` of trigger `t` (gates `f`): no longer held there, in full
    /// again (read back if it was held by reference). Its key and the error when it cannot be
    /// read back.
    pub(super) fn unwait(
        &mut self,
        t: usize,
        stage: Stage,
        w: Waiter,
        f: &FlowSpec,
    ) -> Result<Pending, (Lsn, WalError)> {
        self.unheld(t, stage, 1);
        self.left_log(t, stage, &w);
        Pending::from_waiter(w, stage, f, &mut self.payloads)
    }

    /// A reload offers held event `p` to the new gates `f`: its body is read back if it was
    /// dropped (the new keys may read it), its keys resolved for `f`, and its body held under
    /// the budget again. Its key and the error when the body cannot be read back.
    pub(super) fn rehold(&mut self, p: &mut Pending, f: &FlowSpec) -> Result<(), (Lsn, WalError)> {
        if p.dropped {
            let read = self.payloads.restore(&mut p.job, true);
            read.map_err(|e| (p.job.lsn, e))?;
        } else {
            // Released from the budget here, held under it again below.
            self.payloads.forget(&p.job, false);
        }
        *p.keys = resolve(f, &p.job.event);
        p.dropped = self.payloads.hold(&mut p.job);
        Ok(())
    }

    /// `w` no longer counts as held by reference at `stage` of trigger `t` (if it was).
    fn left_log(&self, t: usize, stage: Stage, w: &Waiter) {
        if !w.is_full() {
            (self.metrics.flow).in_log_add(self.cell(t), stage as usize, -1);
        }
    }

    /// A reload took `taken` out of `stage` of old trigger `o`: they leave its hold (and the
    /// by-reference count); when the gate is `gone` they leave it having waited (once each).
    pub(super) fn retaken(&mut self, o: usize, stage: Stage, taken: &[&Waiter], gone: bool) {
        let n = taken.len();
        if n == 0 {
            return;
        }
        self.unheld(o, stage, n);
        for w in taken {
            self.left_log(o, stage, w);
        }
        if gone {
            self.count_n(o, stage, Decision::Wait, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::flow::tests::rig_config;

    fn books(gates: &str) -> (Books, Arc<DispatchMetrics>) {
        let cfg = rig_config(gates);
        let metrics =
            Arc::new(DispatchMetrics::new(&[]).with_flow(&cfg.triggers, cfg.flow.max_held));
        (Books::new(&cfg, metrics.clone()), metrics)
    }

    fn pending(lsn: u64) -> Pending {
        let job = crate::dispatch::job::test_job(&format!("e{lsn}"), lsn);
        let keys = Box::new(resolve(&FlowSpec::default(), &job.event));
        Pending::new(job, keys, false, false)
    }

    /// An event held by two gates in turn is counted by each and reported by each once; the
    /// count and the gauge return to zero as it leaves them.
    #[test]
    fn held_and_left_once_per_gate() {
        let (mut b, m) =
            books("throttle = { period = \"1s\", max = 1 }\nconcurrency = { max = 1 }");
        let mut out = FlowOut::default();
        let mut p = pending(1);
        b.held(0, Stage::Throttle, &mut p, &mut out);
        b.held(0, Stage::Throttle, &mut p, &mut out);
        b.unheld(0, Stage::Throttle, 1);
        b.held(0, Stage::Concurrency, &mut p, &mut out);
        assert_eq!(
            out.held,
            vec![(1, Stage::Throttle), (1, Stage::Concurrency)]
        );
        assert_eq!(b.waiting(), 2);
        assert_eq!(m.flow.held(b.cell(0), Stage::Throttle as usize), 1);
        b.unheld(0, Stage::Throttle, 1);
        b.unheld(0, Stage::Concurrency, 1);
        assert_eq!(b.waiting(), 0);
        assert_eq!(m.flow.held(b.cell(0), Stage::Concurrency as usize), 0);
        b.leave(p, &mut out).unwrap();
        assert_eq!(out.resumed.len(), 1, "held once: it needs a slot again");
        assert_eq!(b.payloads.bytes(), 0, "its body left the budget with it");
    }

    /// A skipped held event gives its body back; one never held leaves as `ready`.
    #[test]
    fn a_skip_forgets_the_body_and_an_unheld_event_is_ready() {
        let (mut b, m) = books("debounce = { period = \"1s\" }");
        let mut out = FlowOut::default();
        let mut p = pending(1);
        b.held(0, Stage::Debounce, &mut p, &mut out);
        assert!(b.payloads.bytes() > 0);
        b.unheld(0, Stage::Debounce, 1);
        b.skip(0, Stage::Debounce, p, SkipReason::Debounced, &mut out);
        assert_eq!(b.payloads.bytes(), 0);
        assert_eq!(
            m.flow
                .get(b.cell(0), Stage::Debounce as usize, Decision::Skip as usize),
            1
        );
        b.leave(pending(2), &mut out).unwrap();
        assert_eq!(out.ready.len(), 1);
    }

    /// A reload's trigger without cells (added by it) is counted nowhere; taken events leave
    /// the old gate's hold, and a removed gate counts them `wait`.
    #[test]
    fn a_reload_remaps_the_cells_and_keeps_the_held_count() {
        let (mut b, m) = books("throttle = { period = \"1s\", max = 1 }");
        let mut out = FlowOut::default();
        let mut p = pending(1);
        b.held(0, Stage::Throttle, &mut p, &mut out);
        let w = Waiter::Full(Box::new(p));
        b.retaken(0, Stage::Throttle, &[&w], true);
        assert_eq!(b.waiting(), 0);
        let wait = m
            .flow
            .get(b.cell(0), Stage::Throttle as usize, Decision::Wait as usize);
        assert_eq!(wait, 1);
        let mut more = rig_config("").as_ref().clone();
        more.triggers.push(more.triggers[0].clone());
        more.triggers[2].id = "new".into();
        b.rekey(&Arc::new(more));
        assert_eq!(
            (b.cell(0), b.cell(2), b.cell(9)),
            (0, usize::MAX, usize::MAX)
        );
    }
}
