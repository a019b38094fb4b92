//! The one way this room connects to NATS: every configured server, retried by us (not by the
//! client's `retry_on_initial_connect`, which returns before any server answered, so without
//! the server's `max_payload` and reading an unreachable cluster as one that does not answer)
//! until `spec.lease` has passed, each attempt bounded by `spec.ack_timeout`.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use crate::replication::spec::ReplicationSpec;

/// A client connected to `spec.servers`, named `sluice <role> <node>`; the error says why none
/// answered within `spec.lease`.
pub async fn connect(spec: &ReplicationSpec, role: &str) -> Result<async_nats::Client, String> {
    let mut addrs = Vec::new();
    for s in &spec.servers {
        addrs.push(
            s.parse::<async_nats::ServerAddr>()
                .map_err(|e| format!("{s}: {e}"))?,
        );
    }
    let deadline = Instant::now() + spec.lease;
    loop {
        let options = async_nats::ConnectOptions::new()
            .name(format!("sluice {role} {}", spec.node))
            .connection_timeout(spec.ack_timeout)
            .request_timeout(Some(spec.ack_timeout));
        match options.connect(addrs.clone()).await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("{e} (for {:?})", spec.lease));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The current-thread runtime each of this room's threads runs the client on (the mirror, the
/// adopter, a restore, the start-up lease check): timers and I/O enabled.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}
