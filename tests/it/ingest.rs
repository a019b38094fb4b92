//! The ingest contract: 202 bodies, triggers from the manifest, token buckets and their
//! refusals, `/metrics`, `/healthz` and `/readyz`.

use std::time::{Duration, Instant};

use crate::support::*;

#[test]
fn post_is_accepted_with_event_id_and_default_trigger() {
    let server = Server::start(Opts::default());
    let mut c = server.client();
    let r = c.post(
        "/webhooks/stripe.prod-1",
        br#"{"hello":"world"}"#,
        &[("Content-Type", "application/json")],
    );
    let (id, trigger) = accepted(&r);
    assert_eq!(trigger, "default");
    assert!(
        r.header("date").is_some(),
        "no Date header: {:?}",
        r.headers
    );
    assert!(
        r.header("content-type")
            .is_some_and(|v| v.starts_with("application/json")),
        "202 content-type: {:?}",
        r.headers
    );
    // The query string does not change the route.
    let (id2, _) = accepted(&c.post("/webhooks/stripe.prod-1?delivery=7", b"x", &[]));
    assert_ne!(id, id2);
    // A 64-character source is valid.
    let long = "s".repeat(64);
    accepted(&c.post(&format!("/webhooks/{long}"), b"x", &[]));
}

#[test]
fn healthz_and_readyz() {
    let server = Server::start(Opts::default());
    let mut c = server.client();
    let h = c.get("/healthz");
    assert_eq!(h.status, 200, "{}", h.text());
    let r = c.get("/readyz");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text().trim(), "ready");
}

#[test]
fn manifest_trigger_sets_trigger_id_and_source() {
    let mut server = Server::start(Opts::config(
        "[ingest]\ndefault_route = true\n\n\
         [[triggers]]\nid = \"gh\"\nprovider = \"github\"\npath = \"/hooks/gh\"\n",
    ));
    let body = br#"{"action":"opened"}"#;
    let r = server
        .client()
        .post("/hooks/gh", body, &[("X-GitHub-Event", "push")]);
    let (id, trigger) = accepted(&r);
    assert_eq!(trigger, "gh");
    // The default route, set on, works beside the trigger.
    // The query string is ignored for matching.
    let (_, tq) = accepted(&server.post("/hooks/gh?delivery=1", b"q"));
    assert_eq!(tq, "gh");
    let (id2, t2) = accepted(&server.post("/webhooks/other", b"y"));
    assert_eq!(t2, "default");
    // A trigger path only takes POST.
    let g = server.get("/hooks/gh");
    assert_eq!(g.status, 405, "{}", g.text());
    assert_eq!(g.header("allow"), Some("POST"));
    server.stop();
    let events = wal_inspect(&server.data_dir());
    let e = find_event(&events, &id);
    assert_eq!(e.trigger_id, "gh");
    assert_eq!(e.source, "github");
    assert_eq!(e.body_len, body.len() as u64);
    assert_eq!(e.body_sha256, sha256_hex(body));
    let e2 = find_event(&events, &id2);
    assert_eq!(
        (e2.trigger_id.as_str(), e2.source.as_str()),
        ("default", "other")
    );
}

