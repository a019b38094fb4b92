//! Tests of `config::dispatch` (kept apart: the module itself is long).
use super::super::{Config, Overrides};
use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

fn build(text: &str) -> Result<Config, ConfigError> {
    Config::build(
        Config::parse_manifest(text)?,
        &no_env,
        &Overrides::default(),
    )
}

fn trig(id: &str, path: &str, handler: &str) -> String {
    format!("[[triggers]]\nid = \"{id}\"\nprovider = \"p\"\npath = \"{path}\"\nhandler = \"{handler}\"\n")
}

#[test]
fn https_handlers_parse_with_port_443_and_get_default_tls() {
    let h = parse_handler("HTTPS://Example.com:443/hook").unwrap();
    assert!(h.tls);
    assert_eq!((h.host.as_str(), h.port), ("example.com", 443));
    assert_eq!(h.uri, "https://example.com/hook");
    assert_eq!(
        parse_handler("https://h:8443").unwrap().uri,
        "https://h:8443/"
    );
    // http and https of the same host are different destinations.
    assert_ne!(
        parse_handler("http://h/").unwrap().uri,
        parse_handler("https://h/").unwrap().uri
    );
    let c = build(&trig("t", "/t", "https://a/b")).unwrap();
    let tls = c.destinations[0]
        .tls
        .as_ref()
        .expect("https gets TLS settings");
    assert_eq!(tls.source.server_name, "a");
    assert_eq!(tls.source.ca_file, None);
    let c = build(&trig("t", "/t", "http://a/b")).unwrap();
    assert!(c.destinations[0].tls.is_none());
}

#[test]
fn triggers_share_destinations_by_normalized_uri() {
    let text = [
        trig("a", "/a", "http://h:8080/x"),
        "[[triggers]]\nid = \"n\"\nprovider = \"p\"\npath = \"/n\"\n".to_string(),
        trig("b", "/b", "http://other/"),
        trig("c", "/c", "http://H:8080/x"),
    ]
    .concat();
    let c = build(&text).unwrap();
    assert_eq!(c.destinations.len(), 2);
    assert_eq!(c.destinations[0].handler.uri, "http://h:8080/x");
    assert_eq!(c.destinations[1].handler.uri, "http://other/");
    let idx: Vec<_> = c.triggers.iter().map(|t| t.handler).collect();
    assert_eq!(idx, vec![Some(0), None, Some(1), Some(0)]);
    // Defaults for unlisted destinations.
    let d = &c.destinations[1];
    assert_eq!(d.max_in_flight, 64);
    assert_eq!(d.timeout, Duration::from_secs(10));
    assert_eq!(d.rate, None);
    assert_eq!(
        d.circuit,
        CircuitSpec {
            failures: 5,
            open_for: Duration::from_secs(60),
            on_open: crate::config::OnOpen::Dlq,
        }
    );
    assert_eq!(
        d.retry,
        RetrySpec {
            max_attempts: 7,
            base: Duration::from_secs(1),
            cap: Duration::from_secs(600)
        }
    );
    assert!(d.headers.is_empty());
}

/// What dispatch is handed: the same destinations by id, each trigger's route (its
/// destination index and gates), the `[flow]` bounds and the server settings it reads.
#[test]
fn dispatch_spec_is_what_dispatch_runs_on() {
    let text = [
        trig("b", "/b", "http://other/"),
        "[[triggers]]\nid = \"n\"\nprovider = \"p\"\npath = \"/n\"\n".to_string(),
        trig("a", "/a", "http://h/"),
        "singleton = {}\n".to_string(),
        "[server]\nworkers = 3\ndata_dir = \"/var/lib/x\"\n[flow]\nmax_held = 7\n".to_string(),
    ]
    .concat();
    let c = build(&text).unwrap();
    let spec = c.dispatch_spec();
    assert_eq!(spec.destinations, c.destinations);
    let routes: Vec<_> = spec
        .triggers
        .iter()
        .map(|t| (t.id.as_str(), t.dest))
        .collect();
    assert_eq!(routes, vec![("b", Some(0)), ("n", None), ("a", Some(1))]);
    assert_eq!(spec.triggers[2].flow, c.triggers[2].flow);
    assert_eq!((spec.workers, spec.flow.max_held), (3, 7));
    assert_eq!(spec.flow_dir, std::path::Path::new("/var/lib/x/flow"));
    assert_eq!(spec.idle_timeout, c.server.idle_timeout);
    assert_eq!(spec.in_use(), vec![true, true]);
    let gated: Vec<_> = spec.gated().into_iter().map(|(id, _)| id).collect();
    assert_eq!(gated, vec!["a"], "only triggers with a gate, by id");
}

