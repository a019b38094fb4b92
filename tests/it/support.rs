//! Shared helpers: start/stop the real `sluice` binary, a tiny blocking HTTP/1.1 client over
//! `TcpStream`, the WAL command-line tools, small parsers (JSON bodies, Prometheus text), and
//! (`nats`) a real nats-server JetStream cluster on loopback.
//!
//! Every wait in here is bounded: process start (20 s), socket reads and writes (10 s unless a
//! test asks for less), process exit (caller's timeout), CLI tools (30 s). A `Server` kills the
//! process it started (by PID, SIGKILL) when dropped, so a failing test leaves nothing behind.

#![allow(dead_code)]

use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tempfile::TempDir;

mod client;
pub use client::*;
mod system_tools;
pub use system_tools::*;
mod nats;
pub use nats::*;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_sluice");
/// Longest wait for the "listening" line (or for a failed start to exit).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// Default socket read/write timeout of the client.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for a CLI tool (`sluice wal ...`).
pub const CLI_TIMEOUT: Duration = Duration::from_secs(30);

pub const ENV_GLOBAL_CAPACITY: &str = "HARN_ORCHESTRATOR_INGEST_GLOBAL_CAPACITY";
pub const ENV_PER_SOURCE_CAPACITY: &str = "HARN_ORCHESTRATOR_INGEST_PER_SOURCE_CAPACITY";
pub const ENV_REFILL_PER_SEC: &str = "HARN_ORCHESTRATOR_INGEST_REFILL_PER_SEC";
const HARN_ENV: [&str; 3] = [
    ENV_GLOBAL_CAPACITY,
    ENV_PER_SOURCE_CAPACITY,
    ENV_REFILL_PER_SEC,
];

const LISTENING: &str = "sluice: listening on http://";

// ---------------------------------------------------------------------------------------------
// Server process
// ---------------------------------------------------------------------------------------------

/// How to start a server.
#[derive(Clone, Debug)]
pub struct Opts {
    /// Manifest text, written to a file in the test's temp dir and passed as `--config`.
    pub config: Option<String>,
    pub env: Vec<(String, String)>,
    pub workers: usize,
    /// `--durability`.
    pub durability: Option<String>,
    /// `RLIMIT_NOFILE` (soft and hard) of the server process.
    pub nofile: Option<u64>,
    /// `--drain-grace`: `0s` by default here (the server's default is 2s), so that stopping a
    /// test server does not wait; `None` leaves it to the manifest.
    pub drain_grace: Option<String>,
    /// More `serve` arguments (e.g. `--accept-wal-loss`).
    pub args: Vec<String>,
    /// Environment variables the server must not inherit from the test (e.g. `SLUICE_IO`).
    pub unset: Vec<String>,
    /// `--listen`: `127.0.0.1:0` (a free port) unless set; a fixed address keeps its port
    /// across restarts (a proxy's upstream).
    pub listen: Option<String>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            config: None,
            env: Vec::new(),
            workers: 2,
            durability: None,
            nofile: None,
            drain_grace: Some("0s".into()),
            args: Vec::new(),
            unset: Vec::new(),
            listen: None,
        }
    }
}

impl Opts {
    pub fn config(toml: &str) -> Opts {
        Opts {
            config: Some(toml.to_string()),
            ..Opts::default()
        }
    }

