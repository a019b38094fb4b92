//! [`Wire`] over TLS against a real rustls server on 127.0.0.1, with a CA and server
//! certificate generated per test (rcgen). Every server thread is bounded by socket timeouts and
//! every poll loop by a deadline.
use super::*;

use std::net::TcpListener;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::PrivatePkcs8KeyDer;
use rustls::{RootCertStore, ServerConfig, ServerConnection, StreamOwned};

pub(crate) struct Pki {
    pub(crate) ca_der: CertificateDer<'static>,
    pub(crate) server_chain: Vec<CertificateDer<'static>>,
    pub(crate) server_key: Vec<u8>,
}

use rustls::pki_types::CertificateDer;

/// A CA and a server certificate it signs for `names`.
pub(crate) fn pki(names: &[&str]) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // A distinct name per CA: a leaf from another CA is then an unknown issuer, not a bad
    // signature under a same-named CA.
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ca.distinguished_name
        .push(DnType::CommonName, format!("sluice test CA {n}"));
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let leaf = CertificateParams::new(names)
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    Pki {
        ca_der: ca.der().clone(),
        server_chain: vec![leaf.der().clone()],
        server_key: key.serialize_der(),
    }
}

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

pub(crate) fn client(trusted: &CertificateDer<'static>, name: &str) -> TlsClient {
    let mut roots = RootCertStore::empty();
    roots.add(trusted.clone()).unwrap();
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsClient {
        config: Arc::new(config),
        server_name: ServerName::try_from(name.to_string()).unwrap(),
    }
}

/// A TLS server answering each `ping…` message with `pong` + the same bytes, for `conns`
/// connections. Returns its port and how many handshakes completed.
fn server(p: &Pki, conns: usize) -> (u16, JoinHandle<usize>) {
    let key = PrivatePkcs8KeyDer::from(p.server_key.clone());
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(p.server_chain.clone(), key.into())
        .unwrap();
    let config = Arc::new(config);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = thread::spawn(move || {
        let mut ok = 0;
        for _ in 0..conns {
            let (s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let conn = ServerConnection::new(config.clone()).unwrap();
            let mut tls = StreamOwned::new(conn, s);
            let mut buf = [0u8; 64];
            match tls.read(&mut buf) {
                Ok(n) if n > 0 => {
                    ok += 1;
                    let mut answer = b"pong".to_vec();
                    answer.extend_from_slice(&buf[..n]);
                    let _ = tls.write_all(&answer);
                    let _ = tls.flush();
                }
                _ => {}
            }
        }
        ok
    });
    (port, h)
}

/// Connects to `port` through `c`, writes `msg`, and reads until the server's answer arrives
/// or an error ends it (at most 5 s).
fn exchange(port: u16, c: Option<&TlsClient>, msg: &[u8]) -> io::Result<Vec<u8>> {
    let mut poll = Poll::new().unwrap();
    let tcp = TcpStream::connect(format!("127.0.0.1:{port}").parse().unwrap()).unwrap();
    let mut wire = Wire::new(tcp, c).map_err(|(e, _)| e)?;
    poll.registry()
        .register(
            wire.stream(),
            Token(1),
            Interest::READABLE | Interest::WRITABLE,
        )
        .unwrap();
    let mut events = Events::with_capacity(8);
    let (mut wpos, mut got) = (0, Vec::new());
    let stop = Instant::now() + Duration::from_secs(5);
    while Instant::now() < stop {
        poll.poll(&mut events, Some(Duration::from_millis(20)))
            .unwrap();
        // Drive both directions on every wake, as the outbound pool does.
        loop {
            match wire.write(&msg[wpos..]) {
                Ok(n) => wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => {}
                Err(e) => return Err(e),
            }
            let mut buf = [0u8; 256];
            match wire.read(&mut buf) {
                Ok(0) => return Ok(got),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
            if got.len() >= 4 + msg.len() {
                return Ok(got);
            }
        }
    }
    Err(io::ErrorKind::TimedOut.into())
}

#[test]
fn plaintext_crosses_a_tls_connection_to_a_server_the_ca_vouches_for() {
    let p = pki(&["localhost", "127.0.0.1"]);
    let (port, srv) = server(&p, 2);
    let by_name = client(&p.ca_der, "localhost");
    assert_eq!(
        exchange(port, Some(&by_name), b"ping-1").unwrap(),
        b"pongping-1"
    );
    // An IP-address server name is verified against the certificate's IP SAN.
    let by_ip = client(&p.ca_der, "127.0.0.1");
    assert_eq!(
        exchange(port, Some(&by_ip), b"ping-2").unwrap(),
        b"pongping-2"
    );
    assert_eq!(srv.join().unwrap(), 2);
}

#[test]
fn an_untrusted_issuer_is_a_tls_fault_not_an_io_error() {
    let p = pki(&["localhost"]);
    let other = pki(&["localhost"]);
    let (port, srv) = server(&p, 1);
    let e = exchange(port, Some(&client(&other.ca_der, "localhost")), b"ping").unwrap_err();
    assert_eq!(tls_fault(&e), Some(TlsFault::UnknownIssuer), "{e}");
    assert_eq!(srv.join().unwrap(), 0, "no plaintext reached the server");
}

#[test]
fn a_certificate_for_another_name_is_a_name_mismatch() {
    let p = pki(&["example.test"]);
    let (port, srv) = server(&p, 1);
    let e = exchange(port, Some(&client(&p.ca_der, "localhost")), b"ping").unwrap_err();
    assert_eq!(tls_fault(&e), Some(TlsFault::NameMismatch), "{e}");
    assert_eq!(srv.join().unwrap(), 0);
}

#[test]
fn a_server_that_hangs_up_during_the_handshake_aborts_it() {
    let p = pki(&["localhost"]);
    // A plain TCP server: reads the ClientHello, then closes.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let srv = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
    });
    let e = exchange(port, Some(&client(&p.ca_der, "localhost")), b"ping").unwrap_err();
    assert_eq!(tls_fault(&e), Some(TlsFault::HandshakeAborted), "{e}");
    srv.join().unwrap();
}

