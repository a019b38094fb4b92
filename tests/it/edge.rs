//! What real clients, load balancers and hostile configs trip on (issue 11): an observable
//! drain, port safety, provider handshakes and header aliases, a `/metrics` page an
//! independent parser accepts, source isolation, start-up refusals, and the `Connection` /
//! content-type contract of error responses.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};

use crate::downstream::{Behavior, Downstream};
use crate::support::*;

const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

fn hmac256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().to_vec()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn github_sig(secret: &str, body: &[u8]) -> String {
    format!("sha256={}", hex(&hmac256(secret.as_bytes(), &[body])))
}

// ----- 1. drain_grace ------------------------------------------------------------------------

#[test]
fn after_sigterm_readyz_says_draining_while_posts_are_still_accepted() {
    let mut opts = Opts::config("[server]\ndrain_grace = \"2s\"\nshutdown_timeout = \"5s\"\n");
    opts.drain_grace = None; // the manifest's value, not the harness's 0s
    let mut server = Server::start(opts);
    assert_eq!(server.get("/readyz").status, 200);
    let signalled = Instant::now();
    server.sigterm();
    // /readyz on a new connection: 503 draining within 0.3 s (the listener is still open).
    let mut seen_draining = None;
    while signalled.elapsed() < Duration::from_secs(2) {
        let mut c = Client::connect(server.addr()).expect("listener still open during the grace");
        let r = c.get("/readyz");
        if r.status == 503 {
            assert_eq!(r.text().trim(), "draining", "{}", r.text());
            seen_draining = Some(signalled.elapsed());
            break;
        }
        assert_eq!(r.status, 200, "{}", r.text());
        std::thread::sleep(Duration::from_millis(10));
    }
    let at = seen_draining.expect("/readyz never said draining");
    assert!(at <= Duration::from_millis(300), "draining after {at:?}");
    // Requests are still served: a POST on a new connection is accepted, durably — also when
    // the connection is silent for a while after being accepted (it is not closed as idle).
    let mut late = Client::connect(server.addr()).expect("connect during the grace");
    std::thread::sleep(Duration::from_millis(250));
    let r = late.post("/webhooks/late", b"{\"during\":\"grace\"}", &[]);
    let (late_id, _) = accepted(&r);
    assert!(
        r.closes(),
        "responses during the drain close the connection"
    );
    assert!(
        signalled.elapsed() < Duration::from_secs(2),
        "the POST was not inside the grace ({:?})",
        signalled.elapsed()
    );
    // Still serving until the grace ends (nothing in flight would otherwise let it exit).
    std::thread::sleep(Duration::from_millis(1200).saturating_sub(signalled.elapsed()));
    assert!(server.is_running(), "exited before drain_grace ended");
    let status = server.wait_exit(Duration::from_secs(15));
    assert_eq!(status.code(), Some(0), "stderr:\n{}", server.stderr());
    assert!(
        signalled.elapsed() >= Duration::from_secs(2),
        "exited {:?} after SIGTERM, before drain_grace = 2s",
        signalled.elapsed()
    );
    let events = wal_inspect(&server.data_dir());
    find_event(&events, &late_id);
}

// ----- 2. port safety ----------------------------------------------------------------------

/// `sluice serve` on `listen` with its own data dir; waits (≤ 20 s) for it to exit.
fn serve_expecting_failure(listen: &str, data_dir: &Path) -> CliOutput {
    run_cli(&[
        "serve",
        "--listen",
        listen,
        "--data-dir",
        path_str(data_dir),
        "--workers",
        "2",
    ])
}

#[test]
fn a_second_serve_on_a_held_port_exits_1_saying_the_address_is_in_use() {
    let server = Server::start(Opts::default());
    let addr = server.addr().to_string();
    let other = temp_root();
    let out = serve_expecting_failure(&addr, &other.path().join("data"));
    assert_eq!(out.status.code(), Some(1), "{}", out.all());
    assert!(
        out.stderr.contains(&format!("address {addr} in use")),
        "{}",
        out.all()
    );
    // It refused before touching its data dir, and the first server still serves.
    assert!(!other.path().join("data").exists());
    accepted(&server.post("/webhooks/still-mine", b"{}"));

    // A port held by a plain (non-SO_REUSEPORT) socket of this process is refused the same way.
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let out = serve_expecting_failure(&addr, &other.path().join("data2"));
    assert_eq!(out.status.code(), Some(1), "{}", out.all());
    assert!(
        out.stderr.contains(&format!("address {addr} in use")),
        "{}",
        out.all()
    );
}

