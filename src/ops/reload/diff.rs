//! What a reload may change: [`diff`] compares the running configuration with the newly
//! validated one and names the first key whose change needs a restart (see [`crate::ops::reload`]
//! for the list of what applies live).

#![forbid(unsafe_code)]

use std::fmt::Debug;

use crate::config::Config;
use crate::dispatch::placement::owner_core;

/// `Ok(())` when every difference between `old` and `new` applies live; otherwise the key that
/// needs a restart, with the running and the new value. `new` is laid out by destination id
/// (`ids::assign`).
pub fn diff(old: &Config, new: &Config) -> Result<(), String> {
    server(old, new)?;
    sections(old, new)?;
    destinations(old, new)?;
    triggers(old, new)
}

fn same<T: Debug + PartialEq>(key: &str, old: &T, new: &T) -> Result<(), String> {
    if old == new {
        return Ok(());
    }
    Err(format!(
        "{key} cannot change without a restart (running {old:?}, the manifest now says {new:?})"
    ))
}

/// Compares by `Debug` text, for config structs without `PartialEq` (none holds a secret).
fn same_dbg<T: Debug>(key: &str, old: &T, new: &T) -> Result<(), String> {
    same(key, &format!("{old:?}"), &format!("{new:?}"))
}

fn server(old: &Config, new: &Config) -> Result<(), String> {
    let (o, n) = (&old.server, &new.server);
    same("server.listen", &o.listen, &n.listen)?;
    same("server.data_dir", &o.data_dir, &n.data_dir)?;
    same("server.workers", &o.workers, &n.workers)?;
    // The cores' I/O backend (mio or io_uring) is chosen once, when their loops start.
    same("server.io", &o.io, &n.io)?;
    same(
        "server.max_connections_per_core",
        &o.max_connections_per_core,
        &n.max_connections_per_core,
    )?;
    same(
        "server.header_timeout",
        &o.header_timeout,
        &n.header_timeout,
    )?;
    same("server.body_timeout", &o.body_timeout, &n.body_timeout)?;
    same("server.idle_timeout", &o.idle_timeout, &n.idle_timeout)?;
    same(
        "server.shutdown_timeout",
        &o.shutdown_timeout,
        &n.shutdown_timeout,
    )?;
    same("server.drain_grace", &o.drain_grace, &n.drain_grace)?;
    same(
        "server.max_body_bytes",
        &o.max_body_bytes,
        &n.max_body_bytes,
    )?;
    same(
        "server.max_head_bytes",
        &o.max_head_bytes,
        &n.max_head_bytes,
    )?;
    same("server.max_uri_bytes", &o.max_uri_bytes, &n.max_uri_bytes)?;
    same(
        "server.max_pipeline_depth",
        &o.max_pipeline_depth,
        &n.max_pipeline_depth,
    )?;
    same(
        "server.max_inflight_body_bytes",
        &o.max_inflight_body_bytes,
        &n.max_inflight_body_bytes,
    )?;
    same(
        "server.max_queued_response_bytes",
        &o.max_queued_response_bytes,
        &n.max_queued_response_bytes,
    )?;
    same("server.ui", &o.ui, &n.ui)?;
    // Catch-all: a `[server]` key added later is restart-only until the reload learns it.
    same_dbg("[server]", o, n)
}

fn sections(old: &Config, new: &Config) -> Result<(), String> {
    let (o, n) = (&old.wal, &new.wal);
    same_dbg("wal.durability", &o.durability, &n.durability)?;
    same_dbg("wal.write_path", &o.write_path, &n.write_path)?;
    same("wal.segment_bytes", &o.segment_bytes, &n.segment_bytes)?;
    same("wal.max_batch", &o.max_batch, &n.max_batch)?;
    same("wal.ring_capacity", &o.ring_capacity, &n.ring_capacity)?;
    same_dbg("[wal]", o, n)?;
    // `default_route` applies live (the router is rebuilt; the route takes no share of its own
    // unless `default_route_max_pending`, which does need a restart, gives it one): a reload
    // that adds the first trigger turns a defaulted route off.
    stored_headers(old, new)?;
    let live = |i: &crate::ingest::spec::IngestSpec| crate::ingest::spec::IngestSpec {
        default_route: false,
        stored_headers: Vec::new(),
        ..i.clone()
    };
    same_dbg("[ingest]", &live(&old.ingest), &live(&new.ingest))?;
    same_dbg("orchestrator.pumps", &old.pump, &new.pump)?;
    same_dbg("[dispatch]", &old.dispatch, &new.dispatch)?;
    same_dbg("[flow]", &old.flow, &new.flow)?;
    // Restart-only: a running log keeps its subjects, its stream and its lease.
    same("[replication]", &old.replication, &new.replication)?;
    if old.admin_token != new.admin_token {
        return Err("SLUICE_ADMIN_TOKEN cannot change without a restart".into());
    }
    Ok(())
}

