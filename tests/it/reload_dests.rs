//! Hot reload of the set of destinations (issue 14): triggers whose handler is a new URI added
//! live, triggers removed with their destination while it still holds their events, and a
//! destination kept across a reload keeping its state. Through the real binary (2 cores), with
//! real downstream listeners.

use std::collections::HashSet;
use std::time::Duration;

use crate::downstream::{Behavior, Downstream};
use crate::reload::{
    admin_reload, delivered_ids, manifest_path, metric, sighup,
    sighup_with_invalid_toml_keeps_generation, start, wait_generation, TOKEN,
};
use crate::support::*;

/// Trigger `id` (provider `id`, path `/hooks/{id}`) to `uri`, and that destination's
/// `max_in_flight`.
fn trigger(id: &str, uri: &str, max: usize) -> String {
    format!(
        "[[triggers]]\nid = \"{id}\"\nprovider = \"{id}\"\npath = \"/hooks/{id}\"\nhandler = \"{uri}\"\n\n\
         [[destinations]]\nuri = \"{uri}\"\nmax_in_flight = {max}\ntimeout = \"60s\"\n\n"
    )
}

/// The `/metrics` lines of `family` that name destination `uri`.
fn series_of(server: &Server, family: &str, uri: &str) -> Vec<String> {
    let (text, _) = scrape(server);
    text.lines()
        .filter(|l| l.starts_with(family) && l.contains(&format!("destination=\"{uri}\"")))
        .map(str::to_string)
        .collect()
}

/// Events accepted on fresh connections (so both cores take some).
fn post_many(server: &Server, path: &str, n: usize) -> HashSet<String> {
    (0..n)
        .map(|i| accepted(&server.post(path, format!("{{\"n\":{i}}}").as_bytes())).0)
        .collect()
}

/// Issue 14 acceptance, with the added trigger on a new destination: SIGHUP adds trigger `n`
/// whose handler is a second downstream, and raises `t`'s destination from 5 to 10 while it
/// holds 5 calls. The held calls are kept (each event delivered once, on its first attempt), the
/// downstream then sees 10 at once; `n` answers 202 on every core and its events reach the new
/// downstream, counted in its own series. An invalid manifest afterwards keeps generation 2
/// serving and counts `result="error"`.
#[test]
fn sighup_adds_a_trigger_with_a_new_destination() {
    let old = Downstream::start(Behavior::default());
    let new = Downstream::start(Behavior::default());
    old.hold(true);
    let (old_uri, new_uri) = (old.uri("/old"), new.uri("/new"));
    let server = start(&trigger("t", &old_uri, 5));
    let mut ids = post_many(&server, "/hooks/t", 20);
    assert!(wait_until(Duration::from_secs(10), || old.in_flight() == 5));
    assert_eq!(server.post("/hooks/n", b"{}").status, 404);

    let next = format!(
        "{}{}",
        trigger("t", &old_uri, 10),
        trigger("n", &new_uri, 3)
    );
    std::fs::write(manifest_path(&server), next).unwrap();
    sighup(&server);
    wait_generation(&server, 2.0);
    assert!(
        wait_until(Duration::from_secs(10), || old.in_flight() == 10),
        "the kept destination's raised limit: {} in flight",
        old.in_flight()
    );
    let new_ids = post_many(&server, "/hooks/n", 20);
    assert!(
        wait_until(Duration::from_secs(20), || delivered_ids(&new).len() >= 20),
        "only {} of 20 reached the new destination; stderr:\n{}",
        delivered_ids(&new).len(),
        server.stderr()
    );
    assert_eq!(
        delivered_ids(&new).into_iter().collect::<HashSet<_>>(),
        new_ids
    );
    assert!(
        new.peak_concurrency() <= 3,
        "the new destination's own limit"
    );
    let attempts = &[("destination", new_uri.as_str()), ("outcome", "delivered")];
    assert!(wait_until(Duration::from_secs(5), || metric(
        &server,
        "sluice_dispatch_attempts_total",
        attempts
    ) == 20.0));
    assert_eq!(
        metric(&server, "sluice_destinations", &[("state", "active")]),
        2.0
    );

    sighup_with_invalid_toml_keeps_generation(&server, 2.0);
    let late = accepted(&server.post("/hooks/n", b"{\"late\":1}")).0;
    assert!(new.wait(Duration::from_secs(10), |s| s
        .iter()
        .any(|x| x.webhook_id == late)));

    ids.extend(post_many(&server, "/hooks/t", 2));
    old.hold(false);
    assert!(wait_until(Duration::from_secs(20), || delivered_ids(&old)
        .len()
        >= ids.len()));
    let delivered = delivered_ids(&old);
    assert_eq!(delivered.iter().cloned().collect::<HashSet<_>>(), ids);
    assert_eq!(delivered.len(), ids.len(), "each event delivered once");
    assert!(
        old.seen().iter().all(|s| s.attempt == 1),
        "a call held across the reload was retried"
    );
    assert_eq!(old.peak_concurrency(), 10);
    assert!(server.is_running());
}

