//! The tests' HTTP/1.1 client: keep-alive connections, pipelining, raw bytes, and the
//! response type every test reads.

use super::*;

// ---------------------------------------------------------------------------------------------
// HTTP client
// ---------------------------------------------------------------------------------------------

/// A parsed HTTP response.
#[derive(Clone, Debug)]
pub struct Response {
    pub version: String,
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// First value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("response body is not JSON ({e}): {:?}", self.text()))
    }

    /// The response announces that the connection closes.
    pub fn closes(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.to_ascii_lowercase().contains("close"))
    }
}

/// Checks a `202` ingest response and returns `(event_id, trigger_id)`.
pub fn accepted(r: &Response) -> (String, String) {
    assert_eq!(
        r.status,
        202,
        "expected 202, got {} {:?} {:?}",
        r.status,
        r.headers,
        r.text()
    );
    let v = r.json();
    assert_eq!(v["status"], "accepted", "{}", r.text());
    let id = v["event_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no event_id: {}", r.text()))
        .to_string();
    let trigger = v["trigger_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no trigger_id: {}", r.text()))
        .to_string();
    assert_eq!(id.len(), 26, "event id {id:?} is not 26 characters");
    assert!(
        id.bytes()
            .all(|b| b"0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains(&b)),
        "event id {id:?} is not Crockford base32"
    );
    assert_eq!(
        r.text(),
        format!(r#"{{"status":"accepted","event_id":"{id}","trigger_id":"{trigger}"}}"#),
        "accepted body is not exactly the contract's"
    );
    (id, trigger)
}

/// How a read that waits for the peer to close ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Closed {
    /// Orderly close (read returned 0).
    Eof,
    /// ECONNRESET / EPIPE.
    Reset,
    /// Still open at the deadline.
    Open,
}

