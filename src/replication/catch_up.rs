//! At start-up, before any core runs: the local logs against the stream.
//!
//! A record can be durable locally and not in the stream: the node stopped (or was killed)
//! between its `fdatasync` and the JetStream acknowledgement, or JetStream was unavailable when
//! it stopped. Its sender had no 202 for it, but recovery would deliver it, and an event must be
//! delivered only after its batch is replicated. So the mirror publishes every such record
//! first ([`missing_frames`]), in log order, before the cores start.
//!
//! How far each log is replicated comes from the `through` list of the last frame of each
//! subject the log may have been committed on ([`replicated_through`]): a log `core-K` is
//! committed by its owner core, always one of the node's own log indexes, so the subjects
//! `<stream>.<node>.core-J` for every local log index `J` cover them all.
//!
//! If the stream holds more of a log than the disk does, the disk lost what was acknowledged
//! (or another node wrote the log): the node refuses to start ([`Behind`]), naming the log and
//! both LSNs; `sluice replication restore` rebuilds it.
//!
//! Dead letters stored by a batch that never reached the stream are not in the WAL, so they
//! are not published here: their DLQ files stay on the local disk (README "Several nodes").
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::PathBuf;

use async_nats::jetstream::stream;
use bytes::Bytes;

use crate::replication::message::{decode, FrameBuf};
use crate::replication::spec::ReplicationSpec;
use crate::wal::{Lsn, WalReader};

/// A log of this node, as recovered at start-up.
#[derive(Debug, Clone)]
pub struct LocalLog {
    /// The core that commits it in this run.
    pub core: usize,
    /// Its index (`wal/core-<index>`).
    pub index: u16,
    pub dir: PathBuf,
    /// Its last durable LSN.
    pub last_lsn: Lsn,
}

/// The stream is ahead of a local log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behind {
    pub log: u16,
    pub local: Lsn,
    pub stream: Lsn,
}

/// The stream sequence of the last message on `subject`, 0 if it has none.
pub async fn last_sequence<I>(stream: &stream::Stream<I>, subject: &str) -> Result<u64, String> {
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(m) => Ok(m.sequence),
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(0),
        Err(e) => Err(format!("last message of {subject}: {e}")),
    }
}

/// The payload of the last message on `subject`, if it has one.
pub async fn last_message<I>(
    stream: &stream::Stream<I>,
    subject: &str,
) -> Result<Option<Bytes>, String> {
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(m) => Ok(Some(m.payload)),
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(e) => Err(format!("last message of {subject}: {e}")),
    }
}

/// Each log's highest replicated LSN, from the last frame of every subject of `logs`' indexes.
pub async fn replicated_through<I>(
    stream: &stream::Stream<I>,
    spec: &ReplicationSpec,
    logs: &[LocalLog],
) -> Result<HashMap<u16, Lsn>, String> {
    let mut through: HashMap<u16, Lsn> = HashMap::new();
    for log in logs {
        let subject = spec.subject(usize::from(log.index));
        let Some(payload) = last_message(stream, &subject).await? else {
            continue;
        };
        let d = decode(&payload).map_err(|e| format!("the last message of {subject}: {e}"))?;
        for (log, lsn) in d.lists().0 {
            let t = through.entry(log).or_default();
            *t = (*t).max(lsn);
        }
    }
    Ok(through)
}

/// The subjects under `filter` that hold messages, with how many.
pub async fn subjects_of<I>(
    stream: &stream::Stream<I>,
    filter: &str,
) -> Result<Vec<(String, usize)>, String> {
    use futures_util::StreamExt;
    let mut listed = (stream.info_with_subjects(filter).await).map_err(|e| e.to_string())?;
    let mut subjects = Vec::new();
    while let Some(s) = listed.next().await {
        subjects.push(s.map_err(|e| e.to_string())?);
    }
    Ok(subjects)
}

