//! One test per error row of the HTTP codec and the router: the status, a short body, and for
//! codec errors (the framing is lost) that the connection is closed.

use std::time::{Duration, Instant};

use crate::support::*;

/// Longest error body we call "short".
const SHORT: usize = 256;
/// How long the server may take to close after an error response.
const CLOSE_WITHIN: Duration = Duration::from_secs(5);

fn assert_short(r: &Response) {
    assert!(
        r.body.len() <= SHORT,
        "{} body is {} bytes: {:?}",
        r.status,
        r.body.len(),
        r.text()
    );
    assert!(
        r.header("content-length").is_some(),
        "{} without Content-Length: {:?}",
        r.status,
        r.headers
    );
}

/// Sends `bytes` on a new connection and reads one response.
fn exchange(server: &Server, bytes: &[u8]) -> (Client, Response) {
    let mut c = server.client();
    c.send(bytes).expect("send");
    let r = c.read_response().unwrap_or_else(|e| {
        panic!(
            "no response to {:?}: {e}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        )
    });
    (c, r)
}

/// A codec error: `status`, short body, then the server closes the connection.
fn assert_fatal(server: &Server, bytes: &[u8], status: u16) -> Response {
    let (mut c, r) = exchange(server, bytes);
    assert_eq!(
        r.status,
        status,
        "request {:?} → {} {:?}",
        String::from_utf8_lossy(&bytes[..bytes.len().min(200)]),
        r.status,
        r.text()
    );
    assert_short(&r);
    c.assert_closed(CLOSE_WITHIN);
    r
}

#[test]
fn malformed_request_line_is_400() {
    let server = Server::start(Opts::default());
    for raw in [
        &b"NOT A REQUEST\r\n\r\n"[..],
        b"GET /healthz\r\nHost: x\r\n\r\n",
        b"GET /healthz HTTP/1.1\nHost: x\n\n",
        b"\x01\x02\x03 / HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        assert_fatal(&server, raw, 400);
    }
    // The server is still fine.
    assert_eq!(server.get("/healthz").status, 200);
}

#[test]
fn bad_source_is_400() {
    let server = Server::start(Opts::default());
    let long = format!("/webhooks/{}", "a".repeat(65));
    for path in [
        "/webhooks/a%2Fb",
        long.as_str(),
        "/webhooks/a/b",
        "/webhooks/",
    ] {
        let mut c = server.client();
        let r = c.post(path, b"{}", &[]);
        assert_eq!(r.status, 400, "POST {path} → {} {}", r.status, r.text());
        assert_short(&r);
        // A routing error keeps the connection.
        if !r.closes() {
            accepted(&c.post("/webhooks/ok", b"{}", &[]));
        }
    }
}

#[test]
fn unknown_route_is_404() {
    let server = Server::start(Opts::default());
    let mut c = server.client();
    let r = c.post("/nope", b"{}", &[]);
    assert_eq!(r.status, 404, "{}", r.text());
    assert_short(&r);
    let r = c.get("/");
    assert_eq!(r.status, 404, "{}", r.text());
    assert_short(&r);
    let r = c.get("/webhook/x");
    assert_eq!(r.status, 404, "{}", r.text());
}

#[test]
fn get_on_webhook_route_is_405_allow_post() {
    let server = Server::start(Opts::default());
    let mut c = server.client();
    let r = c.get("/webhooks/x");
    assert_eq!(r.status, 405, "{}", r.text());
    assert_short(&r);
    assert_eq!(r.header("allow"), Some("POST"), "{:?}", r.headers);
    let r = c.request("PUT", "/webhooks/x", &[], b"{}");
    assert_eq!(r.status, 405, "{}", r.text());
    assert_eq!(r.header("allow"), Some("POST"), "{:?}", r.headers);
}

#[test]
fn post_on_healthz_is_405_allow_get() {
    let server = Server::start(Opts::default());
    let mut c = server.client();
    for path in ["/healthz", "/readyz", "/metrics"] {
        let r = c.post(path, b"", &[]);
        assert_eq!(r.status, 405, "POST {path}: {}", r.text());
        assert_short(&r);
        let allow = r
            .header("allow")
            .unwrap_or_else(|| panic!("405 without Allow: {:?}", r.headers));
        assert!(
            allow.split(',').any(|m| m.trim() == "GET"),
            "Allow: {allow}"
        );
    }
}

#[test]
fn unfinished_head_is_408_after_header_timeout() {
    let server = Server::start(Opts::config("[server]\nheader_timeout = \"1s\"\n"));
    let mut c = server.client();
    let t0 = Instant::now();
    c.send(b"POST /webhooks/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Len")
        .expect("send");
    let r = c.read_response().expect("a 408 response");
    let took = t0.elapsed();
    assert_eq!(r.status, 408, "{}", r.text());
    assert_short(&r);
    assert!(
        took >= Duration::from_millis(900),
        "408 after only {took:?}"
    );
    assert!(
        took <= Duration::from_secs(4),
        "408 after {took:?} (header_timeout 1s)"
    );
    c.assert_closed(CLOSE_WITHIN);
}

#[test]
fn unfinished_body_is_408_after_body_timeout() {
    let server = Server::start(Opts::config("[server]\nbody_timeout = \"1s\"\n"));
    let mut c = server.client();
    c.send(
        b"POST /webhooks/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n0123456789",
    )
    .expect("send");
    let t0 = Instant::now();
    let r = c.read_response().expect("a 408 response");
    let took = t0.elapsed();
    assert_eq!(r.status, 408, "{}", r.text());
    assert_short(&r);
    assert!(
        took >= Duration::from_millis(800),
        "408 after only {took:?}"
    );
    assert!(
        took <= Duration::from_secs(4),
        "408 after {took:?} (body_timeout 1s)"
    );
    c.assert_closed(CLOSE_WITHIN);
    // Nothing of the unfinished request reached the WAL.
    let mut server = server;
    server.stop();
    assert!(wal_inspect(&server.data_dir()).is_empty());
}

#[test]
fn post_without_length_is_411() {
    let server = Server::start(Opts::default());
    assert_fatal(
        &server,
        b"POST /webhooks/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        411,
    );
}

#[test]
fn content_length_over_max_body_is_413() {
    let server = Server::start(Opts::config("[server]\nmax_body_bytes = 1024\n"));
    // Answered from the head alone: the body is never sent.
    assert_fatal(
        &server,
        b"POST /webhooks/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2048\r\n\r\n",
        413,
    );
    // Exactly the limit is fine.
    accepted(&server.post("/webhooks/x", &[b'a'; 1024]));
}

#[test]
fn chunked_body_over_max_body_is_413() {
    let server = Server::start(Opts::config("[server]\nmax_body_bytes = 1024\n"));
    let mut raw =
        b"POST /webhooks/x HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    raw.extend(chunked(&[b'z'; 1500], &[600, 600]));
    assert_fatal(&server, &raw, 413);
    // A chunked body within the limit is accepted.
    let mut c = server.client();
    let r = c.post(
        "/webhooks/x",
        &chunked(&[b'y'; 1000], &[500]),
        &[("Transfer-Encoding", "chunked")],
    );
    accepted(&r);
}

#[test]
fn long_uri_is_414() {
    let server = Server::start(Opts::config("[server]\nmax_uri_bytes = 64\n"));
    let path = format!("/webhooks/{}", "a".repeat(200));
    let raw = encode_request("POST", &path, &[], b"{}");
    assert_fatal(&server, &raw, 414);
}

#[test]
fn large_head_is_431() {
    let server = Server::start(Opts::config(
        "[server]\nmax_head_bytes = 1024\nmax_uri_bytes = 512\n",
    ));
    let pad = "p".repeat(2000);
    let raw = encode_request("POST", "/webhooks/x", &[("X-Pad", &pad)], b"{}");
    assert_fatal(&server, &raw, 431);
    // A head just under the limit is fine.
    let pad = "p".repeat(700);
    accepted(
        &server
            .client()
            .post("/webhooks/x", b"{}", &[("X-Pad", &pad)]),
    );
}

#[test]
fn gzip_transfer_encoding_is_501() {
    let server = Server::start(Opts::default());
    assert_fatal(
        &server,
        b"POST /webhooks/x HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        501,
    );
}

#[test]
fn http2_request_line_is_505() {
    let server = Server::start(Opts::default());
    assert_fatal(
        &server,
        b"POST /webhooks/x HTTP/2.0\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}",
        505,
    );
}

#[test]
fn smuggling_shaped_framing_is_400() {
    let server = Server::start(Opts::default());
    // Both Content-Length and Transfer-Encoding.
    assert_fatal(
        &server,
        b"POST /webhooks/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    );
    // Two different Content-Lengths.
    assert_fatal(
        &server,
        b"POST /webhooks/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
        400,
    );
    // An invalid chunk size.
    assert_fatal(
        &server,
        b"POST /webhooks/x HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        400,
    );
    // HTTP/1.1 without Host.
    assert_fatal(&server, b"GET /healthz HTTP/1.1\r\n\r\n", 400);
    // Nothing of it reached the WAL.
    let mut server = server;
    server.stop();
    assert!(wal_inspect(&server.data_dir()).is_empty());
}

#[test]
fn expect_continue_with_a_body_over_the_limit_is_413_without_100() {
    let server = Server::start(Opts::config("[server]\nmax_body_bytes = 1024\n"));
    let r = assert_fatal(
        &server,
        b"POST /webhooks/x HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\nContent-Length: 4096\r\n\r\n",
        413,
    );
    assert_eq!(r.status, 413);
}

#[test]
fn slow_drip_body_is_cut_at_body_timeout() {
    let server = Server::start(Opts::config("[server]\nbody_timeout = \"2s\"\n"));
    let mut c = server.client();
    c.send(b"POST /webhooks/drip HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n")
        .expect("send head");
    let t0 = Instant::now();
    // One body byte every 250 ms: progress does not extend the body deadline.
    let mut cut = None;
    while t0.elapsed() < Duration::from_secs(2 + 4) {
        if c.send(b"d").is_err() {
            cut = Some(t0.elapsed());
            break;
        }
        let (how, got) = c.wait_closed(Duration::from_millis(250));
        if how != Closed::Open || !got.is_empty() {
            let text = String::from_utf8_lossy(&got).into_owned();
            assert!(
                got.is_empty() || text.starts_with("HTTP/1.1 408 "),
                "got {text:?}"
            );
            cut = Some(t0.elapsed());
            break;
        }
    }
    let cut = cut.unwrap_or_else(|| {
        panic!(
            "a body dripping for {:?} was never cut (body_timeout 2s)",
            t0.elapsed()
        )
    });
    assert!(cut >= Duration::from_millis(1500), "cut after only {cut:?}");
}