/// A reload removes trigger `u` and with it its destination, which holds 2 of `u`'s calls and
/// queues 4 more: `u` answers 404 from then on, its destination's series stop being exported
/// (`sluice_destinations{state="removed"}` counts it), and once the downstream answers, every
/// event `u` accepted is delivered there, once, on its first attempt; nothing stays pending. A
/// later reload naming the URI again finds its counters.
#[test]
fn removing_a_trigger_finishes_its_accepted_events() {
    let keep = Downstream::start(Behavior::default());
    let gone = Downstream::start(Behavior::default());
    gone.hold(true);
    let (keep_uri, gone_uri) = (keep.uri("/keep"), gone.uri("/gone"));
    let both = format!(
        "{}{}",
        trigger("t", &keep_uri, 5),
        trigger("u", &gone_uri, 2)
    );
    let server = start(&both);
    let u_ids = post_many(&server, "/hooks/u", 6);
    assert!(wait_until(Duration::from_secs(10), || gone.in_flight() == 2));
    let family = "sluice_dispatch_attempts_total";
    assert_eq!(
        series_of(&server, family, &gone_uri).len(),
        4,
        "exported at start"
    );

    std::fs::write(manifest_path(&server), trigger("t", &keep_uri, 5)).unwrap();
    sighup(&server);
    wait_generation(&server, 2.0);
    assert_eq!(server.post("/hooks/u", b"{}").status, 404);
    let t_ids = post_many(&server, "/hooks/t", 3);
    assert!(wait_until(Duration::from_secs(10), || delivered_ids(&keep)
        .len()
        == 3));
    assert_eq!(
        delivered_ids(&keep).into_iter().collect::<HashSet<_>>(),
        t_ids
    );
    assert_eq!(series_of(&server, family, &gone_uri), Vec::<String>::new());
    assert!(series_of(&server, "sluice_destination_in_flight", &gone_uri).is_empty());
    assert_eq!(
        metric(&server, "sluice_destinations", &[("state", "removed")]),
        1.0
    );
    assert_eq!(
        gone.in_flight(),
        2,
        "the removed destination's calls run on"
    );

    gone.hold(false);
    assert!(
        wait_until(Duration::from_secs(20), || delivered_ids(&gone).len() >= 6),
        "only {} of u's 6 events delivered after its removal; stderr:\n{}",
        delivered_ids(&gone).len(),
        server.stderr()
    );
    let delivered = delivered_ids(&gone);
    assert_eq!(delivered.iter().cloned().collect::<HashSet<_>>(), u_ids);
    assert_eq!(delivered.len(), 6, "each once");
    assert!(gone.seen().iter().all(|s| s.attempt == 1));
    assert!(wait_until(Duration::from_secs(10), || metric(
        &server,
        "sluice_wal_pending_events",
        &[]
    ) == 0.0));

    // Named again: the same destination id, its counts kept (6 delivered before).
    std::fs::write(manifest_path(&server), &both).unwrap();
    let r = admin_reload(&server, Some(TOKEN));
    assert_eq!(r.status, 200, "{}", r.text());
    let again = accepted(&server.post("/hooks/u", b"{\"again\":1}")).0;
    assert!(gone.wait(Duration::from_secs(10), |s| s
        .iter()
        .any(|x| x.webhook_id == again)));
    let delivered = &[("destination", gone_uri.as_str()), ("outcome", "delivered")];
    assert!(wait_until(Duration::from_secs(5), || metric(
        &server, family, delivered
    ) == 7.0));
    assert_eq!(
        metric(&server, "sluice_destinations", &[("state", "removed")]),
        0.0
    );
}

/// `t` with `max_pending = { events = E }` in a backlog of 10 events (`[dispatch]`), to `uri`
/// with 10 calls at a time.
fn shared_backlog(uri: &str, events: u64) -> String {
    format!(
        "[dispatch]\nmax_pending_events = 10\n\n\
         [[triggers]]\nid = \"t\"\nprovider = \"t\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n\
         max_pending = {{ events = {events} }}\n\n\
         [[destinations]]\nuri = \"{uri}\"\nmax_in_flight = 10\ntimeout = \"60s\"\n"
    )
}

