//! A subject's purges (`replication::retention` decides what may go; this runs it): a task of
//! its own on the mirror thread, so that a slow purge never delays a publish.
#![forbid(unsafe_code)]

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;

use crate::replication::state::ReplicationState;

/// A subject's purges (`replication::retention`), run by a task of their own so that a slow
/// purge never delays a publish: at most one in flight, at most one a second, each up to the
/// highest sequence wanted by then (a purge below a sequence drops everything below it, so a
/// later one covers an earlier one that never ran).
#[derive(Debug, Default)]
pub struct Purger {
    wanted: std::sync::atomic::AtomicU64,
    running: std::sync::atomic::AtomicBool,
}

/// The least time between two purges of a subject.
const PURGE_EVERY: Duration = Duration::from_secs(1);

impl Purger {
    /// Everything below `below` may go; starts the purging task if it is not running.
    pub fn want(
        self: &Arc<Self>,
        below: u64,
        js: &jetstream::Context,
        subject: &str,
        node: &Arc<ReplicationState>,
    ) {
        // Only the mirror thread touches it: `Relaxed` throughout.
        self.wanted.fetch_max(below, Relaxed);
        if self.running.swap(true, Relaxed) {
            return;
        }
        let (me, js, subject, node) = (self.clone(), js.clone(), subject.to_owned(), node.clone());
        tokio::task::spawn_local(async move {
            let mut done = 0;
            while me.wanted.load(Relaxed) > done {
                let below = me.wanted.load(Relaxed);
                match purge(&js, &subject, below).await {
                    Ok(n) => {
                        node.purged_messages.fetch_add(n, Relaxed);
                        done = below;
                    }
                    Err(e) => {
                        node.purge_failures.fetch_add(1, Relaxed);
                        eprintln!("sluice: replication: purging {subject}: {e}");
                        break;
                    }
                }
                tokio::time::sleep(PURGE_EVERY).await;
            }
            me.running.store(false, Relaxed);
        });
    }
}

/// Drops every message of `subject` below sequence `below`; how many went.
async fn purge(js: &jetstream::Context, subject: &str, below: u64) -> Result<u64, String> {
    let run = async {
        let stream = js
            .get_stream_no_info(subject.split('.').next().unwrap_or(subject))
            .await?;
        let purged = stream.purge().filter(subject).sequence(below).await?;
        Ok::<u64, Box<dyn std::error::Error + Send + Sync>>(purged.purged)
    };
    match tokio::time::timeout(PURGE_EVERY * 10, run).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {:?}", PURGE_EVERY * 10)),
    }
}
