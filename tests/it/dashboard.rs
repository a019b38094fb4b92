//! The dashboard tells the truth at a glance, in a real headless Chromium at 1280 × 900: a
//! trigger refused `queue_full` is red while the node's backlog has room, each trigger shows its
//! share and what it borrowed from the pool, the pump's per-trigger cap is labelled, a trigger
//! (and its destination) removed by a hot reload stays on the page until its events are done,
//! one added by a reload says it is counted with the default route, and nothing scrolls
//! sideways. The screenshots the README shows come from here
//! (`SLUICE_SCREENSHOTS=docs cargo test --test it dashboard_in_chromium`; without it they go
//! to the target's temporary directory).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::browser::Browser;
use crate::downstream::{Behavior, Downstream};
use crate::reload::{admin_reload, manifest_path, TOKEN};
use crate::support::*;

/// `--bad` in `src/ops/dashboard/ui.html`, as `getComputedStyle` reports it.
const RED: &str = "rgb(197, 48, 48)";

/// Everything the assertions read from the rendered DOM (texts, states, computed colours, layout).
const READ_TRUTH: &str = r#"
const q = (root, id) => root.querySelector('[data-testid="' + id + '"]');
const t = (id) => { const e = q(document, id); return e ? e.textContent : null; };
const bg = (e) => e ? getComputedStyle(e).backgroundColor : null;
const triggers = {};
for (const tr of document.querySelectorAll('tr[data-testid="trigger"]')) {
  const c = (id) => q(tr, id).textContent;
  triggers[tr.dataset.id] = { state: tr.dataset.state, removed: tr.dataset.removed,
    pending: c("trigger-pending"), share: c("trigger-share"), borrowed: c("trigger-borrowed"),
    dispatching: c("trigger-dispatching"), refused: c("trigger-refused"),
    share_colour: bg((q(tr, "trigger-share").querySelector(".bar") || {}).firstElementChild),
    state_colour: bg(q(tr, "trigger-state").querySelector(".tag")) };
}
const dests = {};
for (const tr of document.querySelectorAll('tr[data-testid="destination"]')) {
  dests[tr.dataset.uri] = { removed: tr.dataset.removed, in_flight: q(tr, "dest-in-flight").textContent,
    queued: q(tr, "dest-queued").textContent };
}
return { backlog: t("backlog"), bound: t("backlog-bound"), pool: t("backlog-pool"),
         pool_bound: t("backlog-pool-bound"), refusing: t("refusing-triggers"), pump_cap: t("pump-cap"),
         backlog_bar_colour: bg(q(document, "backlog-bar").firstElementChild),
         backlog_hop_colour: getComputedStyle(q(document, "hop-backlog")).borderTopColor,
         dests_hop_colour: getComputedStyle(q(document, "hop-destinations")).borderTopColor,
         dests_worst: t("dests-worst"),
         pump_hop_colour: getComputedStyle(q(document, "hop-pump")).borderTopColor,
         triggers, dests, status: t("status") };
"#;

/// The page's width, what it would scroll to, and the width of each destination's URI cell.
const READ_LAYOUT: &str = r#"
const root = document.documentElement;
const uris = [...document.querySelectorAll('[data-testid="dest-uri"]')]
  .map((td) => ({ uri: td.textContent, width: td.getBoundingClientRect().width }));
return { scroll_width: root.scrollWidth, client_width: root.clientWidth, inner_width: window.innerWidth, uris };
"#;

/// Three triggers with explicit shares of a 200-event backlog (20 + 80 + 20, the pool 80; the
/// default route off, so no share is reserved for it): `stalled` and `old` to downstreams that
/// hold every call, `ok` to one that answers. Without `old` (and its destination) when
/// `with_old` is false: the reload that removes it, and adds `late` (to `ok`), which has no share
/// of its own until a restart: it is counted in the default route's slot, whose share is 0.
fn manifest(stalled: &str, ok: &str, old: &str, with_old: bool) -> String {
    let trigger = |id: &str, handler: &str, share: Option<u64>| {
        let share = share.map_or(String::new(), |n| {
            format!("max_pending = {{ events = {n} }}\n")
        });
        format!(
            "[[triggers]]\nid = \"{id}\"\nprovider = \"{id}\"\npath = \"/hooks/{id}\"\n\
             handler = \"{handler}\"\n{share}\n"
        )
    };
    let dest = |uri: &str, max: u32| {
        format!("[[destinations]]\nuri = \"{uri}\"\nmax_in_flight = {max}\ntimeout = \"60s\"\n\n")
    };
    let mut m =
        String::from("[ingest]\ndefault_route = false\n\n[dispatch]\nmax_pending_events = 200\n\n");
    m += &trigger("stalled", stalled, Some(20));
    m += &trigger("ok", ok, Some(80));
    m += &dest(stalled, 6);
    m += &dest(ok, 4);
    if with_old {
        m += &trigger("old", old, Some(20));
        m += &dest(old, 6);
    } else {
        m += &trigger("late", ok, None);
    }
    m
}