    pub fn env(mut self, key: &str, value: &str) -> Opts {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub fn env_remove(mut self, key: &str) -> Opts {
        self.unset.push(key.to_string());
        self
    }

    pub fn workers(mut self, n: usize) -> Opts {
        self.workers = n;
        self
    }

    pub fn arg(mut self, arg: &str) -> Opts {
        self.args.push(arg.to_string());
        self
    }

    pub fn durability(mut self, mode: &str) -> Opts {
        self.durability = Some(mode.to_string());
        self
    }

    pub fn nofile(mut self, limit: u64) -> Opts {
        self.nofile = Some(limit);
        self
    }

    pub fn listen(mut self, addr: &str) -> Opts {
        self.listen = Some(addr.to_string());
        self
    }
}

/// A start that did not reach "listening".
#[derive(Debug)]
pub struct StartFailure {
    /// `None` if the process had to be killed.
    pub status: Option<ExitStatus>,
    pub stderr: String,
    pub elapsed: Duration,
}

/// A running (or stopped) `sluice serve` process with its own temp dir.
#[derive(Debug)]
pub struct Server {
    child: Option<Child>,
    addr: SocketAddr,
    root: Arc<TempDir>,
    opts: Opts,
    starts: u32,
    exit: Option<ExitStatus>,
}

/// Starts a server that must refuse its configuration: panics if it starts (naming `what`),
/// asserts exit status 2, and returns the failure for the caller's checks of its message.
pub fn refused_config(opts: Opts, what: &str) -> StartFailure {
    let failure = match Server::start_in(temp_root(), opts) {
        Err(f) => f,
        Ok(_) => panic!("started with {what}"),
    };
    assert_eq!(
        failure.status.and_then(|s| s.code()),
        Some(2),
        "{}",
        failure.stderr
    );
    failure
}

/// A fresh temp dir for one test (holds `data/`, configs and logs).
pub fn temp_root() -> Arc<TempDir> {
    Arc::new(
        tempfile::Builder::new()
            .prefix("sluice-it-")
            .tempdir()
            .expect("tempdir"),
    )
}

impl Server {
    /// Starts a server in a fresh temp dir; panics (with its stderr) if it does not start.
    pub fn start(opts: Opts) -> Server {
        Server::start_in(temp_root(), opts).unwrap_or_else(|f| {
            panic!(
                "sluice did not start ({:?}, after {:?}); stderr:\n{}",
                f.status, f.elapsed, f.stderr
            )
        })
    }

    /// Starts a server whose data dir is `<root>/data`.
    pub fn start_in(root: Arc<TempDir>, opts: Opts) -> Result<Server, StartFailure> {
        Server::spawn(root, opts, 0)
    }