#[test]
fn destination_fields_parse() {
    let text = trig("a", "/a", "http://h:8080/x")
        + "[[destinations]]\nuri = \"http://H:8080/x\"\nmax_in_flight = 3\ntimeout = \"250ms\"\n\
           rate = { per_sec = 10 }\ncircuit = { failures = 2, open_for = \"5s\", on_open = \"hold\" }\n\
           headers = { \"x-api-key\" = \"k\", \"X-Tenant\" = \"t 1\" }\n\
           retry = { max_attempts = 3, base = \"100ms\", cap = \"1h\" }\n";
    let c = build(&text).unwrap();
    let d = &c.destinations[0];
    assert_eq!(d.max_in_flight, 3);
    assert_eq!(d.timeout, Duration::from_millis(250));
    assert_eq!(
        d.rate,
        Some(RateSpec {
            per_sec: 10,
            burst: 10
        })
    );
    assert_eq!(d.circuit.failures, 2);
    assert_eq!(d.circuit.open_for, Duration::from_secs(5));
    assert_eq!(d.circuit.on_open, crate::config::OnOpen::Hold);
    assert_eq!(
        d.headers,
        vec![
            ("X-Tenant".to_string(), "t 1".to_string()),
            ("x-api-key".to_string(), "k".to_string())
        ]
    );
    assert_eq!(d.retry.max_attempts, 3);
    assert_eq!(d.retry.base, Duration::from_millis(100));
    assert_eq!(d.retry.cap, Duration::from_secs(3600));
    let burst = trig("a", "/a", "http://h/")
        + "[[destinations]]\nuri = \"http://h\"\nrate = { per_sec = 10, burst = 1 }\n";
    assert_eq!(
        build(&burst).unwrap().destinations[0].rate,
        Some(RateSpec {
            per_sec: 10,
            burst: 1
        })
    );
}

#[test]
fn max_in_flight_auto_parses_with_its_range() {
    let base = trig("a", "/a", "http://h/");
    let dest = |body: &str| format!("{base}[[destinations]]\nuri = \"http://h/\"\n{body}\n");
    let c = build(&dest("max_in_flight = \"auto\"")).unwrap();
    let d = &c.destinations[0];
    assert_eq!(
        d.adaptive,
        Some(crate::config::AdaptiveSpec { min: 1, cap: 256 })
    );
    assert_eq!(d.max_in_flight, 256);
    assert_eq!(
        d.initial_permits(),
        crate::dispatch::deliver::adaptive::INITIAL
    );
    let c = build(&dest(
        "max_in_flight = \"auto\"\nmax_in_flight_cap = 8\nmin_in_flight = 2",
    ))
    .unwrap();
    let d = &c.destinations[0];
    assert_eq!(
        d.adaptive,
        Some(crate::config::AdaptiveSpec { min: 2, cap: 8 })
    );
    assert_eq!(d.initial_permits(), 8);
    let c = build(&dest("max_in_flight = 7")).unwrap();
    assert_eq!(c.destinations[0].adaptive, None);
    assert_eq!(c.destinations[0].initial_permits(), 7);
    for (body, needle) in [
        (
            "max_in_flight = \"fast\"",
            "max_in_flight must be a number in 1..=10000 or \"auto\", not \"fast\"",
        ),
        ("max_in_flight = -1", "max_in_flight = -1 is out of range"),
        (
            "max_in_flight = 4\nmax_in_flight_cap = 9",
            "apply only to max_in_flight = \"auto\"",
        ),
        (
            "min_in_flight = 2",
            "apply only to max_in_flight = \"auto\"",
        ),
        (
            "max_in_flight = \"auto\"\nmax_in_flight_cap = 0",
            "max_in_flight_cap",
        ),
        (
            "max_in_flight = \"auto\"\nmax_in_flight_cap = 10001",
            "max_in_flight_cap",
        ),
        (
            "max_in_flight = \"auto\"\nmin_in_flight = 0",
            "min_in_flight",
        ),
        (
            "max_in_flight = \"auto\"\nmax_in_flight_cap = 4\nmin_in_flight = 5",
            "min_in_flight (5) must not exceed max_in_flight_cap (4)",
        ),
    ] {
        let e = build(&dest(body)).unwrap_err();
        assert!(e.0.contains(needle), "{body:?}: {e}");
    }
}