#[test]
fn a_freed_port_can_be_served_again() {
    // The probe must not mistake a previous run's closed sockets (TIME_WAIT) for a holder.
    let mut first = Server::start(Opts::default());
    let addr = first.addr();
    accepted(&first.post("/webhooks/a", b"{}"));
    first.stop();
    let root = temp_root();
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--listen", &addr.to_string(), "--data-dir"])
        .arg(root.path().join("data"))
        .args(["--workers", "1", "--drain-grace", "0s"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawn");
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let mut ok = false;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("second run on a freed port exited: {status:?}");
        }
        if let Ok(mut c) = Client::connect(addr) {
            if c.try_request("GET", "/healthz", &[], b"")
                .is_ok_and(|r| r.status == 200)
            {
                ok = true;
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(ok, "second run on the freed port never served");
}

// ----- 3. svix names, Slack url_verification -----------------------------------------------

#[test]
fn svix_header_names_verify_on_a_standard_webhooks_trigger() {
    let key = b"svix-test-key-0123456789abcdef!";
    let secret = format!("whsec_{}", STANDARD.encode(key));
    let config = "[[triggers]]\nid = \"sw\"\nprovider = \"svix\"\npath = \"/hooks/sw\"\n\
                  verify = \"standard-webhooks\"\nsecrets = [{ env = \"SW_SECRET\" }]\n";
    let server = Server::start(Opts::config(config).env("SW_SECRET", &secret));
    let body = br#"{"type":"invoice.paid"}"#;
    let ts = now_secs().to_string();
    let sig = format!(
        "v1,{}",
        STANDARD.encode(hmac256(key, &[b"msg_2b", b".", ts.as_bytes(), b".", body]))
    );
    let mut c = server.client();
    let svix = [
        ("svix-id", "msg_2b"),
        ("svix-timestamp", ts.as_str()),
        ("svix-signature", sig.as_str()),
    ];
    accepted(&c.post("/hooks/sw", body, &svix));
    let std_names = [
        ("webhook-id", "msg_2b"),
        ("webhook-timestamp", ts.as_str()),
        ("webhook-signature", sig.as_str()),
    ];
    accepted(&c.post("/hooks/sw", body, &std_names));
    // A wrong svix signature is still refused.
    let bad = [
        ("svix-id", "msg_other"),
        ("svix-timestamp", ts.as_str()),
        ("svix-signature", sig.as_str()),
    ];
    let r = c.post("/hooks/sw", body, &bad);
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.json()["reason"], "bad_signature");
}

#[test]
fn slack_url_verification_is_answered_with_the_challenge_and_not_stored() {
    let secret = "slack-signing-secret";
    let config = "[[triggers]]\nid = \"slack\"\nprovider = \"slack\"\npath = \"/hooks/slack\"\n\
                  verify = \"slack\"\nsecrets = [{ env = \"SLACK_SECRET\" }]\n";
    let mut server = Server::start(Opts::config(config).env("SLACK_SECRET", secret));
    let slack = |body: &[u8], key: &str| {
        let ts = now_secs().to_string();
        let sig = format!(
            "v0={}",
            hex(&hmac256(
                key.as_bytes(),
                &[b"v0:", ts.as_bytes(), b":", body]
            ))
        );
        (ts, sig)
    };
    let challenge = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P";
    let body = format!(
        r#"{{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"{challenge}","type":"url_verification"}}"#
    );
    let mut c = server.client();
    let (ts, sig) = slack(body.as_bytes(), secret);
    let h = [
        ("x-slack-request-timestamp", ts.as_str()),
        ("x-slack-signature", sig.as_str()),
        ("content-type", "application/json"),
    ];
    let r = c.post("/hooks/slack", body.as_bytes(), &h);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json(), serde_json::json!({ "challenge": challenge }));
    // Unsigned, it is an ordinary unauthenticated request.
    let r = c.post("/hooks/slack", body.as_bytes(), &[]);
    assert_eq!(r.status, 401, "{}", r.text());
    // An ordinary signed event is stored.
    let event = br#"{"type":"event_callback","event":{"type":"app_mention"}}"#;
    let (ts, sig) = slack(event, secret);
    let h = [
        ("x-slack-request-timestamp", ts.as_str()),
        ("x-slack-signature", sig.as_str()),
    ];
    let (id, _) = accepted(&c.post("/hooks/slack", event, &h));
    drop(c);
    server.stop();
    let events = wal_inspect(&server.data_dir());
    assert_eq!(events.len(), 1, "only the event is stored: {events:?}");
    assert_eq!(events[0].event_id, id);
}

// ----- 4. /metrics through an independent parser -------------------------------------------

/// Parses the exposition with `prometheus_client`; prints one line per problem.
const CHECK_METRICS_PY: &str = r##"
import sys
from prometheus_client.parser import text_string_to_metric_families
text = sys.stdin.read()
problems = []
helps, types = {}, {}
for line in text.splitlines():
    parts = line.split(" ", 3)
    if line.startswith("# HELP "):
        helps[parts[2]] = helps.get(parts[2], 0) + 1
    elif line.startswith("# TYPE "):
        types[parts[2]] = types.get(parts[2], 0) + 1
for name, n in list(helps.items()) + list(types.items()):
    if n > 1:
        problems.append("family declared %d times: %s" % (n, name))
try:
    families = list(text_string_to_metric_families(text))
except Exception as e:
    print("PARSE ERROR: %r" % (e,))
    sys.exit(1)
for f in families:
    declared = [n for n in (f.name, f.name + "_total") if n in types]
    if not f.documentation:
        problems.append("no HELP: " + f.name)
    if f.type == "unknown" or not declared:
        problems.append("no TYPE: " + f.name)
print("FAMILIES %d SAMPLES %d" % (len(families), sum(len(f.samples) for f in families)))
for p in problems:
    print("PROBLEM " + p)
sys.exit(1 if problems else 0)
"##;

#[test]
fn every_metrics_family_has_help_and_type_for_an_independent_parser() {
    let Some((python, pythonpath)) = python_with(
        "prometheus_client.parser",
        "prometheus_client",
        "python3-prometheus-client",
    ) else {
        return;
    };
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    // The default route on beside the trigger: its flood source is refused by its own bucket.
    let config = format!(
        "[ingest]\ndefault_route = true\n\n\
         [[triggers]]\nid = \"gh\"\nprovider = \"github\"\npath = \"/hooks/gh\"\nhandler = \"{uri}\"\n\
         verify = \"github\"\nsecrets = [{{ env = \"GH_SECRET\" }}]\n\
         dedupe = true\n\
         concurrency = {{ key = \"event.headers.x-github-delivery\", max = 2 }}\n\n\
         [[destinations]]\nuri = \"{uri}\"\nmax_in_flight = 4\n"
    );
    let server = Server::start(
        Opts::config(&config)
            .env("GH_SECRET", "s3")
            // 3 events + 1 duplicate fit; the flood source's own bucket refuses.
            .env(ENV_PER_SOURCE_CAPACITY, "4")
            .env(ENV_REFILL_PER_SEC, "1"),
    );
    let mut c = server.client();
    // Traffic: accepted + dispatched, a duplicate, signature refusals, bucket refusals, route
    // and codec errors.
    for i in 0..3 {
        let body = format!("{{\"n\":{i}}}");
        let sig = github_sig("s3", body.as_bytes());
        let delivery = format!("d-{i}");
        let h = [
            ("x-hub-signature-256", sig.as_str()),
            ("x-github-delivery", delivery.as_str()),
        ];
        accepted(&c.post("/hooks/gh", body.as_bytes(), &h));
    }
    let sig = github_sig("s3", b"{\"n\":0}");
    let dup = [
        ("x-hub-signature-256", sig.as_str()),
        ("x-github-delivery", "d-0"),
    ];
    assert_eq!(c.post("/hooks/gh", b"{\"n\":0}", &dup).status, 200);
    assert_eq!(c.post("/hooks/gh", b"{}", &[]).status, 401);
    for _ in 0..5 {
        c.post("/webhooks/flood", b"{}", &[]);
    }
    assert_eq!(c.post("/webhooks/flood", b"{}", &[]).status, 503);
    assert_eq!(c.get("/nope").status, 404);
    let mut bad = server.client();
    bad.send(b"GARBAGE\r\n\r\n").unwrap();
    assert_eq!(bad.read_response().unwrap().status, 400);
    assert!(
        ds.wait(Duration::from_secs(10), |s| s.len() >= 3),
        "not dispatched"
    );
    let text = c.get("/metrics").text();
    assert!(text.contains("sluice_wal_sync_seconds_bucket"), "{text}");
    assert!(text.contains("sluice_dispatch_attempts_total"), "{text}");

    let mut child = Command::new(&python)
        .args(["-c", CHECK_METRICS_PY])
        .env("PYTHONPATH", &pythonpath)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(text.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{report}\n--- /metrics ---\n{text}");
    assert!(report.starts_with("FAMILIES "), "{report}");
}

// ----- 5. source isolation -------------------------------------------------------------------

#[test]
fn unsigned_default_route_traffic_does_not_spend_a_signed_triggers_bucket() {
    // The default route on beside a verified trigger: its traffic has buckets of its own, and a
    // source the trigger owns (`github`, in any case) is the trigger's, so unsigned requests
    // naming it are refused 401 and spend nothing.
    let config = "[ingest]\ndefault_route = true\n\n\
                  [[triggers]]\nid = \"gh\"\nprovider = \"github\"\npath = \"/hooks/gh\"\n\
                  verify = \"github\"\nsecrets = [{ env = \"GH_SECRET\" }]\n";
    let server = Server::start(
        Opts::config(config)
            .env("GH_SECRET", "topsecret")
            .env(ENV_PER_SOURCE_CAPACITY, "5")
            .env(ENV_REFILL_PER_SEC, "1")
            .env(ENV_GLOBAL_CAPACITY, "1000"),
    );
    let mut c = server.client();
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(c.post("/webhooks/other", b"{}", &[]).status);
    }
    assert!(
        statuses.iter().filter(|s| **s == 503).count() >= 2,
        "the default route's own bucket (5) should refuse: {statuses:?}"
    );
    // Unsigned requests to the trigger, by its path or by its source on the default route, are
    // 401 and spend nothing either.
    for path in ["/hooks/gh", "/webhooks/github", "/webhooks/GitHub"] {
        for _ in 0..4 {
            assert_eq!(c.post(path, b"{}", &[]).status, 401, "{path}");
        }
    }
    let body = br#"{"action":"opened"}"#;
    let sig = github_sig("topsecret", body);
    let r = c.post("/hooks/gh", body, &[("x-hub-signature-256", &sig)]);
    let (_, trigger) = accepted(&r);
    assert_eq!(trigger, "gh");
    // The two keys are visible as separate sources; none is the default route's `github`.
    let text = c.get("/metrics").text();
    let samples = parse_metrics(&text);
    let accepted_of = |source: &str| {
        samples
            .iter()
            .find(|s| s.name == "sluice_ingest_accepted_total" && s.label("source") == Some(source))
            .map(|s| s.value)
    };
    assert_eq!(accepted_of("github@gh"), Some(1.0), "{text}");
    assert!(accepted_of("other").is_some_and(|v| v <= 6.0), "{text}");
    assert_eq!(accepted_of("github"), None, "{text}");
}

// ----- 6. start-up refusals ------------------------------------------------------------------

/// `sluice serve --config <text>`; returns the CLI output (bounded wait).
fn serve_with(config: &str, root: &Path) -> CliOutput {
    let path = root.join("sluice.toml");
    std::fs::write(&path, config).unwrap();
    run_cli(&[
        "serve",
        "--config",
        path_str(&path),
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        path_str(&root.join("data")),
    ])
}

fn assert_config_error(config: &str, root: &Path, needles: &[&str]) {
    let started = Instant::now();
    let out = serve_with(config, root);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{config}\n--- output ---\n{}",
        out.all()
    );
    for n in needles {
        assert!(
            out.stderr.contains(n),
            "{config}: {n:?} not in {}",
            out.stderr
        );
    }
    assert!(started.elapsed() < Duration::from_secs(10), "slow refusal");
}