    fn spawn(root: Arc<TempDir>, opts: Opts, starts: u32) -> Result<Server, StartFailure> {
        let started = Instant::now();
        let data = root.path().join("data");
        let stderr_path = root.path().join(format!("stderr-{starts}.log"));
        let stderr_file = fs::File::create(&stderr_path).expect("create stderr log");
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg("--listen")
            .arg(opts.listen.as_deref().unwrap_or("127.0.0.1:0"))
            .arg("--data-dir")
            .arg(&data)
            .arg("--workers")
            .arg(opts.workers.to_string());
        if let Some(text) = &opts.config {
            let path = root.path().join(format!("sluice-{starts}.toml"));
            fs::write(&path, text).expect("write config");
            cmd.arg("--config").arg(path);
        }
        if let Some(d) = &opts.durability {
            cmd.arg("--durability").arg(d);
        }
        if let Some(g) = &opts.drain_grace {
            cmd.arg("--drain-grace").arg(g);
        }
        cmd.args(&opts.args);
        for k in HARN_ENV
            .iter()
            .copied()
            .chain(opts.unset.iter().map(String::as_str))
        {
            cmd.env_remove(k);
        }
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        if let Some(limit) = opts.nofile {
            use std::os::unix::process::CommandExt;
            let rlim = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            // SAFETY: the closure runs in the forked child before exec and only calls
            // setrlimit(2), which is async-signal-safe, on a value copied into the closure; it
            // allocates nothing and touches no lock.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &rlim) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr_file));
        let mut child = cmd.spawn().expect("spawn sluice");
        let stdout = child.stdout.take().expect("stdout pipe");
        let (tx, rx) = mpsc::channel::<String>();
        thread::spawn(move || {
            // Reads stdout to its end (so the server never blocks on a full pipe) and reports
            // the first "listening" line.
            let mut reader = BufReader::new(stdout);
            let mut tx = Some(tx);
            let mut line = String::new();
            loop {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if let Some(rest) = line.trim().strip_prefix(LISTENING) {
                            if let Some(t) = tx.take() {
                                let _ = t.send(rest.trim_end_matches('/').to_string());
                            }
                        }
                    }
                }
            }
        });
        let read_stderr = || fs::read_to_string(&stderr_path).unwrap_or_default();
        match rx.recv_timeout(STARTUP_TIMEOUT) {
            Ok(addr) => {
                let addr: SocketAddr = addr
                    .parse()
                    .unwrap_or_else(|_| panic!("unparsable listening address {addr:?}"));
                assert!(addr.ip().is_loopback(), "server listens on {addr}");
                Ok(Server {
                    child: Some(child),
                    addr,
                    root,
                    opts,
                    starts: starts + 1,
                    exit: None,
                })
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // stdout closed without the line: the process is exiting.
                let status = wait_child(&mut child, STARTUP_TIMEOUT);
                Err(StartFailure {
                    status,
                    stderr: read_stderr(),
                    elapsed: started.elapsed(),
                })
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(StartFailure {
                    status: None,
                    stderr: read_stderr(),
                    elapsed: started.elapsed(),
                })
            }
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn root(&self) -> Arc<TempDir> {
        self.root.clone()
    }

    /// `--data-dir`.
    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// Core 0's log (`wal/core-0`): the only log of a one-worker server.
    pub fn wal_dir(&self) -> PathBuf {
        self.data_dir().join("wal").join("core-0")
    }

    pub fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Everything the server processes started by this `Server` wrote to stderr so far.
    pub fn stderr(&self) -> String {
        let mut out = String::new();
        for i in 0..self.starts.max(1) {
            let p = self.root.path().join(format!("stderr-{i}.log"));
            if let Ok(s) = fs::read_to_string(p) {
                out.push_str(&format!("--- start {i} ---\n{s}"));
            }
        }
        out
    }

    /// A new client connection (panics if the connection fails).
    pub fn client(&self) -> Client {
        Client::connect(self.addr).unwrap_or_else(|e| panic!("connect {}: {e}", self.addr))
    }

    /// One POST on a new connection.
    pub fn post(&self, path: &str, body: &[u8]) -> Response {
        self.client().post(path, body, &[])
    }

    /// One GET on a new connection.
    pub fn get(&self, path: &str) -> Response {
        self.client().get(path)
    }

    /// POSTs and returns the event id of the 202.
    pub fn ingest(&self, path: &str, body: &[u8]) -> String {
        let r = self.post(path, body);
        accepted(&r).0
    }

    /// Sends SIGTERM to the process (if it runs).
    pub fn sigterm(&self) {
        if let Some(pid) = self.pid() {
            // SAFETY: kill(2) with a PID of a child we spawned and have not reaped yet (so the
            // PID cannot have been reused) and a valid signal number; no memory is involved.
            let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
            assert_eq!(
                rc,
                0,
                "kill(SIGTERM) failed: {}",
                io::Error::last_os_error()
            );
        }
    }

    /// SIGKILL and reap.
    pub fn sigkill(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("server is not running");
        let _ = child.kill();
        let status = child.wait().expect("wait after SIGKILL");
        self.exit = Some(status);
        status
    }

    /// Waits for the process to exit; panics (after SIGKILL) if it does not within `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        if let Some(s) = self.exit {
            if self.child.is_none() {
                return s;
            }
        }
        let mut child = self.child.take().expect("server is not running");
        match wait_child(&mut child, timeout) {
            Some(status) => {
                self.exit = Some(status);
                status
            }
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "sluice did not exit within {timeout:?}; stderr:\n{}",
                    self.stderr()
                );
            }
        }
    }

    /// SIGTERM, wait (≤ 20 s) and assert exit code 0.
    pub fn stop(&mut self) {
        self.sigterm();
        let status = self.wait_exit(Duration::from_secs(20));
        assert!(
            status.success(),
            "sluice exited with {status:?} after SIGTERM; stderr:\n{}",
            self.stderr()
        );
    }

    /// Starts the server again on the same data dir (it must be stopped).
    pub fn try_restart(&mut self) -> Result<(), StartFailure> {
        assert!(self.child.is_none(), "restart of a running server");
        let index = self.starts;
        self.starts += 1;
        let mut next = Server::spawn(self.root.clone(), self.opts.clone(), index)?;
        self.child = next.child.take();
        self.addr = next.addr;
        self.exit = None;
        Ok(())
    }

    pub fn restart(&mut self) {
        if let Err(f) = self.try_restart() {
            panic!("restart failed ({:?}); stderr:\n{}", f.status, f.stderr);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// The value of header `name` (any case) in a request head read line by line, request line
/// first (the test downstreams' servers).
pub fn head_header(head: &[String], name: &str) -> Option<String> {
    head.iter().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

// ---------------------------------------------------------------------------------------------
// CLI tools
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
pub struct CliOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl CliOutput {
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

/// Runs `sluice <args>` with a timeout.
pub fn run_cli(args: &[&str]) -> CliOutput {
    let child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice cli");
    let pid = child.id() as i32;
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(CLI_TIMEOUT) {
        Ok(Ok(out)) => CliOutput {
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        },
        Ok(Err(e)) => panic!("sluice {args:?}: {e}"),
        Err(_) => {
            // SAFETY: kill(2) on the PID of our own child, which the waiting thread has not
            // reaped (it is still waiting), so the PID is not reused.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("sluice {args:?} did not finish within {CLI_TIMEOUT:?}");
        }
    }
}

/// One event as `sluice wal inspect --json` prints it.
#[derive(Clone, Debug)]
pub struct WalEvent {
    pub event_id: String,
    /// The log holding it (`core-K`, `legacy`); LSNs are per log.
    pub log: String,
    pub lsn: u64,
    pub trigger_id: String,
    pub source: String,
    pub received_at: serde_json::Value,
    pub body_len: u64,
    pub body_sha256: String,
    /// `delivered`, `skipped`, `dead_lettered`, `no_handler` or `pending`.
    pub outcome: String,
    /// A skip's gate and reason, or a dead letter's reason.
    pub gate: Option<String>,
    pub reason: Option<String>,
}

/// `sluice wal inspect --data-dir D --json`, which must succeed.
pub fn wal_inspect(data_dir: &Path) -> Vec<WalEvent> {
    let out = run_cli(&["wal", "inspect", "--data-dir", path_str(data_dir), "--json"]);
    assert!(
        out.status.success(),
        "wal inspect failed ({:?}):\n{}",
        out.status,
        out.all()
    );
    out.stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("inspect line {l:?}: {e}"));
            let s = |k: &str| {
                v.get(k)
                    .and_then(|x| x.as_str())
                    .unwrap_or_else(|| panic!("inspect line lacks string {k:?}: {l}"))
                    .to_string()
            };
            let n = |k: &str| {
                v.get(k)
                    .and_then(|x| x.as_u64())
                    .unwrap_or_else(|| panic!("inspect line lacks integer {k:?}: {l}"))
            };
            WalEvent {
                event_id: s("event_id"),
                log: s("log"),
                lsn: n("lsn"),
                trigger_id: s("trigger_id"),
                source: s("source"),
                received_at: v
                    .get("received_at")
                    .cloned()
                    .unwrap_or_else(|| panic!("no received_at: {l}")),
                body_len: n("body_len"),
                body_sha256: s("body_sha256").to_ascii_lowercase(),
                outcome: s("outcome"),
                gate: v.get("gate").and_then(|x| x.as_str()).map(String::from),
                reason: v.get("reason").and_then(|x| x.as_str()).map(String::from),
            }
        })
        .collect()
}

/// `sluice wal verify --data-dir D`.
pub fn wal_verify(data_dir: &Path) -> CliOutput {
    run_cli(&["wal", "verify", "--data-dir", path_str(data_dir)])
}

/// Asserts that `sluice wal verify` exits 0.
pub fn assert_wal_clean(data_dir: &Path) {
    let v = wal_verify(data_dir);
    assert!(
        v.status.success(),
        "wal verify: {:?}\n{}",
        v.status,
        v.all()
    );
}

/// Segment files (`*.seg`) of `wal_dir`, sorted by name.
pub fn segments(wal_dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(wal_dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", wal_dir.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "seg"))
        .collect();
    v.sort();
    v
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

pub fn file_name(p: &Path) -> String {
    p.file_name()
        .expect("file name")
        .to_string_lossy()
        .into_owned()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Finds the event with `id`, panicking with the list when absent.
pub fn find_event<'a>(events: &'a [WalEvent], id: &str) -> &'a WalEvent {
    events.iter().find(|e| e.event_id == id).unwrap_or_else(|| {
        panic!(
            "event {id} not in the WAL; inspect listed {} events: {events:#?}",
            events.len()
        )
    })
}

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

/// One sample line of the Prometheus text format.
#[derive(Clone, Debug)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
    pub line: String,
}

impl Sample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the sample lines (comments skipped).
pub fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = match line.rsplit_once(' ') {
            Some(x) => x,
            None => panic!("metrics line without a value: {line:?}"),
        };
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("metrics value {v:?} in {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), Vec::new()),
            Some((name, rest)) => {
                let inner = rest
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("bad label set in {line:?}"));
                (name.to_string(), parse_labels(inner))
            }
        };
        out.push(Sample {
            name,
            labels,
            value,
            line: line.to_string(),
        });
    }
    out
}

