//! Per-trigger flow-control gates (`[[triggers]]` keys `concurrency`, `ordering`, `priority`, `throttle`,
//! `rate_limit`, `debounce`, `singleton`, `batch`) and the `[flow]` table.
//!
//! Same two stages as the rest of [`super`]: the `Raw*` serde images, every field documented,
//! are validated once into [`FlowSpec`]. The semantics live in [`crate::dispatch::flow`].
//!
//! ```toml
//! concurrency = { key = "event.headers.x-tenant", max = 10 }
//! ordering    = { key = "event.headers.x-customer", on_exhausted = "hold" }  # not with concurrency
//! priority    = { key = "event.headers.x-tier", order = ["gold", "silver", "bronze"] }
//! throttle    = { key = "event.body.user.id", period = "1m", max = 30 }
//! rate_limit  = { period = "1h", max = 1000 }
//! debounce    = { key = "event.body.pull_request.id", period = "30s" }
//! singleton   = { key = "event.body.repository.id" }          # `singleton = {}` allowed
//! batch       = { key = "event.source", size = 50, timeout = "2s" }
//! ```
//!
//! Key selectors ([`KeySelector`]): `event.source`, `event.trigger`, `event.headers.<name>`
//! (case-insensitive) and `event.body.<dotted.json.path>`. Only headers stored with the event
//! are visible to a selector, so a header a selector names is **added to
//! `[ingest] stored_headers`** at startup (see [`super::Config::build`]); past the bound (32
//! stored per event, `content-type` included) that is a startup error naming the trigger and
//! the header, and a reload that would need a header the running server does not store is
//! refused naming both (`ops::reload::diff`). Gates on a trigger without a handler are a
//! warning ([`super::Config::warnings`]). Durations: a positive integer with `ms`, `s`, `m`,
//! `h`, `d` or `w`.

use std::time::Duration;

use serde::Deserialize;

use super::{err, ConfigError};

/// Most values in `priority.order`.
pub const MAX_PRIORITY_ORDER: usize = 64;
/// Largest `max` of `rate_limit` / `throttle` (each key keeps up to `max` timestamps).
pub const MAX_WINDOW_MAX: u64 = 1_000_000;
/// Largest `concurrency.max`.
pub const MAX_CONCURRENCY: u64 = 100_000;
/// Largest `batch.size` (a batch is one request body holding every member).
pub const MAX_BATCH_SIZE: u64 = 10_000;
/// Default of `[flow] max_gate_keys`.
pub const DEFAULT_MAX_GATE_KEYS: usize = 100_000;
/// Default of `[flow] max_held`.
pub const DEFAULT_MAX_HELD: usize = 10_000;
/// Largest `[flow] max_held`.
pub const MAX_MAX_HELD: usize = 1_000_000;
/// Default of `[flow] max_held_per_key` (or `max_held` when that is smaller).
pub const DEFAULT_MAX_HELD_PER_KEY: usize = 100;
/// Default of `[flow] max_held_bytes` (64 MiB).
pub const DEFAULT_MAX_HELD_BYTES: u64 = 64 << 20;

// ---------------------------------------------------------------------------------------------
// Stage 1: raw tables.
// ---------------------------------------------------------------------------------------------

/// `concurrency = { key?, max }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConcurrency {
    /// Key selector. Default: one gate for the trigger.
    pub key: Option<String>,
    /// Deliveries in progress at once per key. Required. Range: 1..=100_000.
    pub max: Option<u64>,
}

/// `ordering = { key?, on_exhausted? }`: FIFO per key (one call in flight per key, in
/// acceptance order; a failing event holds only its key).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOrdering {
    /// Key selector. Default: one order for the whole trigger.
    pub key: Option<String>,
    /// `"dlq"` (default): an event that goes to the DLQ (retries exhausted, a permanent answer,
    /// an open circuit) lets its key move on; `"hold"`: its key stays stopped while the dead
    /// letter is in the DLQ (a replay goes first; a discard lets the key move on).
    pub on_exhausted: Option<String>,
}

/// `priority = { key, order }` (requires `concurrency`)
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPriority {
    /// Key selector whose value is looked up in `order`. Required.
    pub key: Option<String>,
    /// Values, highest priority first; values not listed rank last. Required, 1..=64 distinct.
    pub order: Option<Vec<String>>,
}

/// `throttle` and `rate_limit = { key?, period, max }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWindow {
    /// Key selector. Default: one gate for the trigger.
    pub key: Option<String>,
    /// Sliding window length. Required.
    pub period: Option<String>,
    /// Events per window per key. Required. Range: 1..=1_000_000.
    pub max: Option<u64>,
}