fn trigger_with(id: &str, path: &str, extra: &str) -> String {
    format!("[[triggers]]\nid = \"{id}\"\nprovider = \"p\"\npath = \"{path}\"\n{extra}")
}

#[test]
fn hostile_configs_exit_2_naming_the_key() {
    let root = temp_root();
    let dir = root.path();
    assert_config_error(
        "[server]\nheader_timeout = \"18446744074s\"\n",
        dir,
        &["server.header_timeout", "too large"],
    );
    assert_config_error(
        "[server]\ndrain_grace = \"366d\"\n",
        dir,
        &["server.drain_grace"],
    );
    for path in [
        "/metrics", "/healthz", "/readyz", "/admin/x", "/admin", "/ui", "/api/v1",
    ] {
        assert_config_error(
            &trigger_with("t1", path, ""),
            dir,
            &["\"t1\"", path, "built-in route"],
        );
    }
    assert_config_error(
        &trigger_with("default", "/hooks/d", ""),
        dir,
        &["\"default\"", "reserved"],
    );
    let secret_file = |file: &Path| {
        format!(
            "verify = \"github\"\nsecrets = [{{ file = \"{}\" }}]\n",
            file.display()
        )
    };
    assert_config_error(
        &trigger_with("gh", "/hooks/gh", &secret_file(Path::new("/dev/zero"))),
        dir,
        &["\"gh\"", "/dev/zero", "not a regular file"],
    );
    let big = dir.join("big-secret");
    std::fs::write(&big, vec![b'k'; 65 * 1024]).unwrap();
    assert_config_error(
        &trigger_with("gh", "/hooks/gh", &secret_file(&big)),
        dir,
        &["\"gh\"", "big-secret", "larger than 65536"],
    );
    // A FIFO nobody writes to: refused at once, not a hang.
    let fifo = dir.join("fifo-secret");
    let path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `mkfifo` reads the NUL-terminated path, a valid local, during the call.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo");
    assert_config_error(
        &trigger_with("gh", "/hooks/gh", &secret_file(&fifo)),
        dir,
        &["\"gh\"", "fifo-secret", "not a regular file"],
    );
}