#[test]
fn destination_errors_name_the_key() {
    let base = trig("a", "/a", "http://h/");
    let dest = |body: &str| format!("{base}[[destinations]]\nuri = \"http://h/\"\n{body}\n");
    let cases = [
        (
            format!("{base}[[destinations]]\nuri = \"http://nope/\"\n"),
            "destination \"http://nope/\" is not the handler of any trigger",
        ),
        (
            format!("{base}[[destinations]]\nuri = \"http://h\"\n[[destinations]]\nuri = \"http://h:80/\"\n"),
            "listed twice",
        ),
        (
            format!("{base}[[destinations]]\nuri = \"https://h/\"\n"),
            "destination \"https://h/\" is not the handler of any trigger",
        ),
        (
            dest("tls = { ca_file = \"/nonexistent\" }"),
            "tls applies to https:// destinations only",
        ),
        (dest("max_in_flight = 0"), "max_in_flight = 0 is out of range"),
        (dest("max_in_flight = 10001"), "max_in_flight"),
        (dest("timeout = \"0s\""), "timeout"),
        (dest("timeout = \"10\""), "timeout"),
        (dest("rate = { per_sec = 0 }"), "rate.per_sec"),
        (dest("rate = { per_sec = 5, burst = 0 }"), "rate.burst"),
        (dest("rate = { burst = 5 }"), "per_sec"),
        (dest("rate = { per_sec = 2000000000 }"), "rate"),
        (dest("circuit = { failures = 0 }"), "circuit.failures"),
        (dest("circuit = { open_for = \"1y\" }"), "circuit.open_for"),
        (dest("circuit = { bogus = 1 }"), "bogus"),
        (
            dest("circuit = { on_open = \"queue\" }"),
            "circuit.on_open must be \"dlq\" or \"hold\", not \"queue\"",
        ),
        (dest("retry = { max_attempts = 0 }"), "retry.max_attempts"),
        (dest("retry = { max_attempts = 101 }"), "retry.max_attempts"),
        (dest("retry = { base = \"2m\", cap = \"1m\" }"), "retry.base"),
        (dest("retry = { cap = \"500ms\" }"), "must not exceed retry.cap"),
        (dest("headers = { \"bad name\" = \"v\" }"), "not a header name"),
        (dest("headers = { \"\" = \"v\" }"), "not a header name"),
        (dest("headers = { \"x\" = \"a\\r\\nb\" }"), "control character"),
        (dest("headers = { \"x\" = \"a\\u0000\" }"), "control character"),
        (dest("headers = { \"x\" = \"a\\nb\" }"), "headers.x"),
        (dest("headers = { \"Content-Length\" = \"1\" }"), "set by sluice"),
        (dest("headers = { \"x-a\" = \"1\", \"X-A\" = \"2\" }"), "same header"),
        (dest("unknown = 1"), "unknown"),
    ];
    for (text, needle) in cases {
        let e = build(&text).unwrap_err();
        assert!(e.0.contains(needle), "{text:?}: {e}");
    }
    // Every destination error names its destination.
    let e = build(&dest("max_in_flight = 0")).unwrap_err();
    assert!(e.0.contains("destination \"http://h/\""), "{e}");
    // No trigger has a handler at all.
    let e = build("[[destinations]]\nuri = \"http://h/\"\n").unwrap_err();
    assert!(e.0.contains("not the handler of any trigger"), "{e}");
    // Tab is fine in a value.
    assert!(build(&dest("headers = { \"x\" = \"a\\tb\" }")).is_ok());
}