/// Statuses of `n` posts to `t` on fresh connections, and the ids of those accepted.
fn post_counting(server: &Server, n: usize) -> (Vec<u16>, HashSet<String>) {
    let mut ids = HashSet::new();
    let statuses = (0..n)
        .map(|i| {
            let r = server.post("/hooks/t", format!("{{\"n\":{i}}}").as_bytes());
            if r.status == 202 {
                ids.insert(accepted(&r).0);
            }
            r.status
        })
        .collect();
    (statuses, ids)
}

/// A trigger's `max_pending` changed by SIGHUP. With 10 events of backlog, `t`'s share of 8
/// plus the pool of 2 hold 10 events a stalled downstream has not answered. The reload cuts the
/// share to 2 (the default route's share becomes 3, the pool 5) while the 10 are pending: none
/// is dropped (all 10 delivered once), new events of `t` are refused `queue_full` until they
/// drain; afterwards `t` holds its share of 2 plus the pool of 5, 7 in all.
#[test]
fn max_pending_shrinks_live_without_dropping_pending_events() {
    let ds = Downstream::start(Behavior::default());
    ds.hold(true);
    let uri = ds.uri("/sink");
    let server = start(&shared_backlog(&uri, 8));
    let (statuses, mut ids) = post_counting(&server, 11);
    assert_eq!(
        statuses.iter().filter(|&&s| s == 202).count(),
        10,
        "{statuses:?}"
    );
    assert_eq!(statuses[10], 503, "share 8 + pool 2 hold 10");

    std::fs::write(manifest_path(&server), shared_backlog(&uri, 2)).unwrap();
    sighup(&server);
    wait_generation(&server, 2.0);
    let (statuses, _) = post_counting(&server, 3);
    assert_eq!(
        statuses, [503; 3],
        "the shrunk share waits for the pending events"
    );

    ds.hold(false);
    assert!(wait_until(Duration::from_secs(20), || delivered_ids(&ds)
        .len()
        >= 10));
    assert!(wait_until(Duration::from_secs(10), || metric(
        &server,
        "sluice_wal_pending_events",
        &[]
    ) == 0.0));
    let delivered = delivered_ids(&ds);
    assert_eq!(delivered.iter().cloned().collect::<HashSet<_>>(), ids);
    assert_eq!(delivered.len(), 10, "each pending event delivered once");

    ds.hold(true);
    let (statuses, more) = post_counting(&server, 11);
    assert_eq!(
        statuses.iter().filter(|&&s| s == 202).count(),
        10,
        "share 2 + pool 8 (the default route holds no share): {statuses:?}"
    );
    assert_eq!(statuses[10], 503, "{statuses:?}");
    ids.extend(more);
    ds.hold(false);
    assert!(wait_until(Duration::from_secs(20), || delivered_ids(&ds)
        .len()
        >= 20));
    assert_eq!(delivered_ids(&ds).into_iter().collect::<HashSet<_>>(), ids);
}

/// What a restart does with a removed trigger's events not yet delivered (documented in the
/// README's "Hot reload"): the manifest no longer says where they go, so recovery records them
/// `no_handler` — never silently: stderr names the trigger once, `sluice wal inspect` lists each
/// — and nothing stays pending.
#[test]
fn a_restart_reports_a_removed_triggers_undelivered_events() {
    let keep = Downstream::start(Behavior::default());
    let gone = Downstream::start(Behavior::default());
    gone.hold(true);
    let (keep_uri, gone_uri) = (keep.uri("/keep"), gone.uri("/gone"));
    let mut server = start(&format!(
        "{}{}",
        trigger("t", &keep_uri, 5),
        trigger("u", &gone_uri, 2)
    ));
    let u_ids = post_many(&server, "/hooks/u", 3);
    assert!(wait_until(Duration::from_secs(10), || gone.in_flight() == 2));
    let only_t = trigger("t", &keep_uri, 5);
    std::fs::write(manifest_path(&server), &only_t).unwrap();
    sighup(&server);
    wait_generation(&server, 2.0);
    server.sigkill();

    let opts = crate::dispatch::big_buckets(Opts::config(&only_t)).env("SLUICE_ADMIN_TOKEN", TOKEN);
    let next = Server::start_in(server.root(), opts).unwrap_or_else(|f| panic!("{}", f.stderr));
    assert!(wait_until(Duration::from_secs(10), || metric(
        &next,
        "sluice_wal_pending_events",
        &[]
    ) == 0.0));
    assert!(
        next.stderr().contains("events of trigger \"u\""),
        "{}",
        next.stderr()
    );
    let events = wal_inspect(&next.data_dir());
    let u: Vec<_> = events.iter().filter(|e| e.trigger_id == "u").collect();
    assert_eq!(
        u.iter().map(|e| e.event_id.clone()).collect::<HashSet<_>>(),
        u_ids
    );
    assert!(u.iter().all(|e| e.outcome == "no_handler"), "{u:?}");
}

