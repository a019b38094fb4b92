//! A rolling restart behind a real nginx (Debian package `nginx`) with upstream keep-alive and
//! without `non_idempotent`: nginx retries a POST on the next server only when it could not
//! send it (a refused connection), so a keep-alive connection that sluice resets or closes
//! under a request it has already sent is a `502` for the client. The drain must end every
//! connection so that this cannot happen: a request that reached sluice is answered (with
//! `Connection: close`), an idle connection is half-closed and its input read until nginx
//! closes it (no RST), and the listener stops taking new connections but completes and
//! accepts the handshakes under way before it closes (nginx sends its request as soon as its
//! connect returns).

use std::collections::BTreeMap;
use std::fs;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

/// Rolling restarts per test (each restarts both servers once).
const ROUNDS: usize = 5;
/// Client threads sending keep-alive POSTs through nginx.
const CLIENTS: usize = 6;

/// An nginx process (`daemon off`) with its own prefix, config and logs in a temp dir.
struct Nginx {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

impl Nginx {
    /// Starts nginx in front of `upstreams` (README's example minus `non_idempotent`).
    fn start(nginx: &Path, upstreams: &[u16]) -> Nginx {
        let dir = tempfile::Builder::new()
            .prefix("sluice-nginx-")
            .tempdir()
            .expect("tempdir");
        let port = free_port();
        let d = dir.path().display();
        let servers: String = upstreams
            .iter()
            .map(|p| format!("server 127.0.0.1:{p} max_fails=1 fail_timeout=1s;\n"))
            .collect();
        // As root the workers would switch to `nobody`, who cannot enter the temp dir.
        // SAFETY: geteuid(2) reads the process's credentials; it cannot fail.
        let user = if unsafe { libc::geteuid() } == 0 {
            "user root;"
        } else {
            ""
        };
        let conf = format!(
            "{user}\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n\
               access_log {d}/access.log;\n\
               client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
               upstream sluice {{\n{servers} keepalive 32;\n}}\n\
               server {{\n listen 127.0.0.1:{port};\n\
                 location / {{\n proxy_pass http://sluice;\n proxy_http_version 1.1;\n\
                   proxy_set_header Connection \"\";\n proxy_next_upstream error timeout http_503;\n\
                 }}\n}}\n}}\n"
        );
        let conf_path = dir.path().join("nginx.conf");
        fs::write(&conf_path, conf).expect("write nginx.conf");
        let child = Command::new(nginx)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf_path)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-g")
            .arg("daemon off;")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {} ({e}): install the Debian package nginx",
                    nginx.display()
                )
            });
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
        let mut nginx = Nginx { child, addr, dir };
        let up = wait_until(Duration::from_secs(10), || {
            TcpStream::connect(addr).is_ok() || matches!(nginx.child.try_wait(), Ok(Some(_)))
        });
        assert!(
            up && matches!(nginx.child.try_wait(), Ok(None)),
            "nginx did not start; error.log:\n{}",
            nginx.error_log()
        );
        nginx
    }