fn wait_truth(browser: &Browser, what: &str, mut ok: impl FnMut(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let v = browser.eval(READ_TRUTH);
        if ok(&v) {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "dashboard never showed {what}; last: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Writes the screenshot `name`.png (a PNG `width` pixels wide) to `SLUICE_SCREENSHOTS` or the
/// target's temporary directory.
pub(crate) fn save_screenshot(browser: &Browser, name: &str, width: u32) {
    let png = browser.screenshot();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
    assert_eq!(w, width, "the screenshot is {w} px wide");
    let dir = std::env::var_os("SLUICE_SCREENSHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// The page at 1280 px scrolls nowhere sideways and gives every URI room (no wrapping a few
/// characters per line).
pub(crate) fn assert_fits_1280(browser: &Browser) {
    let v = browser.eval(READ_LAYOUT);
    assert_eq!(v["inner_width"], 1280, "{v}");
    assert!(
        v["scroll_width"].as_u64() <= v["client_width"].as_u64(),
        "horizontal scroll at 1280 px: {v}"
    );
    let uris = v["uris"].as_array().unwrap();
    assert!(!uris.is_empty(), "{v}");
    for u in uris {
        assert!(u["width"].as_f64().unwrap() >= 200.0, "a squeezed URI: {v}");
    }
}

/// Sends `stalled` events until the first refusal: its share (20) plus the whole pool (80).
fn fill_stalled(server: &Server) -> usize {
    let mut c = server.client();
    for n in 0..300 {
        let r = c.post("/hooks/stalled", format!("{{\"n\":{n}}}").as_bytes(), &[]);
        if r.status == 503 {
            assert_eq!(r.json()["reason"], "queue_full", "{}", r.text());
            assert!(r.header("retry-after").is_some(), "{:?}", r.headers);
            return n;
        }
        accepted(&r);
    }
    panic!("stalled was never refused");
}

/// Issue 29 acceptance (the dashboard): see the module docs. `old` holds 10 events (6 calls in
/// flight, 4 queued) when a reload removes it (and adds `late`); `stalled` fills its share and
/// the pool and is refused `queue_full` while the backlog is at 110 of 200, and so is `late`
/// (the default route's slot); `ok` keeps delivering. Then `old`'s events finish and its rows go.
#[test]
fn dashboard_in_chromium_tells_the_truth_about_a_refused_trigger() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let long = "/deliveries/stalled-destination/with/a/long/path/that/must/not/wrap/per/letter";
    let (a, b, c) = (
        Downstream::start(Behavior::default()),
        Downstream::start(Behavior::default()),
        Downstream::start(Behavior::default()),
    );
    a.hold(true);
    c.hold(true);
    let (ua, ub, uc) = (a.uri(long), b.uri("/ok"), c.uri("/old"));
    let server = crate::reload::start(&manifest(&ua, &ub, &uc, true));
    browser.viewport(1280, 900);
    browser.goto(&format!("http://{}/ui", server.addr()));

    let mut client = server.client();
    for n in 0..10 {
        accepted(&client.post("/hooks/old", format!("{{\"n\":{n}}}").as_bytes(), &[]));
    }
    assert!(wait_until(Duration::from_secs(10), || c.in_flight() == 6));
    std::fs::write(manifest_path(&server), manifest(&ua, &ub, &uc, false)).unwrap();
    let r = admin_reload(&server, Some(TOKEN));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(fill_stalled(&server), 100, "share 20 + pool 80");
    for _ in 0..5 {
        assert_eq!(client.post("/hooks/stalled", b"{}", &[]).status, 503);
    }
    for n in 0..5 {
        accepted(&client.post("/hooks/ok", format!("{{\"n\":{n}}}").as_bytes(), &[]));
    }
    let r = client.post("/hooks/late", b"{}", &[]);
    assert_eq!(
        (r.status, r.json()["reason"].clone()),
        (503, "queue_full".into()),
        "{}",
        r.text()
    );
    assert!(wait_until(Duration::from_secs(10), || b.count() == 5));

    let v = wait_truth(&browser, "stalled refusing, old removed but visible", |v| {
        let s = &v["triggers"]["stalled"];
        // A snapshot after the last refusal, with the pumps settled.
        s["refused"] == "queue_full 6"
            && s["dispatching"] == "48 / cap 48"
            && v["pump_cap"]
                .as_str()
                .is_some_and(|c| c.contains("52 events parked"))
            && v["triggers"]["old"]["pending"] == "10"
            && v["triggers"]["ok"]["pending"] == "0"
            && v["triggers"]["late"]["refused"] == "queue_full 1"
            && v["dests"][ua.as_str()]["queued"] == "42"
            && v["dests"][uc.as_str()]["queued"] == "4"
    });
    assert_refusing_truth(&v, &ua, &uc);
    assert_fits_1280(&browser);
    save_screenshot(&browser, "dashboard-refused-trigger", 1280);

    // The removed trigger's events finish: its row and its destination's go.
    c.hold(false);
    let v = wait_truth(&browser, "the removed trigger done", |v| {
        v["triggers"].get("old").is_none() && v["backlog"] == "100"
    });
    assert!(v["dests"].get(uc.as_str()).is_none(), "{v}");
    assert_eq!(c.count(), 10);
    assert_eq!(v["triggers"]["stalled"]["state"], "refusing", "{v}");
    a.hold(false);
}

/// What the page shows with `stalled` at its limit and `old` removed but not done.
fn assert_refusing_truth(v: &Value, stalled_uri: &str, old_uri: &str) {
    let s = &v["triggers"]["stalled"];
    // Red at a glance, though the node's backlog is at 55 %.
    assert_eq!(
        (&v["backlog"], &v["bound"]),
        (&"110".into(), &"200".into()),
        "{v}"
    );
    assert_eq!(s["state"], "refusing", "{v}");
    assert_eq!(s["state_colour"], RED, "{v}");
    assert_eq!(
        s["share_colour"], RED,
        "a refusing trigger's full share is red: {v}"
    );
    assert_eq!(v["backlog_bar_colour"], RED, "{v}");
    assert_eq!(v["backlog_hop_colour"], RED, "{v}");
    assert!(v["refusing"].as_str().unwrap().contains("stalled"), "{v}");
    // Its share and what it borrowed from the pool.
    assert_eq!(s["pending"], "100", "{v}");
    assert_eq!(s["share"], "20 / 20", "{v}");
    assert!(
        s["borrowed"]
            .as_str()
            .unwrap()
            .starts_with("80pool in use 80 / 80"),
        "{v}"
    );
    assert_eq!(
        (&v["pool"], &v["pool_bound"]),
        (&"80".into(), &"80".into()),
        "{v}"
    );
    assert!(
        s["refused"].as_str().unwrap().starts_with("queue_full 6"),
        "{v}"
    );
    // The pump's cap, labelled and explained.
    let cap = v["pump_cap"].as_str().unwrap();
    assert!(cap.starts_with("per-trigger cap 48 of 64"), "{cap}");
    assert!(cap.contains("16 stay for the others"), "{cap}");
    assert!(cap.contains("52 events parked"), "{cap}");
    // The other trigger keeps its share and is not red.
    let ok = &v["triggers"]["ok"];
    assert_eq!(
        (&ok["state"], &ok["share"]),
        (&"ok".into(), &"0 / 80".into()),
        "{v}"
    );
    assert_ne!(ok["state_colour"], RED, "{v}");
    // The trigger the reload added: the default route's slot (share 0, the pool full) refuses it.
    let late = &v["triggers"]["late"];
    assert_eq!(
        (&late["state"], &late["state_colour"]),
        (&"refusing".into(), &RED.into()),
        "{v}"
    );
    assert!(
        late["share"]
            .as_str()
            .unwrap()
            .starts_with("the default route's"),
        "{v}"
    );
    // The removed trigger and its destination: still there, with their events and calls.
    let old = &v["triggers"]["old"];
    assert_eq!(old["removed"], "true", "{v}");
    assert_eq!(old["dispatching"], "10 / cap 48", "{v}");
    let d = &v["dests"][old_uri];
    assert_eq!(
        (&d["removed"], &d["in_flight"], &d["queued"]),
        (&"true".into(), &"6 / 6".into(), &"4".into()),
        "{v}"
    );
    let d = &v["dests"][stalled_uri];
    assert_eq!(
        (&d["in_flight"], &d["queued"]),
        (&"6 / 6".into(), &"42".into()),
        "{v}"
    );
    // Two destinations stuck at their permits beside an idle one: the DESTINATIONS hop is red
    // and names them, though the permits summed over all are 12 of 16.
    assert_eq!(v["dests_hop_colour"], RED, "{v}");
    let worst = v["dests_worst"].as_str().unwrap();
    assert!(
        worst.contains(&format!(
            "{stalled_uri} — stalled: 6 / 6 in flight, 42 queued"
        )),
        "{worst}"
    );
    assert!(worst.contains(old_uri), "{worst}");
}

/// `--ok` and `--warn` in `src/ops/dashboard/ui.html`, as `getComputedStyle` reports them.
const GREEN: &str = "rgb(47, 133, 90)";
const AMBER: &str = "rgb(183, 121, 31)";

/// A trigger at the pump's per-trigger cap with the backlog nearly empty: the cap is the PUMP
/// hop's matter (amber), and the BACKLOG hop stays green.
#[test]
fn dashboard_in_chromium_puts_a_capped_trigger_on_the_pump_not_the_backlog() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let (a, b) = (
        Downstream::start(Behavior::default()),
        Downstream::start(Behavior::default()),
    );
    a.hold(true);
    let (ua, ub) = (a.uri("/held"), b.uri("/ok"));
    let trigger = |id: &str, handler: &str| {
        format!(
            "[[triggers]]\nid = \"{id}\"\nprovider = \"{id}\"\npath = \"/hooks/{id}\"\n\
             handler = \"{handler}\"\nmax_pending = {{ events = 1000 }}\n\n"
        )
    };
    let m = format!(
        "[ingest]\ndefault_route = false\n\n[dispatch]\nmax_pending_events = 4000\n\n{}{}\
         [[destinations]]\nuri = \"{ua}\"\nmax_in_flight = 6\ntimeout = \"60s\"\n\n",
        trigger("stalled", &ua),
        trigger("ok", &ub)
    );
    let server = crate::reload::start(&m);
    browser.viewport(1280, 900);
    browser.goto(&format!("http://{}/ui", server.addr()));
    let mut client = server.client();
    for n in 0..60 {
        accepted(&client.post("/hooks/stalled", format!("{{\"n\":{n}}}").as_bytes(), &[]));
    }
    let v = wait_truth(&browser, "stalled at its cap", |v| {
        v["triggers"]["stalled"]["state"] == "capped" && v["backlog"] == "60"
    });
    assert_eq!(
        v["backlog_hop_colour"], GREEN,
        "60 of 4000, nobody borrowing: {v}"
    );
    assert_eq!(v["pump_hop_colour"], AMBER, "a trigger at its cap: {v}");
    a.hold(false);
}

/// The server printable-escapes a response prefix (`\` as `\\`, other bytes as `\xNN`); the
/// page shows it as given, quoted, not escaped a second time.
#[test]
fn dashboard_in_chromium_shows_a_response_prefix_escaped_once() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let ds = Downstream::start(Behavior::default());
    let (ua, ub, uc) = (ds.uri("/a"), ds.uri("/b"), ds.uri("/c"));
    let server = crate::reload::start(&manifest(&ua, &ub, &uc, true));
    browser.viewport(1280, 900);
    browser.goto(&format!("http://{}/ui", server.addr()));
    let shown = browser.eval(
        r#"return attemptText({status: 502, latency_ms: 7, response_prefix: "a\\\\b\\x00\"c"});"#,
    );
    assert_eq!(shown, r#"502 (7 ms) "a\\b\x00"c""#, "{shown}");
}
