//! HTTPS destinations: a real `sluice serve` delivering to a local rustls server whose CA and
//! certificates each test generates (rcgen). The TLS downstream is a thread per connection,
//! each bounded by a 5 s read timeout; it records every request and how each handshake went.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{HandshakeKind, RootCertStore, ServerConfig, ServerConnection, StreamOwned};

use crate::support::*;

/// A CA and a certificate it issued.
struct Issued {
    cert_pem: String,
    key_pem: String,
    der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        Ca {
            cert: p.self_signed(&key).unwrap(),
            key,
        }
    }
    fn issue(&self, names: &[&str]) -> Issued {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &self.cert, &self.key)
            .unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
            key_der: key.serialize_der(),
        }
    }
    fn pem(&self) -> String {
        self.cert.pem()
    }
}

#[derive(Debug, Clone)]
struct Req {
    id: String,
    timestamp: Option<String>,
    signature: Option<String>,
    body: Vec<u8>,
}

#[derive(Default)]
struct Seen {
    requests: Mutex<Vec<Req>>,
    handshakes: AtomicUsize,
    resumed: AtomicUsize,
    failed_handshakes: AtomicUsize,
    stop: AtomicBool,
}

/// A TLS downstream answering `200` to every request; `close_each` answers with
/// `connection: close` (every delivery then needs a new connection and handshake).
struct TlsDownstream {
    addr: SocketAddr,
    seen: Arc<Seen>,
}

