//! Tests of the limits `config` enforces at start-up: duration bounds, reserved
//! trigger paths and ids, `drain_grace`, and start-up warnings. Kept apart: `mod.rs` is long.
use super::*;
use std::time::Duration;

fn no_env(_: &str) -> Option<String> {
    None
}

fn build(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    Config::build(Config::parse_manifest(text)?, env, &Overrides::default())
}

#[test]
fn out_of_range_durations_and_reserved_ids_fail_with_the_key() {
    let cases = [
        (
            "[server]\nheader_timeout = \"18446744074s\"\n",
            "server.header_timeout",
        ),
        (
            "[server]\nshutdown_timeout = \"366d\"\n",
            "server.shutdown_timeout",
        ),
        ("[server]\ndrain_grace = \"-1s\"\n", "server.drain_grace"),
        (
            "[server]\ndrain_grace = \"18446744074s\"\n",
            "server.drain_grace",
        ),
        (
            "[ingest]\noffer_timeout = \"99999999999h\"\n",
            "ingest.offer_timeout",
        ),
        (
            "[[triggers]]\nid = \"default\"\nprovider = \"x\"\npath = \"/x\"\n",
            "\"default\" is reserved",
        ),
    ];
    for (text, needle) in cases {
        let e = build(text, &no_env).unwrap_err();
        assert!(e.0.contains(needle), "{text:?}: {e}");
    }
}

#[test]
fn trigger_paths_on_built_in_routes_fail_with_the_trigger() {
    for path in [
        "/healthz", "/readyz", "/metrics", "/admin", "/admin/x", "/ui", "/api/v1",
    ] {
        let text = format!("[[triggers]]\nid = \"t1\"\nprovider = \"x\"\npath = \"{path}\"\n");
        let e = build(&text, &no_env).unwrap_err();
        assert!(
            e.0.contains("\"t1\"") && e.0.contains("built-in route"),
            "{path}: {e}"
        );
    }
    assert!(build(
        "[[triggers]]\nid = \"t1\"\nprovider = \"x\"\npath = \"/adminx\"\n",
        &no_env
    )
    .is_ok());
}

#[test]
fn drain_grace_defaults_to_two_seconds_and_may_be_zero() {
    assert_eq!(
        build("", &no_env).unwrap().server.drain_grace,
        Duration::from_secs(2)
    );
    let c = build("[server]\ndrain_grace = \"0s\"\n", &no_env).unwrap();
    assert_eq!(c.server.drain_grace, Duration::ZERO);
}

#[test]
fn unreachable_permits_are_a_warning_naming_both_keys() {
    let text = "[[triggers]]\nid = \"t\"\nprovider = \"x\"\npath = \"/x\"\nhandler = \"http://127.0.0.1:9/x\"\n\
                [[destinations]]\nuri = \"http://127.0.0.1:9/x\"\nmax_in_flight = 100\n\
                [orchestrator]\npumps = { max_outstanding = 10 }\n";
    let c = build(text, &no_env).unwrap();
    let w = c.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("max_in_flight = 100") && w[0].contains("max_outstanding = 10"),
        "{w:?}"
    );
    assert!(build("", &no_env).unwrap().warnings().is_empty());
}

/// Issue 38 item 5: the stored-headers bound counts what the operator listed (`content-type`
/// is always stored besides), and says how many may be listed.
#[test]
fn stored_headers_past_the_bound_count_the_names_listed() {
    let names = |n: usize| {
        let list: Vec<String> = (0..n).map(|i| format!("\"x-h{i}\"")).collect();
        format!("[ingest]\nstored_headers = [{}]\n", list.join(", "))
    };
    let c = build(&names(31), &no_env).unwrap();
    assert_eq!(
        c.ingest.stored_headers.len(),
        32,
        "31 listed + content-type"
    );
    let e = build(&names(32), &no_env).unwrap_err().0;
    assert!(e.contains("lists 32 headers besides content-type"), "{e}");
    assert!(e.contains("list at most 31"), "{e}");
    // Listing content-type itself does not count it twice.
    let with_ct = names(31).replace("[\"x-h0\"", "[\"Content-Type\", \"x-h0\"");
    assert!(build(&with_ct, &no_env).is_ok());
}

/// Issue 38 item 5: gates on a trigger without a handler never see an event: a warning names
/// the trigger and the gates (`serve` and `sluice check` print it).
#[test]
fn gates_on_a_trigger_without_a_handler_are_a_warning() {
    let text = "[[triggers]]\nid = \"nohandler\"\nprovider = \"x\"\npath = \"/x\"\n\
                concurrency = { key = \"event.source\", max = 1 }\n\
                throttle = { period = \"1s\", max = 1 }\n";
    let w = build(text, &no_env).unwrap().warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("trigger \"nohandler\": throttle, concurrency have no effect"),
        "{w:?}"
    );
    let handled = text.replace(
        "path = \"/x\"\n",
        "path = \"/x\"\nhandler = \"http://127.0.0.1:9/x\"\n",
    );
    assert!(build(&handled, &no_env).unwrap().warnings().is_empty());
}
