//! The incremental request reader: head scanner → head parser → body decoder, one request at a
//! time. See the module header of `net::http` for the caller contract.

use std::mem;

use super::chunked::{append_capped, ChunkedDecoder};
use super::head::RequestHead;
use super::head::{self, HeadScanner};
use super::message::{BodyFraming, HttpError, Limits};
use super::request::{ReadEvent, Request};

/// Reads requests from a connection's buffer. One per connection; cheap to create.
#[derive(Debug)]
pub struct RequestReader {
    limits: Limits,
    state: State,
    /// [`with_body_gate`](Self::with_body_gate): stop after every head that has a body.
    gate_bodies: bool,
}

#[derive(Debug)]
enum State {
    Head(HeadScanner),
    Body {
        head: RequestHead,
        body: Vec<u8>,
        decoder: BodyDecoder,
    },
    Failed(HttpError),
}

#[derive(Debug)]
enum BodyDecoder {
    Length { remaining: u64, declared: u64 },
    Chunked(ChunkedDecoder),
}

impl RequestReader {
    pub fn new(limits: Limits) -> Self {
        RequestReader {
            limits,
            state: State::Head(HeadScanner::new()),
            gate_bodies: false,
        }
    }

    /// A reader that returns [`ReadEvent::HeadReady`] for *every* request with a body, before
    /// consuming any byte of it (without the gate, a body that is already buffered is read in
    /// the same call and only [`ReadEvent::Request`] is returned). The caller can then decide
    /// whether the body may be received at all (e.g. the in-flight body budget), answer and
    /// close if not, or `poll` again to read it.
    pub fn with_body_gate(mut self) -> Self {
        self.gate_bodies = true;
        self
    }

    /// The limits this reader enforces.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Advances on the bytes in `buf` and removes the bytes it consumed from its front.
    /// Between calls the caller may only append to `buf`.
    ///
    /// Each returned request shifts the rest of `buf` to the front. With many small pipelined
    /// requests per read, prefer [`poll_slice`](Self::poll_slice) and compact once per read.
    pub fn poll(&mut self, buf: &mut Vec<u8>) -> ReadEvent {
        self.poll_reusing(buf, &mut None)
    }

    /// [`poll`](Self::poll) that parses a new head into the buffers of `spare` (taken from it
    /// when a head is parsed): a caller that hands each finished head back keeps the steady
    /// state free of allocations for heads.
    pub fn poll_reusing(
        &mut self,
        buf: &mut Vec<u8>,
        spare: &mut Option<RequestHead>,
    ) -> ReadEvent {
        let (event, consumed) = self.poll_slice_reusing(buf, spare);
        buf.drain(..consumed);
        event
    }

    /// Like [`poll`](Self::poll) without touching the buffer: returns the event and how many
    /// bytes from the front of `input` were consumed. The next call must be given the input
    /// starting right after those bytes (the unconsumed rest, possibly with more appended).
    pub fn poll_slice(&mut self, input: &[u8]) -> (ReadEvent, usize) {
        self.poll_slice_reusing(input, &mut None)
    }

    /// [`poll_slice`](Self::poll_slice) with a spare head (see [`poll_reusing`](Self::poll_reusing)).
    pub fn poll_slice_reusing(
        &mut self,
        input: &[u8],
        spare: &mut Option<RequestHead>,
    ) -> (ReadEvent, usize) {
        let mut consumed = 0;
        let event = self.step(input, &mut consumed, spare);
        if let ReadEvent::Error(e) = event {
            self.state = State::Failed(e);
        }
        (event, consumed)
    }

    /// The head of the request whose body is being read (after [`ReadEvent::HeadReady`]).
    pub fn pending_head(&self) -> Option<&RequestHead> {
        match &self.state {
            State::Body { head, .. } => Some(head),
            _ => None,
        }
    }

    /// True between requests: no byte of a next request has been seen. A connection that times
    /// out while idle can be closed silently; otherwise a 408 is appropriate.
    pub fn is_idle(&self) -> bool {
        matches!(&self.state, State::Head(scanner) if scanner.is_idle())
    }

