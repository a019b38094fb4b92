//! Client codec tests: every framing, interim responses, keep-alive, bounded body keeping,
//! resumability at every split point, pipelining, errors, `Retry-After`, the request writer,
//! and a deterministic mutation loop.

use super::*;

fn limits() -> ClientLimits {
    ClientLimits::default()
}

/// Feeds `input` in pieces ending at `cuts` (then the rest), polling until no progress after
/// each piece; then reports EOF if `eof`. Returns every non-`Incomplete` event.
fn run(input: &[u8], cuts: &[usize], limits: &ClientLimits, eof: bool) -> Vec<ResponseEvent> {
    let mut reader = ResponseReader::new(limits.clone());
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut start = 0;
    for &end in cuts.iter().chain(std::iter::once(&input.len())) {
        buf.extend_from_slice(&input[start..end]);
        start = end;
        loop {
            match reader.poll(&mut buf) {
                ResponseEvent::Incomplete => break,
                e @ ResponseEvent::Error(_) => {
                    out.push(e);
                    return out;
                }
                r => out.push(r),
            }
        }
    }
    if eof {
        out.push(reader.on_eof());
    }
    out
}

fn whole(input: &[u8]) -> Vec<ResponseEvent> {
    run(input, &[], &limits(), false)
}

fn one(input: &[u8]) -> Response {
    match whole(input).as_slice() {
        [ResponseEvent::Response(r)] => r.clone(),
        other => panic!("expected one response, got {other:?}"),
    }
}

fn error_of(input: &[u8], limits: &ClientLimits) -> ClientError {
    match run(input, &[], limits, true).last() {
        Some(ResponseEvent::Error(e)) => *e,
        other => panic!("expected an error, got {other:?}"),
    }
}

const CL: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}";
const CHUNKED: &[u8] = b"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\"b\" ; c\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\nX-Other: 2\r\n\r\n";
const CLOSE: &[u8] = b"HTTP/1.1 500 Internal Server Error\r\nServer: x\r\n\r\nuntil close";
const INTERIM: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";

#[test]
fn content_length_body() {
    let r = one(CL);
    assert_eq!(r.status, 200);
    assert_eq!(r.body_prefix, b"{\"ok\":true}");
    assert_eq!(r.body_len, 11);
    assert!(r.keep_alive);
    assert_eq!(r.retry_after, None);
    assert_eq!(r.header("CONTENT-TYPE"), Some(&b"application/json"[..]));
    assert_eq!(r.headers[1], ("content-length".to_string(), b"11".to_vec()));
}

