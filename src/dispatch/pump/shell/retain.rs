//! Retention of the logs a core's pump owns, every [`RETAIN_EVERY`]: for each log, the
//! decision of `wal::retention` (through the storage interface) from the done cursor the pump
//! core reports; the segments it gives up are handed to the log's commit helper to delete
//! (`WalShared::request_retire`: the helper checkpoints the new first live LSN first), and the
//! logs' size on disk goes to the `max_wal_bytes` bound. DLQ entries live in their own files
//! and are unaffected. What the helpers retired (their logs' cumulative counts per trigger,
//! `WalShared::retired`) is folded into the pump's ledger at the same pace.
#![forbid(unsafe_code)]

use std::time::{Duration, UNIX_EPOCH};

use super::{CorePump, RETAIN_EVERY};
use crate::storage::StdFs;
use crate::sync::clock::unix_micros;
use crate::wal::retire::retention;

impl CorePump {
    pub(super) fn retain(&mut self, now: u64) {
        if now < self.retain_at {
            return;
        }
        self.retain_at = now + RETAIN_EVERY;
        let keep = self.retention;
        // Segment ages are against their modification times: the wall clock.
        let wall = UNIX_EPOCH + Duration::from_micros(unix_micros());
        let logs: Vec<(usize, std::path::PathBuf, crate::wal::Lsn)> = self
            .pump
            .cursors()
            .map(|(i, d, c)| (i, d.to_owned(), c))
            .collect();
        for (slot, (index, dir, cursor)) in logs.into_iter().enumerate() {
            if let Some(counts) = self.wal[slot].retired.newer(&mut self.retired_seen[slot]) {
                self.pump.fold_retired(index, &counts);
            }
            let dir = dir.as_path();
            let old = self.disk_bytes[slot];
            let new = match retention::plan(&StdFs, dir, cursor, keep, wall) {
                Ok(r) => {
                    if let Some(lsn) = r.retire_below {
                        self.wal[slot].request_retire(lsn);
                    }
                    if let Some(lsn) = r.done_below {
                        self.wal[slot].note_done_below(lsn);
                    }
                    r.bytes
                }
                Err(e) => {
                    eprintln!("sluice: retention: {}: {e}", dir.display());
                    old
                }
            };
            self.disk_bytes[slot] = new;
            self.queue.adjust_wal_bytes(old, new);
        }
    }
}
