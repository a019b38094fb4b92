//! Reader-level tests: every error row of the status table, pipelining, resumability at every
//! split point, HTTP/1.0, 100-continue.

use super::*;

/// A comparable summary of one request or error.
fn summary(event: &ReadEvent) -> Option<String> {
    match event {
        ReadEvent::Request(Request { head, body }) => {
            let headers: Vec<String> = head
                .headers()
                .map(|(n, v)| format!("{n}={}", String::from_utf8_lossy(v)))
                .collect();
            Some(format!(
                "{} {} {:?} ka={} ec={} {:?} {:?} body={}",
                head.method.as_str(),
                head.target(),
                head.version,
                head.keep_alive,
                head.expect_continue,
                head.framing,
                headers,
                String::from_utf8_lossy(body)
            ))
        }
        ReadEvent::Error(e) => Some(format!("error {}", e.status())),
        ReadEvent::Incomplete | ReadEvent::HeadReady { .. } => None,
    }
}

/// Feeds `input` in pieces cut at `cuts`, polling until no progress after each piece.
fn run(input: &[u8], cuts: &[usize], limits: &Limits) -> Vec<String> {
    let mut reader = RequestReader::new(limits.clone());
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut start = 0;
    for &end in cuts.iter().chain(std::iter::once(&input.len())) {
        buf.extend_from_slice(&input[start..end]);
        start = end;
        loop {
            let event = reader.poll(&mut buf);
            let stop = matches!(event, ReadEvent::Incomplete | ReadEvent::Error(_));
            out.extend(summary(&event));
            if matches!(event, ReadEvent::Error(_)) {
                return out;
            }
            if stop {
                break;
            }
        }
    }
    out
}

fn whole(input: &[u8]) -> Vec<String> {
    run(input, &[], &Limits::default())
}

fn first_error(input: &[u8], limits: &Limits) -> Option<u16> {
    let mut reader = RequestReader::new(limits.clone());
    let mut buf = input.to_vec();
    loop {
        match reader.poll(&mut buf) {
            ReadEvent::Error(e) => return Some(e.status()),
            ReadEvent::Incomplete => return None,
            _ => {}
        }
    }
}

fn status_of(input: &[u8]) -> Option<u16> {
    first_error(input, &Limits::default())
}

fn one_request(input: &[u8]) -> Request {
    let mut reader = RequestReader::new(Limits::default());
    let mut buf = input.to_vec();
    match reader.poll(&mut buf) {
        ReadEvent::Request(r) => r,
        other => panic!("expected a request, got {other:?}"),
    }
}

const GITHUB: &[u8] = b"POST /hooks/github?src=gh&x=1 HTTP/1.1\r\nHost: sluice.example\r\nUser-Agent: GitHub-Hookshot/abc\r\nContent-Type: application/json\r\nContent-Length: 5\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: 72d3162e\r\n\r\nhello";

