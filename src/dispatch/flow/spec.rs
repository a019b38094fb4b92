//! A trigger's flow-control gates as `config` validated them ([`FlowSpec`]: `batch`,
//! `debounce`, `rate_limit`, `throttle`, `singleton`, `concurrency` with its `priority`), the
//! key selectors they group events by ([`KeySelector`]) and the per-core bounds of their state
//! ([`FlowBounds`], `[flow]`). `config::flow` parses the manifest keys into these; the
//! semantics are [`super`]'s.
#![forbid(unsafe_code)]

use std::time::Duration;

/// What a gate key is taken from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySelector {
    /// No `key`: one gate for the whole trigger.
    Global,
    /// `event.source`
    Source,
    /// `event.trigger`
    Trigger,
    /// `event.headers.<name>`, name lower-cased.
    Header(String),
    /// `event.body.<a.b.c>`: object members (or array indices) of the JSON body.
    Body(Vec<String>),
}

impl KeySelector {
    /// Parses a selector; the error says what is wrong (the caller names the key).
    pub fn parse(text: &str) -> Result<KeySelector, String> {
        let expected = "expected event.source, event.trigger, event.headers.<name> or \
                        event.body.<dotted.path>";
        match text {
            "event.source" => return Ok(KeySelector::Source),
            "event.trigger" => return Ok(KeySelector::Trigger),
            _ => {}
        }
        if let Some(name) = text.strip_prefix("event.headers.") {
            let ok = !name.is_empty()
                && name.len() <= 256
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !ok {
                return Err(format!("{text:?}: {name:?} is not a header name"));
            }
            return Ok(KeySelector::Header(name.to_ascii_lowercase()));
        }
        if let Some(path) = text.strip_prefix("event.body.") {
            let segments: Vec<String> = path.split('.').map(str::to_string).collect();
            if path.len() > 1024 || segments.iter().any(|s| s.is_empty()) {
                return Err(format!(
                    "{text:?}: the body path must be dot-separated non-empty names (≤ 1024 bytes)"
                ));
            }
            return Ok(KeySelector::Body(segments));
        }
        Err(format!("{text:?} is not a key selector ({expected})"))
    }

    /// The header this selector reads, if any.
    pub fn header(&self) -> Option<&str> {
        match self {
            KeySelector::Header(h) => Some(h),
            _ => None,
        }
    }
}

/// `concurrency` (with its optional `priority`), or `ordering` (FIFO per key: `max` 1, no
/// priority, and `ordering` set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConcurrencyGate {
    pub key: KeySelector,
    pub max: usize,
    pub priority: Option<PriorityOrder>,
    /// `Some` for an `ordering` gate: what a dead letter does to its key (`on_exhausted`).
    pub ordering: Option<OnExhausted>,
}

impl ConcurrencyGate {
    /// An `ordering` gate whose key stops at a dead letter (`on_exhausted = "hold"`).
    pub fn holds(&self) -> bool {
        self.ordering == Some(OnExhausted::Hold)
    }
}

/// `ordering.on_exhausted`: what an event of an ordered key that goes to the DLQ does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnExhausted {
    /// `"dlq"` (the default): the key moves on to its next event.
    Dlq,
    /// `"hold"`: the key stays stopped while the dead letter is in the DLQ; a replay of it goes
    /// first, a discard lets the key move on.
    Hold,
}

/// `priority`: rank = position of the key's value in `order`; unlisted values rank `order.len()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityOrder {
    pub key: KeySelector,
    pub order: Vec<String>,
}

impl PriorityOrder {
    pub fn rank(&self, value: &str) -> usize {
        self.order
            .iter()
            .position(|v| v == value)
            .unwrap_or(self.order.len())
    }
}

/// `throttle` / `rate_limit`: at most `max` per sliding `period` per key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowGate {
    pub key: KeySelector,
    pub period: Duration,
    pub max: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebounceGate {
    pub key: KeySelector,
    pub period: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingletonGate {
    pub key: KeySelector,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchGate {
    pub key: KeySelector,
    pub size: usize,
    pub timeout: Duration,
}

/// A trigger's gates; all `None` (the default) means no flow control.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowSpec {
    pub batch: Option<BatchGate>,
    pub debounce: Option<DebounceGate>,
    pub rate_limit: Option<WindowGate>,
    pub throttle: Option<WindowGate>,
    pub singleton: Option<SingletonGate>,
    pub concurrency: Option<ConcurrencyGate>,
}

impl FlowSpec {
    pub fn is_empty(&self) -> bool {
        self == &FlowSpec::default()
    }

    /// The trigger's `ordering` gate (a concurrency gate with `ordering` set), if it has one.
    pub fn ordering(&self) -> Option<&ConcurrencyGate> {
        self.concurrency.as_ref().filter(|c| c.ordering.is_some())
    }

    /// The manifest keys of the gates configured, in evaluation order (`priority` with
    /// `concurrency`).
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        let mut on = |set: bool, name: &'static str| {
            if set {
                names.push(name);
            }
        };
        on(self.batch.is_some(), "batch");
        on(self.debounce.is_some(), "debounce");
        on(self.rate_limit.is_some(), "rate_limit");
        on(self.throttle.is_some(), "throttle");
        on(self.singleton.is_some(), "singleton");
        let ordering = self.ordering().is_some();
        on(self.concurrency.is_some() && !ordering, "concurrency");
        on(ordering, "ordering");
        let priority = self
            .concurrency
            .as_ref()
            .is_some_and(|c| c.priority.is_some());
        on(priority, "priority");
        names
    }

    /// Every header a selector of this trigger reads.
    pub fn headers(&self) -> Vec<&str> {
        let mut keys: Vec<&KeySelector> = Vec::new();
        keys.extend(self.batch.as_ref().map(|g| &g.key));
        keys.extend(self.debounce.as_ref().map(|g| &g.key));
        keys.extend(self.rate_limit.as_ref().map(|g| &g.key));
        keys.extend(self.throttle.as_ref().map(|g| &g.key));
        keys.extend(self.singleton.as_ref().map(|g| &g.key));
        if let Some(c) = &self.concurrency {
            keys.push(&c.key);
            keys.extend(c.priority.as_ref().map(|p| &p.key));
        }
        keys.into_iter().filter_map(KeySelector::header).collect()
    }
}

/// `[flow]`: bounds of one core's flow-control state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowBounds {
    pub max_gate_keys: usize,
    pub max_held: usize,
    /// Waiters of one `throttle`/`concurrency` key held in full (≤ `max_held`).
    pub max_held_per_key: usize,
    pub max_held_bytes: u64,
}