fn parse_labels(inner: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = inner;
    while !rest.is_empty() {
        let (name, after) = rest
            .split_once("=\"")
            .unwrap_or_else(|| panic!("bad labels {inner:?}"));
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(if n == 'n' { '\n' } else { n });
                    }
                }
                '"' => {
                    end = Some(i);
                    break;
                }
                c => value.push(c),
            }
        }
        let end = end.unwrap_or_else(|| panic!("unterminated label in {inner:?}"));
        out.push((name.trim_start_matches(',').to_string(), value));
        rest = after[end + 1..].trim_start_matches(',');
    }
    out
}

/// Fetches and parses `/metrics`, returning the raw text too.
pub fn scrape(server: &Server) -> (String, Vec<Sample>) {
    let r = server.get("/metrics");
    assert_eq!(r.status, 200, "/metrics: {} {}", r.status, r.text());
    let text = r.text();
    let samples = parse_metrics(&text);
    (text, samples)
}

/// The resident set size of process `pid` (`VmRSS` of `/proc/PID/status`), in bytes.
pub fn rss_bytes(pid: i32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("bad VmRSS line {line:?}"));
    kib * 1024
}

/// The value of the sample `name` whose labels include `labels` (0 if absent).
pub fn sample_value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value)
        .sum()
}