/// The headers stored with each event are fixed for a run (`ingest.stored_headers` plus every
/// header a flow-control key reads). A new gate keyed on a header the running server does not
/// store is refused naming the trigger and the header; any other change names what it adds
/// and removes.
fn stored_headers(old: &Config, new: &Config) -> Result<(), String> {
    let (o, n) = (&old.ingest.stored_headers, &new.ingest.stored_headers);
    if o == n {
        return Ok(());
    }
    for t in &new.triggers {
        if let Some(h) = t
            .flow
            .headers()
            .into_iter()
            .find(|h| !o.iter().any(|s| s == h))
        {
            return Err(format!(
                "trigger {:?}: a flow-control key reads header {h:?}, which the running server \
                 does not store with its events (the stored headers are fixed until a restart); \
                 restart to key a gate on it",
                t.id
            ));
        }
    }
    let added: Vec<&String> = n.iter().filter(|h| !o.contains(h)).collect();
    let removed: Vec<&String> = o.iter().filter(|h| !n.contains(h)).collect();
    Err(format!(
        "ingest.stored_headers cannot change without a restart (the new manifest adds \
         {added:?} and removes {removed:?}; the headers flow-control keys read are stored too)"
    ))
}

/// `new` is laid out by destination id (`ids::assign`): an id both have is the same URI.
/// A destination kept, or named again after a removal, keeps its state, so the keys that state
/// was built from cannot change; a new one is built from its settings, except a shared budget
/// (its Redis slot is made at start).
fn destinations(old: &Config, new: &Config) -> Result<(), String> {
    for n in new.destinations.iter().skip(old.destinations.len()) {
        if n.shared.is_some() {
            return Err(format!(
                "destination {} is new and has a shared budget (shared), whose Redis slot is \
                 built at start; add it with a restart",
                n.handler.uri
            ));
        }
    }
    for (o, n) in old.destinations.iter().zip(&new.destinations) {
        let key = |k: &str| format!("destination {}: {k}", o.handler.uri);
        same(
            &key("max_in_flight = \"auto\""),
            &o.adaptive.is_some(),
            &n.adaptive.is_some(),
        )?;
        same(
            &key("min_in_flight/max_in_flight_cap"),
            &o.adaptive,
            &n.adaptive,
        )?;
        same(&key("circuit"), &o.circuit, &n.circuit)?;
        same(&key("tls"), &o.tls, &n.tls)?;
        if o.shared.is_some() || n.shared.is_some() {
            // The cluster-wide budget lives in Redis and in the node's client thread, both set
            // up at start: changed here it would be applied on no node.
            same(&key("shared"), &o.shared, &n.shared)?;
            same(
                &key("max_in_flight (shared budget)"),
                &o.max_in_flight,
                &n.max_in_flight,
            )?;
            same(&key("rate (shared budget)"), &o.rate, &n.rate)?;
        }
        // Catch-all: everything but the live keys must be equal.
        let mut live = n.clone();
        live.max_in_flight = o.max_in_flight;
        live.rate = o.rate;
        live.timeout = o.timeout;
        live.retry = o.retry;
        live.headers = o.headers.clone();
        live.signing_key = o.signing_key.clone();
        live.signing_secret = o.signing_secret.clone();
        live.batch = o.batch;
        if &live != o {
            return Err(key(
                "a setting other than max_in_flight, rate, timeout, retry, headers, \
                            signing_secret and batch cannot change without a restart",
            ));
        }
    }
    Ok(())
}