#[test]
fn a_plain_wire_is_the_socket_itself() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let srv = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).unwrap();
        s.write_all(b"pong").unwrap();
        s.write_all(&buf).unwrap();
    });
    assert_eq!(exchange(port, None, b"ping").unwrap(), b"pongping");
    srv.join().unwrap();
}

#[test]
fn faults_read_as_reasons() {
    assert!(TlsFault::UnknownIssuer.to_string().contains("trusted CA"));
    let e = fault(TlsFault::Expired);
    assert_eq!(tls_fault(&e), Some(TlsFault::Expired));
    assert_eq!(tls_fault(&io::Error::other("x")), None);
    assert_eq!(
        tls_fault(&io::ErrorKind::ConnectionReset.into()),
        None,
        "a plain socket error is no TLS fault"
    );
}

#[test]
fn a_request_larger_than_the_handshake_buffer_goes_out_whole() {
    // 300 KiB: more than rustls buffers before the handshake ends (64 KiB) and more than one
    // socket buffer, so both WouldBlock paths of `write` are taken.
    const LEN: usize = 300 * 1024;
    let p = pki(&["localhost"]);
    let key = PrivatePkcs8KeyDer::from(p.server_key.clone());
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(p.server_chain.clone(), key.into())
        .unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let srv = thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let conn = ServerConnection::new(Arc::new(config)).unwrap();
        let mut tls = StreamOwned::new(conn, s);
        let mut got = vec![0u8; LEN];
        tls.read_exact(&mut got).unwrap();
        let sum: u64 = got.iter().map(|&b| b as u64).sum();
        tls.write_all(format!("pong{sum:020}").as_bytes()).unwrap();
        tls.flush().unwrap();
    });
    let msg: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    let want: u64 = msg.iter().map(|&b| b as u64).sum();
    let got = exchange_until(port, &client(&p.ca_der, "localhost"), &msg, 24).unwrap();
    assert_eq!(got, format!("pong{want:020}").as_bytes());
    srv.join().unwrap();
}

/// Like [`exchange`], but waits for an answer of `answer_len` bytes.
fn exchange_until(port: u16, c: &TlsClient, msg: &[u8], answer_len: usize) -> io::Result<Vec<u8>> {
    let mut poll = Poll::new().unwrap();
    let tcp = TcpStream::connect(format!("127.0.0.1:{port}").parse().unwrap()).unwrap();
    let mut wire = Wire::new(tcp, Some(c)).map_err(|(e, _)| e)?;
    poll.registry()
        .register(
            wire.stream(),
            Token(1),
            Interest::READABLE | Interest::WRITABLE,
        )
        .unwrap();
    let mut events = Events::with_capacity(8);
    let (mut wpos, mut got) = (0, Vec::new());
    let stop = Instant::now() + Duration::from_secs(5);
    while Instant::now() < stop && got.len() < answer_len {
        poll.poll(&mut events, Some(Duration::from_millis(20)))
            .unwrap();
        // The pool's order: write, read, write again.
        for _ in 0..2 {
            loop {
                match wire.write(&msg[wpos..]) {
                    Ok(0) => break,
                    Ok(n) => wpos += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => break,
                    Err(e) => return Err(e),
                }
            }
            let mut buf = [0u8; 256];
            loop {
                match wire.read(&mut buf) {
                    Ok(0) => return Ok(got),
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    assert_eq!(wpos, msg.len(), "the whole message went to rustls");
    Ok(got)
}