/// `debounce = { key?, period }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDebounce {
    /// Key selector. Default: one gate for the trigger.
    pub key: Option<String>,
    /// Quiet time after the latest event of a key before it is delivered. Required.
    pub period: Option<String>,
}

/// `singleton = { key? }`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSingleton {
    /// Key selector. Default: one gate for the trigger.
    pub key: Option<String>,
}

/// `batch = { key?, size, timeout }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBatch {
    /// Key selector. Default: one batch for the trigger.
    pub key: Option<String>,
    /// Members per batch. Required. Range: 1..=10_000.
    pub size: Option<u64>,
    /// A batch is delivered this long after its first member even if not full. Required.
    pub timeout: Option<String>,
}

/// `[flow]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFlowSection {
    /// Per core: most `rate_limit` / `throttle` keys with state. Idle keys (empty window, no
    /// waiters) are evicted to make room; if none is idle, the event uses the gate's shared
    /// `_overflow` key. Default: 100_000. Range: 1..=10_000_000.
    pub max_gate_keys: Option<usize>,
    /// Most events one gate of one trigger holds (throttle queue, debounce keys, batch members
    /// being collected, concurrency waiters; and, separately, events released by the gates
    /// waiting for a `max_outstanding` slot). At the bound the trigger's events stay in the
    /// log (still counted by the backlog bound, so ingest refuses once its share is full) and
    /// are admitted in order as the gate releases some. Must be at least every `batch.size`.
    /// Default: 10_000. Range: 1..=1_000_000.
    pub max_held: Option<usize>,
    /// Most waiters one key of a `throttle` or `concurrency` gate holds in full; its later
    /// waiters are held by reference (their records left in the log, read back in order when
    /// the key has room), and so are a gate's past `max_held`, so one stalled key neither
    /// fills the gate nor holds back the trigger's other keys. Default: 100, or `max_held`
    /// when smaller. Range: 1..=`max_held`.
    pub max_held_per_key: Option<usize>,
    /// Per core: most bytes of held events' bodies kept in memory. Past it, a newly held
    /// event's body is dropped and read back from its log when the gate releases it (0: every
    /// held event by reference). Default: 67_108_864 (64 MiB). Range: 0..=1_099_511_627_776.
    pub max_held_bytes: Option<u64>,
}

/// The gate keys of one `[[triggers]]` entry, as written.
#[derive(Debug, Default)]
pub struct RawFlow {
    pub concurrency: Option<RawConcurrency>,
    pub ordering: Option<RawOrdering>,
    pub priority: Option<RawPriority>,
    pub throttle: Option<RawWindow>,
    pub rate_limit: Option<RawWindow>,
    pub debounce: Option<RawDebounce>,
    pub singleton: Option<RawSingleton>,
    pub batch: Option<RawBatch>,
}

// ---------------------------------------------------------------------------------------------
// Stage 2: validated.
// ---------------------------------------------------------------------------------------------

pub use crate::dispatch::flow::spec::{
    BatchGate, ConcurrencyGate, DebounceGate, FlowBounds, FlowSpec, KeySelector, OnExhausted,
    PriorityOrder, SingletonGate, WindowGate,
};

pub(super) fn build_flow_settings(r: RawFlowSection) -> Result<FlowBounds, ConfigError> {
    let max_held = super::ranged(
        "flow.max_held",
        r.max_held,
        DEFAULT_MAX_HELD,
        1,
        MAX_MAX_HELD,
    )?;
    let max_held_per_key = match r.max_held_per_key {
        None => DEFAULT_MAX_HELD_PER_KEY.min(max_held),
        Some(n) if (1..=max_held).contains(&n) => n,
        Some(n) => {
            return err(format!(
                "flow.max_held_per_key = {n} is out of range (1..={max_held}): a key holds at \
                 most flow.max_held = {max_held} in full"
            ))
        }
    };
    Ok(FlowBounds {
        max_held_per_key,
        max_gate_keys: super::ranged(
            "flow.max_gate_keys",
            r.max_gate_keys,
            DEFAULT_MAX_GATE_KEYS,
            1,
            10_000_000,
        )?,
        max_held,
        max_held_bytes: super::ranged(
            "flow.max_held_bytes",
            r.max_held_bytes,
            DEFAULT_MAX_HELD_BYTES,
            0,
            1 << 40,
        )?,
    })
}

