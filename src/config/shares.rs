//! `[[triggers]] max_pending = { events = N, bytes = B }`: a trigger's guaranteed share of the
//! durable backlog (the arithmetic is [`crate::ingest::shares`], README "Bounds").

use serde::Deserialize;

use super::dispatch::DispatchConfig;
use super::{err, ConfigError, TriggerConfig};

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
pub(super) fn check_sums(
    triggers: &[TriggerConfig],
    default_route: Option<MaxPending>,
    dispatch: &DispatchConfig,
) -> Result<(), ConfigError> {
    let shares = || triggers.iter().map(|t| t.max_pending).chain(default_route);
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

/// What `serve` logs at start and `sluice check` prints (to stderr, one line each, prefixed
/// `routes:`): every route that takes events, the share of the durable backlog it holds, and
/// the common pool (the split of [`crate::ingest::shares::split_slots`], as the server makes it).
pub fn routes_summary(config: &super::Config) -> Vec<String> {
    use crate::ingest::shares::split_slots;
    let d = &config.dispatch;
    let default = config.ingest.default_route_max_pending;
    let split = |max, get: fn(&MaxPending) -> Option<u64>| {
        let explicit: Vec<Option<u64>> = config
            .triggers
            .iter()
            .map(|t| get(&t.max_pending))
            .collect();
        split_slots(
            max,
            &explicit,
            default.as_ref().map(get),
            d.reserved_fraction,
        )
        .ok()
    };
    let (Some(events), Some(bytes)) = (
        split(d.max_pending_events, |m| m.events),
        split(d.max_pending_bytes, |m| m.bytes),
    ) else {
        return vec!["routes: the shares do not fit the backlog bound".into()];
    };
    let mut lines: Vec<String> = config
        .triggers
        .iter()
        .enumerate()
        .map(|(i, t)| {
            format!(
                "routes: POST {} -> trigger {:?} (source {:?}): share {} events, {} bytes",
                t.path, t.id, t.provider, events.shares[i], bytes.shares[i]
            )
        })
        .collect();
    let n = config.triggers.len();
    lines.push(match (config.ingest.default_route, default) {
        (false, _) if n > 0 => "routes: POST /webhooks/{source} -> off (triggers are configured; \
                                ingest.default_route = true serves it too)"
            .into(),
        (false, _) => {
            "routes: POST /webhooks/{source} -> off (ingest.default_route = false)".into()
        }
        (true, None) => "routes: POST /webhooks/{source} -> default route: no share (borrows \
                         from the pool only)"
            .into(),
        (true, Some(_)) => format!(
            "routes: POST /webhooks/{{source}} -> default route: share {} events, {} bytes",
            events.shares[n], bytes.shares[n]
        ),
    });
    lines.push(format!(
        "routes: common pool: {} events, {} bytes (of dispatch.max_pending_events = {}, \
         max_pending_bytes = {})",
        events.pool, bytes.pool, d.max_pending_events, d.max_pending_bytes
    ));
    lines
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Overrides};

    fn summary(text: &str) -> Vec<String> {
        let raw = Config::parse_manifest(text).unwrap();
        let cfg = Config::build(raw, &|_| None, &Overrides::default()).unwrap();
        super::routes_summary(&cfg)
    }

    #[test]
    fn one_trigger_holds_the_reserve_and_the_default_route_is_off() {
        let s = summary(
            "[dispatch]\nmax_pending_events = 100\nmax_pending_bytes = 2097152\n\
             [[triggers]]\nid = \"gh\"\nprovider = \"github\"\npath = \"/hooks/gh\"\n",
        );
        assert_eq!(
            s,
            [
                "routes: POST /hooks/gh -> trigger \"gh\" (source \"github\"): share 50 events, 1048576 bytes",
                "routes: POST /webhooks/{source} -> off (triggers are configured; ingest.default_route = true serves it too)",
                "routes: common pool: 50 events, 1048576 bytes (of dispatch.max_pending_events = 100, max_pending_bytes = 2097152)",
            ]
        );
    }

    #[test]
    fn the_default_route_takes_a_share_only_when_given_one() {
        let base = "[dispatch]\nmax_pending_events = 100\nmax_pending_bytes = 2097152\n";
        let s = summary(base);
        assert!(s[0].contains("default route: no share"), "{s:?}");
        assert!(s[1].contains("pool: 100 events, 2097152 bytes"), "{s:?}");
        let s = summary(&format!(
            "[ingest]\ndefault_route = true\ndefault_route_max_pending = {{ events = 10 }}\n{base}\
             [[triggers]]\nid = \"gh\"\nprovider = \"github\"\npath = \"/hooks/gh\"\n"
        ));
        assert!(
            s[1].contains("default route: share 10 events, 524288 bytes"),
            "{s:?}"
        );
        assert!(s[0].contains("share 40 events, 524288 bytes"), "{s:?}");
    }
}