/// A trigger added by a reload has every setting live: its flow-control gates (each core builds
/// them when it re-keys, and the reload claims their metric cells before it publishes,
/// `FlowMetrics::claim`), its `verify` and `dedupe` (the generation's guard table,
/// `ingest::GuardTable`), its `when_backlog_full` (`Backlog::reserve_as`). A backlog share of its
/// own, sized at start, it does not get (it uses the default route's): `Backlog::resize_shares`
/// refuses its `max_pending`, and resizes a kept trigger's.
fn triggers(old: &Config, new: &Config) -> Result<(), String> {
    for n in &new.triggers {
        let Some(o) = old.triggers.iter().find(|o| o.id == n.id) else {
            continue;
        };
        let key = |k: &str| format!("trigger {:?}: {k}", n.id);
        // A gated trigger's windows, holds and held events live on its destination's owner
        // core (`dispatch::placement`): a new handler owned by another core would start its
        // gates empty there while the old core still held the old ones.
        let owner = |c: &Config, h: Option<usize>| {
            h.and_then(|i| c.destinations.get(i))
                .map(|d| owner_core(d.handler.uri.as_str(), c.server.workers))
        };
        let gated = !o.flow.is_empty() || !n.flow.is_empty();
        if gated && o.handler.is_some() && owner(old, o.handler) != owner(new, n.handler) {
            return Err(key(
                "handler: a trigger with flow-control gates cannot move to a destination \
                 owned by another core without a restart (its gates' windows and held events \
                 live on the old one)",
            ));
        }
        // Catch-all: everything but the live keys must be equal.
        let mut live = n.clone();
        live.path = o.path.clone();
        live.provider = o.provider.clone();
        live.handler = o.handler;
        live.flow = o.flow.clone();
        live.auth = o.auth.clone();
        live.when_backlog_full = o.when_backlog_full;
        live.max_pending = o.max_pending;
        if &live != o {
            return Err(key(
                "a setting other than path, provider, handler, the flow gates, \
                 verify/secrets/tolerance, dedupe, when_backlog_full and max_pending cannot \
                 change without a restart",
            ));
        }
    }
    Ok(())
}