/// A batch must fit in its gate: `batch.size <= [flow] max_held`, else the batch could never
/// fill (a precise error, never a clamp).
/// `triggers`: each trigger's id and gates.
pub(super) fn check_batch_sizes<'a>(
    triggers: impl IntoIterator<Item = (&'a str, &'a FlowSpec)>,
    flow: &FlowBounds,
) -> Result<(), ConfigError> {
    for (id, gates) in triggers {
        if let Some(b) = gates.batch.as_ref().filter(|b| b.size > flow.max_held) {
            return Err(ConfigError(format!(
                "trigger {:?}: batch.size: {} is larger than flow.max_held ({}), the most events \
                 a gate holds; raise flow.max_held or lower the size",
                id, b.size, flow.max_held
            )));
        }
    }
    Ok(())
}

/// Flow-control durations: a positive integer with `ms`, `s`, `m`, `h`, `d` or `w` (weeks).
pub fn parse_flow_duration(text: &str) -> Result<Duration, String> {
    if let Some(n) = text.trim().strip_suffix('w') {
        let days = super::parse_duration(&format!("{n}d"))
            .map_err(|_| format!("duration {text:?} must be a positive integer with a unit"))?;
        return days
            .checked_mul(7)
            .filter(|d| *d <= super::duration::MAX_DURATION)
            .ok_or_else(|| format!("duration {text:?} is too large (at most 365d)"));
    }
    super::parse_duration(text)
        .map_err(|e| e.replace("(use ms, s, m, h or d)", "(use ms, s, m, h, d or w)"))
}

/// Validates one trigger's gates. `id` names the trigger in every message.
pub fn build_flow(id: &str, r: RawFlow) -> Result<FlowSpec, ConfigError> {
    let v = Validator { id };
    v.combinations(&r)?;
    let priority = match r.priority {
        None => None,
        Some(p) => Some(v.priority(p)?),
    };
    let concurrency = match r.concurrency {
        None => None,
        Some(c) => Some(ConcurrencyGate {
            key: v.selector("concurrency", c.key)?,
            max: v.number("concurrency", "max", c.max, MAX_CONCURRENCY)?,
            priority,
            ordering: None,
        }),
    };
    let concurrency = match r.ordering {
        None => concurrency,
        Some(o) => Some(ConcurrencyGate {
            key: v.selector("ordering", o.key)?,
            max: 1,
            priority: None,
            ordering: Some(v.on_exhausted(o.on_exhausted)?),
        }),
    };
    Ok(FlowSpec {
        batch: match r.batch {
            None => None,
            Some(b) => Some(BatchGate {
                key: v.selector("batch", b.key)?,
                size: v.number("batch", "size", b.size, MAX_BATCH_SIZE)?,
                timeout: v.duration("batch", "timeout", b.timeout)?,
            }),
        },
        debounce: match r.debounce {
            None => None,
            Some(d) => Some(DebounceGate {
                key: v.selector("debounce", d.key)?,
                period: v.duration("debounce", "period", d.period)?,
            }),
        },
        rate_limit: v.window("rate_limit", r.rate_limit)?,
        throttle: v.window("throttle", r.throttle)?,
        singleton: match r.singleton {
            None => None,
            Some(s) => Some(SingletonGate {
                key: v.selector("singleton", s.key)?,
            }),
        },
        concurrency,
    })
}

/// The checks of one trigger's `flow` table; every message names the trigger and the key.
struct Validator<'a> {
    id: &'a str,
}

