//! Retention of the logs a core's pump owns: the segments wholly below a log's done cursor and
//! older than `dispatch.retention` are handed to the log's commit helper to delete, and the logs'
//! size on disk is measured for the `max_wal_bytes` bound.
#![forbid(unsafe_code)]

use std::path::Path;

use super::{CorePump, RETAIN_EVERY};
use crate::wal::Lsn;

impl CorePump {
    /// Retention, per log: asks the log's commit helper to delete the segments wholly below the
    /// log's done cursor whose last write is older than `retention` (never the active segment;
    /// `WalShared::request_retire`: the helper checkpoints the new first live LSN first), and
    /// measures the logs' size on disk for the `max_wal_bytes` bound. DLQ entries live in their
    /// own files and are unaffected.
    pub(super) fn retain(&mut self, now: u64) {
        if now < self.retain_at {
            return;
        }
        self.retain_at = now + RETAIN_EVERY;
        let retention = self.shared.config.dispatch.retention;
        for (slot, (index, dir, cursor)) in self.pump.cursors().enumerate() {
            let old = self.disk_bytes[slot];
            let (new, retire_below) = retain_log(dir, cursor, old, retention);
            if let Some(lsn) = retire_below {
                self.shared.wal[index].request_retire(lsn);
            }
            self.disk_bytes[slot] = new;
            self.shared.backlog.adjust_wal_bytes(old, new);
        }
    }
}

/// Retention of the log in `dir` whose done cursor is `cursor` (`last`: its bytes at the last
/// measurement): the bytes of the segments that stay, and the LSN below which every segment
/// may be deleted (`None`: none may).
fn retain_log(
    dir: &Path,
    cursor: Lsn,
    last: u64,
    retention: std::time::Duration,
) -> (u64, Option<Lsn>) {
    let segments = match crate::wal::segment::list_segments(dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sluice: retention: listing {}: {e}", dir.display());
            return (last, None);
        }
    };
    let mut total = 0u64;
    let mut deleting = true;
    let mut retire_below = None;
    for (i, (_, path)) in segments.iter().enumerate() {
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        let last_lsn = segments
            .get(i + 1)
            .map(|(first, _)| first.saturating_sub(1));
        let old_enough = meta
            .modified()
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age >= retention);
        deleting = deleting && last_lsn.is_some_and(|l| l < cursor) && old_enough;
        if deleting {
            // The commit helper deletes it, after checkpointing the new first live LSN.
            retire_below = last_lsn.map(|l| l + 1);
            continue;
        }
        total += meta.len();
    }
    (total, retire_below)
}