#[test]
fn pump_precedence_and_errors() {
    let env64 =
        |v: &'static str| move |k: &str| (k == ENV_PUMP_MAX_OUTSTANDING).then(|| v.to_string());
    let parse = |t: &str| Config::parse_manifest(t).unwrap();
    let d = Overrides::default();
    assert_eq!(build("").unwrap().pump.max_outstanding, 64);
    assert_eq!(
        build("[orchestrator]\npumps = { max_outstanding = 5 }\n")
            .unwrap()
            .pump
            .max_outstanding,
        5
    );
    assert_eq!(
        build("[orchestrator.pumps]\nmax_outstanding = 6\n")
            .unwrap()
            .pump
            .max_outstanding,
        6
    );
    assert_eq!(
        build("[orchestrator.pumps]\nmax-outstanding = 7\n")
            .unwrap()
            .pump
            .max_outstanding,
        7
    );
    let text = "[orchestrator.pumps]\nmax_outstanding = 6\n";
    let c = Config::build(parse(text), &env64("9"), &d).unwrap();
    assert_eq!(c.pump.max_outstanding, 9);
    let o = Overrides {
        pump_max_outstanding: Some(11),
        ..Overrides::default()
    };
    let c = Config::build(parse(text), &env64("9"), &o).unwrap();
    assert_eq!(c.pump.max_outstanding, 11);
    for bad in ["0", "100001", "x", "-1", ""] {
        let e = Config::build(parse(""), &env64(bad), &d).unwrap_err();
        assert!(e.0.contains(ENV_PUMP_MAX_OUTSTANDING), "{bad:?}: {e}");
    }
    let e = build("[orchestrator]\npumps = { max_outstanding = 0 }\n").unwrap_err();
    assert!(e.0.contains("orchestrator.pumps.max_outstanding"), "{e}");
    let e = build("[orchestrator]\npumps = { max_outstanding = 100001 }\n").unwrap_err();
    assert!(e.0.contains("orchestrator.pumps.max_outstanding"), "{e}");
    let e = build("[orchestrator]\nother = 1\n").unwrap_err();
    assert!(e.0.contains("other"), "{e}");
    let o = Overrides {
        pump_max_outstanding: Some(0),
        ..Overrides::default()
    };
    let e = Config::build(parse(""), &no_env, &o).unwrap_err();
    assert!(e.0.contains("pump_max_outstanding"), "{e}");
}

#[test]
fn dispatch_defaults_and_ranges() {
    let c = build("").unwrap();
    assert_eq!(
        c.dispatch,
        DispatchConfig {
            max_pending_events: 100_000,
            max_pending_bytes: 1 << 30,
            saturated_high: 0.9,
            saturated_low: 0.7,
            retention: Duration::from_secs(7 * 86_400),
            max_wal_bytes: 64 << 30,
            max_dlq_entries: 100_000,
            absorb_max_bytes: (64 << 30) / 10,
            reserved_fraction: 0.5,
        }
    );
    assert!(c.destinations.is_empty());
    let ok = build(
        "[server]\nworkers = 1\n[dispatch]\nmax_pending_events = 1\nmax_pending_bytes = 1048576\n\
         saturated_high = 1.0\nsaturated_low = 0.5\nretention = \"12h\"\nmax_wal_bytes = 134217728\n\
         max_dlq_entries = 1\n",
    )
    .unwrap();
    assert_eq!(ok.dispatch.retention, Duration::from_secs(12 * 3600));
    assert_eq!(ok.dispatch.max_wal_bytes, 128 << 20);
    let cases = [
        ("max_pending_events = 0", "dispatch.max_pending_events"),
        ("max_pending_bytes = 1048575", "dispatch.max_pending_bytes"),
        ("saturated_high = 1.5", "dispatch.saturated_high"),
        ("saturated_high = 0.0", "dispatch.saturated_high"),
        ("saturated_high = nan", "dispatch.saturated_high"),
        ("saturated_low = 0.95", "dispatch.saturated_low"),
        ("saturated_low = 0.0", "dispatch.saturated_low"),
        (
            "saturated_high = 0.5\nsaturated_low = 0.5",
            "dispatch.saturated_low",
        ),
        ("retention = \"0d\"", "dispatch.retention"),
        ("max_wal_bytes = 134217727", "dispatch.max_wal_bytes"),
        ("max_dlq_entries = 0", "dispatch.max_dlq_entries"),
        ("bogus = 1", "bogus"),
    ];
    for (body, needle) in cases {
        let e = build(&format!("[server]\nworkers = 1\n[dispatch]\n{body}\n")).unwrap_err();
        assert!(e.0.contains(needle), "{body:?}: {e}");
    }
    // max_wal_bytes follows the segment size.
    let e = build("[wal]\nsegment_bytes = 1073741824\n[dispatch]\nmax_wal_bytes = 1073741824\n")
        .unwrap_err();
    assert!(
        e.0.contains("(server.workers + 1) × wal.segment_bytes"),
        "{e}"
    );
}

