//! `[server]`: the listener, the workers, the connection limits and timeouts, and the
//! connection layer's memory budgets. Stage 1 ([`RawServer`], every field documented) and
//! stage 2 ([`ServerConfig`]), validated by [`build_server`]; split from `config/mod.rs` by
//! section.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{budgets, duration, duration_or, ranged, ConfigError, Overrides};

/// The I/O backend (`server.io`), for running one build on either backend without a manifest.
pub const ENV_IO: &str = "SLUICE_IO";

/// `[server]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    /// Listen address. Default: `127.0.0.1:8080`.
    pub listen: Option<String>,
    /// Data directory; the WAL lives in `<data_dir>/wal`. Default: `./sluice-data`.
    pub data_dir: Option<PathBuf>,
    /// Worker threads (one event loop each). Default: available cores. Range: 1..=256.
    pub workers: Option<usize>,
    /// The cores' I/O backend: `"auto"` (io_uring where the kernel supports every operation
    /// used, else mio), `"mio"` or `"uring"` (a start-up error where unavailable). Env
    /// `SLUICE_IO`; `serve --io` wins over both. Default: `"auto"`.
    pub io: Option<String>,
    /// Open connections per worker; past it new connections get `503` and are closed.
    /// Default: 4096. Range: 1..=1_000_000.
    pub max_connections_per_core: Option<usize>,
    /// Time allowed to receive a request head (from its first byte, or from the connection's
    /// start). Past it: `408` and close. Default: `10s`.
    pub header_timeout: Option<String>,
    /// Time allowed to receive a request body after its head. Past it: `408` and close.
    /// Default: `30s`.
    pub body_timeout: Option<String>,
    /// Idle keep-alive connections are closed after this long. Default: `60s`.
    pub idle_timeout: Option<String>,
    /// On SIGTERM/SIGINT, time given to in-flight requests before exit (counted after
    /// `drain_grace`). Default: `30s`.
    pub shutdown_timeout: Option<String>,
    /// On SIGTERM/SIGINT, `/readyz` answers `503 draining` at once, but the listener stays open
    /// and requests are served as usual for this long, so a load balancer polling `/readyz` can
    /// take the instance out of rotation before it stops accepting. `0s`: stop accepting at
    /// once. Default: `2s`. Range: `0s..=365d`.
    pub drain_grace: Option<String>,
    /// Largest accepted request body; larger gets `413`. Default: 10 MiB. Range: 1..=32 MiB
    /// (the WAL's record bound, `wal::MAX_BODY_BYTES`).
    pub max_body_bytes: Option<u64>,
    /// Largest request head; larger gets `431`. Default: 16 KiB. Range: 1 KiB..=1 MiB.
    pub max_head_bytes: Option<usize>,
    /// Longest request target; longer gets `414`. Default: 8 KiB. Range: 64..=max_head_bytes.
    pub max_uri_bytes: Option<usize>,
    /// Requests one connection may have queued (pipelined) before the server stops reading
    /// from it. Default: 16. Range: 1..=1024.
    pub max_pipeline_depth: Option<usize>,
    /// Bytes of request bodies being received at once, over all connections and cores: a
    /// declared `Content-Length` is reserved when the head arrives, a chunked body as it grows.
    /// A body the budget cannot cover is refused at once with `503 body_budget` and is not
    /// read. Default: 256 MiB. Range: `max_body_bytes`..=64 GiB.
    pub max_inflight_body_bytes: Option<u64>,
    /// Response bytes one connection may have queued (unsent because the client does not read)
    /// before the server stops reading its requests. One response may take a connection past
    /// it. Default: 64 KiB. Range: 4 KiB..=64 MiB.
    pub max_queued_response_bytes: Option<usize>,
    /// Who may see the dashboard: `"public"`, `"token"` (the admin token) or `"off"`; see
    /// [`super::ui`]. Default: `"public"` on a loopback listen address, `"token"` otherwise.
    pub ui: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub workers: usize,
    pub io: crate::net::io::IoMode,
    pub max_connections_per_core: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    pub shutdown_timeout: Duration,
    /// Serving on after SIGTERM/SIGINT, before accepting stops (`RawServer::drain_grace`).
    pub drain_grace: Duration,
    pub max_body_bytes: u64,
    pub max_head_bytes: usize,
    pub max_uri_bytes: usize,
    pub max_pipeline_depth: usize,
    pub max_inflight_body_bytes: u64,
    pub max_queued_response_bytes: usize,
    /// `server.ui` ([`super::ui::UiMode`]).
    pub ui: super::ui::UiMode,
}

