//! `[[triggers]] max_pending = { events = N, bytes = B }`: a trigger's guaranteed share of the
//! durable backlog (the arithmetic is [`crate::ingest::shares`], README "Bounds").

use serde::Deserialize;

use super::dispatch::DispatchConfig;
use super::{err, ConfigError};

/// A trigger's guaranteed share of `dispatch.max_pending_events` / `max_pending_bytes`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMaxPending {
    /// Events guaranteed to the trigger, ≥ 1. Default: an equal part of half the bound.
    pub events: Option<u64>,
    /// Bytes (record cost) guaranteed to the trigger, ≥ 1. Default: as `events`.
    pub bytes: Option<u64>,
}

/// The validated share (`None`: the default share), ingest's type.
pub use crate::ingest::spec::MaxPending;

/// Validates one trigger's `max_pending`: each value given is ≥ 1.
pub(super) fn build(id: &str, raw: Option<RawMaxPending>) -> Result<MaxPending, ConfigError> {
    let raw = raw.unwrap_or_default();
    for (what, v) in [("events", raw.events), ("bytes", raw.bytes)] {
        if v == Some(0) {
            return err(format!(
                "trigger {id:?}: max_pending.{what} = 0; give at least 1, or leave it out for \
                 the default share"
            ));
        }
    }
    Ok(MaxPending {
        events: raw.events,
        bytes: raw.bytes,
    })
}

/// The triggers' explicit shares sum to at most the bounds they divide.
/// The triggers' (and the default route's) explicit shares sum to at most the bounds they
/// divide.
/// `triggers`: each trigger's share, in config order.
pub(super) fn check_sums(
    triggers: &[MaxPending],
    default_route: Option<MaxPending>,
    dispatch: &DispatchConfig,
) -> Result<(), ConfigError> {
    let shares = || triggers.iter().copied().chain(default_route);
    for (what, max, get) in [
        (
            "events",
            dispatch.max_pending_events,
            (|m: MaxPending| m.events) as fn(MaxPending) -> Option<u64>,
        ),
        ("bytes", dispatch.max_pending_bytes, |m| m.bytes),
    ] {
        let sum = shares().filter_map(get).fold(0u64, u64::saturating_add);
        if sum > max {
            return err(format!(
                "the triggers' (and ingest.default_route_max_pending's) max_pending.{what} sum \
                 to {sum}, past dispatch.max_pending_{what} = {max}: the guaranteed shares must \
                 fit in the bound"
            ));
        }
    }
    Ok(())
}
