//! Restoring a node's data dir from the JetStream stream (issue 41): the dead-letter side of
//! `replication::restore`, which names no dispatch type, and the one call the CLI
//! (`sluice replication restore`) and the runtime's start-up (a node with an empty data dir)
//! share.
//!
//! [`Dlq`] implements `replication::restore::write::DeadLetters` over the server's
//! [`DlqStore`]: each dead letter the stream carries (dispatch's entry encoding) is decoded
//! ([`decode_entry`]) and put, each release removes its id, in stream order. The store is
//! opened with the node's `dispatch.max_dlq_entries`.
#![forbid(unsafe_code)]

use std::path::Path;

use crate::dispatch::dlq::entry::decode_entry;
use crate::dispatch::dlq::{DlqError, DlqStore};
use crate::replication::restore::write::{self, DeadLetters, Restored};
use crate::replication::restore::RestoreError;
use crate::replication::ReplicationSpec;
use crate::wal::WalConfig;

/// The dead-letter store a restore writes into.
#[derive(Debug)]
pub struct Dlq(DlqStore);

impl DeadLetters for Dlq {
    fn put(&mut self, entry: &[u8]) -> Result<(), String> {
        let e =
            decode_entry(entry).map_err(|why| format!("a dead letter does not decode: {why}"))?;
        self.0
            .put(&e)
            .map_err(|err| format!("dead letter {}: {err}", e.id))
    }

    fn release(&mut self, id: &str) -> Result<bool, String> {
        match self.0.remove(id) {
            Ok(()) => Ok(true),
            Err(DlqError::NotFound { .. }) => Ok(false),
            Err(e) => Err(format!("removing dead letter {id}: {e}")),
        }
    }
}

/// The mirror's way to carry live dead letters forward (`replication::retention`): each id still
/// in `dlq`, in the store's entry encoding, read now (so its newest version).
pub fn carry(dlq: std::sync::Arc<DlqStore>) -> crate::replication::mirror::Carry {
    std::sync::Arc::new(move |ids: &[String]| {
        let read = |id: &String| {
            let entry = dlq.get(id).ok()?;
            Some((
                id.clone(),
                crate::dispatch::dlq::entry::encode_entry(&entry).ok()?,
            ))
        };
        ids.iter().filter_map(read).collect()
    })
}

/// Restores node `node`'s logs and dead letters from `spec`'s stream into `data_dir`, with the
/// WAL settings of `wal` and a DLQ of at most `max_dlq_entries`; `Ok(None)` when the stream holds
/// no message of the node (nothing written). See `replication::restore::write::restore_data_dir`.
pub fn restore(
    spec: &ReplicationSpec,
    node: &str,
    data_dir: &Path,
    wal: &WalConfig,
    max_dlq_entries: usize,
) -> Result<Option<Restored>, RestoreError> {
    write::restore_data_dir(spec, node, data_dir, wal, |dir| {
        DlqStore::open(dir, max_dlq_entries)
            .map(Dlq)
            .map_err(|e| e.to_string())
    })
}

/// The lines a restore prints: one per log (records and LSN range), then the dead letters.
pub fn report(node: &str, r: &Restored) -> Vec<String> {
    let mut out: Vec<String> = (r.summary.logs.iter())
        .map(|l| {
            let repeats = match l.repeats {
                0 => String::new(),
                n => format!(" ({n} repeated records skipped)"),
            };
            format!(
                "restored log core-{} of node {node}: {} records, LSN {}..={}{repeats}",
                l.log, l.records, l.first, l.last
            )
        })
        .collect();
    let missing = match r.released_missing {
        0 => String::new(),
        n => format!(" ({n} releases of dead letters stored before replication)"),
    };
    out.push(format!(
        "restored {} dead letters and {} releases of node {node} from {} messages on {} \
         subjects{missing}",
        r.summary.dead_letters,
        r.summary.released,
        r.summary.messages,
        r.subjects.len()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::dlq::entry::{encode_entry, DlqEntry, DlqReason};
    use crate::replication::restore::{LogRestored, Summary};
    use crate::wal::format::tests::sample_event;

    #[test]
    fn dead_letters_are_put_decoded_and_released_by_id() {
        let tmp = tempfile::tempdir().unwrap();
        let mut dlq = Dlq(DlqStore::open(&tmp.path().join("dlq"), 10).unwrap());
        let entry = DlqEntry {
            id: "01ARZ3NDEKTSV4RRFFQ69G5FAV".into(),
            event: sample_event(3, 10),
            event_lsn: 3,
            destination: "http://x/".into(),
            reason: DlqReason::RetryExhausted,
            attempts: 4,
            last_error: "503".into(),
            dead_lettered_at_ms: 1,
        };
        dlq.put(&encode_entry(&entry).unwrap()).unwrap();
        assert_eq!(dlq.0.get(&entry.id).unwrap(), entry);
        assert!(dlq
            .put(b"nonsense")
            .unwrap_err()
            .contains("does not decode"));
        assert_eq!(dlq.release(&entry.id), Ok(true));
        assert_eq!(dlq.release(&entry.id), Ok(false), "a release of nothing");
        assert!(dlq.0.is_empty());
    }

    #[test]
    fn the_report_names_each_log_and_its_lsn_range() {
        let r = Restored {
            subjects: Vec::new(),
            summary: Summary {
                logs: vec![LogRestored {
                    log: 1,
                    first: 1,
                    last: 40,
                    records: 40,
                    repeats: 0,
                }],
                messages: 3,
                dead_letters: 2,
                released: 1,
            },
            released_missing: 0,
        };
        let lines = report("node-a", &r);
        assert_eq!(
            lines[0],
            "restored log core-1 of node node-a: 40 records, LSN 1..=40"
        );
        assert!(lines[1].starts_with("restored 2 dead letters and 1 releases"));
    }
}