#[test]
fn chunked_body_with_extensions_and_trailers() {
    let r = one(CHUNKED);
    assert_eq!(r.status, 202);
    assert_eq!(r.body_prefix, b"hello world");
    assert_eq!(r.body_len, 11);
    assert!(r.keep_alive);
    // Trailers are discarded, not merged into the headers.
    assert_eq!(r.header("x-trailer"), None);
    // `Transfer-Encoding: gzip, chunked` style lists are refused; case is ignored for chunked.
    let r = one(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: , CHUNKED\r\n\r\n0\r\n\r\n");
    assert_eq!(r.body_len, 0);
}

#[test]
fn close_delimited_body_ends_at_eof() {
    let events = run(CLOSE, &[], &limits(), false);
    assert!(events.is_empty(), "{events:?}");
    let events = run(CLOSE, &[], &limits(), true);
    let [ResponseEvent::Response(r)] = events.as_slice() else {
        panic!("{events:?}");
    };
    assert_eq!((r.status, r.body_len, r.keep_alive), (500, 11, false));
    assert_eq!(r.body_prefix, b"until close");
    // Empty close-delimited body, and an HTTP/1.0 one even with keep-alive.
    let events = run(
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n",
        &[],
        &limits(),
        true,
    );
    let [ResponseEvent::Response(r)] = events.as_slice() else {
        panic!("{events:?}");
    };
    assert_eq!((r.body_len, r.keep_alive), (0, false));
}

#[test]
fn no_body_for_204_and_304() {
    let input = b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n\
                  HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n\
                  HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx";
    let events = whole(input);
    let statuses: Vec<(u16, u64, bool)> = events
        .iter()
        .map(|e| match e {
            ResponseEvent::Response(r) => (r.status, r.body_len, r.keep_alive),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(statuses, [(204, 0, true), (304, 0, true), (200, 1, true)]);
}

#[test]
fn interim_responses_are_skipped() {
    let r = one(INTERIM);
    assert_eq!(r.status, 201);
    assert_eq!(r.body_prefix, b"ok");
    assert_eq!(r.header("link"), None);
    // An interim head alone is not a response.
    assert!(whole(b"HTTP/1.1 100 Continue\r\n\r\n").is_empty());
    assert_eq!(
        error_of(b"HTTP/1.1 101 Switching Protocols\r\n\r\n", &limits()),
        ClientError::Malformed("unexpected 101 switching protocols")
    );
}

#[test]
fn keep_alive_rules() {
    let cases: &[(&[u8], bool)] = &[
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false),
        (b"HTTP/1.1 200 OK\r\nConnection: Upgrade, CLOSE\r\nContent-Length: 0\r\n\r\n", false),
        (b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", true),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false),
        (b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n", true),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false),
        (b"HTTP/1.0 204 No Content\r\nConnection: keep-alive\r\n\r\n", true),
    ];
    for (input, keep_alive) in cases {
        let r = one(input);
        assert_eq!(
            r.keep_alive,
            *keep_alive,
            "{}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn body_over_keep_is_counted_not_kept() {
    let l = ClientLimits {
        max_body_keep: 4,
        ..limits()
    };
    let mut cl = b"HTTP/1.1 200 OK\r\nContent-Length: 10000\r\n\r\n".to_vec();
    cl.extend(std::iter::repeat(b'a').take(10_000));
    let mut chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..10 {
        chunked.extend_from_slice(b"3e8\r\n");
        chunked.extend(std::iter::repeat(b'a').take(1000));
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let mut close = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
    close.extend(std::iter::repeat(b'a').take(10_000));
    for (input, eof) in [(&cl, false), (&chunked, false), (&close, true)] {
        // Fed in 100-byte reads: the prefix never grows past the limit.
        let cuts: Vec<usize> = (100..input.len()).step_by(100).collect();
        let events = run(input, &cuts, &l, eof);
        let Some(ResponseEvent::Response(r)) = events.first() else {
            panic!("{events:?}");
        };
        assert_eq!(
            (r.body_len, r.body_prefix.as_slice()),
            (10_000, &b"aaaa"[..])
        );
        assert!(r.body_prefix.capacity() <= 4);
    }
}

#[test]
fn body_too_large() {
    let l = ClientLimits {
        max_body_bytes: 10,
        ..limits()
    };
    let cases: &[&[u8]] = &[
        b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n",
        b"HTTP/1.1 200 OK\r\n\r\n01234567890",
    ];
    for input in cases {
        assert_eq!(error_of(input, &l), ClientError::BodyTooLarge);
    }
    // Exactly at the limit is fine.
    let r = run(b"HTTP/1.1 200 OK\r\n\r\n0123456789", &[], &l, true);
    assert!(matches!(r.as_slice(), [ResponseEvent::Response(r)] if r.body_len == 10));
}

#[test]
fn every_split_point_gives_the_same_result() {
    let pipelined = [CL, CHUNKED, INTERIM, b"\r\nHTTP/1.1 204 No Content\r\n\r\n"].concat();
    let cases: Vec<Vec<u8>> = vec![
        CL.to_vec(),
        CHUNKED.to_vec(),
        CLOSE.to_vec(),
        INTERIM.to_vec(),
        pipelined,
        b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\n\r\n".to_vec(),
        b"HTTP/1.0 200 OK\nContent-Length: 3\n\nabc".to_vec(),
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab".to_vec(),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX".to_vec(),
        b"HTTP/1.1 2x0 OK\r\n\r\n".to_vec(),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n".to_vec(),
        b"HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n".to_vec(),
        b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 120\r\nContent-Length: 0\r\n\r\n"
            .to_vec(),
    ];
    for input in &cases {
        let l = limits();
        let expected = run(input, &[], &l, true);
        assert!(!expected.is_empty());
        for cut in 0..=input.len() {
            assert_eq!(run(input, &[cut], &l, true), expected, "cut at {cut}");
        }
        let bytes: Vec<usize> = (1..input.len()).collect();
        assert_eq!(run(input, &bytes, &l, true), expected, "byte at a time");
    }
}

#[test]
fn pipelined_responses_one_per_poll() {
    let mut buf = [CL, CL].concat();
    let mut reader = ResponseReader::new(limits());
    let ResponseEvent::Response(first) = reader.poll(&mut buf) else {
        panic!("no first response");
    };
    assert_eq!(buf, CL, "the second response stays in the buffer");
    assert!(reader.is_idle());
    let ResponseEvent::Response(second) = reader.poll(&mut buf) else {
        panic!("no second response");
    };
    assert_eq!(first, second);
    assert!(buf.is_empty());
    assert_eq!(reader.poll(&mut buf), ResponseEvent::Incomplete);
}

#[test]
fn poll_slice_matches_poll() {
    let input = [CL, CHUNKED, INTERIM].concat();
    let mut reader = ResponseReader::new(limits());
    let mut offset = 0;
    let mut statuses = Vec::new();
    loop {
        match reader.poll_slice(&input[offset..]) {
            (ResponseEvent::Response(r), n) => {
                offset += n;
                statuses.push(r.status);
            }
            (ResponseEvent::Incomplete, n) => {
                assert_eq!(offset + n, input.len());
                break;
            }
            (e, _) => panic!("{e:?}"),
        }
    }
    assert_eq!(statuses, [200, 202, 201]);
}

#[test]
fn malformed_status_lines() {
    let cases: &[&[u8]] = &[
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 20 OK\r\n\r\n",
        b"HTTP/1.1 099 Low\r\n\r\n",
        b"HTTP/1.1 600 High\r\n\r\n",
        b"HTTP/2 200 OK\r\n\r\n",
        b"HTTP/1.1200 OK\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n folded\r\n\r\n",
        b"http/1.1 200 OK\r\n\r\n",
        b"SSH-2.0-OpenSSH_9.6\r\n",
        b"<html>",
    ];
    for input in cases {
        let e = error_of(input, &limits());
        assert!(
            matches!(e, ClientError::Malformed(_)),
            "{} → {e:?}",
            String::from_utf8_lossy(input)
        );
    }
    // Early rejection: no need to wait for the end of the head.
    let mut reader = ResponseReader::new(limits());
    let e = reader.poll(&mut b"HTTX".to_vec());
    assert_eq!(
        e,
        ResponseEvent::Error(ClientError::Malformed("not an http/1.x response"))
    );
    // A missing reason phrase is fine.
    assert_eq!(
        one(b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n").status,
        200
    );
}

#[test]
fn framing_errors() {
    let cases: &[(&[u8], ClientError)] = &[
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            ClientError::Malformed("both content-length and transfer-encoding"),
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            ClientError::Malformed("conflicting content-length"),
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3, 4\r\n\r\n",
            ClientError::Malformed("conflicting content-length"),
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\n",
            ClientError::Malformed("invalid content-length"),
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n",
            ClientError::Malformed("invalid content-length"),
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            ClientError::UnsupportedTransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            ClientError::UnsupportedTransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            ClientError::UnsupportedTransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: \r\n\r\n",
            ClientError::Malformed("empty transfer-encoding"),
        ),
        (
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            ClientError::Malformed("transfer-encoding on http/1.0"),
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            ClientError::Malformed("invalid chunk size"),
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(
            error_of(input, &limits()),
            *expected,
            "{}",
            String::from_utf8_lossy(input)
        );
    }
    // Identical repeated lengths are one length.
    let r = one(b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\nContent-Length: 2\r\n\r\nok");
    assert_eq!(r.body_len, 2);
}

#[test]
fn head_too_large() {
    let l = ClientLimits {
        max_head_bytes: 64,
        max_headers: 2,
        ..limits()
    };
    // Incomplete but already over the limit.
    let mut long = b"HTTP/1.1 200 OK\r\nX-Long: ".to_vec();
    long.extend(std::iter::repeat(b'a').take(64));
    assert_eq!(error_of(&long, &l), ClientError::HeadTooLarge);
    // Exactly at the limit is fine, one byte over is not.
    let mut fits = b"HTTP/1.1 204 No Content\r\nX: ".to_vec();
    fits.extend(std::iter::repeat(b'a').take(64 - fits.len() - 4));
    fits.extend_from_slice(b"\r\n\r\n");
    assert_eq!(fits.len(), 64);
    assert_eq!(run(&fits, &[], &l, false).len(), 1);
    fits.insert(30, b'a');
    assert_eq!(error_of(&fits, &l), ClientError::HeadTooLarge);
    let many = b"HTTP/1.1 204 No Content\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
    assert_eq!(error_of(many, &l), ClientError::HeadTooLarge);
    // The trailer section is bounded by max_head_bytes too.
    let mut trailers = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: ".to_vec();
    trailers.extend(std::iter::repeat(b'a').take(64));
    assert_eq!(error_of(&trailers, &l), ClientError::HeadTooLarge);
    // More slots than the inline array.
    let l = ClientLimits {
        max_headers: 100,
        ..limits()
    };
    let mut input = b"HTTP/1.1 204 No Content\r\n".to_vec();
    for i in 0..100 {
        input.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    input.extend_from_slice(b"\r\n");
    let events = run(&input, &[], &l, false);
    assert!(matches!(events.as_slice(), [ResponseEvent::Response(r)] if r.headers.len() == 100));
}

#[test]
fn truncated_at_eof() {
    let cases: &[&[u8]] = &[
        b"",
        b"HTTP/1.1 200 OK\r\nContent-Le",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n",
    ];
    for input in cases {
        assert_eq!(
            run(input, &[], &limits(), true),
            [ResponseEvent::Error(ClientError::Truncated)]
        );
    }
    let mut reader = ResponseReader::new(limits());
    assert!(reader.is_idle());
    assert_eq!(reader.poll(&mut b"H".to_vec()), ResponseEvent::Incomplete);
    assert!(!reader.is_idle());
}

#[test]
fn errors_are_sticky_and_eof_finishes() {
    let mut reader = ResponseReader::new(limits());
    let mut buf = b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n".to_vec();
    let e = reader.poll(&mut buf);
    assert!(matches!(e, ResponseEvent::Error(ClientError::Malformed(_))));
    assert_eq!(reader.poll(&mut CL.to_vec()), e);
    assert_eq!(reader.on_eof(), e);

    let mut reader = ResponseReader::new(limits());
    let mut buf = CLOSE.to_vec();
    assert_eq!(reader.poll(&mut buf), ResponseEvent::Incomplete);
    assert!(
        buf.is_empty(),
        "a close-delimited body is consumed as it arrives"
    );
    assert!(matches!(reader.on_eof(), ResponseEvent::Response(_)));
    let truncated = ResponseEvent::Error(ClientError::Truncated);
    assert_eq!(reader.poll(&mut CL.to_vec()), truncated);
    assert_eq!(reader.on_eof(), truncated);
}

#[test]
fn retry_after_forms() {
    let secs = |s| Some(RetryAfter::Delay(Duration::from_secs(s)));
    assert_eq!(parse_retry_after(b"120"), secs(120));
    assert_eq!(parse_retry_after(b" 0\t"), secs(0));
    assert_eq!(parse_retry_after(b"86401"), secs(86_400));
    assert_eq!(parse_retry_after(b"99999999999999999999999"), secs(86_400));
    let at = Some(RetryAfter::At(784_111_777));
    assert_eq!(parse_retry_after(b"Sun, 06 Nov 1994 08:49:37 GMT"), at);
    assert_eq!(parse_retry_after(b"Sunday, 06-Nov-94 08:49:37 GMT"), at);
    assert_eq!(parse_retry_after(b"Sun Nov  6 08:49:37 1994"), at);
    for garbage in [
        &b""[..],
        b" ",
        b"-1",
        b"1.5",
        b"+5",
        b"5s",
        b"soon",
        b"1 2",
        b"\xff",
    ] {
        assert_eq!(parse_retry_after(garbage), None, "{garbage:?}");
    }
    // In a response: the first field wins; an invalid one is None.
    let r = one(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 30\r\nRetry-After: 60\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(r.retry_after, secs(30));
    let r = one(b"HTTP/1.1 503 Busy\r\nRetry-After: later\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(r.retry_after, None);
}

#[test]
fn retry_after_delay_from_now() {
    let now = 1_000_000;
    assert_eq!(
        RetryAfter::At(now + 30).delay_from(now),
        Duration::from_secs(30)
    );
    assert_eq!(RetryAfter::At(now - 30).delay_from(now), Duration::ZERO);
    assert_eq!(RetryAfter::At(u64::MAX).delay_from(now), MAX_RETRY_AFTER);
    let d = Duration::from_secs(5);
    assert_eq!(RetryAfter::Delay(d).delay_from(now), d);
    assert_eq!(
        RetryAfter::Delay(Duration::from_secs(1 << 40)).delay_from(0),
        MAX_RETRY_AFTER
    );
}

fn request<'a>(headers: &'a [(&'a str, &'a [u8])], body: &'a [u8]) -> OutboundRequest<'a> {
    OutboundRequest {
        method: "POST",
        authority: "hooks.example.com:8080",
        path: "/in/github?x=1",
        headers,
        body,
    }
}

#[test]
fn write_request_exact_bytes() {
    let headers: &[(&str, &[u8])] = &[
        ("Content-Type", b"application/json"),
        ("X-Sluice-Event-Id", b"01JD3V6W2Y8Q9R4T5S6A7B8C9D"),
        ("X-Empty", b""),
    ];
    let mut out = b"previous".to_vec();
    write_request(&mut out, &request(headers, b"{\"a\":1}")).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "previousPOST /in/github?x=1 HTTP/1.1\r\n\
         host: hooks.example.com:8080\r\n\
         content-length: 7\r\n\
         Content-Type: application/json\r\n\
         X-Sluice-Event-Id: 01JD3V6W2Y8Q9R4T5S6A7B8C9D\r\n\
         X-Empty: \r\n\
         \r\n\
         {\"a\":1}"
    );
    let mut out = Vec::new();
    let req = OutboundRequest {
        method: "PUT",
        authority: "[::1]",
        path: "/",
        headers: &[],
        body: b"",
    };
    write_request(&mut out, &req).unwrap();
    assert_eq!(
        out,
        b"PUT / HTTP/1.1\r\nhost: [::1]\r\ncontent-length: 0\r\n\r\n"
    );
}

#[test]
fn write_request_rejections_leave_out_unchanged() {
    let base = request(&[], b"x");
    let cases: Vec<(OutboundRequest<'_>, RequestError)> = vec![
        (OutboundRequest { method: "", ..base }, RequestError::Method),
        (
            OutboundRequest {
                method: "PO ST",
                ..base
            },
            RequestError::Method,
        ),
        (
            OutboundRequest {
                authority: "",
                ..base
            },
            RequestError::Authority,
        ),
        (
            OutboundRequest {
                authority: "a\r\nb",
                ..base
            },
            RequestError::Authority,
        ),
        (OutboundRequest { path: "in", ..base }, RequestError::Path),
        (OutboundRequest { path: "", ..base }, RequestError::Path),
        (
            OutboundRequest {
                path: "/a b",
                ..base
            },
            RequestError::Path,
        ),
        (
            OutboundRequest {
                path: "/a\r\nX: y",
                ..base
            },
            RequestError::Path,
        ),
        (
            OutboundRequest {
                path: "/a\0",
                ..base
            },
            RequestError::Path,
        ),
        (
            OutboundRequest {
                path: "/é", ..base
            },
            RequestError::Path,
        ),
        (
            OutboundRequest {
                headers: &[("", b"v")],
                ..base
            },
            RequestError::HeaderName { index: 0 },
        ),
        (
            OutboundRequest {
                headers: &[("ok", b"v"), ("X\r\nY", b"v")],
                ..base
            },
            RequestError::HeaderName { index: 1 },
        ),
        (
            OutboundRequest {
                headers: &[("X:", b"v")],
                ..base
            },
            RequestError::HeaderName { index: 0 },
        ),
        (
            OutboundRequest {
                headers: &[("X\0", b"v")],
                ..base
            },
            RequestError::HeaderName { index: 0 },
        ),
        (
            OutboundRequest {
                headers: &[("X", b"a\rb")],
                ..base
            },
            RequestError::HeaderValue { index: 0 },
        ),
        (
            OutboundRequest {
                headers: &[("X", b"a\nb")],
                ..base
            },
            RequestError::HeaderValue { index: 0 },
        ),
        (
            OutboundRequest {
                headers: &[("X", b"a\0b")],
                ..base
            },
            RequestError::HeaderValue { index: 0 },
        ),
        (
            OutboundRequest {
                headers: &[("Host", b"evil")],
                ..base
            },
            RequestError::ReservedHeader { index: 0 },
        ),
        (
            OutboundRequest {
                headers: &[("content-LENGTH", b"1")],
                ..base
            },
            RequestError::ReservedHeader { index: 0 },
        ),
        (
            OutboundRequest {
                headers: &[("Transfer-Encoding", b"chunked")],
                ..base
            },
            RequestError::ReservedHeader { index: 0 },
        ),
    ];
    for (req, expected) in cases {
        let mut out = b"keep".to_vec();
        assert_eq!(write_request(&mut out, &req), Err(expected), "{req:?}");
        assert_eq!(out, b"keep");
        assert!(!expected.to_string().is_empty());
    }
    // Tabs and obs-text are valid in values.
    let mut out = Vec::new();
    let ok = OutboundRequest {
        headers: &[("X", b"a\tb\xff")],
        ..base
    };
    assert_eq!(write_request(&mut out, &ok), Ok(()));
}

#[test]
fn written_requests_parse_back() {
    use crate::net::http::{Limits, ReadEvent, RequestReader};
    let headers: &[(&str, &[u8])] = &[("content-type", b"application/json")];
    let mut out = Vec::new();
    write_request(&mut out, &request(headers, b"{}")).unwrap();
    let ReadEvent::Request(req) = RequestReader::new(Limits::default()).poll(&mut out) else {
        panic!("the server codec refused the client's request");
    };
    assert_eq!(req.head.target(), "/in/github?x=1");
    assert_eq!(
        req.head.header("host"),
        Some(&b"hooks.example.com:8080"[..])
    );
    assert_eq!(req.body, b"{}");
}

#[test]
fn error_display() {
    let cases = [
        (ClientError::Malformed("x"), "malformed response: x"),
        (ClientError::HeadTooLarge, "response head too large"),
        (ClientError::BodyTooLarge, "response body too large"),
        (
            ClientError::Truncated,
            "connection closed before the response ended",
        ),
        (
            ClientError::UnsupportedTransferEncoding,
            "unsupported transfer coding in response",
        ),
    ];
    for (e, text) in cases {
        assert_eq!(e.to_string(), text);
    }
}

#[test]
fn mutated_inputs_never_panic_and_split_consistently() {
    // Deterministic xorshift; mutations favour the bytes that matter to framing.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let seeds = [CL, CHUNKED, CLOSE, INTERIM, &[CL, CHUNKED].concat()];
    let alphabet = b"\r\n :;,0123456789abcdefHTP/.\t\0\xffchunkedContent-LengthTransfer-Encoding";
    let l = ClientLimits {
        max_head_bytes: 256,
        max_headers: 8,
        max_body_keep: 8,
        max_body_bytes: 1 << 20,
    };
    for _ in 0..4000 {
        let mut input = seeds[(next() % seeds.len() as u64) as usize].to_vec();
        for _ in 0..1 + next() % 4 {
            let at = (next() % (input.len() as u64 + 1)) as usize;
            let byte = alphabet[(next() % alphabet.len() as u64) as usize];
            match next() % 3 {
                0 if at < input.len() => input[at] = byte,
                1 if at < input.len() => {
                    input.remove(at);
                }
                _ => input.insert(at, byte),
            }
        }
        let expected = run(&input, &[], &l, true);
        let cut = (next() % (input.len() as u64 + 1)) as usize;
        assert_eq!(
            run(&input, &[cut], &l, true),
            expected,
            "{input:?} cut at {cut}"
        );
    }
}

#[test]
fn find_lf_matches_naive_search() {
    let mut bytes = vec![b'a'; 70];
    assert_eq!(find_lf(&bytes), None);
    for i in 0..70 {
        bytes[i] = b'\n';
        assert_eq!(find_lf(&bytes), Some(i));
        assert_eq!(find_lf(&bytes[..i]), None);
        bytes[i] = 0x8a;
        assert_eq!(find_lf(&bytes), None);
    }
}

#[test]
fn a_template_writes_what_write_request_writes() {
    let trailing: &[(&str, &[u8])] = &[("x-tenant", b"acme"), ("authorization", b"Bearer t")];
    let per: &[(&str, &[u8])] = &[("content-type", b"application/json"), ("webhook-id", b"e1")];
    let t = RequestTemplate::new("POST", "127.0.0.1:9", "/h?q=1", trailing).unwrap();
    let mut ours = b"kept".to_vec();
    t.write(&mut ours, per, b"{\"a\":1}").unwrap();
    let all: Vec<(&str, &[u8])> = per.iter().chain(trailing).copied().collect();
    let mut theirs = b"kept".to_vec();
    let req = OutboundRequest {
        method: "POST",
        authority: "127.0.0.1:9",
        path: "/h?q=1",
        headers: &all,
        body: b"{\"a\":1}",
    };
    write_request(&mut theirs, &req).unwrap();
    assert_eq!(
        String::from_utf8(ours).unwrap(),
        String::from_utf8(theirs).unwrap()
    );
}

#[test]
fn a_template_refuses_what_write_request_refuses() {
    let ok: &[(&str, &[u8])] = &[];
    assert_eq!(
        RequestTemplate::new("POST", "h", "no-slash", ok),
        Err(RequestError::Path)
    );
    assert_eq!(
        RequestTemplate::new("POST", "h", "/", &[("host", b"x")]),
        Err(RequestError::ReservedHeader { index: 0 })
    );
    let t = RequestTemplate::new("POST", "h", "/", ok).unwrap();
    let mut out = b"before".to_vec();
    let bad: &[(&str, &[u8])] = &[("a", b"1"), ("b", b"x\r\ny: z")];
    assert_eq!(
        t.write(&mut out, bad, b""),
        Err(RequestError::HeaderValue { index: 1 })
    );
    assert_eq!(out, b"before", "nothing written on error");
}

/// A template's per-request names are the caller's constants, checked in debug builds (where
/// every test runs): a name that is not a token, or one the writer sets itself, stops the test.
#[test]
#[cfg(debug_assertions)]
fn a_template_write_with_a_bad_constant_name_fails_in_a_debug_build() {
    let ok: &[(&str, &[u8])] = &[];
    let t = RequestTemplate::new("POST", "h", "/", ok).unwrap();
    for bad in [
        &[("bad name", &b"1"[..])][..],
        &[("Content-Length", &b"1"[..])][..],
    ] {
        let r = std::panic::catch_unwind(|| t.write(&mut Vec::new(), bad, b""));
        assert!(r.is_err(), "{bad:?} passed");
    }
}

#[test]
fn a_status_only_reader_reads_the_same_status_framing_and_retry_after() {
    let wire: &[u8] = b"HTTP/1.1 503 Busy\r\nServer: x\r\nRetry-After: 7\r\n\
        Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
        HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok";
    let mut full = ResponseReader::new(limits());
    let mut lean = ResponseReader::new(limits()).status_only();
    let (mut a, mut b) = (wire.to_vec(), wire.to_vec());
    for _ in 0..2 {
        let (ResponseEvent::Response(x), ResponseEvent::Response(y)) =
            (full.poll(&mut a), lean.poll(&mut b))
        else {
            panic!("both complete");
        };
        assert!(!x.headers.is_empty() && !x.body_prefix.is_empty());
        assert!(y.headers.is_empty() && y.body_prefix.is_empty());
        assert_eq!(
            (x.status, x.keep_alive, x.retry_after, x.body_len),
            (y.status, y.keep_alive, y.retry_after, y.body_len)
        );
    }
    assert!(a.is_empty() && b.is_empty());
}

#[test]
fn a_status_only_reader_keeping_body_reports_the_body_prefix_only() {
    // Split across chunks and cut at `n`; a close-delimited body too; an empty body keeps nothing.
    let wire: &[u8] = b"HTTP/1.1 500 Oops\r\nX: y\r\nTransfer-Encoding: chunked\r\n\r\n\
        3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n\
        HTTP/1.1 204 No Content\r\n\r\n";
    let mut r = ResponseReader::new(limits()).status_only().keeping_body(5);
    let mut buf = wire.to_vec();
    let ResponseEvent::Response(x) = r.poll(&mut buf) else {
        panic!("complete");
    };
    assert!(x.headers.is_empty());
    assert_eq!(
        (x.status, &x.body_prefix[..], x.body_len),
        (500, &b"abcde"[..], 7)
    );
    let ResponseEvent::Response(y) = r.poll(&mut buf) else {
        panic!("complete");
    };
    assert_eq!((y.status, y.body_prefix.capacity()), (204, 0));
    let mut close = ResponseReader::new(limits())
        .status_only()
        .keeping_body(1 << 20);
    let mut buf = b"HTTP/1.1 200 OK\r\n\r\nbody".to_vec();
    assert!(matches!(close.poll(&mut buf), ResponseEvent::Incomplete));
    let ResponseEvent::Response(z) = close.on_eof() else {
        panic!("complete at EOF");
    };
    assert_eq!(&z.body_prefix[..], b"body", "at most max_body_keep");
}