#[test]
fn unreachable_destination_permits_are_a_startup_warning() {
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    let config = format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n\
         [[destinations]]\nuri = \"{uri}\"\nmax_in_flight = 100\n\
         [orchestrator]\npumps = {{ max_outstanding = 8 }}\n"
    );
    let server = Server::start(Opts::config(&config));
    let stderr = server.stderr();
    assert!(
        stderr.contains("warning")
            && stderr.contains("max_in_flight = 100")
            && stderr.contains("max_outstanding = 8"),
        "{stderr}"
    );
}

// ----- 11. Connection handling and content types of errors -----------------------------------

#[test]
fn route_errors_keep_the_connection_and_codec_errors_close_it_with_one_text_type() {
    let server = Server::start(Opts::default());
    let mut c = server.client();
    // Complete, well-framed requests that route nowhere: answered, connection kept.
    let r = c.post("/nope", b"{}", &[]);
    assert_eq!(r.status, 404);
    let r405 = c.get("/webhooks/x");
    assert_eq!(r405.status, 405);
    let r400 = c.post("/webhooks/bad%20name", b"{}", &[]);
    assert_eq!(r400.status, 400);
    for r in [&r, &r405, &r400] {
        assert!(!r.closes(), "{} announced close: {:?}", r.status, r.headers);
        assert_eq!(r.header("content-type"), Some(TEXT_PLAIN), "{}", r.status);
    }
    // The same connection still carries an event.
    accepted(&c.post("/webhooks/ok", b"{}", &[]));
    // A codec error: same text type, `Connection: close`, and the server closes.
    c.send(b"POST /webhooks/ok HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}")
        .unwrap();
    let r = c.read_response().expect("400 for conflicting lengths");
    assert_eq!(r.status, 400);
    assert!(r.closes(), "{:?}", r.headers);
    assert_eq!(r.header("content-type"), Some(TEXT_PLAIN));
    c.assert_closed(Duration::from_secs(5));
    // Ops endpoints use the same text type; event decisions are JSON.
    assert_eq!(
        server.get("/healthz").header("content-type"),
        Some(TEXT_PLAIN)
    );
    let r = server.post("/webhooks/ok", b"{}");
    assert_eq!(r.header("content-type"), Some("application/json"));
}