/// The per-run bound on destination ids: the start-up destination plus 64 a run's reloads may
/// add (removed ones count: they keep their id). Each admin reload moves `t` to a new handler
/// URI; the 65th new one is refused `409 needs_restart` naming the URI, counted as an error,
/// and the running generation keeps serving. A URI the run already knows is still accepted.
#[test]
fn reloads_past_the_destination_bound_are_refused_by_uri() {
    let ds = Downstream::start(Behavior::default());
    let path = |i: usize| ds.uri(&format!("/n{i}"));
    let server = start(&trigger("t", &path(0), 5));
    for i in 1..=64 {
        std::fs::write(manifest_path(&server), trigger("t", &path(i), 5)).unwrap();
        let r = admin_reload(&server, Some(TOKEN));
        assert_eq!(r.status, 200, "reload {i}: {}", r.text());
    }
    let count = |state| metric(&server, "sluice_destinations", &[("state", state)]);
    assert_eq!((count("active"), count("removed")), (1.0, 64.0));
    std::fs::write(manifest_path(&server), trigger("t", &path(65), 5)).unwrap();
    let r = admin_reload(&server, Some(TOKEN));
    assert_eq!(r.status, 409, "{}", r.text());
    let v = r.json();
    assert_eq!(v["reason"], "needs_restart");
    let detail = v["detail"].as_str().unwrap();
    assert!(
        detail.contains(&path(65)) && detail.contains("restart"),
        "{detail}"
    );
    assert_eq!(v["generation"], 65);
    assert_eq!(
        metric(
            &server,
            "sluice_config_reloads_total",
            &[("result", "error")]
        ),
        1.0
    );
    // Still serving generation 65 (to /n64); a known URI is fine at the bound.
    let id = accepted(&server.post("/hooks/t", b"{}")).0;
    assert!(ds.wait(Duration::from_secs(10), |s| s
        .iter()
        .any(|x| x.webhook_id == id)));
    std::fs::write(manifest_path(&server), trigger("t", &path(3), 5)).unwrap();
    assert_eq!(admin_reload(&server, Some(TOKEN)).status, 200);
}

/// A reload refused after its new destination was laid out leaves no trace. The refused one
/// adds trigger `n` (a backlog share of its own, which only a restart can give) on a new URI
/// `x`; the next, accepted, adds `m` on another new URI `y`, which takes the same destination
/// id. `y`'s calls are counted under `y`, nothing is exported for `x`, and nothing counts as
/// removed. (The refusal used to come after `x` had named the id's metric cell, for the run.)
#[test]
fn a_refused_reload_leaves_no_destination_named() {
    let keep = Downstream::start(Behavior::default());
    let x = Downstream::start(Behavior::default());
    let y = Downstream::start(Behavior::default());
    let (keep_uri, x_uri, y_uri) = (keep.uri("/keep"), x.uri("/x"), y.uri("/y"));
    let server = start(&trigger("t", &keep_uri, 5));
    let shared =
        trigger("n", &x_uri, 5).replace("handler = ", "max_pending = { events = 10 }\nhandler = ");
    std::fs::write(
        manifest_path(&server),
        format!("{}{shared}", trigger("t", &keep_uri, 5)),
    )
    .unwrap();
    let r = admin_reload(&server, Some(TOKEN));
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("max_pending"), "{}", r.text());

    let next = format!("{}{}", trigger("t", &keep_uri, 5), trigger("m", &y_uri, 3));
    std::fs::write(manifest_path(&server), next).unwrap();
    let r = admin_reload(&server, Some(TOKEN));
    assert_eq!(r.status, 200, "{}", r.text());
    let ids = post_many(&server, "/hooks/m", 4);
    assert!(wait_until(Duration::from_secs(10), || delivered_ids(&y)
        .len()
        >= 4));
    assert_eq!(delivered_ids(&y).into_iter().collect::<HashSet<_>>(), ids);
    let family = "sluice_dispatch_attempts_total";
    let delivered = &[("destination", y_uri.as_str()), ("outcome", "delivered")];
    assert!(wait_until(Duration::from_secs(5), || metric(
        &server, family, delivered
    ) == 4.0));
    assert!(series_of(&server, family, &x_uri).is_empty());
    assert_eq!(
        metric(
            &server,
            "sluice_destination_permits",
            &[("destination", &y_uri)]
        ),
        3.0
    );
    assert_eq!(
        metric(&server, "sluice_destinations", &[("state", "removed")]),
        0.0
    );
    assert!(x.seen().is_empty());
}
