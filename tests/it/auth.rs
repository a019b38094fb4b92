//! Signatures, dedupe and the admin gate through HTTP: one test per signature scheme (valid →
//! 202, forged → 401 with the reason and nothing in the WAL), dedupe across a SIGKILL and
//! restart, secrets that are missing at startup, and `SLUICE_ADMIN_TOKEN`.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Sha256, Sha512};

use crate::support::*;

const SECRET: &str = "It's a Secret to Everybody";
const OLD_SECRET: &str = "the previous secret";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn hmac256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().to_vec()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A server with one trigger `t` on `/hooks/t` and the given extra trigger keys; the secrets
/// are in `SECRET_A` (current) and `SECRET_B` (rotated out, still accepted).
fn server_with(keys: &str, a: &str, b: &str) -> Server {
    let config = format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\n\
         secrets = [{{ env = \"SECRET_A\" }}, {{ env = \"SECRET_B\" }}]\n{keys}"
    );
    Server::start(Opts::config(&config).env("SECRET_A", a).env("SECRET_B", b))
}

fn assert_refused(r: &Response, reason: &str) {
    assert_eq!(r.status, 401, "{} {}", r.status, r.text());
    assert_eq!(
        r.text(),
        format!(r#"{{"status":"refused","reason":"{reason}"}}"#)
    );
}

fn signature_failures(server: &Server, reason: &str) -> f64 {
    let (_, samples) = scrape(server);
    samples
        .iter()
        .find(|s| {
            s.name == "sluice_signature_failures_total"
                && s.label("trigger") == Some("t")
                && s.label("reason") == Some(reason)
        })
        .map(|s| s.value)
        .unwrap_or_else(|| {
            panic!("no sluice_signature_failures_total{{trigger=t,reason={reason}}}")
        })
}

/// Valid requests were accepted, forged ones left nothing: exactly `ids` are in the WAL.
fn assert_wal_holds(server: &mut Server, ids: &[String]) {
    server.stop();
    let events = wal_inspect(&server.data_dir());
    let mut got: Vec<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
    got.sort();
    let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(got, want);
    let log = server.stderr();
    assert!(
        !log.contains(SECRET) && !log.contains(OLD_SECRET),
        "a secret reached the log:\n{log}"
    );
}

#[test]
fn github_signatures() {
    let mut server = server_with("verify = \"github\"\n", SECRET, OLD_SECRET);
    let body = br#"{"action":"opened"}"#;
    let sig = |key: &str, body: &[u8]| format!("sha256={}", hex(&hmac256(key.as_bytes(), &[body])));
    let mut c = server.client();
    let post = |c: &mut Client, s: &str, body: &[u8]| {
        c.post("/hooks/t", body, &[("X-Hub-Signature-256", s)])
    };
    let (a, _) = accepted(&post(&mut c, &sig(SECRET, body), body));
    let (b, _) = accepted(&post(&mut c, &sig(OLD_SECRET, body), body));
    assert_refused(&post(&mut c, &sig("wrong", body), body), "bad_signature");
    assert_refused(
        &post(&mut c, &sig(SECRET, body), b"tampered"),
        "bad_signature",
    );
    assert_refused(&c.post("/hooks/t", body, &[]), "missing_signature");
    assert_eq!(signature_failures(&server, "bad_signature"), 2.0);
    assert_eq!(signature_failures(&server, "missing_signature"), 1.0);
    assert_wal_holds(&mut server, &[a, b]);
}

#[test]
fn stripe_signatures() {
    let mut server = server_with(
        "verify = \"stripe\"\ntolerance = \"60s\"\n",
        SECRET,
        OLD_SECRET,
    );
    let body = br#"{"id":"evt_1","object":"event"}"#;
    let header = |key: &str, t: u64| {
        let ts = t.to_string();
        let mac = hmac256(key.as_bytes(), &[ts.as_bytes(), b".", body]);
        format!("t={t},v1={},v0=deadbeef", hex(&mac))
    };
    let mut c = server.client();
    let mut post = |h: &str| c.post("/hooks/t", body, &[("Stripe-Signature", h)]);
    let (a, _) = accepted(&post(&header(SECRET, now())));
    let (b, _) = accepted(&post(&header(OLD_SECRET, now())));
    assert_refused(&post(&header("wrong", now())), "bad_signature");
    assert_refused(
        &post(&header(SECRET, now() - 600)),
        "timestamp_out_of_window",
    );
    assert_refused(
        &post(&header(SECRET, now() + 600)),
        "timestamp_out_of_window",
    );
    assert_refused(&c.post("/hooks/t", body, &[]), "missing_signature");
    assert_eq!(signature_failures(&server, "timestamp_out_of_window"), 2.0);
    assert_wal_holds(&mut server, &[a, b]);
}

#[test]
fn slack_signatures() {
    let mut server = server_with("verify = \"slack\"\n", SECRET, OLD_SECRET);
    let body = br#"{"type":"event_callback","event_id":"Ev1"}"#;
    let mut c = server.client();
    let mut post = |key: &str, t: u64, body: &[u8]| {
        let ts = t.to_string();
        let sig = format!(
            "v0={}",
            hex(&hmac256(
                key.as_bytes(),
                &[
                    b"v0:",
                    ts.as_bytes(),
                    b":",
                    br#"{"type":"event_callback","event_id":"Ev1"}"#
                ]
            ))
        );
        c.post(
            "/hooks/t",
            body,
            &[
                ("X-Slack-Signature", &sig),
                ("X-Slack-Request-Timestamp", &ts),
            ],
        )
    };
    let (a, _) = accepted(&post(SECRET, now(), body));
    let (b, _) = accepted(&post(OLD_SECRET, now(), body));
    assert_refused(&post("wrong", now(), body), "bad_signature");
    assert_refused(&post(SECRET, now(), b"tampered"), "bad_signature");
    assert_refused(&post(SECRET, now() - 301, body), "timestamp_out_of_window");
    assert_refused(&post(SECRET, now() + 3600, body), "timestamp_out_of_window");
    let r = server
        .client()
        .post("/hooks/t", body, &[("X-Slack-Signature", "v0=00")]);
    assert_refused(&r, "missing_signature");
    assert_wal_holds(&mut server, &[a, b]);
}

#[test]
fn standard_webhooks_signatures_with_a_secret_file() {
    let key = b"0123456789abcdef0123456789abcdef";
    let old_key = b"fedcba9876543210fedcba9876543210";
    let root = temp_root();
    let file = root.path().join("whsec");
    std::fs::write(&file, format!("whsec_{}\n", STANDARD.encode(key))).unwrap();
    let config = format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\n\
         verify = \"standard-webhooks\"\n\
         secrets = [{{ file = \"{}\" }}, {{ env = \"SECRET_B\" }}]\n",
        file.display()
    );
    let opts =
        Opts::config(&config).env("SECRET_B", &format!("whsec_{}", STANDARD.encode(old_key)));
    let mut server = Server::start_in(root, opts).expect("start");
    let body = br#"{"type":"invoice.paid"}"#;
    let sign = |k: &[u8], id: &str, t: u64| {
        let ts = t.to_string();
        format!(
            "v1,{}",
            STANDARD.encode(hmac256(
                k,
                &[id.as_bytes(), b".", ts.as_bytes(), b".", body]
            ))
        )
    };
    let mut c = server.client();
    let mut post = |id: &str, t: u64, sig: &str, body: &[u8]| {
        let ts = t.to_string();
        c.post(
            "/hooks/t",
            body,
            &[
                ("webhook-id", id),
                ("webhook-timestamp", &ts),
                ("webhook-signature", sig),
            ],
        )
    };
    let t = now();
    let (a, _) = accepted(&post("msg_1", t, &sign(key, "msg_1", t), body));
    let both = format!(
        "{} {}",
        sign(b"nope", "msg_2", t),
        sign(old_key, "msg_2", t)
    );
    let (b, _) = accepted(&post("msg_2", t, &both, body));
    assert_refused(
        &post("msg_3", t, &sign(b"wrong", "msg_3", t), body),
        "bad_signature",
    );
    assert_refused(
        &post("msg_3", t, &sign(key, "msg_3", t), b"tampered"),
        "bad_signature",
    );
    let stale = t - 400;
    assert_refused(
        &post("msg_4", stale, &sign(key, "msg_4", stale), body),
        "timestamp_out_of_window",
    );
    let r = server
        .client()
        .post("/hooks/t", body, &[("webhook-id", "msg_5")]);
    assert_refused(&r, "missing_signature");
    assert_wal_holds(&mut server, &[a, b]);
}

#[test]
fn generic_hmac_signatures() {
    let keys = "verify = \"hmac\"\n\
                hmac = { header = \"X-Signature\", prefix = \"sha512=\", algorithm = \"sha512\", encoding = \"base64\" }\n";
    let mut server = server_with(keys, SECRET, OLD_SECRET);
    let body = b"plain text body";
    let sig = |key: &str, body: &[u8]| {
        let mut m = Hmac::<Sha512>::new_from_slice(key.as_bytes()).unwrap();
        m.update(body);
        format!("sha512={}", STANDARD.encode(m.finalize().into_bytes()))
    };
    let mut c = server.client();
    let mut post = |s: &str, body: &[u8]| c.post("/hooks/t", body, &[("X-Signature", s)]);
    let (a, _) = accepted(&post(&sig(OLD_SECRET, body), body));
    assert_refused(&post(&sig("wrong", body), body), "bad_signature");
    assert_refused(&post(&sig(SECRET, body), b"tampered"), "bad_signature");
    let unprefixed = sig(SECRET, body).replace("sha512=", "");
    assert_refused(&post(&unprefixed, body), "bad_signature");
    assert_refused(
        &server.client().post("/hooks/t", body, &[]),
        "missing_signature",
    );
    assert_wal_holds(&mut server, &[a]);
}

#[test]
fn missing_secret_fails_startup_naming_it() {
    let config = "[[triggers]]\nid = \"gh\"\nprovider = \"github\"\npath = \"/hooks/gh\"\n\
                  verify = \"github\"\nsecrets = [{ env = \"SLUICE_IT_UNSET_SECRET\" }]\n";
    let f = Server::start_in(temp_root(), Opts::config(config)).expect_err("started");
    assert_eq!(f.status.and_then(|s| s.code()), Some(2), "{}", f.stderr);
    assert!(
        f.stderr.contains("SLUICE_IT_UNSET_SECRET") && f.stderr.contains("\"gh\""),
        "{}",
        f.stderr
    );
}

#[test]
fn same_delivery_twice_is_one_event_even_after_a_crash() {
    let config = "[[triggers]]\nid = \"gh\"\nprovider = \"github\"\npath = \"/hooks/gh\"\n\
                  verify = \"github\"\nsecrets = [{ env = \"SECRET_A\" }]\ndedupe = true\n";
    let mut server = Server::start(Opts::config(config).env("SECRET_A", SECRET));
    let body = br#"{"action":"opened"}"#;
    let sig = format!("sha256={}", hex(&hmac256(SECRET.as_bytes(), &[body])));
    let post = |server: &Server, delivery: &str| {
        server.client().post(
            "/hooks/gh",
            body,
            &[
                ("X-Hub-Signature-256", &sig),
                ("X-GitHub-Delivery", delivery),
            ],
        )
    };
    let (first, _) = accepted(&post(&server, "d-1"));
    let assert_duplicate = |r: &Response| {
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(
            r.text(),
            format!(r#"{{"status":"duplicate_dropped","trigger_id":"gh","event_id":"{first}"}}"#)
        );
    };
    assert_duplicate(&post(&server, "d-1"));
    // Another delivery of the same body is another event.
    let (second, _) = accepted(&post(&server, "d-2"));
    let (_, samples) = scrape(&server);
    let dropped = samples
        .iter()
        .find(|s| s.name == "sluice_dedupe_dropped_total" && s.label("trigger") == Some("gh"))
        .map(|s| s.value);
    assert_eq!(dropped, Some(1.0));

    server.sigkill();
    server.restart();
    assert_duplicate(&post(&server, "d-1"));
    assert!(
        server
            .stderr()
            .contains("dedupe index rebuilt from the wal: 2 keys"),
        "{}",
        server.stderr()
    );
    server.stop();
    let events = wal_inspect(&server.data_dir());
    let mut ids: Vec<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
    ids.sort();
    let mut want = vec![first.as_str(), second.as_str()];
    want.sort();
    assert_eq!(ids, want);
}

#[test]
fn body_digest_dedupe_without_verification() {
    let config = "[ingest]\ndefault_route = true\n\n\
                  [[triggers]]\nid = \"d\"\nprovider = \"p\"\npath = \"/hooks/d\"\n\
                  dedupe = { window = \"1h\" }\n";
    let mut server = Server::start(Opts::config(config));
    let (first, _) = accepted(&server.post("/hooks/d", b"same"));
    let r = server.post("/hooks/d", b"same");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["event_id"], first.as_str());
    accepted(&server.post("/hooks/d", b"different"));
    // Scoped per trigger: the default route has no dedupe.
    // (A source other than the trigger's `p`, which the trigger owns on the default route.)
    accepted(&server.post("/webhooks/q", b"same"));
    accepted(&server.post("/webhooks/q", b"same"));
    server.stop();
    assert_eq!(wal_inspect(&server.data_dir()).len(), 4);
}

#[test]
fn admin_routes_need_the_token() {
    let off = Server::start(Opts::default());
    assert_eq!(off.get("/admin/ping").status, 404);

    let server = Server::start(Opts::default().env("SLUICE_ADMIN_TOKEN", "s3cr3t-token"));
    let get = |auth: Option<&str>| {
        let h: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
        server.client().request("GET", "/admin/ping", &h, b"")
    };
    let r = get(None);
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(get(Some("Bearer wrong")).status, 401);
    assert_eq!(get(Some("s3cr3t-token")).status, 401);
    let ok = get(Some("Bearer s3cr3t-token"));
    assert_eq!(ok.status, 200, "{}", ok.text());
    // Unknown admin paths are 401 without the token, 404 with it.
    assert_eq!(server.get("/admin/nope").status, 401);
    let r = server.client().request(
        "GET",
        "/admin/nope",
        &[("Authorization", "Bearer s3cr3t-token")],
        b"",
    );
    assert_eq!(r.status, 404);
    // The operational endpoints stay open.
    for path in ["/metrics", "/healthz", "/readyz"] {
        assert_eq!(server.get(path).status, 200, "{path}");
    }
}
