//! HTTP/1.1 features of the server: keep-alive, pipelining, `Expect: 100-continue`, HTTP/1.0,
//! `Connection: close`, chunked request bodies.

use std::time::{Duration, Instant};

use crate::support::*;

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    let server = Server::start(Opts::default());
    let mut c = server.client();
    let (a, _) = accepted(&c.post("/webhooks/ka", b"one", &[]));
    let h = c.get("/healthz");
    assert_eq!(h.status, 200);
    assert!(
        !h.closes(),
        "healthz closed a keep-alive connection: {:?}",
        h.headers
    );
    let (b, _) = accepted(&c.post("/webhooks/ka", b"two", &[]));
    assert_ne!(a, b);
    // Still open: a fourth request works too.
    assert_eq!(c.get("/readyz").status, 200);
}

#[test]
fn pipelined_posts_are_answered_in_order() {
    let mut server = Server::start(Opts::default());
    let mut c = server.client();
    let mut burst = Vec::new();
    for i in 0..3 {
        burst.extend(encode_request(
            "POST",
            &format!("/webhooks/pipe{i}"),
            &[],
            format!("body {i}").as_bytes(),
        ));
    }
    c.send(&burst).expect("send pipelined requests");
    let responses = c.read_responses(3).expect("three responses");
    let ids: Vec<String> = responses.iter().map(|r| accepted(r).0).collect();
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "{ids:?}"
    );
    // The connection is still usable after the burst.
    accepted(&c.post("/webhooks/pipe3", b"after", &[]));
    server.stop();
    // The i-th response belongs to the i-th request.
    let events = wal_inspect(&server.data_dir());
    assert_answers_in_order(&events, &ids, |i| (format!("pipe{i}"), format!("body {i}")));
}

/// The `i`-th id answers the `i`-th request, whose (source, body) is `request(i)`.
fn assert_answers_in_order(
    events: &[WalEvent],
    ids: &[String],
    request: impl Fn(usize) -> (String, String),
) {
    for (i, id) in ids.iter().enumerate() {
        let e = find_event(events, id);
        let (source, body) = request(i);
        assert_eq!(
            e.source, source,
            "response {i} carries the id of another request"
        );
        assert_eq!(e.body_sha256, sha256_hex(body.as_bytes()), "response {i}");
    }
}

#[test]
fn pipelined_mix_of_ops_and_ingest_keeps_order() {
    let server = Server::start(Opts::default());
    let mut c = server.client();
    let mut burst = encode_request("POST", "/webhooks/mix", &[], b"a");
    burst.extend(encode_request("GET", "/healthz", &[], b""));
    burst.extend(encode_request("GET", "/nope", &[], b""));
    burst.extend(encode_request("POST", "/webhooks/mix", &[], b"b"));
    c.send(&burst).expect("send");
    let rs = c.read_responses(4).expect("four responses");
    let statuses: Vec<u16> = rs.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![202, 200, 404, 202]);
}