    /// Bytes of body received so far for the pending request.
    pub fn body_received(&self) -> usize {
        match &self.state {
            State::Body { body, .. } => body.len(),
            _ => 0,
        }
    }

    /// Bytes allocated for the pending request's body (≥ [`body_received`](Self::body_received);
    /// never more than the declared `Content-Length`, or `max_body_bytes` when chunked).
    pub fn body_capacity(&self) -> usize {
        match &self.state {
            State::Body { body, .. } => body.capacity(),
            _ => 0,
        }
    }

    /// The declared `Content-Length` of the pending request (`None` when chunked or idle).
    pub fn declared_length(&self) -> Option<u64> {
        match &self.state {
            State::Body {
                decoder: BodyDecoder::Length { declared, .. },
                ..
            } => Some(*declared),
            _ => None,
        }
    }

    fn step(
        &mut self,
        buf: &[u8],
        consumed: &mut usize,
        spare: &mut Option<RequestHead>,
    ) -> ReadEvent {
        match &mut self.state {
            State::Failed(e) => ReadEvent::Error(*e),
            State::Head(scanner) => {
                if scanner.is_idle() {
                    // RFC 9112 §2.2: ignore empty lines before a request line.
                    while buf[*consumed..].starts_with(b"\r\n") {
                        *consumed += 2;
                    }
                    if buf[*consumed..] == *b"\r" {
                        return ReadEvent::Incomplete;
                    }
                }
                let start = *consumed;
                let end = match scanner.scan(&buf[start..], &self.limits) {
                    Ok(Some(len)) => start + len,
                    Ok(None) => return ReadEvent::Incomplete,
                    Err(e) => return ReadEvent::Error(e),
                };
                let head = match head::parse(&buf[start..end], &self.limits, spare.take()) {
                    Ok(head) => head,
                    Err(e) => return ReadEvent::Error(e),
                };
                *consumed = end;
                let decoder = match head.framing {
                    BodyFraming::None | BodyFraming::Length(0) => {
                        self.state = State::Head(HeadScanner::new());
                        let body = Vec::new();
                        return ReadEvent::Request(Request { head, body });
                    }
                    BodyFraming::Length(n) => BodyDecoder::Length {
                        remaining: n,
                        declared: n,
                    },
                    BodyFraming::Chunked => BodyDecoder::Chunked(ChunkedDecoder::new()),
                };
                let expect_continue = head.expect_continue;
                self.state = State::Body {
                    head,
                    body: Vec::new(),
                    decoder,
                };
                if self.gate_bodies {
                    return ReadEvent::HeadReady { expect_continue };
                }
                match self.read_body(buf, consumed) {
                    ReadEvent::Incomplete => ReadEvent::HeadReady { expect_continue },
                    event => event,
                }
            }
            State::Body { .. } => self.read_body(buf, consumed),
        }
    }

    /// Feeds `buf[*consumed..]` to the body decoder; on completion returns the request and
    /// resets for the next one.
    fn read_body(&mut self, buf: &[u8], consumed: &mut usize) -> ReadEvent {
        let State::Body { body, decoder, .. } = &mut self.state else {
            unreachable!("read_body outside the body state");
        };
        let input = &buf[*consumed..];
        let done = match decoder {
            BodyDecoder::Length {
                remaining,
                declared,
            } => {
                let take = (*remaining).min(input.len() as u64) as usize;
                append_capped(body, &input[..take], *declared);
                *remaining -= take as u64;
                *consumed += take;
                *remaining == 0
            }
            BodyDecoder::Chunked(chunked) => {
                match chunked.decode(input, body, &self.limits) {
                    Ok(n) => *consumed += n,
                    Err(e) => return ReadEvent::Error(e),
                }
                chunked.is_done()
            }
        };
        if !done {
            return ReadEvent::Incomplete;
        }
        match mem::replace(&mut self.state, State::Head(HeadScanner::new())) {
            State::Body { head, body, .. } => ReadEvent::Request(Request { head, body }),
            _ => unreachable!("checked above"),
        }
    }
}