/// Triggers the new configuration keeps but without the handler they had: from the reload on,
/// their events not yet dispatched are recorded `no_handler` (not delivered). The reload says so
/// on stderr, once per trigger, as it applies.
pub fn handlers_dropped<'a>(old: &Config, new: &'a Config) -> Vec<&'a str> {
    new.triggers
        .iter()
        .filter(|n| n.handler.is_none())
        .filter(|n| {
            old.triggers
                .iter()
                .any(|o| o.id == n.id && o.handler.is_some())
        })
        .map(|n| n.id.as_str())
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::config::Overrides;

    /// A configuration built from manifest `text` with no environment (the reload tests').
    pub(in crate::ops) fn cfg(text: &str) -> Config {
        Config::build(
            Config::parse_manifest(text).unwrap(),
            &|_| None,
            &Overrides::default(),
        )
        .unwrap()
    }

    const BASE: &str = "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\nhandler = \"http://127.0.0.1:9/\"\n\
                        [[destinations]]\nuri = \"http://127.0.0.1:9/\"\nmax_in_flight = 5\n";

    #[test]
    fn restart_only_keys_are_named() {
        let old = cfg(BASE);
        for (extra, key) in [
            ("[server]\nlisten = \"127.0.0.1:9999\"\n", "server.listen"),
            ("[server]\ndata_dir = \"/elsewhere\"\n", "server.data_dir"),
            ("[server]\nworkers = 7\n", "server.workers"),
            ("[server]\nio = \"mio\"\n", "server.io"),
            ("[wal]\nwrite_path = \"mmap\"\n", "wal.write_path"),
            ("[wal]\nsegment_bytes = 33554432\n", "wal.segment_bytes"),
            (
                "[replication]\nnats = [\"nats://127.0.0.1:4222\"]\nnode = \"a\"\n",
                "[replication]",
            ),
        ] {
            let e = diff(&old, &cfg(&format!("{BASE}{extra}"))).unwrap_err();
            assert!(e.starts_with(key), "{key}: {e}");
        }
    }

    #[test]
    fn a_kept_trigger_whose_handler_is_removed_is_named() {
        let old = cfg(BASE);
        let store_only = cfg("[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\n");
        assert_eq!(handlers_dropped(&old, &store_only), vec!["t"]);
        // Not: a handler kept or given, a trigger removed, one that never had a handler.
        assert!(handlers_dropped(&old, &old).is_empty());
        assert!(handlers_dropped(&store_only, &old).is_empty());
        let other = cfg("[[triggers]]\nid = \"u\"\nprovider = \"p\"\npath = \"/u\"\n");
        assert!(handlers_dropped(&old, &other).is_empty());
        assert!(handlers_dropped(&store_only, &store_only).is_empty());
    }

    #[test]
    fn live_changes_pass() {
        let old = cfg(BASE);
        let more = BASE.replace(
            "max_in_flight = 5",
            "max_in_flight = 10\ntimeout = \"3s\"\nrate = { per_sec = 50 }",
        );
        let added = format!("{more}[[triggers]]\nid = \"u\"\nprovider = \"q\"\npath = \"/u\"\nhandler = \"http://127.0.0.1:9/\"\n");
        assert_eq!(diff(&old, &cfg(&added)), Ok(()));
        // Removing the added trigger again is live too.
        assert_eq!(diff(&cfg(&added), &cfg(&more)), Ok(()));
        // A new trigger with dedupe, and dedupe given to an existing one, apply live.
        let deduped = format!(
            "{BASE}[[triggers]]\nid = \"v\"\nprovider = \"q\"\npath = \"/v\"\ndedupe = true\n"
        );
        assert_eq!(diff(&old, &cfg(&deduped)), Ok(()));
        let t_deduped = BASE.replace("path = \"/t\"", "path = \"/t\"\ndedupe = true");
        assert_eq!(diff(&old, &cfg(&t_deduped)), Ok(()));
        assert_eq!(diff(&cfg(&t_deduped), &old), Ok(()));
        // A new trigger with flow-control gates applies live.
        let gated = format!("{BASE}[[triggers]]\nid = \"g\"\nprovider = \"q\"\npath = \"/g\"\nhandler = \"http://127.0.0.1:9/\"\nthrottle = {{ period = \"1s\", max = 2 }}\nsingleton = {{}}\n");
        assert_eq!(diff(&old, &cfg(&gated)), Ok(()));
        let moved = BASE.replace("path = \"/t\"", "path = \"/t-new\"");
        assert_eq!(diff(&old, &cfg(&moved)), Ok(()));
    }

    #[test]
    fn new_triggers_with_start_time_state_are_refused() {
        let old = cfg(BASE);
        let absorb = format!("{BASE}[[triggers]]\nid = \"a\"\nprovider = \"q\"\npath = \"/a\"\nwhen_backlog_full = \"absorb\"\n");
        assert_eq!(diff(&old, &cfg(&absorb)), Ok(()), "absorb applies live");
        // max_pending passes the diff: the backlog judges it (`Backlog::resize_shares`).
        let share = BASE.replace(
            "path = \"/t\"",
            "path = \"/t\"\nmax_pending = { events = 10 }",
        );
        assert_eq!(diff(&old, &cfg(&share)), Ok(()));
        // A new destination: live, unless its budget is shared (a Redis slot made at start).
        let running = cfg(BASE);
        let other = "[[triggers]]\nid = \"o\"\nprovider = \"q\"\npath = \"/o\"\nhandler = \"http://127.0.0.1:8/\"\n";
        let added = crate::ops::reload::ids::assign(&running, cfg(&format!("{BASE}{other}")), 1);
        assert_eq!(diff(&running, &added.unwrap()), Ok(()));
        let shared = format!("{BASE}{other}[[destinations]]\nuri = \"http://127.0.0.1:8/\"\nshared = {{ redis = \"redis://127.0.0.1:6379\", key = \"k\" }}\n");
        let added = crate::ops::reload::ids::assign(&running, cfg(&shared), 1).unwrap();
        assert!(diff(&running, &added)
            .unwrap_err()
            .contains("shared budget"));
        let circuit = BASE.replace(
            "max_in_flight = 5",
            "max_in_flight = 5\ncircuit = { failures = 2 }",
        );
        assert!(diff(&old, &cfg(&circuit)).unwrap_err().contains("circuit"));
    }

    /// A shared destination's cluster budget was set up in Redis at start: its limits and its
    /// `shared` table are restart-only (named), its timeout and retry stay live.
    #[test]
    fn a_shared_destinations_budget_is_restart_only() {
        let shared = "\nshared = { redis = \"redis://127.0.0.1:6379\", key = \"k\" }";
        let base = BASE.replace("max_in_flight = 5", &format!("max_in_flight = 5{shared}"));
        let old = cfg(&base);
        let raised = base.replace("max_in_flight = 5", "max_in_flight = 9");
        let e = diff(&old, &cfg(&raised)).unwrap_err();
        assert!(e.contains("max_in_flight (shared budget)"), "{e}");
        let rated = base.replace(
            "max_in_flight = 5",
            "max_in_flight = 5\nrate = { per_sec = 10 }",
        );
        let e = diff(&old, &cfg(&rated)).unwrap_err();
        assert!(e.contains("rate (shared budget)"), "{e}");
        let rekeyed = base.replace("key = \"k\"", "key = \"k2\"");
        assert!(diff(&old, &cfg(&rekeyed)).unwrap_err().contains("shared"));
        let unshared = cfg(BASE);
        assert!(diff(&old, &unshared).unwrap_err().contains("shared"));
        let slower = base.replace("max_in_flight = 5", "max_in_flight = 5\ntimeout = \"9s\"");
        assert_eq!(diff(&old, &cfg(&slower)), Ok(()));
    }
    /// Issue 38 item 5: a gate a reload keys on a header the running server does not store is
    /// refused naming the trigger and the header, in one short line (not two `Debug` dumps).
    #[test]
    fn a_gate_keyed_on_an_unstored_header_names_the_trigger_and_the_header() {
        let old = cfg(BASE);
        let keyed = BASE.replace(
            "path = \"/t\"",
            "path = \"/t\"\nconcurrency = { key = \"event.headers.x-key\", max = 1 }",
        );
        let e = diff(&old, &cfg(&keyed)).unwrap_err();
        assert!(
            e.starts_with("trigger \"t\": a flow-control key reads header \"x-key\""),
            "{e}"
        );
        assert!(
            !e.contains("IngestSpec") && e.len() < 300,
            "{} bytes: {e}",
            e.len()
        );
        // A gate on a header already stored applies live.
        let stored = BASE.replace(
            "path = \"/t\"",
            "path = \"/t\"\nconcurrency = { key = \"event.headers.user-agent\", max = 1 }",
        );
        assert_eq!(diff(&old, &cfg(&stored)), Ok(()));
        // The stored list itself changed: what it adds and removes, briefly.
        let listed = format!("[ingest]\nstored_headers = [\"x-a\"]\n{BASE}");
        let e = diff(&old, &cfg(&listed)).unwrap_err();
        assert!(e.starts_with("ingest.stored_headers cannot change"), "{e}");
        assert!(e.contains("[\"x-a\"]") && !e.contains("IngestSpec"), "{e}");
    }

    /// A gated trigger may change its handler live only to a destination of the same owner
    /// core (its gates' state lives there); an ungated one anywhere.
    #[test]
    fn a_gated_trigger_keeps_its_owner_core() {
        let uri = |i: usize| format!("http://127.0.0.1:{}/", 9000 + i);
        let home = owner_core(&uri(0), 2);
        let same = (1..).find(|&i| owner_core(&uri(i), 2) == home).unwrap();
        let other = (1..).find(|&i| owner_core(&uri(i), 2) != home).unwrap();
        let manifest = |to: usize, gate: &str| {
            format!(
                "[server]\nworkers = 2\n[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\n\
                 handler = \"{}\"\n{gate}",
                uri(to)
            )
        };
        let gate = "throttle = { period = \"1s\", max = 2 }\n";
        let running = cfg(&manifest(0, gate));
        let moved = |to: usize, gate: &str| {
            crate::ops::reload::ids::assign(&running, cfg(&manifest(to, gate)), 8).unwrap()
        };
        let e = diff(&running, &moved(other, gate)).unwrap_err();
        assert!(e.contains("another core"), "{e}");
        assert_eq!(diff(&running, &moved(same, gate)), Ok(()));
        let plain = cfg(&manifest(0, ""));
        let to_other = crate::ops::reload::ids::assign(&plain, cfg(&manifest(other, "")), 8);
        assert_eq!(diff(&plain, &to_other.unwrap()), Ok(()));
    }
}