    fn error_log(&self) -> String {
        fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // Our own child, by its PID: SIGTERM, on which the master stops its worker (a SIGKILL
        // would leave the worker running, orphaned), then SIGKILL if it has not exited.
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on the PID of a child we spawned and have not reaped (so the PID is
        // still ours); it only sends a signal.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let exited = wait_until(Duration::from_secs(5), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        });
        if !exited {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Keep-alive POSTs through nginx until `stop`; counts each status (0: the connection to nginx
/// failed, which nginx never does on its own).
fn client_loop(addr: SocketAddr, stop: Arc<AtomicBool>, counts: Arc<Mutex<BTreeMap<u16, u64>>>) {
    let mut conn: Option<Client> = None;
    let mut local: BTreeMap<u16, u64> = BTreeMap::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match Client::connect(addr) {
                Ok(c) => {
                    c.set_read_timeout(Duration::from_secs(10));
                    conn.insert(c)
                }
                Err(_) => {
                    *local.entry(0).or_default() += 1;
                    thread::sleep(Duration::from_millis(10));
                    continue;
                }
            },
        };
        n += 1;
        let body = format!("{{\"n\":{n}}}");
        match c.try_post("/webhooks/rolling", body.as_bytes(), &[]) {
            Ok(r) => {
                *local.entry(r.status).or_default() += 1;
                if r.closes() {
                    conn = None;
                }
            }
            Err(_) => {
                *local.entry(0).or_default() += 1;
                conn = None;
            }
        }
    }
    let mut all = counts.lock().expect("counts");
    for (k, v) in local {
        *all.entry(k).or_default() += v;
    }
}

/// Wall-clock `HH:MM:SS.mmm` (UTC), to line events up with nginx's error log.
fn clock() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let s = ms / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600 % 24,
        s / 60 % 60,
        s % 60,
        ms % 1000
    )
}

/// SIGTERM, a clean exit, and a start on the same port; then time for nginx to take the
/// server back (its `fail_timeout` is 1 s) before the next one goes. Each step goes on the
/// timeline.
fn roll(server: &mut Server, name: &str, timeline: &mut Vec<String>) {
    timeline.push(format!("{} SIGTERM {name}", clock()));
    server.stop();
    timeline.push(format!("{} {name} exited", clock()));
    server.restart();
    timeline.push(format!("{} {name} listening", clock()));
    thread::sleep(Duration::from_millis(2500));
}

#[test]
fn a_rolling_restart_behind_nginx_keepalive_gives_no_502() {
    let Some(nginx_bin) = require_tool("nginx", "nginx") else {
        return;
    };
    let ports = [free_port(), free_port()];
    let opts = |port: u16, grace: &str| {
        let mut o =
            crate::dispatch::big_buckets(Opts::default()).listen(&format!("127.0.0.1:{port}"));
        // One server drains as README advises (a grace with `Connection: close` on every
        // answer), the other with none (the listener closes at the signal).
        o.drain_grace = Some(grace.into());
        o
    };
    let mut a = Server::start(opts(ports[0], "1s"));
    let mut b = Server::start(opts(ports[1], "0s"));
    let nginx = Nginx::start(&nginx_bin, &ports);

    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Mutex::new(BTreeMap::new()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (stop, counts) = (stop.clone(), counts.clone());
            thread::spawn(move || client_loop(nginx.addr, stop, counts))
        })
        .collect();
    let started = Instant::now();
    thread::sleep(Duration::from_millis(500));
    let mut timeline = Vec::new();
    for _ in 0..ROUNDS {
        roll(&mut a, "a", &mut timeline);
        roll(&mut b, "b", &mut timeline);
    }
    timeline.push(format!("{} clients stop", clock()));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("client thread");
    }
    let counts = counts.lock().expect("counts").clone();
    let log = nginx.error_log();
    let resets = log.matches("Connection reset by peer").count();
    let premature = log.matches("prematurely closed").count();
    println!(
        "{ROUNDS} rolling restarts in {:?}: responses by status {counts:?}; nginx error.log: \
         {resets} resets, {premature} premature closes",
        started.elapsed()
    );
    // Refused connects are expected (a server is down for a moment each round): the other
    // errors are the ones to see.
    let bad: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("[error]") && !l.contains("connect() failed (111"))
        .take(10)
        .collect();
    assert_eq!(
        counts.get(&502).copied().unwrap_or(0),
        0,
        "502s through nginx: {counts:?}; first errors:\n{}\ntimeline (a on {}, b on {}):\n{}",
        bad.join("\n"),
        ports[0],
        ports[1],
        timeline.join("\n")
    );
    // A reset or an early close nginx met is a failure even when it did not become a 502
    // (e.g. a connection reset while nginx was still connecting, which it retries): sluice
    // must end every connection cleanly.
    assert_eq!(
        (resets, premature),
        (0, 0),
        "nginx met resets / premature closes; first errors:\n{}\ntimeline:\n{}",
        bad.join("\n"),
        timeline.join("\n")
    );
    assert_eq!(counts.get(&0).copied().unwrap_or(0), 0, "{counts:?}");
    assert!(
        counts.get(&202).copied().unwrap_or(0) >= 100,
        "the load did not flow: {counts:?}"
    );
    a.stop();
    b.stop();
}
