//! HTTP codec throughput: parsing a GitHub-style webhook request, and writing a 202 reply
//! (server side); parsing a destination's 200 reply and writing a 1 KiB delivery (client side).
//!
//! Each parse iteration copies the whole message into the connection buffer (as a socket read
//! would) and polls a reused reader once, which yields the complete request or response. Every
//! case is measured twice, once per message (elements/s) and once per byte (bytes/s).
//!
//! Run: `cargo bench --bench http_parse -- --quick` (or without `--quick` for full sampling;
//! `-- --quick client` for the client cases only).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice::net::http::client::{
    write_request, ClientLimits, OutboundRequest, ResponseEvent, ResponseReader,
};
use sluice::net::http::{write_response, Limits, ReadEvent, RequestReader};

/// The 12 header fields GitHub sends with a webhook delivery, with the framing line given.
fn github_head(framing: &str) -> String {
    format!(
        "POST /hooks/github?source=gh HTTP/1.1\r\n\
         Host: hooks.example.com\r\n\
         User-Agent: GitHub-Hookshot/7f3a2b1\r\n\
         Content-Type: application/json\r\n\
         {framing}\r\n\
         Accept: */*\r\n\
         X-GitHub-Delivery: 72d3162e-cc78-11e3-81ab-4c9367dc0958\r\n\
         X-GitHub-Event: push\r\n\
         X-GitHub-Hook-ID: 292430182\r\n\
         X-GitHub-Hook-Installation-Target-ID: 79929171\r\n\
         X-GitHub-Hook-Installation-Target-Type: repository\r\n\
         X-Hub-Signature: sha1=7d38cdd689735b008b3c702edd92eea23791c5f6\r\n\
         X-Hub-Signature-256: sha256=d57c68ca6f92289e6987922ff26938930f6e66a2d161ef06abdf1859230aa23c\r\n\
         \r\n"
    )
}

fn json_body(len: usize) -> Vec<u8> {
    let mut body = br#"{"ref":"refs/heads/main","commits":[{"message":""#.to_vec();
    body.resize(len - 4, b'x');
    body.extend_from_slice(br#""}]}"#);
    body
}

/// Content-Length request with a 1 KiB body.
fn length_request() -> Vec<u8> {
    let mut req = github_head("Content-Length: 1024").into_bytes();
    req.extend_from_slice(&json_body(1024));
    req
}

/// Chunked request with the same 1 KiB body in four 256-byte chunks.
fn chunked_request() -> Vec<u8> {
    let mut req = github_head("Transfer-Encoding: chunked").into_bytes();
    for chunk in json_body(1024).chunks(256) {
        req.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        req.extend_from_slice(chunk);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    req
}

fn parse_once(reader: &mut RequestReader, buf: &mut Vec<u8>, input: &[u8]) -> usize {
    buf.clear();
    buf.extend_from_slice(input);
    match reader.poll(buf) {
        ReadEvent::Request(req) => black_box(req).body.len(),
        other => panic!("expected a complete request, got {other:?}"),
    }
}

fn write_202(out: &mut Vec<u8>) -> usize {
    out.clear();
    let body = br#"{"event_id":"01JD3V6W2Y8Q9R4T5S6A7B8C9D"}"#;
    write_response(
        out,
        202,
        &[("content-type", "application/json")],
        black_box(body),
        true,
        false,
    );
    out.len()
}

/// A typical destination reply: 200, six header fields, a 20-byte JSON body.
fn client_response() -> Vec<u8> {
    let body = br#"{"status":"queued"}"#;
    let mut resp = format!(
        "HTTP/1.1 200 OK\r\n\
         Date: Mon, 30 Nov 2026 09:30:00 GMT\r\n\
         Content-Type: application/json; charset=utf-8\r\n\
         Content-Length: {}\r\n\
         Connection: keep-alive\r\n\
         Server: nginx/1.27.2\r\n\
         X-Request-Id: 5f0c6b1e-8d2a-4f7e-9c3b-2a1d0e9f8b7c\r\n\
         \r\n",
        body.len() + 1
    )
    .into_bytes();
    resp.extend_from_slice(body);
    resp.push(b'\n');
    resp
}

fn client_parse_once(reader: &mut ResponseReader, buf: &mut Vec<u8>, input: &[u8]) -> u64 {
    buf.clear();
    buf.extend_from_slice(input);
    match reader.poll(buf) {
        ResponseEvent::Response(resp) => black_box(resp).body_len,
        other => panic!("expected a complete response, got {other:?}"),
    }
}

/// A 1 KiB JSON delivery with the headers sluice sends.
fn client_write_1k(out: &mut Vec<u8>, body: &[u8]) -> usize {
    out.clear();
    let headers: &[(&str, &[u8])] = &[
        ("content-type", b"application/json"),
        ("user-agent", b"sluice/0.1"),
        ("x-sluice-event-id", b"01JD3V6W2Y8Q9R4T5S6A7B8C9D"),
        ("x-sluice-attempt", b"1"),
        (
            "x-sluice-signature-256",
            b"sha256=d57c68ca6f92289e6987922ff26938930f6e66a2d161ef06abdf1859230aa23c",
        ),
    ];
    let req = OutboundRequest {
        method: "POST",
        authority: "api.example.com:8443",
        path: "/webhooks/sluice?tenant=42",
        headers,
        body: black_box(body),
    };
    write_request(out, &req).expect("valid request");
    out.len()
}

fn bench(c: &mut Criterion) {
    let cases = [
        ("parse_length_1k", length_request()),
        ("parse_chunked_1k", chunked_request()),
    ];
    let mut out = Vec::with_capacity(256);
    let reply_len = write_202(&mut out);

    for (unit, per) in [("elements", false), ("bytes", true)] {
        let mut group = c.benchmark_group(format!("http_parse/{unit}"));
        group.measurement_time(Duration::from_secs(2));
        group.warm_up_time(Duration::from_millis(500));
        for (name, input) in &cases {
            group.throughput(if per {
                Throughput::Bytes(input.len() as u64)
            } else {
                Throughput::Elements(1)
            });
            let mut reader = RequestReader::new(Limits::default());
            let mut buf = Vec::with_capacity(input.len());
            assert_eq!(parse_once(&mut reader, &mut buf, input), 1024);
            group.bench_function(*name, |b| {
                b.iter(|| parse_once(&mut reader, &mut buf, black_box(input)))
            });
        }
        group.throughput(if per {
            Throughput::Bytes(reply_len as u64)
        } else {
            Throughput::Elements(1)
        });
        group.bench_function("write_response_202_json", |b| {
            b.iter(|| write_202(&mut out))
        });

        let input = client_response();
        group.throughput(if per {
            Throughput::Bytes(input.len() as u64)
        } else {
            Throughput::Elements(1)
        });
        let mut reader = ResponseReader::new(ClientLimits::default());
        let mut buf = Vec::with_capacity(input.len());
        assert_eq!(client_parse_once(&mut reader, &mut buf, &input), 20);
        group.bench_function("client_parse_response_200", |b| {
            b.iter(|| client_parse_once(&mut reader, &mut buf, black_box(&input)))
        });

        let body = json_body(1024);
        let mut req_out = Vec::with_capacity(2048);
        let req_len = client_write_1k(&mut req_out, &body);
        group.throughput(if per {
            Throughput::Bytes(req_len as u64)
        } else {
            Throughput::Elements(1)
        });
        group.bench_function("client_write_request_1k", |b| {
            b.iter(|| client_write_1k(&mut req_out, &body))
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