impl TlsDownstream {
    fn start(config: ServerConfig, close_each: bool) -> TlsDownstream {
        let config = Arc::new(config);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let st = seen.clone();
        std::thread::spawn(move || {
            let mut conns = 0;
            while !st.stop.load(Ordering::Relaxed) && conns < 512 {
                match l.accept() {
                    Ok((s, _)) => {
                        conns += 1;
                        let (st, config) = (st.clone(), config.clone());
                        std::thread::spawn(move || serve(s, config, &st, close_each));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        TlsDownstream { addr, seen }
    }
    fn uri(&self) -> String {
        format!("https://{}/sink", self.addr)
    }
    fn requests(&self) -> Vec<Req> {
        self.seen.requests.lock().unwrap().clone()
    }
}

impl Drop for TlsDownstream {
    fn drop(&mut self) {
        self.seen.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(s: std::net::TcpStream, config: Arc<ServerConfig>, st: &Seen, close_each: bool) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut tls = StreamOwned::new(ServerConnection::new(config).unwrap(), s);
    while tls.conn.is_handshaking() {
        if tls.conn.complete_io(&mut tls.sock).is_err() {
            st.failed_handshakes.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    st.handshakes.fetch_add(1, Ordering::Relaxed);
    if tls.conn.handshake_kind() == Some(HandshakeKind::Resumed) {
        st.resumed.fetch_add(1, Ordering::Relaxed);
    }
    let mut r = BufReader::new(tls);
    loop {
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) if line == "\r\n" => break,
                Ok(_) => head.push(line),
            }
            if head.len() > 200 || st.stop.load(Ordering::Relaxed) {
                return;
            }
        }
        let header = |name: &str| head_header(&head, name);
        let len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; len.min(4 << 20)];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        st.requests.lock().unwrap().push(Req {
            id: header("webhook-id").unwrap_or_default(),
            timestamp: header("webhook-timestamp"),
            signature: header("webhook-signature"),
            body,
        });
        let close = if close_each {
            "connection: close\r\n"
        } else {
            ""
        };
        let resp = format!("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n{close}\r\nok");
        let w = r.get_mut();
        if w.write_all(resp.as_bytes())
            .and_then(|_| w.flush())
            .is_err()
            || close_each
        {
            w.conn.send_close_notify();
            let _ = w.flush();
            return;
        }
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(leaf: &Issued, client_ca: Option<&Ca>) -> ServerConfig {
    let b = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let b = match client_ca {
        None => b.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            roots.add(ca.cert.der().clone()).unwrap();
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .unwrap();
            b.with_client_cert_verifier(v)
        }
    };
    let key = PrivatePkcs8KeyDer::from(leaf.key_der.clone());
    b.with_single_cert(vec![leaf.der.clone()], key.into())
        .unwrap()
}

fn manifest(uri: &str, destination: &str) -> String {
    format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/hooks/t\"\nhandler = \"{uri}\"\n\n\
         [[destinations]]\nuri = \"{uri}\"\n{destination}\n"
    )
}

fn big_buckets(o: Opts) -> Opts {
    o.env("HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY", "1000000")
        .env("HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY", "1000000")
        .env("HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC", "1000000")
}

fn attempts(server: &Server, outcome: &str) -> f64 {
    let (_, samples) = scrape(server);
    samples
        .iter()
        .filter(|s| {
            s.name == "sluice_dispatch_attempts_total" && s.label("outcome") == Some(outcome)
        })
        .map(|s| s.value)
        .sum()
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// Body `i`: varied sizes and every byte value, so byte-identity is a real check; body 0 is
/// 1.5 MiB (far more than rustls buffers before the handshake ends, and than a socket buffer).
fn body(i: usize) -> Vec<u8> {
    let len = if i == 0 {
        1536 * 1024
    } else {
        (i * 397) % 9000 + 1
    };
    (0..len).map(|k| (k * 31 + i) as u8).collect()
}

#[test]
fn https_with_ca_file_delivers_every_event_byte_identical_and_signed() {
    use base64::Engine;
    use hmac::{Hmac, Mac};
    let ca = Ca::new("sluice https test CA");
    let leaf = ca.issue(&["127.0.0.1", "localhost"]);
    let ds = TlsDownstream::start(server_config(&leaf, None), false);
    let files = tempfile::tempdir().unwrap();
    let ca_file = write(files.path(), "ca.pem", &ca.pem());
    let key = b"an independent 32-byte test key!";
    let secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    );
    let dest = format!(
        "max_in_flight = 8\ntls = {{ ca_file = \"{ca_file}\" }}\n\
         signing_secret = {{ env = \"SINK_KEY\" }}"
    );
    let server = Server::start(
        big_buckets(Opts::config(&manifest(&ds.uri(), &dest))).env("SINK_KEY", &secret),
    );
    let mut sent = HashMap::new();
    let mut c = server.client();
    for i in 0..50 {
        let b = body(i);
        let (id, _) = accepted(&c.post(
            "/hooks/t",
            &b,
            &[("Content-Type", "application/octet-stream")],
        ));
        sent.insert(id, b);
    }
    assert!(
        wait_until(Duration::from_secs(30), || ds.requests().len() >= 50),
        "only {} of 50 delivered over TLS: {}",
        ds.requests().len(),
        server.stderr()
    );
    let got: HashMap<String, Req> = ds
        .requests()
        .into_iter()
        .map(|r| (r.id.clone(), r))
        .collect();
    assert_eq!(got.len(), 50, "50 distinct webhook-ids");
    for (id, b) in &sent {
        let r = got.get(id).unwrap_or_else(|| panic!("{id} never arrived"));
        assert_eq!(&r.body, b, "{id}: body differs");
        let ts = r.timestamp.as_deref().expect("webhook-timestamp");
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
        mac.update(format!("{id}.{ts}.").as_bytes());
        mac.update(b);
        let want = format!(
            "v1,{}",
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
        );
        assert_eq!(r.signature.as_deref(), Some(want.as_str()), "{id}");
    }
    assert!(
        wait_until(Duration::from_secs(5), || attempts(&server, "delivered")
            == 50.0),
        "delivered attempts: {}",
        attempts(&server, "delivered")
    );
    assert_eq!(attempts(&server, "tls_error"), 0.0);
    // Keep-alive pooling: far fewer handshakes than deliveries (≤ max_in_flight per core).
    let hs = ds.seen.handshakes.load(Ordering::Relaxed);
    assert!((1..=16).contains(&hs), "{hs} handshakes for 50 deliveries");
}

#[test]
fn without_the_ca_nothing_is_delivered_and_attempts_count_as_tls_error() {
    let ca = Ca::new("sluice https private CA");
    let leaf = ca.issue(&["127.0.0.1"]);
    let ds = TlsDownstream::start(server_config(&leaf, None), false);
    // Default roots (webpki-roots) do not know the test CA.
    let dest = "retry = { max_attempts = 2, base = \"100ms\", cap = \"100ms\" }\n\
                circuit = { failures = 1000 }";
    let server = Server::start(big_buckets(Opts::config(&manifest(&ds.uri(), dest))));
    let ids: Vec<String> = (0..5)
        .map(|i| server.ingest("/hooks/t", format!("event {i}").as_bytes()))
        .collect();
    let dir = server.data_dir();
    let dlq = || {
        let out = run_cli(&["dlq", "list", "--data-dir", path_str(&dir), "--json"]);
        out.stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .collect::<Vec<_>>()
    };
    assert!(
        wait_until(Duration::from_secs(20), || dlq().len() >= 5),
        "not dead-lettered: {:?}",
        dlq()
    );
    for e in dlq() {
        assert!(ids.iter().any(|id| e["id"] == id.as_str()), "{e}");
        assert_eq!(e["reason"], "retry_exhausted", "{e}");
        assert_eq!(e["attempts"], 2, "{e}");
        let why = e["last_error"].as_str().unwrap_or_default();
        assert!(
            why.contains("TLS handshake") && why.contains("trusted CA"),
            "{why}"
        );
    }
    assert!(ds.requests().is_empty(), "nothing may be delivered");
    assert_eq!(
        attempts(&server, "tls_error"),
        10.0,
        "5 events × 2 attempts"
    );
    assert_eq!(attempts(&server, "delivered"), 0.0);
    assert_eq!(attempts(&server, "retryable"), 0.0);
    assert!(ds.seen.failed_handshakes.load(Ordering::Relaxed) >= 10);
}

#[test]
fn client_certificates_and_session_resumption() {
    let ca = Ca::new("sluice https mTLS CA");
    let leaf = ca.issue(&["sink.test"]);
    let clients = Ca::new("sluice https client CA");
    let client = clients.issue(&["sluice-client"]);
    // Every answer closes the connection: each delivery needs a handshake, which resumes the
    // session the previous one left in the destination's shared client config.
    let ds = TlsDownstream::start(server_config(&leaf, Some(&clients)), true);
    let files = tempfile::tempdir().unwrap();
    let ca_file = write(files.path(), "ca.pem", &ca.pem());
    let cert = write(files.path(), "client.pem", &client.cert_pem);
    let key = write(files.path(), "client.key", &client.key_pem);
    let dest = format!(
        "max_in_flight = 1\ntls = {{ ca_file = \"{ca_file}\", client_cert = \"{cert}\", \
         client_key = \"{key}\", server_name = \"sink.test\" }}"
    );
    let server = Server::start(big_buckets(Opts::config(&manifest(&ds.uri(), &dest))).workers(1));
    for i in 0..10 {
        server.ingest("/hooks/t", format!("mtls {i}").as_bytes());
    }
    assert!(
        wait_until(Duration::from_secs(20), || ds.requests().len() >= 10),
        "only {} of 10 delivered with a client certificate",
        ds.requests().len()
    );
    let hs = ds.seen.handshakes.load(Ordering::Relaxed);
    let resumed = ds.seen.resumed.load(Ordering::Relaxed);
    assert!(hs >= 10, "{hs} handshakes: connection: close was ignored");
    assert!(
        resumed >= 1,
        "no handshake resumed a session ({hs} handshakes)"
    );

    // The same server refuses a client without a certificate: tls_error, nothing delivered.
    let dest = format!(
        "retry = {{ max_attempts = 1 }}\ncircuit = {{ failures = 1000 }}\n\
         tls = {{ ca_file = \"{ca_file}\", server_name = \"sink.test\" }}"
    );
    let before = ds.requests().len();
    let server = Server::start(big_buckets(Opts::config(&manifest(&ds.uri(), &dest))));
    server.ingest("/hooks/t", b"no client cert");
    assert!(
        wait_until(Duration::from_secs(10), || attempts(&server, "tls_error")
            >= 1.0),
        "a refused client certificate must count as tls_error: {}",
        server.stderr()
    );
    assert_eq!(ds.requests().len(), before);
}

#[test]
fn a_bad_tls_file_fails_startup_with_exit_2_naming_the_key() {
    let files = tempfile::tempdir().unwrap();
    let garbage = write(files.path(), "ca.pem", "not a certificate\n");
    let uri = "https://127.0.0.1:9/sink";
    let dest = format!("tls = {{ ca_file = \"{garbage}\" }}");
    let failure = refused_config(
        Opts::config(&manifest(uri, &dest)),
        "a CA file holding no certificate",
    );
    assert!(failure.stderr.contains("tls.ca_file"), "{}", failure.stderr);
}