pub(super) fn build_server(r: RawServer, o: &Overrides) -> Result<ServerConfig, ConfigError> {
    let listen = listen_addr(o.listen.clone().or(r.listen.clone()))?;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let workers = ranged("server.workers", o.workers.or(r.workers), cores, 1, 256)?;
    let (max_head_bytes, max_body_bytes) = (head_bytes(&r)?, body_bytes(&r)?);
    let t = Timeouts::build(&r, o)?;
    Ok(ServerConfig {
        listen,
        data_dir: o
            .data_dir
            .clone()
            .or(r.data_dir)
            .unwrap_or_else(|| PathBuf::from("./sluice-data")),
        workers,
        io: match o.io.clone().or(r.io) {
            None => crate::net::io::IoMode::Auto,
            Some(t) => crate::net::io::IoMode::parse(&t)
                .map_err(|e| ConfigError(format!("server.io: {e}")))?,
        },
        max_connections_per_core: ranged(
            "server.max_connections_per_core",
            r.max_connections_per_core,
            4096,
            1,
            1_000_000,
        )?,
        header_timeout: t.header,
        body_timeout: t.body,
        idle_timeout: t.idle,
        shutdown_timeout: t.shutdown,
        drain_grace: t.drain_grace,
        max_body_bytes,
        max_head_bytes,
        // Default: 8 KiB, or the head limit if smaller (the target is part of the head).
        max_uri_bytes: ranged(
            "server.max_uri_bytes",
            r.max_uri_bytes,
            (8 * 1024).min(max_head_bytes),
            64,
            max_head_bytes,
        )?,
        max_pipeline_depth: ranged(
            "server.max_pipeline_depth",
            r.max_pipeline_depth,
            16,
            1,
            1024,
        )?,
        max_inflight_body_bytes: budgets::inflight_body_bytes(
            r.max_inflight_body_bytes,
            max_body_bytes,
        )?,
        max_queued_response_bytes: budgets::queued_response_bytes(r.max_queued_response_bytes)?,
        ui: super::ui::build(r.ui.as_deref(), listen)?,
    })
}

/// `server.listen` (or `--listen`). Default: `127.0.0.1:8080`.
fn listen_addr(given: Option<String>) -> Result<SocketAddr, ConfigError> {
    let text = given.unwrap_or_else(|| "127.0.0.1:8080".into());
    text.parse().map_err(|_| {
        ConfigError(format!(
            "listen: {text:?} is not an address like 127.0.0.1:8080"
        ))
    })
}

/// `server.max_head_bytes`: 1 KiB..=1 MiB, default 16 KiB.
fn head_bytes(r: &RawServer) -> Result<usize, ConfigError> {
    ranged(
        "server.max_head_bytes",
        r.max_head_bytes,
        16 * 1024,
        1024,
        1 << 20,
    )
}

/// `server.max_body_bytes`: 1..=the WAL's record bound, default 10 MiB.
fn body_bytes(r: &RawServer) -> Result<u64, ConfigError> {
    ranged(
        "server.max_body_bytes",
        r.max_body_bytes,
        10 << 20,
        1,
        crate::wal::MAX_BODY_BYTES as u64,
    )
}

/// The connection timeouts and the drain's phases.
struct Timeouts {
    header: Duration,
    body: Duration,
    idle: Duration,
    shutdown: Duration,
    drain_grace: Duration,
}

impl Timeouts {
    fn build(r: &RawServer, o: &Overrides) -> Result<Timeouts, ConfigError> {
        let secs = Duration::from_secs;
        Ok(Timeouts {
            header: duration_or("server.header_timeout", r.header_timeout.clone(), secs(10))?,
            body: duration_or("server.body_timeout", r.body_timeout.clone(), secs(30))?,
            idle: duration_or("server.idle_timeout", r.idle_timeout.clone(), secs(60))?,
            shutdown: duration_or(
                "server.shutdown_timeout",
                r.shutdown_timeout.clone(),
                secs(30),
            )?,
            drain_grace: match o.drain_grace.clone().or(r.drain_grace.clone()) {
                None => secs(2),
                Some(t) => duration::parse_duration_or_zero(&t)
                    .map_err(|e| ConfigError(format!("server.drain_grace: {e}")))?,
            },
        })
    }
}
