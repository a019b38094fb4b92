//! The backlog and trigger parts of `/api/v1/state` (`ops::dashboard`): per trigger what it
//! holds of its guaranteed share and what it borrowed from the common pool, whether its next
//! event is refused (`at_limit`), its refusals and its jobs in the dispatch window; the pool,
//! the default route's and the recovered events' slots; the pump's per-trigger window cap.
//!
//! **Removed triggers stay visible.** A trigger a reload removed keeps its backlog slot (its
//! events accepted before the reload are still delivered, `ops::reload::ids`), and
//! `backlog.events` keeps counting them; so its row stays in `triggers[]`, with
//! `"removed": true`, until it holds no event and no dispatch job. Read from the slots, so
//! this covers the triggers configured at start; a trigger a reload added (and removed again)
//! was counted in the default route's slot, where its events stay visible.

#![forbid(unsafe_code)]

use serde_json::{json, Map, Value};

use crate::config::Config;
use crate::ingest::backlog::view::{SlotView, SLOT_REFUSALS};
use crate::ingest::backlog::WhenFull;
use crate::ops::view::OpsView;

/// `triggers[]`: the configuration's triggers, then the removed ones still holding events.
pub fn triggers(node: &OpsView<'_>, config: &Config) -> Vec<Value> {
    let backlog = node.backlog;
    let views = backlog.slot_views();
    let default = backlog.default_slot();
    let mut rows: Vec<Value> = config
        .triggers
        .iter()
        .map(|t| {
            let view = &views[backlog.own_slot(&t.id).unwrap_or(default)];
            let absorbs = t.when_backlog_full == WhenFull::Absorb;
            trigger_row(node, &t.id, Some(&t.path), view, absorbs)
        })
        .collect();
    let dispatching = |v: &SlotView| node.caps.held_by(&v.name);
    let removed = views[..default].iter().filter(|v| {
        !config.triggers.iter().any(|t| t.id == v.name) && (v.events > 0 || dispatching(v) > 0)
    });
    rows.extend(removed.map(|v| trigger_row(node, &v.name, None, v, v.absorbs)));
    rows
}

/// One trigger's row; `path` is `None` for a trigger the configuration no longer names.
fn trigger_row(
    node: &OpsView<'_>,
    id: &str,
    path: Option<&str>,
    view: &SlotView,
    absorbs: bool,
) -> Value {
    let mut row = slot_json(view, node.caps.held_by(&view.name));
    let d = node.dispatch;
    // The start-up trigger's cells (a reload may reorder the triggers).
    let cells = d.flow.index_of(id).unwrap_or(usize::MAX);
    let mut gates = Map::new();
    for (g, gate) in crate::dispatch::flow::metrics::GATES.iter().enumerate() {
        if let Some(counts) = d.flow.decisions(cells, g) {
            let counts: Map<String, Value> = crate::dispatch::flow::metrics::DECISIONS
                .iter()
                .zip(counts)
                .map(|(name, n)| (name.to_string(), json!(n)))
                .collect();
            gates.insert(gate.to_string(), Value::Object(counts));
        }
    }
    let fields = [
        ("id", json!(id)),
        ("path", json!(path)),
        ("removed", json!(path.is_none())),
        ("backlog_slot", json!(view.name)),
        (
            "when_backlog_full",
            json!(if absorbs { "absorb" } else { "refuse" }),
        ),
        // The sum of its `sluice_flow_held{gate}` over the six gates.
        ("gate_waiting", json!(d.flow.held_in_gates(cells))),
        ("gates", Value::Object(gates)),
        ("ordering", ordering_json(d.flow.ordering(id))),
    ];
    row.extend(fields.map(|(k, v)| (k.to_string(), v)));
    Value::Object(row)
}

/// An `ordering` gate's keys (`null` without one): waiting, stopped (the first by name, each
/// with the DLQ entry it waits for), and the oldest wait with its key.
fn ordering_json(v: Option<crate::dispatch::flow::metrics::OrderingView>) -> Value {
    let Some(v) = v else { return Value::Null };
    let stopped: Vec<Value> = (v.stopped.iter())
        .map(|(key, entry)| json!({"key": key, "dlq_entry": entry}))
        .collect();
    json!({
        "on_exhausted": if v.hold { "hold" } else { "dlq" },
        "keys_waiting": v.keys_waiting,
        "keys_stopped": v.keys_stopped,
        "oldest_wait_seconds": v.oldest_wait_ms as f64 / 1000.0,
        "oldest_key": v.oldest_key,
        "stopped": stopped,
    })
}

/// What a slot holds, of its share and of the pool, its limit and its refusals; `dispatching`:
/// its jobs in the dispatch window.
fn slot_json(v: &SlotView, dispatching: u64) -> Map<String, Value> {
    let refused: Map<String, Value> = SLOT_REFUSALS
        .iter()
        .zip(v.refused)
        .map(|(r, n)| (r.as_str().to_string(), json!(n)))
        .collect();
    let fields = [
        ("pending_events", json!(v.events)),
        ("pending_bytes", json!(v.bytes)),
        ("share_events", json!(v.share_events)),
        ("share_bytes", json!(v.share_bytes)),
        ("borrowed_events", json!(v.borrowed_events)),
        ("borrowed_bytes", json!(v.borrowed_bytes)),
        ("at_limit", json!(v.at_limit)),
        ("dispatching", json!(dispatching)),
        ("refused", Value::Object(refused)),
    ];
    fields
        .map(|(k, v)| (k.to_string(), v))
        .into_iter()
        .collect()
}

/// `backlog`: the node's totals, the common pool, the default route's and the recovered slots.
pub fn backlog(node: &OpsView<'_>, config: &Config, oldest_age_s: f64) -> Value {
    let b = node.backlog;
    let (pool_events, pool_bytes) = b.pool_used();
    let (pool_max_events, pool_max_bytes) = b.pool_size();
    let default = b.slot_view(b.default_slot());
    let recovered = b.slot_view(b.recovered_slot());
    let mut default_route = slot_json(&default, node.caps.held_by(&default.name));
    default_route.insert("on".into(), json!(config.ingest.default_route));
    json!({
        "events": b.pending_events(),
        "max_events": config.dispatch.max_pending_events,
        "bytes": b.pending_bytes(),
        "max_bytes": config.dispatch.max_pending_bytes,
        "oldest_age_seconds": oldest_age_s,
        "saturated": b.is_saturated(),
        "pool": {
            "events": pool_events,
            "max_events": pool_max_events,
            "bytes": pool_bytes,
            "max_bytes": pool_max_bytes,
        },
        "default_route": default_route,
        "recovered": {"pending_events": recovered.events, "pending_bytes": recovered.bytes},
    })
}

/// `pump`: jobs outstanding, the window, its per-trigger cap and the events parked at it.
pub fn pump(node: &OpsView<'_>, config: &Config) -> Value {
    let d = node.dispatch;
    json!({
        "outstanding": d.pump_outstanding(),
        "max_outstanding": config.pump.max_outstanding,
        "window_overflows": d.window_overflows(),
        "trigger_cap": node.caps.cap(),
        "parked_events": node.caps.parked(),
    })
}