/// A blocking HTTP/1.1 client connection. Keeps unread bytes between responses, so pipelined
/// responses can be read one by one.
#[derive(Debug)]
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> io::Result<Client> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            buf: Vec::new(),
        })
    }

    pub fn set_read_timeout(&self, d: Duration) {
        self.stream
            .set_read_timeout(Some(d))
            .expect("set_read_timeout");
    }

    /// Writes raw bytes.
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Sends a request and reads its response.
    pub fn try_request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<Response> {
        self.send(&encode_request(method, path, headers, body))?;
        self.read_response()
    }

    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        self.try_request(method, path, headers, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    pub fn try_post(
        &mut self,
        path: &str,
        body: &[u8],
        headers: &[(&str, &str)],
    ) -> io::Result<Response> {
        self.try_request("POST", path, headers, body)
    }

    pub fn post(&mut self, path: &str, body: &[u8], headers: &[(&str, &str)]) -> Response {
        self.request("POST", path, headers, body)
    }

    pub fn get(&mut self, path: &str) -> Response {
        self.request("GET", path, &[], b"")
    }

    fn fill(&mut self) -> io::Result<usize> {
        let mut tmp = [0u8; 64 * 1024];
        let n = loop {
            match self.stream.read(&mut tmp) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(n)
    }

    fn need(&mut self, n: usize) -> io::Result<()> {
        while self.buf.len() < n {
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed mid-response",
                ));
            }
        }
        Ok(())
    }

    /// Reads one response (any status, including `100 Continue`).
    pub fn read_response(&mut self) -> io::Result<Response> {
        self.read_response_to(false)
    }

    /// Reads the response to a `HEAD` request: `Content-Length` but no body.
    pub fn read_head_response(&mut self) -> io::Result<Response> {
        self.read_response_to(true)
    }

    fn read_response_to(&mut self, head_only: bool) -> io::Result<Response> {
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i;
            }
            if self.buf.len() > 1 << 20 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "response head over 1 MiB",
                ));
            }
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "connection closed before a response head (had {:?})",
                        String::from_utf8_lossy(&self.buf)
                    ),
                ));
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        self.buf.drain(..head_end + 4);
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let mut parts = status_line.splitn(3, ' ');
        let version = parts.next().unwrap_or_default().to_string();
        let status: u16 = parts.next().and_then(|s| s.parse().ok()).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad status line {status_line:?}"),
            )
        })?;
        if !version.starts_with("HTTP/1.") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad status line {status_line:?}"),
            ));
        }
        let reason = parts.next().unwrap_or_default().to_string();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
            .collect();
        let mut resp = Response {
            version,
            status,
            reason,
            headers,
            body: Vec::new(),
        };
        if head_only || (100..200).contains(&status) || status == 204 || status == 304 {
            return Ok(resp);
        }
        if let Some(cl) = resp.header("content-length") {
            let n: usize = cl.parse().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("bad content-length {cl:?}"),
                )
            })?;
            self.need(n)?;
            resp.body = self.buf.drain(..n).collect();
        } else if resp
            .header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
        {
            resp.body = self.read_chunked()?;
        } else {
            // Close-delimited.
            while self.fill()? > 0 {}
            resp.body = std::mem::take(&mut self.buf);
        }
        Ok(resp)
    }

    fn read_chunked(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = find(&self.buf, b"\r\n") {
                    break i;
                }
                if self.fill()? == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            };
            let line = String::from_utf8_lossy(&self.buf[..line_end]).into_owned();
            self.buf.drain(..line_end + 2);
            let size_text = line.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
            if size == 0 {
                // Trailers, then the final CRLF.
                loop {
                    let end = loop {
                        if let Some(i) = find(&self.buf, b"\r\n") {
                            break i;
                        }
                        if self.fill()? == 0 {
                            return Err(io::ErrorKind::UnexpectedEof.into());
                        }
                    };
                    self.buf.drain(..end + 2);
                    if end == 0 {
                        return Ok(body);
                    }
                }
            }
            self.need(size + 2)?;
            body.extend(self.buf.drain(..size));
            self.buf.drain(..2);
        }
    }

    /// Reads `n` responses in order.
    pub fn read_responses(&mut self, n: usize) -> io::Result<Vec<Response>> {
        (0..n).map(|_| self.read_response()).collect()
    }

    /// Waits (at most `timeout`) for the peer to close; returns how, plus any bytes received.
    pub fn wait_closed(&mut self, timeout: Duration) -> (Closed, Vec<u8>) {
        let deadline = Instant::now() + timeout;
        let mut got = std::mem::take(&mut self.buf);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return (Closed::Open, got);
            }
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .expect("timeout");
            let mut tmp = [0u8; 16 * 1024];
            match self.stream.read(&mut tmp) {
                Ok(0) => return (Closed::Eof, got),
                Ok(n) => got.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return (Closed::Reset, got),
            }
        }
    }

    /// Asserts that the server closes the connection within `timeout` (EOF or reset) and
    /// sends nothing more than `allowed_extra` bytes meanwhile.
    pub fn assert_closed(&mut self, timeout: Duration) {
        let (how, got) = self.wait_closed(timeout);
        assert_ne!(how, Closed::Open, "connection still open after {timeout:?}");
        assert!(
            got.is_empty(),
            "unexpected bytes before close: {:?}",
            String::from_utf8_lossy(&got)
        );
    }
}

/// Encodes a request: adds `Host` unless given, and `Content-Length` for POST/PUT or a
/// non-empty body unless the caller gave `Content-Length` or `Transfer-Encoding`.
pub fn encode_request(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    let mut out = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    if !has("host") {
        out.extend_from_slice(b"Host: 127.0.0.1\r\n");
    }
    if (method == "POST" || method == "PUT" || !body.is_empty())
        && !has("content-length")
        && !has("transfer-encoding")
    {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    for (n, v) in headers {
        out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// Encodes `body` as chunks of the given sizes (the rest in one last chunk), with a terminator.
pub fn chunked(body: &[u8], sizes: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = body;
    for &s in sizes {
        let s = s.min(rest.len());
        if s == 0 {
            continue;
        }
        out.extend_from_slice(format!("{s:x}\r\n").as_bytes());
        out.extend_from_slice(&rest[..s]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[s..];
    }
    if !rest.is_empty() {
        out.extend_from_slice(format!("{:x}\r\n", rest.len()).as_bytes());
        out.extend_from_slice(rest);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A body with every byte value, NUL and 0xFF included.
pub fn binary_body(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i * 7 + 3) as u8)
        .chain([0u8, 0xFF, 0, 0xFF, b'\r', b'\n'])
        .collect()
}
