//! Defaults that fit configured triggers: with `[[triggers]]` the default route
//! (`POST /webhooks/{source}`) is off unless `ingest.default_route = true`, and when on it takes
//! no reserved share of the backlog, so one trigger with `max_pending_events = N` holds N; a
//! stalled trigger is not hidden from `/readyz` by the default route; a case variant of a
//! verified trigger's path or source never gets in unverified.

use std::time::Duration;

use crate::isolation::Silent;
use crate::support::*;

fn big_buckets(o: Opts) -> Opts {
    crate::dispatch::big_buckets(o)
}

/// `[dispatch] max_pending_events = 100` and one trigger `a` whose handler never answers.
fn one_stalled_trigger(silent: &Silent, ingest: &str) -> String {
    let uri = format!("http://{}/never", silent.addr);
    format!(
        "[ingest]\n{ingest}\n[dispatch]\nmax_pending_events = 100\n\n\
         [[triggers]]\nid = \"a\"\nprovider = \"pa\"\npath = \"/hooks/a\"\nhandler = \"{uri}\"\n\n\
         [[destinations]]\nuri = \"{uri}\"\ntimeout = \"120s\"\n"
    )
}

/// Posts `n` events to `path`: (accepted, refused `queue_full` with a `Retry-After` in 1..=60).
fn post_n(server: &Server, path: &str, n: usize) -> (usize, usize) {
    let mut c = server.client();
    let (mut ok, mut full) = (0, 0);
    for i in 0..n {
        let r = c.post(path, format!("{{\"n\":{i}}}").as_bytes(), &[]);
        match r.status {
            202 => ok += 1,
            503 => {
                assert_eq!(r.json()["reason"], "queue_full", "{}", r.text());
                let ra: u64 = r
                    .header("retry-after")
                    .expect("Retry-After")
                    .parse()
                    .unwrap();
                assert!((1..=60).contains(&ra), "Retry-After {ra}");
                full += 1;
            }
            s => panic!("event {i} to {path}: {s} {}", r.text()),
        }
    }
    (ok, full)
}

#[test]
fn one_trigger_holds_the_whole_bound_and_the_default_route_is_off() {
    let silent = Silent::start();
    let server = Server::start(big_buckets(Opts::config(&one_stalled_trigger(&silent, ""))));
    let (ok, full) = post_n(&server, "/hooks/a", 300);
    // Its share (half the bound) and the whole pool: nothing is held back for a route that is
    // not served.
    assert_eq!((ok, full), (100, 200));
    let r = server.post("/webhooks/anything", b"{}");
    assert_eq!(r.status, 404, "{}", r.text());
    // The trigger stalled with the pool full: the node cannot accept.
    let r = server.get("/readyz");
    assert_eq!((r.status, r.text().trim()), (503, "saturated"));
    // Refused load holds memory flat: 2,000 more refusals, RSS within a few MiB.
    let pid = server.pid().unwrap();
    let before = rss_bytes(pid);
    let (ok, full) = post_n(&server, "/hooks/a", 2000);
    assert_eq!((ok, full), (0, 2000));
    let after = rss_bytes(pid);
    assert!(
        after < before + 8 * 1024 * 1024,
        "RSS grew from {before} to {after} under refused load"
    );
    // Start-up names the routes and what each holds.
    let log = server.stderr();
    assert!(
        log.contains("routes: POST /hooks/a -> trigger \"a\" (source \"pa\"): share 50 events")
            && log.contains("routes: POST /webhooks/{source} -> off (triggers are configured")
            && log.contains("routes: common pool: 50 events"),
        "{log}"
    );
}