#[test]
fn parses_head_lowercases_names_and_splits_target() {
    let r = one_request(GITHUB);
    assert_eq!(r.head.method, Method::Post);
    assert_eq!(r.head.target(), "/hooks/github?src=gh&x=1");
    assert_eq!(r.head.path(), "/hooks/github");
    assert_eq!(r.head.query(), Some("src=gh&x=1"));
    assert_eq!(r.head.version, Version::Http11);
    assert!(r.head.keep_alive);
    assert_eq!(r.head.framing, BodyFraming::Length(5));
    assert_eq!(r.head.header("x-github-event"), Some(&b"push"[..]));
    assert_eq!(r.head.header("X-GitHub-Delivery"), Some(&b"72d3162e"[..]));
    assert_eq!(r.head.content_type(), Some(&b"application/json"[..]));
    assert_eq!(r.head.header_count(), 6);
    assert!(r.head.headers().all(|(n, _)| n == n.to_ascii_lowercase()));
    assert_eq!(r.body, b"hello");

    let r = one_request(b"GET http://h.example/x/y?q=1 HTTP/1.1\r\nHost: h.example\r\n\r\n");
    assert_eq!((r.head.path(), r.head.query()), ("/x/y", Some("q=1")));
    let r = one_request(b"GET https://h.example?q HTTP/1.1\r\nHost: h.example\r\n\r\n");
    assert_eq!((r.head.path(), r.head.query()), ("/", Some("q")));
    let r = one_request(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!((r.head.path(), r.head.query()), ("*", None));
    let r = one_request(b"GET /plain HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.head.path(), "/plain");
    assert_eq!(r.head.query(), None);
    assert_eq!(r.head.framing, BodyFraming::None);
}

#[test]
fn pipelined_requests_one_per_poll() {
    let mut input = GITHUB.to_vec();
    input.extend_from_slice(b"\r\nGET /a HTTP/1.1\r\nHost: a\r\n\r\n");
    input.extend_from_slice(
        b"POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    );
    input.extend_from_slice(b"GET /partial HTTP/1.1\r\n");
    let mut reader = RequestReader::new(Limits::default());
    let mut buf = input.clone();
    let ReadEvent::Request(first) = reader.poll(&mut buf) else {
        panic!("first")
    };
    assert_eq!(first.head.path(), "/hooks/github");
    assert_eq!(buf.len(), input.len() - GITHUB.len(), "leftover stays");
    let ReadEvent::Request(second) = reader.poll(&mut buf) else {
        panic!("second")
    };
    assert_eq!(second.head.path(), "/a");
    let ReadEvent::Request(third) = reader.poll(&mut buf) else {
        panic!("third")
    };
    assert_eq!(third.body, b"abc");
    assert!(matches!(reader.poll(&mut buf), ReadEvent::Incomplete));
    assert!(!reader.is_idle());
    assert_eq!(buf, b"GET /partial HTTP/1.1\r\n");
}

#[test]
fn poll_slice_with_an_offset_matches_poll() {
    let mut input = Vec::new();
    for i in 0..50 {
        input.extend_from_slice(format!("GET /{i} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
    }
    input.extend_from_slice(b"GET /last HTTP/1.1\r\n");
    let mut reader = RequestReader::new(Limits::default());
    let mut offset = 0;
    let mut paths = Vec::new();
    loop {
        let (event, consumed) = reader.poll_slice(&input[offset..]);
        offset += consumed;
        match event {
            ReadEvent::Request(r) => paths.push(r.head.path().to_owned()),
            ReadEvent::Incomplete => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(paths.len(), 50);
    assert_eq!(paths[49], "/49");
    // Compact, append the rest of the last request, and continue.
    let mut buf = input[offset..].to_vec();
    buf.extend_from_slice(b"Host: a\r\n\r\n");
    let ReadEvent::Request(r) = reader.poll(&mut buf) else {
        panic!("last")
    };
    assert_eq!(r.head.path(), "/last");
    assert!(buf.is_empty());
}

#[test]
fn zero_limits_do_not_misfire_on_empty_input() {
    let l = Limits {
        max_head_bytes: 0,
        ..Limits::default()
    };
    let mut reader = RequestReader::new(l);
    assert!(matches!(
        reader.poll(&mut Vec::new()),
        ReadEvent::Incomplete
    ));
    assert!(matches!(
        reader.poll(&mut b"G".to_vec()),
        ReadEvent::Error(HttpError::HeaderTooLarge)
    ));
}

#[test]
fn every_split_point_gives_the_same_result() {
    let mut pipelined = GITHUB.to_vec();
    pipelined.extend_from_slice(b"GET /x?y HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let inputs: Vec<Vec<u8>> = vec![
        GITHUB.to_vec(),
        pipelined,
        b"\r\nPUT /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip , Chunked\r\n\r\n".to_vec(),
        b"PUT /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n4;ext=1\r\nwiki\r\n5\r\npedia\r\n0\r\nTrailer: t\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n".to_vec(),
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nwikiXX".to_vec(),
        b"GET / HTTP/2.0\r\nHost: h\r\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nHost: h\nX: y\r\n\r\n".to_vec(),
    ];
    for input in &inputs {
        let expected = whole(input);
        assert!(!expected.is_empty());
        let bytewise: Vec<usize> = (1..input.len()).collect();
        assert_eq!(run(input, &bytewise, &Limits::default()), expected);
        for cut in 1..input.len() {
            assert_eq!(
                run(input, &[cut], &Limits::default()),
                expected,
                "cut {cut}"
            );
        }
    }
}

#[test]
fn http10_defaults_to_close() {
    let r = one_request(b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(r.head.version, Version::Http10);
    assert!(!r.head.keep_alive);
    let r = one_request(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
    assert!(r.head.keep_alive);
    let r = one_request(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, close\r\n\r\n");
    assert!(!r.head.keep_alive);
    let r = one_request(b"POST / HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi");
    assert_eq!(r.body, b"hi");
    // Expect is ignored on HTTP/1.0 (RFC 9110 §10.1.1), whatever its value.
    let r = one_request(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n");
    assert!(!r.head.expect_continue);
    assert_eq!(status_of(b"GET / HTTP/1.0\r\nExpect: foo\r\n\r\n"), None);
}

#[test]
fn expect_100_continue() {
    let mut reader = RequestReader::new(Limits::default());
    let mut buf =
        b"POST /h HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 5\r\n\r\n"
            .to_vec();
    assert!(matches!(
        reader.poll(&mut buf),
        ReadEvent::HeadReady {
            expect_continue: true
        }
    ));
    assert_eq!(reader.pending_head().map(|h| h.path()), Some("/h"));
    assert!(buf.is_empty());
    assert!(matches!(reader.poll(&mut buf), ReadEvent::Incomplete));
    buf.extend_from_slice(b"hel");
    assert!(matches!(reader.poll(&mut buf), ReadEvent::Incomplete));
    assert_eq!(reader.body_received(), 3);
    buf.extend_from_slice(b"lo");
    let ReadEvent::Request(r) = reader.poll(&mut buf) else {
        panic!("request")
    };
    assert!(r.head.expect_continue);
    assert_eq!(r.body, b"hello");
    assert!(reader.is_idle());
    // Without Expect, a pending body still reports HeadReady, with expect_continue false.
    let mut buf = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nab".to_vec();
    assert!(matches!(
        reader.poll(&mut buf),
        ReadEvent::HeadReady {
            expect_continue: false
        }
    ));
    assert_eq!(
        status_of(b"POST / HTTP/1.1\r\nHost: a\r\nExpect: fast\r\nContent-Length: 1\r\n\r\n"),
        Some(417)
    );
}

#[test]
fn bad_request_rows() {
    let cases: &[&[u8]] = &[
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", // TLS hello, incomplete
        b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",           // double space
        b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", // space in name
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n", // control in value
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", // bare CR in value
        b"GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n",      // bare LF ending a field
        b"GET / HTTP/1.1\nHost: a\r\n\r\n",              // bare LF ending request line
        b"GET / HTTP/1.1\rHost: a\r\n\r\n",              // bare CR in request line
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n folded\r\n\r\n", // obs-fold
        b"GET / HTTP/1.1\r\n Host: a\r\n\r\n",           // leading space
        b"GET /a\x01b HTTP/1.1\r\nHost: a\r\n\r\n",      // control in target
        b"GET /a\x7fb HTTP/1.1\r\nHost: a\r\n\r\n",      // DEL in target
        b"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", // non-ASCII target
        b"GET / HTTP/1.1\r\n\r\n",                       // missing Host
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", // two Hosts
        b"GET / HTTP/1.1 x\r\nHost: a\r\n\r\n",          // junk after version
        b"GET / http/1.1\r\nHost: a\r\n\r\n",            // lowercase version
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n", // bad CL
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n",
    ];
    for &c in cases {
        assert_eq!(status_of(c), Some(400), "{:?}", String::from_utf8_lossy(c));
    }
    // Identical duplicate lengths are one length.
    let r = one_request(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-length: 2\r\n\r\nhi",
    );
    assert_eq!(r.body, b"hi");
}

#[test]
fn length_required_rows() {
    for m in ["POST", "PUT", "PATCH"] {
        let req = format!("{m} / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(status_of(req.as_bytes()), Some(411), "{m}");
    }
    assert_eq!(status_of(b"POST / HTTP/1.0\r\n\r\n"), Some(411));
    for m in ["GET", "HEAD", "DELETE", "OPTIONS"] {
        let req = format!("{m} / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(status_of(req.as_bytes()), None, "{m}");
    }
}

#[test]
fn payload_too_large_rows() {
    let l = Limits {
        max_body_bytes: 10,
        ..Limits::default()
    };
    // Refused on the head alone, before any body byte.
    let head = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n";
    assert_eq!(first_error(head, &l), Some(413));
    let huge = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n";
    assert_eq!(first_error(huge, &l), Some(413));
    let ok = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789";
    assert_eq!(first_error(ok, &l), None);
    let chunked =
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n5\r\n";
    assert_eq!(first_error(chunked, &l), Some(413));
}

#[test]
fn body_allocation_follows_received_bytes() {
    let mut reader = RequestReader::new(Limits::default());
    let mut buf =
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10000000\r\n\r\n0123456789".to_vec();
    assert!(matches!(reader.poll(&mut buf), ReadEvent::HeadReady { .. }));
    assert_eq!(reader.body_received(), 10);
    assert!(matches!(reader.poll(&mut buf), ReadEvent::Incomplete));
}

#[test]
fn uri_too_long_rows() {
    let l = Limits {
        max_uri_bytes: 32,
        ..Limits::default()
    };
    let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(32));
    assert_eq!(first_error(long.as_bytes(), &l), Some(414));
    let fits = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(31));
    assert_eq!(first_error(fits.as_bytes(), &l), None);
    // Still incomplete: no CRLF yet, the target alone is over the limit.
    let partial = format!("GET /{}", "a".repeat(40));
    assert_eq!(first_error(partial.as_bytes(), &l), Some(414));
}

#[test]
fn header_too_large_rows() {
    let l = Limits {
        max_head_bytes: 64,
        max_headers: 2,
        ..Limits::default()
    };
    let big = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "v".repeat(40));
    assert_eq!(first_error(big.as_bytes(), &l), Some(431));
    // Incomplete head already over the limit.
    let partial = format!("GET / HTTP/1.1\r\nX: {}", "v".repeat(60));
    assert_eq!(first_error(partial.as_bytes(), &l), Some(431));
    // Exactly at the limit is fine.
    let exact = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "v".repeat(32));
    assert_eq!(exact.len(), 64);
    assert_eq!(first_error(exact.as_bytes(), &l), None);
    let over = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "v".repeat(33));
    assert_eq!(first_error(over.as_bytes(), &l), Some(431));
    let many = b"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n";
    assert_eq!(first_error(many, &l), Some(431));
}

#[test]
fn not_implemented_rows() {
    for te in [
        "gzip",
        "gzip, chunked",
        "chunked, gzip",
        "identity",
        "chunked;x=1",
    ] {
        let req = format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {te}\r\n\r\n");
        assert_eq!(status_of(req.as_bytes()), Some(501), "{te}");
    }
    let req = format!("{} / HTTP/1.1\r\nHost: a\r\n\r\n", "M".repeat(33));
    assert_eq!(status_of(req.as_bytes()), Some(501));
    // Case-insensitive, split over two fields, empty list elements ignored.
    let r = one_request(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,\r\nTransfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n");
    assert_eq!(r.head.framing, BodyFraming::Chunked);
}

#[test]
fn version_not_supported_rows() {
    for v in ["HTTP/2.0", "HTTP/1.2", "HTTP/3", "HTTP/0.9"] {
        let req = format!("GET / {v}\r\nHost: a\r\n\r\n");
        assert_eq!(status_of(req.as_bytes()), Some(505), "{v}");
        // Detected as soon as the request line ends.
        let line = format!("GET / {v}\r\n");
        assert_eq!(status_of(line.as_bytes()), Some(505), "{v}");
    }
}

#[test]
fn errors_are_sticky_and_leading_empty_lines_ignored() {
    let mut reader = RequestReader::new(Limits::default());
    let mut buf = b"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
    assert!(matches!(reader.poll(&mut buf), ReadEvent::Request(_)));
    assert!(reader.is_idle());
    buf.extend_from_slice(b"BAD\x00");
    assert!(matches!(
        reader.poll(&mut buf),
        ReadEvent::Error(HttpError::BadRequest(_))
    ));
    buf.extend_from_slice(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert!(matches!(
        reader.poll(&mut buf),
        ReadEvent::Error(HttpError::BadRequest(_))
    ));
}

#[test]
fn error_status_and_reason() {
    let all = [
        (HttpError::BadRequest("x"), 400),
        (HttpError::LengthRequired, 411),
        (HttpError::PayloadTooLarge, 413),
        (HttpError::UriTooLong, 414),
        (HttpError::ExpectationFailed, 417),
        (HttpError::HeaderTooLarge, 431),
        (HttpError::NotImplemented, 501),
        (HttpError::VersionNotSupported, 505),
    ];
    for (e, status) in all {
        assert_eq!(e.status(), status);
        assert!(!e.reason().is_empty());
        assert!(!reason_phrase(status).is_empty());
    }
}

#[test]
fn mutated_inputs_never_panic_and_split_consistently() {
    // Deterministic xorshift; mutations favour the bytes that matter to framing.
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let alphabet = b"\r\n :;,0123456789aAfFzZ\t\x00\x7f\xff/?-";
    let bases: [&[u8]; 2] = [
        GITHUB,
        b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n4;e=1\r\nwiki\r\n5\r\npedia\r\n0\r\nT: t\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
    ];
    let limits = Limits {
        max_head_bytes: 256,
        max_uri_bytes: 32,
        max_body_bytes: 64,
        max_chunk_line_bytes: 16,
        max_headers: 8,
    };
    for i in 0..3000 {
        let mut input = bases[i % 2].to_vec();
        for _ in 0..1 + next() % 3 {
            let at = (next() % input.len() as u64) as usize;
            let b = alphabet[(next() % alphabet.len() as u64) as usize];
            match next() % 3 {
                0 => input[at] = b,
                1 => input.insert(at, b),
                _ => {
                    input.remove(at);
                }
            }
        }
        let expected = run(&input, &[], &limits);
        let mut cuts = [
            (next() % input.len() as u64) as usize,
            (next() % input.len() as u64) as usize,
        ];
        cuts.sort_unstable();
        assert_eq!(
            run(&input, &cuts, &limits),
            expected,
            "{:?}",
            String::from_utf8_lossy(&input)
        );
    }
}

#[test]
fn body_gate_stops_before_every_body() {
    let mut reader = RequestReader::new(Limits::default()).with_body_gate();
    let mut buf = b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\nHost: h\r\n\r\nPOST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\n".to_vec();
    // The whole body is buffered, yet the gate reports the head first and consumes nothing of it.
    assert!(matches!(
        reader.poll(&mut buf),
        ReadEvent::HeadReady {
            expect_continue: false
        }
    ));
    assert_eq!(reader.declared_length(), Some(3));
    assert_eq!((reader.body_received(), reader.body_capacity()), (0, 0));
    assert!(buf.starts_with(b"abc"));
    let ReadEvent::Request(r) = reader.poll(&mut buf) else {
        panic!("request")
    };
    assert_eq!(r.body, b"abc");
    // No body: no gate.
    let ReadEvent::Request(r) = reader.poll(&mut buf) else {
        panic!("request")
    };
    assert_eq!(r.head.path(), "/b");
    assert!(matches!(reader.poll(&mut buf), ReadEvent::HeadReady { .. }));
    assert_eq!(reader.declared_length(), None, "chunked");
    let ReadEvent::Request(r) = reader.poll(&mut buf) else {
        panic!("request")
    };
    assert_eq!(r.body, b"xy");
    assert!(buf.is_empty() && reader.is_idle());
}

#[test]
fn a_declared_body_is_one_allocation_of_its_length() {
    let mut reader = RequestReader::new(Limits::default()).with_body_gate();
    let len = 3 << 20;
    let mut buf =
        format!("POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: {len}\r\n\r\n").into_bytes();
    assert!(matches!(reader.poll(&mut buf), ReadEvent::HeadReady { .. }));
    assert_eq!(
        reader.body_capacity(),
        0,
        "nothing before the first body byte"
    );
    // The body arrives in reads of 64 KiB: the buffer is sized to the declared length at the
    // first one and never reallocated (a doubling would copy and could hold twice the body).
    let mut first = None;
    let mut sent = 0;
    loop {
        let n = (len - sent).min(64 << 10);
        buf.resize(buf.len() + n, b'x');
        sent += n;
        match reader.poll(&mut buf) {
            ReadEvent::Incomplete => {
                assert_eq!(reader.body_capacity(), len);
                assert_eq!(reader.body_received(), sent);
                first.get_or_insert(reader.body_capacity());
            }
            ReadEvent::Request(r) => {
                assert_eq!((r.body.len(), r.body.capacity()), (len, len));
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(first, Some(len));
}