#[test]
fn when_backlog_full_defaults_by_verify_scheme_and_absorb_max_bytes_follows_the_wal_bound() {
    use crate::ingest::backlog::WhenFull;
    let env = |k: &str| (k == "GH").then(|| "s3cret".to_owned());
    let text = "[server]\nworkers = 1\n[dispatch]\nmax_wal_bytes = 134217728\n\
                [[triggers]]\nid = \"gh\"\nprovider = \"github\"\npath = \"/gh\"\nverify = \"github\"\nsecrets = [{ env = \"GH\" }]\n\
                [[triggers]]\nid = \"plain\"\nprovider = \"p\"\npath = \"/p\"\n\
                [[triggers]]\nid = \"gh-refuse\"\nprovider = \"github\"\npath = \"/g2\"\nverify = \"github\"\nsecrets = [{ env = \"GH\" }]\nwhen_backlog_full = \"refuse\"\n\
                [[triggers]]\nid = \"plain-absorb\"\nprovider = \"p\"\npath = \"/p2\"\nwhen_backlog_full = \"absorb\"\n";
    let c = Config::build(
        Config::parse_manifest(text).unwrap(),
        &env,
        &Overrides::default(),
    )
    .unwrap();
    let policy: Vec<WhenFull> = c.triggers.iter().map(|t| t.when_backlog_full).collect();
    assert_eq!(
        policy,
        [
            WhenFull::Absorb,
            WhenFull::Refuse,
            WhenFull::Refuse,
            WhenFull::Absorb
        ]
    );
    assert_eq!(
        crate::ingest::backlog::absorbing_triggers(&c.ingest_triggers()),
        ["gh", "plain-absorb"]
    );
    assert_eq!(c.dispatch.absorb_max_bytes, 134217728 / 10);
    let ok = build(
        "[server]\nworkers = 1\n[dispatch]\nmax_wal_bytes = 134217728\nabsorb_max_bytes = 0\n",
    )
    .unwrap();
    assert_eq!(ok.dispatch.absorb_max_bytes, 0);
    let e =
        build("[server]\nworkers = 1\n[dispatch]\nmax_wal_bytes = 134217728\nabsorb_max_bytes = 134217729\n").unwrap_err();
    assert!(e.0.contains("dispatch.absorb_max_bytes"), "{e}");
    let e = build(&format!(
        "{}when_backlog_full = \"maybe\"\n",
        trig("t", "/t", "http://127.0.0.1:9/x")
    ))
    .unwrap_err();
    assert!(
        e.0.contains("when_backlog_full") && e.0.contains("\"t\""),
        "{e}"
    );
}

#[test]
fn max_pending_shares_and_reserved_fraction() {
    let two = format!(
        "[dispatch]\nmax_pending_events = 1000\nmax_pending_bytes = 1048576\n\
         {}max_pending = {{ events = 600 }}\n{}max_pending = {{ events = 400, bytes = 5 }}\n",
        trig("a", "/a", "http://127.0.0.1:9/x"),
        trig("b", "/b", "http://127.0.0.1:9/x"),
    );
    let c = build(&two).unwrap();
    use super::super::shares::MaxPending;
    assert_eq!(
        c.triggers[0].max_pending,
        MaxPending {
            events: Some(600),
            bytes: None
        }
    );
    assert_eq!(c.triggers[1].max_pending.bytes, Some(5));
    assert_eq!(c.dispatch.reserved_fraction, 0.5);
    // Past the bound: an error naming both sides.
    let e = build(&two.replace("events = 400", "events = 401")).unwrap_err();
    assert!(
        e.0.contains("max_pending.events sum to 1001") && e.0.contains("max_pending_events = 1000"),
        "{e}"
    );
    let e = build(&two.replace("events = 600", "events = 0")).unwrap_err();
    assert!(
        e.0.contains("\"a\"") && e.0.contains("max_pending.events = 0"),
        "{e}"
    );
    let e = build(&two.replace("bytes = 5", "bytse = 5")).unwrap_err();
    assert!(e.0.contains("bytse"), "unknown keys are errors: {e}");
    let e = build("[dispatch]\nreserved_fraction = 1.5\n").unwrap_err();
    assert!(e.0.contains("dispatch.reserved_fraction = 1.5"), "{e}");
    let ok = build("[dispatch]\nreserved_fraction = 0\n").unwrap();
    assert_eq!(ok.dispatch.reserved_fraction, 0.0);
}

