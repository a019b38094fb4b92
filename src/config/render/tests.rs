//! `render`: its output is a manifest that validates to the same configuration (the round trip
//! `sluice check` promises), never shows a secret, and reads as the sections it renders.

use super::*;
use crate::config::{Config, Overrides};

fn env(k: &str) -> Option<String> {
    match k {
        "GH" => Some("gh-secret-value".into()),
        "GH_NEXT" => Some("gh-next-value".into()),
        "SW" => Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
        "SW_RAW" => Some("a-raw-signing-key".into()),
        "SIGN" => Some("whsec_YWJjZA==".into()),
        _ => None,
    }
}

fn build(text: &str, overrides: &Overrides) -> Config {
    let raw = Config::parse_manifest(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    Config::build(raw, &env, overrides).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Renders `text`, feeds the output back, and checks that it renders the same; returns it.
fn round_trip(text: &str, overrides: &Overrides) -> String {
    let first = render(&build(text, overrides));
    toml::from_str::<toml::Table>(&first).unwrap_or_else(|e| panic!("not TOML: {e}\n{first}"));
    let second = render(&build(&first, overrides));
    assert_eq!(first, second, "the output of check does not check the same");
    for secret in [
        "gh-secret-value",
        "gh-next-value",
        "MfKQ9r8",
        "a-raw-signing-key",
        "YWJjZA",
    ] {
        assert!(!first.contains(secret), "secret {secret} printed:\n{first}");
    }
    first
}

const GATES_AND_AUTH: &str = r#"
[ingest]
stored_headers = ["x-tenant"]

[[triggers]]
id = "gh"
provider = "github"
path = "/hooks/gh"
handler = "http://127.0.0.1:9/sink"
verify = "github"
secrets = [{ env = "GH" }, { env = "GH_NEXT" }]
dedupe = true
concurrency = { key = "event.headers.x-tenant", max = 3 }
priority = { key = "event.body.tier", order = ["gold", "silver"] }
throttle = { key = "event.body.user.id", period = "60s", max = 30 }
rate_limit = { period = "1h", max = 1000 }
max_pending = { events = 100, bytes = 1000000 }

[[triggers]]
id = "sw"
provider = "svc"
path = "/hooks/sw"
handler = "http://127.0.0.1:9/other"
verify = "standard-webhooks"
secrets = [{ env = "SW" }, { env = "SW_RAW", encoding = "raw" }]
tolerance = "2m"
debounce = { key = "event.source", period = "30s" }
singleton = {}
ordering = { key = "event.headers.x-customer", on_exhausted = "hold" }

[[triggers]]
id = "hm"
provider = "acme"
path = "/hooks/hm"
handler = "https://example.com/hook"
verify = "hmac"
secrets = [{ env = "GH" }]
hmac = { header = "X-Sig", prefix = "sha1=", algorithm = "sha1", encoding = "base64" }
dedupe = { window = "2h" }
batch = { key = "event.trigger", size = 5, timeout = "2s" }
when_backlog_full = "absorb"

[[destinations]]
uri = "http://127.0.0.1:9/sink"
max_in_flight = 5
rate = { per_sec = 10 }
headers = { "x-api-key" = "k\"1'", "X-Other" = "é" }
signing_secret = { env = "SIGN" }
retry = { max_attempts = 3, base = "250ms", cap = "1m" }
circuit = { failures = 2, open_for = "30s", on_open = "hold" }
batch = { max_events = 50, linger = "20ms" }

[[destinations]]
uri = "http://127.0.0.1:9/other"
max_in_flight = 4
signing_secret = { env = "SW_RAW", encoding = "raw" }
shared = { redis = "redis://127.0.0.1:6390/2", lease = "5s", on_unavailable = "local" }

[[destinations]]
uri = "https://example.com/hook"
max_in_flight = "auto"
min_in_flight = 2
tls = { server_name = "hooks.example.org" }
"#;

#[test]
fn defaults_round_trip() {
    let text = round_trip("", &Overrides::default());
    assert!(
        text.contains("[server]\nlisten = \"127.0.0.1:8080\""),
        "{text}"
    );
    assert!(text.contains("max_outstanding = 64"), "{text}");
    assert!(text.contains("saturated_high = 0.9"), "{text}");
}

#[test]
fn triggers_with_auth_gates_and_destinations_round_trip_as_tables() {
    let text = round_trip(GATES_AND_AUTH, &Overrides::default());
    for want in [
        "[[triggers]]\nid = \"gh\"",
        "secrets = [{ env = \"GH\" }, { env = \"GH_NEXT\" }]",
        "dedupe = { window = \"1d\" }",
        "concurrency = { key = \"event.headers.x-tenant\", max = 3 }",
        "priority = { key = \"event.body.tier\", order = [\"gold\", \"silver\"] }",
        "throttle = { key = \"event.body.user.id\", period = \"1m\", max = 30 }",
        "rate_limit = { period = \"1h\", max = 1000 }",
        "max_pending = { events = 100, bytes = 1000000 }",
        "secrets = [{ env = \"SW\" }, { env = \"SW_RAW\", encoding = \"raw\" }]",
        "tolerance = \"2m\"",
        "singleton = {}",
        "ordering = { key = \"event.headers.x-customer\", on_exhausted = \"hold\" }",
        "hmac = { header = \"x-sig\", prefix = \"sha1=\", algorithm = \"sha1\", encoding = \"base64\" }",
        "batch = { key = \"event.trigger\", size = 5, timeout = \"2s\" }",
        "signing_secret = { env = \"SIGN\" }",
        "signing_secret = { env = \"SW_RAW\", encoding = \"raw\" }",
        "max_in_flight = \"auto\"\nmin_in_flight = 2",
        "tls = { server_name = \"hooks.example.org\" }",
        "on_unavailable = \"local\"",
        "circuit = { failures = 2, open_for = \"30s\", on_open = \"hold\" }",
        "batch = { max_events = 50, max_bytes = 1048576, linger = \"20ms\" }",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    assert!(
        !text.contains("TriggerAuth") && !text.contains("Some("),
        "{text}"
    );
}

#[test]
fn command_line_overrides_are_part_of_the_output() {
    let o = Overrides {
        listen: Some("127.0.0.1:0".into()),
        workers: Some(3),
        io: Some("mio".into()),
        drain_grace: Some("1500ms".into()),
        ..Overrides::default()
    };
    let text = round_trip(GATES_AND_AUTH, &o);
    assert!(text.contains("listen = \"127.0.0.1:0\""), "{text}");
    assert!(text.contains("workers = 3"), "{text}");
    assert!(text.contains("io = \"mio\""), "{text}");
    assert!(text.contains("drain_grace = \"1500ms\""), "{text}");
}

#[test]
fn durations_print_in_the_largest_exact_unit() {
    let d = Duration::from_millis;
    assert_eq!(duration_text(d(0)), "0s");
    assert_eq!(duration_text(d(250)), "250ms");
    assert_eq!(duration_text(d(1500)), "1500ms");
    assert_eq!(duration_text(d(2000)), "2s");
    assert_eq!(duration_text(d(90_000)), "90s");
    assert_eq!(duration_text(d(120_000)), "2m");
    assert_eq!(duration_text(d(7 * 86_400_000)), "7d");
    for ms in [1, 999, 1001, 61_000, 3_600_000, 86_400_001] {
        let text = duration_text(d(ms));
        assert_eq!(crate::config::parse_duration(&text), Ok(d(ms)), "{text}");
    }
}

// `routes_summary`: the routes and their backlog shares, as `serve` logs them.

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

#[test]
fn replication_round_trips_with_its_defaults_filled_in() {
    let given = "[replication]\nnats = [\"nats://10.0.0.5\", \"tls://[::1]:4333\"]\n\
                 node = \"node-a\"\nack_timeout = \"1500ms\"\n";
    let text = round_trip(given, &Overrides::default());
    let want = "[replication]\nnats = [\"nats://10.0.0.5:4222\", \"tls://[::1]:4333\"]\n\
                stream = \"sluice\"\nreplicas = 3\nnode = \"node-a\"\nack_timeout = \"1500ms\"\n\
                lease = \"10s\"\nmax_inflight = 2\n";
    assert!(text.contains(want), "{text}");
    // With gates, triggers and destinations, the section still comes before the arrays.
    let text = round_trip(&format!("{given}{GATES_AND_AUTH}"), &Overrides::default());
    assert!(
        text.find("[replication]") < text.find("[[triggers]]"),
        "{text}"
    );
    // The default node is the host name's, written out: the output checks the same elsewhere.
    let text = round_trip(
        "[replication]\nnats = [\"nats://a\"]\n",
        &Overrides::default(),
    );
    let node = crate::config::node_from_host(&crate::config::host_name().unwrap()).unwrap();
    assert!(text.contains(&format!("node = \"{node}\"")), "{text}");
    assert!(!round_trip("", &Overrides::default()).contains("replication"));
}

#[test]
fn check_summarises_replication_when_it_is_on() {
    let o = Overrides {
        workers: Some(4),
        ..Overrides::default()
    };
    assert_eq!(replication_summary(&build("", &o)), None);
    let cfg = build(
        "[replication]\nnats = [\"nats://a\", \"tls://b:4000\"]\nnode = \"node-a\"\n\
         stream = \"hooks\"\nreplicas = 1\nlease = \"1m\"\nmax_inflight = 2\n",
        &o,
    );
    assert_eq!(
        replication_summary(&cfg).unwrap(),
        "replication: servers nats://a:4222, tls://b:4000; stream \"hooks\", replicas 1; \
         node \"node-a\" (subjects \"hooks.node-a.core-0\"..\"hooks.node-a.core-3\", lease bucket \
         \"hooks_nodes\"); ack_timeout 2s, lease 1m, max_inflight 2 batches per log"
    );
}