#[test]
fn a_default_route_set_on_beside_a_trigger_borrows_only_and_hides_no_saturation() {
    let silent = Silent::start();
    let cfg = one_stalled_trigger(&silent, "default_route = true");
    let server = Server::start(big_buckets(Opts::config(&cfg)));
    // The default route is served (its events have no handler: done at once).
    let (ok, _) = post_n(&server, "/webhooks/other", 10);
    assert_eq!(ok, 10);
    assert!(wait_until(Duration::from_secs(10), || {
        let (_, s) = scrape(&server);
        sample_value(&s, "sluice_wal_pending_events", &[]) == 0.0
    }));
    // The trigger holds its whole share plus the whole pool: nothing is reserved for the route.
    let (ok, full) = post_n(&server, "/hooks/a", 300);
    assert_eq!((ok, full), (100, 200));
    let (ok, full) = post_n(&server, "/webhooks/other", 5);
    assert_eq!(
        (ok, full),
        (0, 5),
        "the pool is full; the route has no share"
    );
    // One trigger stalled at its share with the pool full is the node saturated: the default
    // route, without a share, does not count as a trigger with an empty one.
    let r = server.get("/readyz");
    assert_eq!((r.status, r.text().trim()), (503, "saturated"));
    assert!(server
        .stderr()
        .contains("routes: POST /webhooks/{source} -> default route: no share"));
}

#[test]
fn two_stalled_triggers_with_full_shares_saturate_the_node_beside_the_default_route() {
    let (sa, sb) = (Silent::start(), Silent::start());
    let (ua, ub) = (
        format!("http://{}/never", sa.addr),
        format!("http://{}/never", sb.addr),
    );
    let cfg = format!(
        "[ingest]\ndefault_route = true\n[dispatch]\nmax_pending_events = 100\n\n\
         [[triggers]]\nid = \"a\"\nprovider = \"pa\"\npath = \"/hooks/a\"\nhandler = \"{ua}\"\n\n\
         [[triggers]]\nid = \"b\"\nprovider = \"pb\"\npath = \"/hooks/b\"\nhandler = \"{ub}\"\n\n\
         [[destinations]]\nuri = \"{ua}\"\ntimeout = \"120s\"\n\n\
         [[destinations]]\nuri = \"{ub}\"\ntimeout = \"120s\"\n"
    );
    let server = Server::start(big_buckets(Opts::config(&cfg)));
    // a: its share (25) and the pool (50).
    assert_eq!(post_n(&server, "/hooks/a", 200), (75, 125));
    assert_eq!(
        server.get("/readyz").status,
        200,
        "one trigger of two is not the node"
    );
    // b fills its share: both triggers full, the pool full: saturated.
    assert_eq!(post_n(&server, "/hooks/b", 100), (25, 75));
    let r = server.get("/readyz");
    assert_eq!((r.status, r.text().trim()), (503, "saturated"));
}

#[test]
fn a_case_variant_of_a_verified_trigger_never_gets_in_unsigned() {
    let cfg = "[ingest]\ndefault_route = true\n\n\
               [[triggers]]\nid = \"gh\"\nprovider = \"github\"\npath = \"/webhooks/github\"\n\
               verify = \"github\"\nsecrets = [{ env = \"GH_SECRET\" }]\n";
    let server = Server::start(big_buckets(Opts::config(cfg).env("GH_SECRET", "s")));
    for path in ["/webhooks/github", "/webhooks/GitHub", "/webhooks/GITHUB"] {
        let r = server.post(path, b"{}");
        assert_eq!(r.status, 401, "{path}: {}", r.text());
        assert_eq!(r.json()["reason"], "missing_signature", "{path}");
    }
    // Other sources are the default route's.
    let r = server.post("/webhooks/stripe", b"{}");
    assert_eq!(r.status, 202, "{}", r.text());
    // Without default_route = true only the exact trigger path is served.
    let cfg = cfg.replace("default_route = true", "");
    let server = Server::start(big_buckets(Opts::config(&cfg).env("GH_SECRET", "s")));
    assert_eq!(server.post("/webhooks/GitHub", b"{}").status, 404);
    assert_eq!(server.post("/webhooks/stripe", b"{}").status, 404);
    assert_eq!(server.post("/webhooks/github", b"{}").status, 401);
}