/// Checks a bucket refusal: 503, `Retry-After: N` with N ≥ 1, the exact JSON body.
fn assert_saturated(r: &Response) {
    assert_eq!(r.status, 503, "expected 503, got {} {}", r.status, r.text());
    let ra = r
        .header("retry-after")
        .unwrap_or_else(|| panic!("503 without Retry-After: {:?}", r.headers));
    let n: u64 = ra
        .parse()
        .unwrap_or_else(|_| panic!("Retry-After {ra:?} is not an integer"));
    assert!(n >= 1, "Retry-After {n} < 1");
    assert!(n <= 2, "Retry-After {n} for a bucket refilling 1 token/s");
    assert_eq!(
        r.text(),
        format!(r#"{{"status":"refused","reason":"ingest_saturated","retry_after":{n}}}"#)
    );
}

#[test]
fn per_source_bucket_refuses_with_retry_after() {
    let server = Server::start(
        Opts::default()
            .env(ENV_PER_SOURCE_CAPACITY, "2")
            .env(ENV_REFILL_PER_SEC, "1")
            .env(ENV_GLOBAL_CAPACITY, "100000"),
    );
    let mut c = server.client();
    let t0 = Instant::now();
    let mut statuses = Vec::new();
    let mut refusal = None;
    // Capacity 2, refill 1/s: the third POST is refused unless the first three took over a
    // second (a very slow machine); then keep going until a refusal (bounded).
    for _ in 0..6 {
        let r = c.post("/webhooks/a", b"{}", &[]);
        statuses.push((r.status, t0.elapsed()));
        if r.status == 503 {
            refusal = Some(r);
            break;
        }
        accepted(&r);
    }
    assert_eq!(statuses[0].0, 202, "{statuses:?}");
    assert_eq!(statuses[1].0, 202, "{statuses:?}");
    if statuses.len() >= 3 && statuses[2].1 < Duration::from_millis(900) {
        assert_eq!(
            statuses[2].0, 503,
            "third quick POST was not refused: {statuses:?}"
        );
    }
    let refusal = refusal.unwrap_or_else(|| panic!("never refused: {statuses:?}"));
    assert_saturated(&refusal);
    // The refusal keeps the connection usable and another source has its own bucket.
    let (_, t) = accepted(&c.post("/webhooks/b", b"{}", &[]));
    assert_eq!(t, "default");
    // Waiting Retry-After seconds is enough to be admitted again.
    let wait: u64 = refusal
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    std::thread::sleep(Duration::from_secs(wait) + Duration::from_millis(100));
    accepted(&c.post("/webhooks/a", b"{}", &[]));

    let (text, samples) = scrape(&server);
    let admit = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"harn_backpressure_events_total{action="admit",dimension="ingest"} "#)
        })
        .unwrap_or_else(|| panic!("no admit line (labels sorted) in /metrics:\n{text}"));
    let reject = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"harn_backpressure_events_total{action="reject",dimension="ingest"} "#)
        })
        .unwrap_or_else(|| panic!("no reject line (labels sorted) in /metrics:\n{text}"));
    let admit: f64 = admit.trim().parse().expect("admit value");
    let reject: f64 = reject.trim().parse().expect("reject value");
    assert!(admit >= 3.0, "admit = {admit}");
    assert!(reject >= 1.0, "reject = {reject}");
    let refused_a = samples.iter().find(|s| {
        s.name == "sluice_ingest_refusals_total"
            && s.label("reason") == Some("ingest_saturated")
            && s.label("source") == Some("a")
    });
    let refused_a = refused_a.unwrap_or_else(|| panic!("no refusal line for source a:\n{text}"));
    assert!(refused_a.value >= 1.0, "{}", refused_a.line);
    assert!(
        !samples
            .iter()
            .any(|s| s.name == "sluice_ingest_refusals_total"
                && s.label("source") == Some("b")
                && s.label("reason") == Some("ingest_saturated")
                && s.value > 0.0),
        "source b was never refused:\n{text}"
    );
}

#[test]
fn global_bucket_refuses_across_sources() {
    let server = Server::start(
        Opts::default()
            .env(ENV_GLOBAL_CAPACITY, "2")
            .env(ENV_REFILL_PER_SEC, "1")
            .env(ENV_PER_SOURCE_CAPACITY, "1000"),
    );
    let mut c = server.client();
    let mut statuses = Vec::new();
    let mut refusal = None;
    for i in 0..6 {
        let r = c.post(&format!("/webhooks/src{i}"), b"{}", &[]);
        statuses.push(r.status);
        if r.status == 503 {
            refusal = Some(r);
            break;
        }
        accepted(&r);
    }
    assert_eq!(&statuses[..2], &[202, 202], "{statuses:?}");
    assert_saturated(
        &refusal.unwrap_or_else(|| panic!("global bucket never refused: {statuses:?}")),
    );
}

#[test]
fn invalid_bucket_env_fails_fast_naming_the_variable() {
    for (var, value) in [
        (ENV_REFILL_PER_SEC, "0"),
        (ENV_REFILL_PER_SEC, "abc"),
        (ENV_PER_SOURCE_CAPACITY, "-1"),
    ] {
        let t0 = Instant::now();
        let f = Server::start_in(temp_root(), Opts::default().env(var, value))
            .err()
            .unwrap_or_else(|| panic!("{var}={value} started"));
        let status = f
            .status
            .unwrap_or_else(|| panic!("{var}={value}: still running after {:?}", f.elapsed));
        assert!(!status.success(), "{var}={value}: exit {status:?}");
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{var}={value}: took {:?}",
            t0.elapsed()
        );
        assert!(
            f.stderr.contains(var),
            "{var}={value}: stderr does not name the variable:\n{}",
            f.stderr
        );
    }
}