/// Polls `f` every 20 ms until it returns true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// `/healthz` probed on `connections` connections (SO_REUSEPORT spreads them over the cores),
/// each every `every`, until [`HealthProbes::stop`] (at most 20,000 probes a connection).
pub struct HealthProbes {
    stop: Arc<std::sync::atomic::AtomicBool>,
    worst: Arc<std::sync::Mutex<Duration>>,
    threads: Vec<std::thread::JoinHandle<usize>>,
}

impl HealthProbes {
    pub fn start(addr: SocketAddr, connections: usize, every: Duration) -> HealthProbes {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let worst = Arc::new(std::sync::Mutex::new(Duration::ZERO));
        let threads = (0..connections)
            .map(|_| {
                let (stop, worst) = (stop.clone(), worst.clone());
                std::thread::spawn(move || {
                    let mut c = Client::connect(addr).expect("connect");
                    c.set_read_timeout(Duration::from_secs(10));
                    let mut n = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) && n < 20_000 {
                        let t = Instant::now();
                        assert_eq!(c.get("/healthz").status, 200);
                        let took = t.elapsed();
                        let mut w = worst.lock().unwrap();
                        *w = (*w).max(took);
                        drop(w);
                        n += 1;
                        std::thread::sleep(every);
                    }
                    n
                })
            })
            .collect();
        HealthProbes {
            stop,
            worst,
            threads,
        }
    }

    /// Stops the probes: `(probes made, the slowest)`.
    pub fn stop(self) -> (usize, Duration) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let n = self.threads.into_iter().map(|t| t.join().unwrap()).sum();
        let worst = *self.worst.lock().unwrap();
        (n, worst)
    }
}