impl Validator<'_> {
    fn at(&self, key: &str, msg: String) -> ConfigError {
        ConfigError(format!("trigger {:?}: {key}: {msg}", self.id))
    }

    fn required(&self, gate: &str, field: &str) -> ConfigError {
        self.at(gate, format!("{field} is required"))
    }

    fn selector(&self, gate: &str, key: Option<String>) -> Result<KeySelector, ConfigError> {
        match key {
            None => Ok(KeySelector::Global),
            Some(k) => KeySelector::parse(&k).map_err(|e| self.at(&format!("{gate}.key"), e)),
        }
    }

    /// A required count in `1..=hi`.
    fn number(
        &self,
        gate: &str,
        field: &str,
        v: Option<u64>,
        hi: u64,
    ) -> Result<usize, ConfigError> {
        match v {
            None => Err(self.required(gate, field)),
            Some(n) if (1..=hi).contains(&n) => Ok(n as usize),
            Some(n) => Err(self.at(
                &format!("{gate}.{field}"),
                format!("{n} is out of range (1..={hi})"),
            )),
        }
    }

    /// A required duration.
    fn duration(
        &self,
        gate: &str,
        field: &str,
        v: Option<String>,
    ) -> Result<Duration, ConfigError> {
        match v {
            None => Err(self.required(gate, field)),
            Some(t) => parse_flow_duration(&t).map_err(|e| self.at(&format!("{gate}.{field}"), e)),
        }
    }

    /// `ordering.on_exhausted`: `"dlq"` (the default) or `"hold"`.
    fn on_exhausted(&self, v: Option<String>) -> Result<OnExhausted, ConfigError> {
        match v.as_deref() {
            None | Some("dlq") => Ok(OnExhausted::Dlq),
            Some("hold") => Ok(OnExhausted::Hold),
            Some(other) => Err(self.at(
                "ordering.on_exhausted",
                format!("{other:?} is not \"dlq\" or \"hold\""),
            )),
        }
    }

    /// `batch` stands alone; `priority` orders `concurrency` waiters, so it needs one;
    /// `ordering` is a concurrency gate of its own (one call per key, acceptance order).
    fn combinations(&self, r: &RawFlow) -> Result<(), ConfigError> {
        let id = self.id;
        if r.ordering.is_some() {
            let others = [
                ("concurrency", r.concurrency.is_some()),
                ("priority", r.priority.is_some()),
                ("batch", r.batch.is_some()),
            ];
            if let Some((other, _)) = others.iter().find(|(_, set)| *set) {
                return err(format!(
                    "trigger {id:?}: ordering cannot be combined with {other} (ordering is one \
                     call at a time per key, in acceptance order: remove one of the two keys)"
                ));
            }
        }
        if r.batch.is_some() {
            let others = [
                ("debounce", r.debounce.is_some()),
                ("singleton", r.singleton.is_some()),
                ("concurrency", r.concurrency.is_some()),
                ("priority", r.priority.is_some()),
                ("throttle", r.throttle.is_some()),
                ("rate_limit", r.rate_limit.is_some()),
            ];
            if let Some((other, _)) = others.iter().find(|(_, set)| *set) {
                return err(format!(
                    "trigger {id:?}: batch cannot be combined with {other} (remove one of the two keys)"
                ));
            }
        }
        if r.priority.is_some() && r.concurrency.is_none() {
            return err(format!(
                "trigger {id:?}: priority requires concurrency (priority orders concurrency waiters)"
            ));
        }
        Ok(())
    }

    /// `rate_limit` or `throttle`: a key, a period and a count.
    fn window(&self, gate: &str, w: Option<RawWindow>) -> Result<Option<WindowGate>, ConfigError> {
        let Some(w) = w else { return Ok(None) };
        Ok(Some(WindowGate {
            key: self.selector(gate, w.key)?,
            period: self.duration(gate, "period", w.period)?,
            max: self.number(gate, "max", w.max, MAX_WINDOW_MAX)?,
        }))
    }

    /// `priority = { key, order }`: 1..=`MAX_PRIORITY_ORDER` distinct values.
    fn priority(&self, p: RawPriority) -> Result<PriorityOrder, ConfigError> {
        let key = match p.key {
            None => return Err(self.required("priority", "key")),
            Some(k) => self.selector("priority", Some(k))?,
        };
        let order = p.order.ok_or_else(|| self.required("priority", "order"))?;
        if order.is_empty() || order.len() > MAX_PRIORITY_ORDER {
            return Err(self.at(
                "priority.order",
                format!("must list 1..={MAX_PRIORITY_ORDER} values"),
            ));
        }
        for (i, v) in order.iter().enumerate() {
            if order[..i].contains(v) {
                return Err(self.at("priority.order", format!("{v:?} is listed twice")));
            }
        }
        Ok(PriorityOrder { key, order })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Config, ConfigError, Overrides};
    use super::*;

    fn build(gates: &str) -> Result<Config, ConfigError> {
        let text = format!(
            "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\nhandler = \"http://h/\"\n{gates}\n"
        );
        Config::build(
            Config::parse_manifest(&text)?,
            &|_| None,
            &Overrides::default(),
        )
    }

    fn flow(gates: &str) -> FlowSpec {
        build(gates).unwrap().triggers[0].flow.clone()
    }

    #[test]
    fn parses_the_issue_example() {
        let f = flow(
            "concurrency = { key = \"event.headers.X-Tenant\", max = 10 }\n\
             priority = { key = \"event.headers.x-tier\", order = [\"gold\", \"silver\", \"bronze\"] }\n\
             throttle = { key = \"event.body.user.id\", period = \"1m\", max = 30 }\n\
             rate_limit = { period = \"1h\", max = 1000 }\n\
             debounce = { key = \"event.body.pull_request.id\", period = \"30s\" }\n\
             singleton = { key = \"event.body.repository.id\" }\n",
        );
        let c = f.concurrency.unwrap();
        assert_eq!(c.key, KeySelector::Header("x-tenant".into()));
        assert_eq!(c.max, 10);
        let p = c.priority.unwrap();
        assert_eq!((p.rank("gold"), p.rank("bronze"), p.rank("tin")), (0, 2, 3));
        let t = f.throttle.unwrap();
        assert_eq!(t.key, KeySelector::Body(vec!["user".into(), "id".into()]));
        assert_eq!((t.period, t.max), (Duration::from_secs(60), 30));
        let r = f.rate_limit.unwrap();
        assert_eq!(r.key, KeySelector::Global);
        assert_eq!(r.period, Duration::from_secs(3600));
        assert_eq!(f.debounce.unwrap().period, Duration::from_secs(30));
        assert!(f.singleton.is_some());
        assert!(f.batch.is_none());
    }

    #[test]
    fn empty_singleton_batch_and_weeks() {
        assert_eq!(
            flow("singleton = {}\n").singleton.unwrap().key,
            KeySelector::Global
        );
        let b = flow("batch = { key = \"event.source\", size = 50, timeout = \"2s\" }")
            .batch
            .unwrap();
        assert_eq!(
            (b.key, b.size, b.timeout),
            (KeySelector::Source, 50, Duration::from_secs(2))
        );
        assert_eq!(
            flow("rate_limit = { period = \"2w\", max = 1 }")
                .rate_limit
                .unwrap()
                .period,
            Duration::from_secs(14 * 86_400)
        );
        assert_eq!(
            flow("debounce = { period = \"250ms\", key = \"event.trigger\" }")
                .debounce
                .unwrap()
                .period,
            Duration::from_millis(250)
        );
        assert!(flow("").is_empty());
    }

    #[test]
    fn ordering_is_one_call_per_key_in_acceptance_order() {
        let f = flow("ordering = { key = \"event.headers.X-Customer\", on_exhausted = \"hold\" }");
        let c = f.concurrency.clone().unwrap();
        assert_eq!(c.key, KeySelector::Header("x-customer".into()));
        assert_eq!(
            (c.max, c.priority, c.ordering),
            (1, None, Some(OnExhausted::Hold))
        );
        assert_eq!(f.names(), ["ordering"]);
        let d = flow("ordering = {}").concurrency.unwrap();
        assert_eq!(
            (d.key, d.ordering),
            (KeySelector::Global, Some(OnExhausted::Dlq))
        );
        let c = build("ordering = { key = \"event.headers.X-Customer\" }").unwrap();
        assert!(c.ingest.stored_headers.iter().any(|h| h == "x-customer"));
    }

    #[test]
    fn selector_headers_are_added_to_the_stored_set() {
        let c = build("concurrency = { key = \"event.headers.X-Tenant\", max = 1 }").unwrap();
        assert!(c.ingest.stored_headers.iter().any(|h| h == "x-tenant"));
    }

    #[test]
    fn invalid_input_names_the_trigger_and_key() {
        let cases = [
            ("concurrency = { max = 0 }", "concurrency.max"),
            ("concurrency = {}", "concurrency: max is required"),
            ("concurrency = { key = \"event.id\", max = 1 }", "concurrency.key"),
            ("concurrency = { key = \"event.body.\", max = 1 }", "concurrency.key"),
            ("concurrency = { key = \"event.body.a..b\", max = 1 }", "concurrency.key"),
            ("concurrency = { key = \"event.headers.a b\", max = 1 }", "concurrency.key"),
            ("throttle = { period = \"0s\", max = 1 }", "throttle.period"),
            ("throttle = { period = \"1y\", max = 1 }", "throttle.period"),
            ("throttle = { period = \"1.5s\", max = 1 }", "throttle.period"),
            ("rate_limit = { max = 1 }", "rate_limit: period is required"),
            ("rate_limit = { period = \"1s\", max = 0 }", "rate_limit.max"),
            ("debounce = { key = \"event.source\" }", "debounce: period is required"),
            ("batch = { size = 0, timeout = \"1s\" }", "batch.size"),
            ("batch = { size = 2 }", "batch: timeout is required"),
            ("priority = { key = \"event.source\", order = [\"a\"] }", "requires concurrency"),
            (
                "concurrency = { max = 1 }\npriority = { key = \"event.source\", order = [] }",
                "priority.order",
            ),
            (
                "concurrency = { max = 1 }\npriority = { key = \"event.source\", order = [\"a\", \"a\"] }",
                "listed twice",
            ),
            (
                "concurrency = { max = 1 }\npriority = { order = [\"a\"] }",
                "priority: key is required",
            ),
            ("singleton = { kee = \"event.source\" }", "kee"),
            ("ordering = { on_exhausted = \"retry\" }", "ordering.on_exhausted"),
            ("ordering = { key = \"event.id\" }", "ordering.key"),
            ("ordering = {}\nconcurrency = { max = 2 }", "ordering cannot be combined with concurrency"),
            (
                "ordering = {}\nbatch = { size = 2, timeout = \"1s\" }",
                "cannot be combined with batch",
            ),
        ];
        for (gates, needle) in cases {
            let e = build(gates).unwrap_err();
            assert!(e.0.contains(needle), "{gates:?}: {e}");
            assert!(
                e.0.contains("\"t\"") || needle == "kee",
                "{gates:?}: {e} does not name the trigger"
            );
        }
    }

    #[test]
    fn batch_excludes_every_other_gate_naming_both() {
        for other in [
            "debounce = { period = \"1s\" }",
            "singleton = {}",
            "concurrency = { max = 1 }",
            "throttle = { period = \"1s\", max = 1 }",
            "rate_limit = { period = \"1s\", max = 1 }",
        ] {
            let gates = format!("batch = {{ size = 2, timeout = \"1s\" }}\n{other}");
            let e = build(&gates).unwrap_err();
            let name = other.split_whitespace().next().unwrap();
            assert!(
                e.0.contains("\"t\"") && e.0.contains("batch") && e.0.contains(name),
                "{e}"
            );
        }
    }

    #[test]
    fn max_gate_keys_range() {
        let c = build("").unwrap();
        assert_eq!(c.flow.max_gate_keys, DEFAULT_MAX_GATE_KEYS);
        let e = build("[flow]\nmax_gate_keys = 0").unwrap_err();
        assert!(e.0.contains("flow.max_gate_keys"), "{e}");
    }

    #[test]
    fn max_held_per_key_defaults_below_max_held_and_never_above() {
        let per_key = |text: &str| build(text).map(|c| c.flow.max_held_per_key);
        assert_eq!(per_key("").unwrap(), DEFAULT_MAX_HELD_PER_KEY);
        assert_eq!(
            per_key("[flow]\nmax_held = 20").unwrap(),
            20,
            "default: at most max_held"
        );
        assert_eq!(per_key("[flow]\nmax_held_per_key = 7").unwrap(), 7);
        let e = per_key("[flow]\nmax_held = 20\nmax_held_per_key = 21").unwrap_err();
        assert!(
            e.0.contains("flow.max_held_per_key = 21 is out of range (1..=20)"),
            "{e}"
        );
        let e = per_key("[flow]\nmax_held_per_key = 0").unwrap_err();
        assert!(e.0.contains("flow.max_held_per_key = 0"), "{e}");
    }

    #[test]
    fn max_held_range_and_batch_size_must_fit() {
        assert_eq!(build("").unwrap().flow.max_held, DEFAULT_MAX_HELD);
        assert_eq!(
            build("").unwrap().flow.max_held_bytes,
            DEFAULT_MAX_HELD_BYTES
        );
        assert_eq!(
            build("[flow]\nmax_held_bytes = 0")
                .unwrap()
                .flow
                .max_held_bytes,
            0
        );
        let e = build("[flow]\nmax_held_bytes = 1099511627777").unwrap_err();
        assert!(e.0.contains("flow.max_held_bytes"), "{e}");
        let e = build("[flow]\nmax_held = 0").unwrap_err();
        assert!(e.0.contains("flow.max_held = 0 is out of range"), "{e}");
        let ok = build("batch = { size = 100, timeout = \"2s\" }\n[flow]\nmax_held = 100");
        assert_eq!(
            ok.unwrap().triggers[0].flow.batch.as_ref().unwrap().size,
            100
        );
        let e =
            build("batch = { size = 101, timeout = \"2s\" }\n[flow]\nmax_held = 100").unwrap_err();
        assert!(
            e.0.contains("\"t\"") && e.0.contains("batch.size: 101") && e.0.contains("max_held"),
            "{e}"
        );
    }
}
