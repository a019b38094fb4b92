//! `/metrics` rendering of the durable-queue bound: per trigger what it holds and its share
//! (`sluice_backlog_*`), the common pool, the durable-queue refusals by trigger and reason,
//! absorbed events and the absorb budget. Every cell is read `Relaxed`, one by one.
#![forbid(unsafe_code)]

use std::sync::atomic::Ordering::Relaxed;

use super::view::SLOT_REFUSALS;
use super::Backlog;
use crate::ingest::shares::ShareDim;
use crate::metrics::prom::{MetricType, PromWriter};

impl Backlog {
    /// Per-trigger gauges, refusals and the pool; absorbed events and the absorb budget.
    pub fn render_prometheus(&self, w: &mut PromWriter) {
        self.render_slots(w);
        self.render_pool(w);
        self.render_refusals(w);
        self.render_absorb(w);
    }

    /// Held and guaranteed, events and bytes, by trigger.
    fn render_slots(&self, w: &mut PromWriter) {
        let per_slot: [(&str, &str, &ShareDim, bool); 4] = [
            (
                "sluice_backlog_events",
                "Committed events not yet done, by trigger (its share and what it borrowed).",
                &self.share_events,
                false,
            ),
            (
                "sluice_backlog_bytes",
                "Bytes of committed events not yet done, by trigger.",
                &self.share_bytes,
                false,
            ),
            (
                "sluice_backlog_share_events",
                "Events of the backlog guaranteed to each trigger (max_pending.events).",
                &self.share_events,
                true,
            ),
            (
                "sluice_backlog_share_bytes",
                "Bytes of the backlog guaranteed to each trigger (max_pending.bytes).",
                &self.share_bytes,
                true,
            ),
        ];
        for (name, help, dim, share) in per_slot {
            w.header(name, help, MetricType::Gauge);
            for (s, id) in self.names.iter().enumerate() {
                let v = if share { dim.share(s) } else { dim.used(s) };
                w.sample_u64(name, &[("trigger", id)], v);
            }
        }
    }

    /// The common pool: used and size, events and bytes.
    fn render_pool(&self, w: &mut PromWriter) {
        for (name, help, dim) in [
            (
                "sluice_backlog_pool_events",
                "Events borrowed from the backlog's common pool, and its size.",
                &self.share_events,
            ),
            (
                "sluice_backlog_pool_bytes",
                "Bytes borrowed from the backlog's common pool, and its size.",
                &self.share_bytes,
            ),
        ] {
            w.header(name, help, MetricType::Gauge);
            w.sample_u64(name, &[("state", "used")], dim.pool_used());
            w.sample_u64(name, &[("state", "size")], dim.pool_size());
        }
    }

    /// The durable queue's refusals by trigger (the recovered slot has none) and reason.
    fn render_refusals(&self, w: &mut PromWriter) {
        const REFUSED: &str = "sluice_ingest_trigger_refusals_total";
        w.header(
            REFUSED,
            "Events refused by the durable queue (queue_full, wal_full, wal_busy, \
             wal_unavailable), by trigger and reason.",
            MetricType::Counter,
        );
        for (s, id) in self.names.iter().enumerate().take(self.names.len() - 1) {
            for r in SLOT_REFUSALS {
                let n = self.stats[s].refusals[r as usize].load(Relaxed);
                w.sample_u64(REFUSED, &[("reason", r.as_str()), ("trigger", id)], n);
            }
        }
    }

    /// Events absorbed by trigger, and the absorb budget in use.
    fn render_absorb(&self, w: &mut PromWriter) {
        const NAME: &str = "sluice_ingest_absorbed_total";
        w.header(
            NAME,
            "Events accepted past their trigger's share and the pool by triggers with \
             when_backlog_full = \"absorb\", by trigger.",
            MetricType::Counter,
        );
        for (s, id) in self.names.iter().enumerate() {
            let n = self.stats[s].absorbed.load(Relaxed);
            // A slot absorbing since a reload: rendered from its first absorbed event.
            if self.absorbing[s] || n > 0 {
                w.sample_u64(NAME, &[("trigger", id)], n);
            }
        }
        const BUDGET: &str = "sluice_ingest_absorb_bytes";
        w.header(
            BUDGET,
            "Bytes of the absorb budget (dispatch.absorb_max_bytes) in use.",
            MetricType::Gauge,
        );
        w.sample_u64(BUDGET, &[], self.absorb_bytes());
    }
}