/// How far log `index` is replicated by the frames of the subjects under `filter` (another
/// node's, for a log this node adopted): the highest `through` the last message of each names.
pub async fn node_through<I>(
    stream: &stream::Stream<I>,
    filter: &str,
    index: u16,
) -> Result<Lsn, String> {
    let mut through = 0;
    for (subject, _) in subjects_of(stream, filter).await? {
        let Some(payload) = last_message(stream, &subject).await? else {
            continue;
        };
        let d = decode(&payload).map_err(|e| format!("the last message of {subject}: {e}"))?;
        for (_, lsn) in d.lists().0.into_iter().filter(|t| t.0 == index) {
            through = through.max(lsn);
        }
    }
    Ok(through)
}

/// The logs the stream is ahead of (their disk lost acknowledged records).
pub fn behind(logs: &[LocalLog], through: &HashMap<u16, Lsn>) -> Vec<Behind> {
    let ahead = |l: &LocalLog| {
        let stream = through.get(&l.index).copied().unwrap_or(0);
        (stream > l.last_lsn).then_some(Behind {
            log: l.index,
            local: l.last_lsn,
            stream,
        })
    };
    logs.iter().filter_map(ahead).collect()
}

/// Frames of `log`'s records above `from` (its replicated LSN), in order, each at most
/// `limit` bytes (a record alone may pass it), the last one closed with the log's `through`.
pub fn missing_frames(log: &LocalLog, from: Lsn, limit: usize) -> Result<Vec<Vec<u8>>, String> {
    let mut frames = Vec::new();
    if from >= log.last_lsn {
        return Ok(frames);
    }
    let what = |e: &dyn std::fmt::Display| format!("reading {}: {e}", log.dir.display());
    let reader = WalReader::open_from(&log.dir, from + 1).map_err(|e| what(&e))?;
    let mut frame = FrameBuf::default();
    for rec in reader {
        let rec = rec.map_err(|e| what(&e))?;
        if rec.lsn > log.last_lsn {
            break;
        }
        if !frame.is_empty() && frame.len() + rec.payload.len() + 32 > limit {
            frames.push(frame.finish());
        }
        frame.raw_record(log.index, rec.lsn, rec.kind, &rec.payload);
    }
    frame.through(log.index, log.last_lsn);
    frames.push(frame.finish());
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::message::pack;
    use crate::wal::format::tests::sample_event;
    use crate::wal::recover::tests::test_cfg;
    use crate::wal::{Record, WritePath};

    #[test]
    fn the_records_above_the_replicated_lsn_are_framed_in_order_and_a_log_behind_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = test_cfg(tmp.path(), WritePath::Pwrite);
        let (mut wal, _) = crate::wal::open(&cfg).unwrap();
        let records: Vec<Record> = (1..=5)
            .map(|i| Record::Event(sample_event(i, 300)))
            .collect();
        wal.append(&records).unwrap();
        wal.sync().unwrap();
        let log = LocalLog {
            core: 0,
            index: 3,
            dir: wal.dir().to_path_buf(),
            last_lsn: 5,
        };
        assert!(
            missing_frames(&log, 5, 1 << 20).unwrap().is_empty(),
            "all replicated"
        );
        let frames = missing_frames(&log, 2, 900).unwrap();
        assert!(frames.len() >= 2, "cut under the limit: {}", frames.len());
        let msg = pack(0, frames.iter().map(|f| &f[..]));
        let d = decode(&msg).unwrap();
        let lsns: Vec<Lsn> = (d.frames.iter())
            .flat_map(|f| {
                f.parts
                    .iter()
                    .flat_map(|(l, rs)| rs.iter().map(move |r| (*l, r.lsn)))
            })
            .map(|(l, lsn)| {
                assert_eq!(l, 3);
                lsn
            })
            .collect();
        assert_eq!(lsns, [3, 4, 5]);
        assert_eq!(d.frames.last().unwrap().through, [(3, 5)]);
        let through = HashMap::from([(3, 7)]);
        assert_eq!(
            behind(std::slice::from_ref(&log), &through),
            [Behind {
                log: 3,
                local: 5,
                stream: 7
            }]
        );
        assert!(behind(&[log], &HashMap::from([(3, 5)])).is_empty());
    }
}