#[test]
fn shared_budgets_parse_and_refuse_what_they_cannot_do() {
    let t = trig("a", "/a", "http://h/x");
    let c = build(&format!(
        "{t}[[destinations]]\nuri = \"http://h/x\"\nmax_in_flight = 20\n\
         shared = {{ redis = \"redis://10.0.0.5:6380/1\", lease = \"2s\", on_unavailable = \"local\" }}\n"
    ))
    .unwrap();
    let s = c.destinations[0].shared.as_ref().expect("shared");
    assert_eq!(s.key, "http://h/x", "key defaults to the destination uri");
    assert_eq!(s.lease, Duration::from_secs(2));
    assert_eq!(s.on_unavailable, super::super::shared::OnUnavailable::Local);
    assert_eq!(
        (s.redis.host.as_str(), s.redis.port, s.redis.db),
        ("10.0.0.5", 6380, 1)
    );
    let no_shared = build(&format!("{t}[[destinations]]\nuri = \"http://h/x\"\n")).unwrap();
    assert!(no_shared.destinations[0].shared.is_none());

    let e = |dest: &str| {
        build(&format!(
            "{t}[[destinations]]\nuri = \"http://h/x\"\n{dest}\n"
        ))
        .unwrap_err()
        .0
    };
    let auto = e("max_in_flight = \"auto\"\nshared = { redis = \"redis://r\" }");
    assert!(auto.contains("fixed max_in_flight, not \"auto\""), "{auto}");
    let unknown = e("shared = { redis = \"redis://r\", lease_ms = 5 }");
    assert!(unknown.contains("unknown field `lease_ms`"), "{unknown}");
    let missing = e("shared = { key = \"k\" }");
    assert!(missing.contains("missing field `redis`"), "{missing}");
    let bad = e("shared = { redis = \"redis://r\", lease = \"20m\" }");
    assert!(
        bad.contains("destination \"http://h/x\": shared.lease"),
        "{bad}"
    );
}

#[test]
fn batch_defaults_ranges_and_errors() {
    let with = |b: &str| {
        format!(
            "{}[[destinations]]\nuri = \"http://h/x\"\nbatch = {b}\n",
            trig("a", "/a", "http://h/x")
        )
    };
    let plain = build(&trig("a", "/a", "http://h/x")).unwrap();
    assert_eq!(plain.destinations[0].batch, None, "batching is opt-in");
    let d = build(&with("{}")).unwrap().destinations[0].batch.unwrap();
    assert_eq!(
        (d.max_events, d.max_bytes, d.linger),
        (100, 1 << 20, Duration::from_millis(5))
    );
    let d = build(&with(
        "{ max_events = 50, max_bytes = 1024, linger = \"60s\" }",
    ))
    .unwrap()
    .destinations[0]
        .batch
        .unwrap();
    assert_eq!(
        (d.max_events, d.max_bytes, d.linger),
        (50, 1024, Duration::from_secs(60))
    );
    let cases = [
        (
            "{ max_events = 0 }",
            "batch.max_events = 0 is out of range (1..=10000)",
        ),
        (
            "{ max_events = 10001 }",
            "batch.max_events = 10001 is out of range",
        ),
        (
            "{ max_bytes = 1023 }",
            "batch.max_bytes = 1023 is out of range (1024..=67108864)",
        ),
        (
            "{ max_bytes = 67108865 }",
            "batch.max_bytes = 67108865 is out of range",
        ),
        (
            "{ linger = \"0ms\" }",
            "batch.linger: duration \"0ms\" must be greater than zero",
        ),
        (
            "{ linger = \"61s\" }",
            "batch.linger = 61s is out of range (1ms..=60s)",
        ),
        (
            "{ linger = \"5\" }",
            "batch.linger: duration \"5\" has no unit",
        ),
        ("{ size = 5 }", "unknown field `size`"),
    ];
    for (b, want) in cases {
        let e = build(&with(b)).unwrap_err().to_string();
        assert!(e.contains(want), "{b}: {e}");
        if !b.contains("size") {
            assert!(
                e.contains("destination \"http://h/x\""),
                "{b}: names the destination: {e}"
            );
        }
    }
}
