//! Senders that never retry (issue 11, item 10): a `verify = "github"` trigger absorbs past
//! `max_pending_events` (GitHub does not redeliver a refused delivery) while a generic trigger
//! on the same server is refused `queue_full`; absorbed events are counted per trigger, stored
//! in the WAL, and bounded by `dispatch.absorb_max_bytes`.

use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::downstream::{Behavior, Downstream};
use crate::support::*;

const SECRET: &str = "absorb-secret";

fn github_signature(body: &[u8]) -> String {
    let mut m = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    m.update(body);
    let mac = m.finalize().into_bytes();
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// A GitHub-verified trigger `gh` and a generic trigger `plain`, both delivering to a handler
/// that does not answer within the test, with `max_pending_events = 10` in one shared pool
/// (`reserved_fraction = 0`: no guaranteed shares, so the generic trigger has no room of its
/// own; the shares' interplay with absorbing is unit-tested in `ingest::backlog`).
fn manifest(uri: &str, dispatch_extra: &str) -> String {
    format!(
        "[dispatch]\nmax_pending_events = 10\nreserved_fraction = 0\n{dispatch_extra}\n\
         [[triggers]]\nid = \"gh\"\nprovider = \"github\"\npath = \"/hooks/gh\"\nhandler = \"{uri}\"\n\
         verify = \"github\"\nsecrets = [{{ env = \"GH_SECRET\" }}]\n\n\
         [[triggers]]\nid = \"plain\"\nprovider = \"p\"\npath = \"/hooks/plain\"\nhandler = \"{uri}\"\n\n\
         [[destinations]]\nuri = \"{uri}\"\ntimeout = \"60s\"\n"
    )
}

fn start(uri: &str, dispatch_extra: &str) -> Server {
    Server::start(
        Opts::config(&manifest(uri, dispatch_extra))
            .env("GH_SECRET", SECRET)
            .env(ENV_GLOBAL_CAPACITY, "1000000")
            .env(ENV_PER_SOURCE_CAPACITY, "1000000")
            .env(ENV_REFILL_PER_SEC, "1000000"),
    )
}

fn stalled() -> Downstream {
    Downstream::start(Behavior {
        delay: Duration::from_secs(10),
        ..Behavior::default()
    })
}

fn deliver(c: &mut Client, n: usize) -> Response {
    let body = format!("{{\"action\":\"opened\",\"number\":{n}}}");
    let sig = github_signature(body.as_bytes());
    let delivery = format!("delivery-{n}");
    c.post(
        "/hooks/gh",
        body.as_bytes(),
        &[
            ("X-Hub-Signature-256", &sig),
            ("X-GitHub-Event", "pull_request"),
            ("X-GitHub-Delivery", &delivery),
            ("Content-Type", "application/json"),
        ],
    )
}

fn absorbed(server: &Server, trigger: &str) -> f64 {
    let (_, samples) = scrape(server);
    samples
        .iter()
        .find(|s| s.name == "sluice_ingest_absorbed_total" && s.label("trigger") == Some(trigger))
        .map(|s| s.value)
        .unwrap_or_else(|| panic!("no sluice_ingest_absorbed_total{{trigger={trigger}}}"))
}

#[test]
fn github_trigger_absorbs_50_deliveries_past_the_bound_while_a_generic_one_is_refused() {
    let ds = stalled();
    let uri = ds.uri("/sink");
    let mut server = start(&uri, "");
    let mut c = server.client();
    let mut ids = Vec::new();
    for n in 0..50 {
        let (id, _) = accepted(&deliver(&mut c, n));
        ids.push(id);
    }
    // The backlog is 50 events over a bound of 10: the generic trigger is refused.
    let r = c.post("/hooks/plain", b"{\"x\":1}", &[]);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["reason"], "queue_full", "{}", r.text());
    assert!(r.header("retry-after").is_some());
    assert_eq!(absorbed(&server, "gh"), 40.0, "the first 10 fit the bound");
    // Forged deliveries are still refused (verification comes first).
    let r = c.post("/hooks/gh", b"{}", &[("X-Hub-Signature-256", "sha256=00")]);
    assert_eq!(r.status, 401, "{}", r.text());
    // Every absorbed delivery is in the WAL.
    server.sigkill();
    let events = wal_inspect(&server.data_dir());
    for id in &ids {
        find_event(&events, id);
    }
    assert_eq!(events.len(), 50);
    drop(ds);
}

#[test]
fn absorbing_stops_at_absorb_max_bytes() {
    let ds = stalled();
    let uri = ds.uri("/sink");
    // Each delivery costs a few hundred bytes of WAL: 10 fit the event bound, then a 4 KiB
    // absorb budget holds a handful more.
    let server = start(&uri, "max_wal_bytes = 268435456\nabsorb_max_bytes = 4096");
    let mut c = server.client();
    let mut n = 0;
    let refused = loop {
        let r = deliver(&mut c, n);
        n += 1;
        if r.status != 202 {
            break r;
        }
        assert!(n < 200, "absorbing never stopped");
    };
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["reason"], "queue_full", "{}", refused.text());
    let accepted = n - 1;
    let got = absorbed(&server, "gh") as usize;
    assert_eq!(
        got,
        accepted - 10,
        "everything past the first 10 was absorbed"
    );
    assert!((2..=40).contains(&got), "{got} absorbed within 4 KiB");
    let (_, samples) = scrape(&server);
    let budget = samples
        .iter()
        .find(|s| s.name == "sluice_ingest_absorb_bytes")
        .expect("sluice_ingest_absorb_bytes")
        .value;
    assert!(budget > 0.0 && budget <= 4096.0, "{budget}");
    drop(ds);
}