#[test]
fn metrics_expose_the_contract_families() {
    let server = Server::start(Opts::default());
    accepted(&server.post("/webhooks/m", b"{}"));
    assert_eq!(server.get("/healthz").status, 200);
    let r = server.get("/metrics");
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .is_some_and(|v| v.starts_with("text/plain")),
        "metrics content-type {:?}",
        r.header("content-type")
    );
    let text = r.text();
    let samples = parse_metrics(&text);
    let has = |name: &str| samples.iter().any(|s| s.name == name);
    for name in [
        "harn_backpressure_events_total",
        "sluice_http_requests_total",
        "sluice_wal_appends_total",
        "sluice_wal_durable_lsn",
        "sluice_wal_os_unsynced_bytes",
        "sluice_wal_sync_seconds_bucket",
        "sluice_wal_sync_seconds_sum",
        "sluice_wal_sync_seconds_count",
    ] {
        assert!(has(name), "no {name} in /metrics:\n{text}");
    }
    assert!(
        text.contains("# TYPE sluice_wal_sync_seconds histogram"),
        "sluice_wal_sync_seconds is not typed as a histogram:\n{text}"
    );
    assert_eq!(
        sample_value(&samples, "sluice_wal_os_unsynced_bytes", &[("log", "0")]),
        0.0,
        "fsync mode keeps no unsynced copy:\n{text}"
    );
    let appends: f64 = samples
        .iter()
        .filter(|s| s.name == "sluice_wal_appends_total")
        .map(|s| s.value)
        .sum();
    assert!(appends >= 1.0, "sluice_wal_appends_total = {appends}");
    let inf = samples
        .iter()
        .find(|s| s.name == "sluice_wal_sync_seconds_bucket" && s.label("le") == Some("+Inf"))
        .unwrap_or_else(|| panic!("no +Inf bucket:\n{text}"));
    assert!(inf.value >= 1.0, "{}", inf.line);
    // Requests counted by route and status, labels in alphabetical order.
    let webhook_202 = samples
        .iter()
        .find(|s| s.name == "sluice_http_requests_total" && s.label("status") == Some("202"))
        .unwrap_or_else(|| panic!("no sluice_http_requests_total with status 202:\n{text}"));
    assert!(webhook_202.value >= 1.0, "{}", webhook_202.line);
    for s in samples
        .iter()
        .filter(|s| s.name == "sluice_http_requests_total")
    {
        let names: Vec<&str> = s.labels.iter().map(|(n, _)| n.as_str()).collect();
        assert!(
            names.contains(&"route") && names.contains(&"status"),
            "{}",
            s.line
        );
    }
    for s in samples.iter().filter(|s| !s.name.ends_with("_bucket")) {
        let names: Vec<&str> = s.labels.iter().map(|(n, _)| n.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted, "labels not sorted: {}", s.line);
    }
}

#[test]
fn oversized_stored_header_is_refused_as_a_client_error() {
    // User-Agent is a stored header; the WAL keeps at most 8 KiB per value, while the default
    // head limit (16 KiB) lets a 9 KB value through. The client must learn it is its fault
    // (4xx), not be told to retry (503) forever.
    let server = Server::start(Opts::default());
    let ua = "u".repeat(9000);
    let r = server
        .client()
        .post("/webhooks/ua", b"{}", &[("User-Agent", &ua)]);
    assert!(
        (400..500).contains(&r.status),
        "a 9000-byte stored header got {} {:?} {}",
        r.status,
        r.header("retry-after"),
        r.text()
    );
    // Others are not affected.
    accepted(&server.post("/webhooks/ua", b"{}"));
    assert_eq!(server.get("/readyz").status, 200);
}

#[test]
fn many_repeated_stored_headers_are_refused_as_a_client_error() {
    // The WAL keeps at most 32 headers per event; 40 `X-Request-Id` fields fit the head limits.
    let server = Server::start(Opts::default());
    let mut headers = Vec::new();
    for _ in 0..40 {
        headers.push(("X-Request-Id", "r"));
    }
    let r = server.client().post("/webhooks/many", b"{}", &headers);
    assert!(
        r.status == 202 || (400..500).contains(&r.status),
        "40 repeated stored headers got {} {}",
        r.status,
        r.text()
    );
    accepted(&server.post("/webhooks/many", b"{}"));
}

#[test]
fn invalid_manifest_fails_fast_naming_the_key() {
    for (text, key) in [
        ("[server]\nheader_timeout = \"0s\"\n", "header_timeout"),
        ("[server]\nmax_body_bytes = 0\n", "max_body_bytes"),
        ("[server]\nbogus_key = 1\n", "bogus_key"),
        ("[wal]\ndurability = \"sometimes\"\n", "durability"),
        (
            "[[triggers]]\nid = \"bad id\"\nprovider = \"github\"\npath = \"/hooks/gh\"\n",
            "id",
        ),
    ] {
        let f = Server::start_in(temp_root(), Opts::config(text))
            .err()
            .unwrap_or_else(|| panic!("manifest {text:?} was accepted"));
        let status = f
            .status
            .unwrap_or_else(|| panic!("{text:?}: still running"));
        assert_eq!(status.code(), Some(2), "{text:?}: exit {status:?}");
        assert!(
            f.stderr.contains(key),
            "{text:?}: stderr does not name {key}:\n{}",
            f.stderr
        );
    }
}