#[test]
fn expect_100_continue() {
    let mut server = Server::start(Opts::default());
    let mut c = server.client();
    let body = b"{\"continued\":true}";
    c.send(
        format!(
            "POST /webhooks/cont HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .expect("send head");
    let interim = c
        .read_response()
        .expect("100 Continue before the body is sent");
    assert_eq!(interim.status, 100, "{interim:?}");
    assert_eq!(interim.version, "HTTP/1.1");
    c.send(body).expect("send body");
    let (id, _) = accepted(&c.read_response().expect("final response"));
    server.stop();
    let events = wal_inspect(&server.data_dir());
    assert_eq!(find_event(&events, &id).body_sha256, sha256_hex(body));
}

#[test]
fn http_1_0_gets_a_response_and_the_connection_closes() {
    let server = Server::start(Opts::default());
    let mut c = server.client();
    c.send(b"POST /webhooks/old HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi")
        .expect("send");
    let r = c.read_response().expect("response");
    accepted(&r);
    c.assert_closed(Duration::from_secs(5));

    let mut c = server.client();
    c.send(b"GET /healthz HTTP/1.0\r\n\r\n").expect("send");
    let r = c.read_response().expect("response");
    assert_eq!(r.status, 200);
    c.assert_closed(Duration::from_secs(5));
}

#[test]
fn connection_close_is_honoured() {
    let server = Server::start(Opts::default());
    let mut c = server.client();
    let r = c.post("/webhooks/bye", b"x", &[("Connection", "close")]);
    accepted(&r);
    assert!(
        r.closes(),
        "no Connection: close in the response: {:?}",
        r.headers
    );
    c.assert_closed(Duration::from_secs(5));

    let mut c = server.client();
    let r = c.request("GET", "/healthz", &[("Connection", "close")], b"");
    assert_eq!(r.status, 200);
    c.assert_closed(Duration::from_secs(5));
}

#[test]
fn chunked_body_is_stored_byte_identical() {
    let mut server = Server::start(Opts::default());
    let body = binary_body(5000);
    let mut c = server.client();
    let r = c.post(
        "/webhooks/chunky",
        &chunked(&body, &[1, 2, 100, 4000]),
        &[
            ("Transfer-Encoding", "chunked"),
            ("Content-Type", "application/octet-stream"),
        ],
    );
    let (id, _) = accepted(&r);
    // With a chunk extension and a trailer, byte by byte.
    let body2 = b"second \x00\xff body".to_vec();
    let mut raw =
        b"POST /webhooks/chunky HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    raw.extend_from_slice(b"7;ext=1\r\nsecond \r\n");
    raw.extend_from_slice(format!("{:x}\r\n", body2.len() - 7).as_bytes());
    raw.extend_from_slice(&body2[7..]);
    raw.extend_from_slice(b"\r\n0\r\nX-Trailer: t\r\n\r\n");
    for b in &raw {
        c.send(std::slice::from_ref(b)).expect("send byte");
    }
    let (id2, _) = accepted(&c.read_response().expect("response"));
    server.stop();
    let events = wal_inspect(&server.data_dir());
    let e = find_event(&events, &id);
    assert_eq!(e.body_len, body.len() as u64);
    assert_eq!(e.body_sha256, sha256_hex(&body));
    let e2 = find_event(&events, &id2);
    assert_eq!(e2.body_len, body2.len() as u64);
    assert_eq!(e2.body_sha256, sha256_hex(&body2));
}

#[test]
fn pipelining_deeper_than_max_pipeline_depth_is_answered_fully() {
    let server = Server::start(Opts::config("[server]\nmax_pipeline_depth = 2\n"));
    // Ops requests (answered at once) and ingest requests (answered after the WAL).
    for (method, path) in [("GET", "/healthz"), ("POST", "/webhooks/deep")] {
        let mut c = server.client();
        c.set_read_timeout(Duration::from_secs(5));
        let mut burst = Vec::new();
        for i in 0..6 {
            burst.extend(encode_request(
                method,
                path,
                &[],
                if method == "POST" {
                    format!("{i}").into_bytes()
                } else {
                    Vec::new()
                }
                .as_slice(),
            ));
        }
        c.send(&burst).expect("send");
        for i in 0..6 {
            let r = c.read_response().unwrap_or_else(|e| {
                panic!("{method} {path}: response {i} of 6 pipelined (depth 2) never came: {e}")
            });
            assert!(
                r.status == 200 || r.status == 202,
                "{method} {path} #{i}: {}",
                r.status
            );
        }
    }
}

#[test]
fn head_request_gets_headers_only() {
    let server = Server::start(Opts::default());
    let mut c = server.client();
    c.send(&encode_request("HEAD", "/healthz", &[], b""))
        .expect("send");
    let r = c.read_head_response().expect("HEAD response");
    assert_eq!(r.status, 200);
    // No body bytes followed: the next response on the connection parses.
    let r = c.get("/readyz");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text().trim(), "ready");
}

#[test]
fn http_1_0_keep_alive_is_honoured() {
    let server = Server::start(Opts::default());
    let mut c = server.client();
    c.send(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .expect("send");
    assert_eq!(c.read_response().expect("first").status, 200);
    c.send(b"POST /webhooks/old HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx")
        .expect("send");
    accepted(&c.read_response().expect("second"));
}

#[test]
fn absolute_form_target_is_routed() {
    let server = Server::start(Opts::default());
    let mut c = server.client();
    let r = c.post("http://127.0.0.1/webhooks/absolute", b"{}", &[]);
    accepted(&r);
}

#[test]
fn idle_keep_alive_connection_is_closed_after_idle_timeout() {
    let server = Server::start(Opts::config("[server]\nidle_timeout = \"1s\"\n"));
    let mut c = server.client();
    accepted(&c.post("/webhooks/idle", b"{}", &[]));
    let t0 = Instant::now();
    let (how, got) = c.wait_closed(Duration::from_secs(1 + 4));
    assert_ne!(
        how,
        Closed::Open,
        "idle connection still open after {:?}",
        t0.elapsed()
    );
    assert!(
        got.is_empty(),
        "idle close sent {:?}",
        String::from_utf8_lossy(&got)
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(800),
        "closed after only {:?}",
        t0.elapsed()
    );
}

#[test]
fn requests_pipelined_after_connection_close_are_not_ingested() {
    let mut server = Server::start(Opts::default());
    let mut c = server.client();
    let mut burst = encode_request(
        "POST",
        "/webhooks/close1",
        &[("Connection", "close")],
        b"first",
    );
    burst.extend(encode_request("POST", "/webhooks/close2", &[], b"second"));
    c.send(&burst).expect("send");
    let (id, _) = accepted(&c.read_response().expect("response to the first request"));
    c.assert_closed(Duration::from_secs(5));
    server.stop();
    let events = wal_inspect(&server.data_dir());
    find_event(&events, &id);
    let unanswered: Vec<&WalEvent> = events.iter().filter(|e| e.source == "close2").collect();
    assert!(
        unanswered.is_empty(),
        "a request after `Connection: close` was written to the WAL without any response: {unanswered:#?}"
    );
}

#[test]
fn request_then_half_close_still_gets_its_response() {
    let mut server = Server::start(Opts::default());
    let mut c = server.client();
    c.send(&encode_request("POST", "/webhooks/halfclose", &[], b"bye"))
        .expect("send");
    c.stream
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown(Write)");
    let (id, _) = accepted(&c.read_response().expect("response after the client's FIN"));
    c.assert_closed(Duration::from_secs(5));
    server.stop();
    find_event(&wal_inspect(&server.data_dir()), &id);
}

#[test]
fn long_pipeline_of_posts_is_answered_in_order() {
    let mut server = Server::start(Opts::default());
    let mut c = server.client();
    let n = 100;
    let mut burst = Vec::new();
    for i in 0..n {
        let body = format!("pipelined body {i}");
        burst.extend(encode_request(
            "POST",
            &format!("/webhooks/lp{}", i % 7),
            &[],
            body.as_bytes(),
        ));
    }
    c.send(&burst).expect("send");
    let mut ids = Vec::new();
    for i in 0..n {
        let r = c
            .read_response()
            .unwrap_or_else(|e| panic!("response {i} of {n}: {e}"));
        ids.push(accepted(&r).0);
    }
    server.stop();
    let events = wal_inspect(&server.data_dir());
    assert_answers_in_order(&events, &ids, |i| {
        (format!("lp{}", i % 7), format!("pipelined body {i}"))
    });
    assert_eq!(events.len(), n);
}
