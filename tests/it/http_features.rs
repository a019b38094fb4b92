//! HTTP/1.1 features of the server: keep-alive, pipelining, `Expect: 100-continue`, HTTP/1.0,
//! `Connection: close`, chunked request bodies.

use std::time::Duration;

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
    for (i, id) in ids.iter().enumerate() {
        let e = find_event(&events, id);
        assert_eq!(
            e.source,
            format!("pipe{i}"),
            "response {i} carries the id of another request"
        );
        assert_eq!(e.body_sha256, sha256_hex(format!("body {i}").as_bytes()));
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
