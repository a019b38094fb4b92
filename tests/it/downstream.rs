//! A real HTTP/1.1 downstream for dispatch tests: a thread per connection on 127.0.0.1, with a
//! configurable service time and answer, recording every request it sees and the peak number of
//! requests it was serving at once.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the downstream answers.
#[derive(Debug, Clone)]
pub struct Behavior {
    pub delay: Duration,
    pub status: u16,
    pub retry_after: Option<u64>,
}

impl Default for Behavior {
    fn default() -> Self {
        Behavior {
            delay: Duration::ZERO,
            status: 200,
            retry_after: None,
        }
    }
}

/// One request the downstream received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub webhook_id: String,
    /// `x-sluice-attempt` (1 for the first try).
    pub attempt: u32,
    pub replay_of: Option<String>,
    pub content_type: Option<String>,
    /// `webhook-timestamp` and `webhook-signature`, as sent.
    pub timestamp: Option<String>,
    pub signature: Option<String>,
    pub body: Vec<u8>,
    pub status: u16,
}

#[derive(Debug, Default)]
struct State {
    behavior: Mutex<Behavior>,
    /// Answers used (in order) before falling back to `behavior`.
    script: Mutex<VecDeque<Behavior>>,
    /// Decides first, from the request's body and how many requests came before it.
    rule: Mutex<Option<Rule>>,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    seen: Mutex<Vec<Seen>>,
    stop: AtomicBool,
    connections: AtomicUsize,
    /// While set, every received request waits (unanswered) until [`Downstream::hold`] clears it.
    hold: AtomicBool,
}

/// An answer chosen from the body and the number of requests received before this one.
pub type Rule = fn(&[u8], usize) -> Option<Behavior>;

pub struct Downstream {
    addr: SocketAddr,
    state: Arc<State>,
    accept: Option<JoinHandle<()>>,
}

const MAX_CONNECTIONS: usize = 256;

impl Downstream {
    pub fn start(behavior: Behavior) -> Downstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind downstream");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(State {
            behavior: Mutex::new(behavior),
            ..State::default()
        });
        let st = state.clone();
        let accept = std::thread::spawn(move || {
            while !st.stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        if st.connections.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
                            st.connections.fetch_sub(1, Ordering::Relaxed);
                            continue; // dropped: bounded
                        }
                        let st = st.clone();
                        std::thread::spawn(move || {
                            serve(stream, &st);
                            st.connections.fetch_sub(1, Ordering::Relaxed);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Downstream {
            addr,
            state,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:PORT{path}`
    pub fn uri(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// `true`: requests are received (and counted in flight) but not answered until `false`.
    pub fn hold(&self, on: bool) {
        self.state.hold.store(on, Ordering::SeqCst);
    }

    /// Requests received and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.state.in_flight.load(Ordering::SeqCst)
    }

    pub fn set(&self, b: Behavior) {
        *self.state.behavior.lock().unwrap() = b;
    }

    /// Every request asks `rule` first (then the script, then the behavior).
    pub fn rule(&self, rule: Rule) {
        *self.state.rule.lock().unwrap() = Some(rule);
    }

    pub fn script(&self, answers: Vec<Behavior>) {
        self.state.script.lock().unwrap().extend(answers);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.state.seen.lock().unwrap().len()
    }

    /// The most requests it was serving at the same time.
    pub fn peak_concurrency(&self) -> usize {
        self.state.peak.load(Ordering::SeqCst)
    }

    /// Waits until `f(seen)` holds, at most `timeout`.
    pub fn wait(&self, timeout: Duration, mut f: impl FnMut(&[Seen]) -> bool) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if f(&self.state.seen.lock().unwrap()) {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Downstream {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn serve(stream: TcpStream, st: &State) {
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = stream;
    loop {
        if st.stop.load(Ordering::Relaxed) {
            return;
        }
        // Request line + headers.
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) => return,
                Ok(_) => {
                    if line == "\r\n" || line == "\n" {
                        break;
                    }
                    head.push(line);
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    if st.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    if head.is_empty() {
                        continue;
                    }
                    return;
                }
                Err(_) => return,
            }
            if head.len() > 200 {
                return;
            }
        }
        let header = |name: &str| crate::support::head_header(&head, name);
        let len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; len.min(64 << 20)];
        let _ = reader
            .get_mut()
            .set_read_timeout(Some(Duration::from_secs(5)));
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let _ = reader
            .get_mut()
            .set_read_timeout(Some(Duration::from_millis(200)));
        let now_serving = st.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        st.peak.fetch_max(now_serving, Ordering::SeqCst);
        let before = st.seen.lock().unwrap().len();
        let ruled = st.rule.lock().unwrap().and_then(|rule| rule(&body, before));
        let b = ruled
            .or_else(|| st.script.lock().unwrap().pop_front())
            .unwrap_or_else(|| st.behavior.lock().unwrap().clone());
        st.seen.lock().unwrap().push(Seen {
            at: Instant::now(),
            webhook_id: header("webhook-id").unwrap_or_default(),
            attempt: header("x-sluice-attempt")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            replay_of: header("x-sluice-replay-of"),
            content_type: header("content-type"),
            timestamp: header("webhook-timestamp"),
            signature: header("webhook-signature"),
            body,
            status: b.status,
        });
        if !b.delay.is_zero() {
            std::thread::sleep(b.delay);
        }
        while st.hold.load(Ordering::SeqCst) && !st.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(5));
        }
        st.in_flight.fetch_sub(1, Ordering::SeqCst);
        let mut resp = format!("HTTP/1.1 {} X\r\ncontent-length: 2\r\n", b.status);
        if let Some(ra) = b.retry_after {
            resp.push_str(&format!("retry-after: {ra}\r\n"));
        }
        resp.push_str("\r\nok");
        if writer.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}
