//! Restoring a node's logs from the JetStream stream (issue 41: `sluice replication restore`, and
//! a node started with an empty data dir): the messages of `<stream>.<node>.>`, read in stream
//! order, give back every log the node's cores committed, as its disk would have held them.
//!
//! Three parts, the first pure:
//! - [`Rebuild`] is fed the decoded messages ([`message::decode`]) in stream order. For every
//!   record of every log part it checks the log's LSN continuity: a log's first record is LSN 1
//!   (or the start LSN it was given, [`Rebuild::start_at`]), each next one the previous + 1. A
//!   repeated LSN whose bytes are identical to the record restored under it is skipped (a
//!   re-published message); a gap, or a repeat with other bytes, is a typed error naming the
//!   log, the subject, the stream sequence and both LSNs ([`RestoreError::Gap`],
//!   [`RestoreError::Conflict`]). Each record goes to a [`Writer`] decoded (`wal::decode_payload`),
//!   with its log, LSN and kind; then the frame's dead letters (their store's encoding, opaque
//!   here) and the ids it released, in order. At the end ([`Rebuild::finish`]) every log must
//!   reach the durable LSN the last frames named for it (`through`): a stream that lacks a log's
//!   tail is an error, not a shorter log.
//! - [`fetch`] reads the messages (`fetch.rs`): the official client on a current-thread runtime,
//!   an ordered pull consumer over `<stream>.<node>.>`, until the last sequence of each of the
//!   node's subjects, every wait bounded.
//! - [`mod@write`] puts the logs on disk through the WAL's own append path, beside a staging
//!   directory that replaces nothing, verifies them as recovery does, and only then moves them
//!   into the data dir ([`write::restore_data_dir`]). The dead letters go to a
//!   [`write::DeadLetters`] that the caller supplies: this room never names the dead-letter
//!   store (it is dispatch's; `ops::restore` implements it).
//!
//! **Where a log begins.** A node drops from the stream what its logs retired (the mirror's
//! purge, `replication::mirror`); each frame names, per log, the LSN below which everything is
//! retired (its `first` list, message version 2). The restore reads those of each subject's
//! last message first ([`fetch::Source::firsts`]) and begins each log there
//! ([`Rebuild::start_at`]): records below are skipped (their frames' dead letters and releases
//! still apply), the first one kept must be it, and the WAL begins the log there
//! (`wal::begin_at`). A log whose every record is retired is restored empty, beginning at its
//! start. What the retired records counted (the ledger's `retired` tallies) is not carried.
//!
//! Memory: 8 bytes per restored record (the checksum and length kept to recognise a repeat),
//! plus one message at a time.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use crate::replication::message::{self, Decoded};
use crate::wal::format::RecordRef;
use crate::wal::{self, Lsn, Record, RecordKind};

pub mod fetch;
pub mod write;

/// Where a restored record, dead letter or release goes (the WAL and DLQ writer, or a test's
/// fake). Calls come in stream order; [`Writer::end_message`] closes each message.
pub trait Writer {
    /// Record `lsn` of log `log` (`wal/core-<log>`), of kind `kind`, decoded.
    fn record(
        &mut self,
        log: u16,
        lsn: Lsn,
        kind: RecordKind,
        record: Record,
    ) -> Result<(), String>;
    /// A dead letter the node stored, in its store's encoding.
    fn dead_letter(&mut self, entry: &[u8]) -> Result<(), String>;
    /// The id of a dead letter the node removed.
    fn released(&mut self, id: &str) -> Result<(), String>;
    /// The message's end: what it wrote is made durable.
    fn end_message(&mut self) -> Result<(), String>;
}

/// Where in the stream a message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At<'a> {
    pub subject: &'a str,
    pub sequence: u64,
}

/// Why a restore failed. [`RestoreError::exit_code`] is the CLI's exit code for each.
#[derive(Debug)]
pub enum RestoreError {
    /// `--node` is not a single subject token (`[A-Za-z0-9_-]{1,64}`).
    BadNode(String),
    /// No NATS server answered.
    Unreachable { servers: Vec<String>, error: String },
    /// The stream does not exist.
    NoStream { stream: String },
    /// The stream could not be read (its info, a consumer, a message).
    Stream { stream: String, error: String },
    /// No message came within the bound while the read had not reached its end.
    Stalled {
        filter: String,
        at: u64,
        end: u64,
        waited: std::time::Duration,
    },
    /// A message does not decode ([`message::decode`]), or a record in it does not.
    Decode {
        subject: String,
        sequence: u64,
        error: String,
    },
    /// A log's next record is not the LSN expected.
    Gap {
        log: u16,
        subject: String,
        sequence: u64,
        expected: Lsn,
        found: Lsn,
    },
    /// A record repeats an LSN already restored, with other bytes.
    Conflict {
        log: u16,
        subject: String,
        sequence: u64,
        lsn: Lsn,
        last: Lsn,
    },
    /// A log ends below the durable LSN the stream's frames named for it.
    Incomplete { log: u16, last: Lsn, through: Lsn },
    /// The data dir already holds logs (or dead letters): nothing local is overwritten.
    NotEmpty { path: PathBuf, found: String },
    /// Writing the restored logs or dead letters failed.
    Write { what: String, error: String },
    /// A restored log did not verify as local recovery would.
    Verify { log: u16, error: String },
}

impl RestoreError {
    /// The exit code of `sluice replication restore` for this failure: 2 a bad `--node`, 3 the
    /// stream's records are not continuous (a gap, a conflicting repeat, a message or record
    /// that does not decode, a log short of its `through`, a restored log that does not
    /// verify), 5 no NATS server answered, 6 the stream does not exist, 7 the data dir holds
    /// logs already, 1 anything else (a stalled or failed read, a write).
    pub fn exit_code(&self) -> u8 {
        match self {
            RestoreError::BadNode(_) => 2,
            RestoreError::Decode { .. }
            | RestoreError::Gap { .. }
            | RestoreError::Conflict { .. }
            | RestoreError::Incomplete { .. }
            | RestoreError::Verify { .. } => 3,
            RestoreError::Unreachable { .. } => 5,
            RestoreError::NoStream { .. } => 6,
            RestoreError::NotEmpty { .. } => 7,
            RestoreError::Stream { .. } | RestoreError::Stalled { .. } => 1,
            RestoreError::Write { .. } => 1,
        }
    }
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use RestoreError as E;
        match self {
            E::BadNode(node) => write!(
                f,
                "node {node:?} is not a node name (1 to 64 of A-Z a-z 0-9 _ -)"
            ),
            E::Unreachable { servers, error } => write!(
                f,
                "replication restore: no NATS server answered ({}): {error}",
                servers.join(", ")
            ),
            E::NoStream { stream } => {
                write!(
                    f,
                    "replication restore: the stream {stream:?} does not exist"
                )
            }
            E::Stream { stream, error } => {
                write!(f, "replication restore: stream {stream:?}: {error}")
            }
            E::Stalled {
                filter,
                at,
                end,
                waited,
            } => write!(
                f,
                "replication restore: reading {filter} stalled: no message for {waited:?} after \
                 stream sequence {at} (the read ends at {end})"
            ),
            E::Decode {
                subject,
                sequence,
                error,
            } => write!(
                f,
                "replication restore: {subject} sequence {sequence} does not decode: {error}"
            ),
            E::Gap {
                log,
                subject,
                sequence,
                expected,
                found,
            } => write!(
                f,
                "replication restore: log core-{log} is not continuous: {subject} sequence \
                 {sequence} holds LSN {found}, the next expected is LSN {expected}"
            ),
            E::Conflict {
                log,
                subject,
                sequence,
                lsn,
                last,
            } => write!(
                f,
                "replication restore: log core-{log}: {subject} sequence {sequence} repeats LSN \
                 {lsn} with other bytes than the record restored under it (the log is restored \
                 through LSN {last}): the log forked"
            ),
            E::Incomplete { log, last, through } => write!(
                f,
                "replication restore: log core-{log} ends at LSN {last} in the stream, but its \
                 node had it durable through LSN {through}: the stream lacks its tail"
            ),
            E::NotEmpty { path, found } => write!(
                f,
                "replication restore: {} already holds {found}: a restore never overwrites local \
                 data (restore into an empty data dir)",
                path.display()
            ),
            E::Write { what, error } => write!(f, "replication restore: {what}: {error}"),
            E::Verify { log, error } => write!(
                f,
                "replication restore: the restored log core-{log} does not verify: {error}"
            ),
        }
    }
}

impl std::error::Error for RestoreError {}

/// True if `node` is a single subject token as `[replication] node` must be.
pub fn valid_node(node: &str) -> bool {
    (1..=64).contains(&node.len())
        && node
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What one log's restore gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRestored {
    /// The log's index (`wal/core-<log>`).
    pub log: u16,
    /// Its first and last restored LSN.
    pub first: Lsn,
    pub last: Lsn,
    /// Records restored (`last - first + 1`).
    pub records: u64,
    /// Repeated records skipped (identical bytes).
    pub repeats: u64,
}

/// What a whole restore gave ([`Rebuild::finish`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Per log, in log order.
    pub logs: Vec<LogRestored>,
    /// Messages read.
    pub messages: u64,
    /// Dead letters stored and releases applied, in stream order.
    pub dead_letters: u64,
    pub released: u64,
}

/// One log being rebuilt.
#[derive(Debug)]
struct LogState {
    /// The LSN of `sums[0]`.
    first: Lsn,
    /// Per restored record: CRC32C over its kind and payload, and the payload's length.
    sums: Vec<(u32, u32)>,
    repeats: u64,
}

impl LogState {
    fn next(&self) -> Lsn {
        self.first + self.sums.len() as u64
    }
    fn last(&self) -> Lsn {
        self.next() - 1
    }
}

/// The pure rebuild of a node's logs from its messages (module docs).
#[derive(Debug, Default)]
pub struct Rebuild {
    logs: BTreeMap<u16, LogState>,
    /// Start LSNs given by [`Rebuild::start_at`] (retention's seam).
    starts: BTreeMap<u16, Lsn>,
    /// The highest durable LSN the frames named per log.
    through: BTreeMap<u16, Lsn>,
    messages: u64,
    dead_letters: u64,
    released: u64,
}

/// What a record's continuity check decided.
enum Step {
    Write,
    /// A repeat of a record written already (a re-published frame).
    Skip,
    /// Below the log's start: retired, not restored.
    Below,
}

fn sum(r: &RecordRef<'_>) -> (u32, u32) {
    let crc = crc32c::crc32c_append(crc32c::crc32c(&[r.kind as u8]), r.payload);
    (crc, r.payload.len() as u32)
}

impl Rebuild {
    /// A rebuild in which every log starts at LSN 1.
    pub fn new() -> Rebuild {
        Rebuild::default()
    }

    /// Log `log` starts at `lsn` (its records below are retired, and the stream may have
    /// dropped them): records below are skipped, and the first one kept must be `lsn`. The
    /// frames' dead letters and releases are applied all the same.
    pub fn start_at(&mut self, log: u16, lsn: Lsn) {
        self.starts.insert(log, lsn.max(1));
    }

    /// Feeds one decoded message, read at `at`: its records (continuity checked) to `w`, then
    /// each frame's dead letters and releases, then [`Writer::end_message`].
    pub fn feed(
        &mut self,
        at: At<'_>,
        msg: &Decoded<'_>,
        w: &mut dyn Writer,
    ) -> Result<(), RestoreError> {
        let write_err = |error: String| RestoreError::Write {
            what: format!("{} sequence {}", at.subject, at.sequence),
            error,
        };
        for frame in &msg.frames {
            let (mut written, mut repeated) = (0u64, 0u64);
            for (log, records) in &frame.parts {
                for r in records {
                    match self.check(at, *log, r)? {
                        Step::Below => {}
                        Step::Skip => repeated += 1,
                        Step::Write => {
                            let record = wal::decode_payload(r.kind, r.payload).map_err(|e| {
                                RestoreError::Decode {
                                    subject: at.subject.to_owned(),
                                    sequence: at.sequence,
                                    error: format!("log core-{log} LSN {}: {e}", r.lsn),
                                }
                            })?;
                            w.record(*log, r.lsn, r.kind, record).map_err(write_err)?;
                            self.logs.get_mut(log).expect("checked").sums.push(sum(r));
                            written += 1;
                        }
                    }
                }
            }
            // A frame whose every record is a repeat is a re-published frame: its dead letters
            // and releases were applied with the first copy (applying a put again after a
            // later release would bring a removed dead letter back).
            if repeated > 0 && written == 0 {
                continue;
            }
            for entry in &frame.dead {
                w.dead_letter(entry).map_err(write_err)?;
                self.dead_letters += 1;
            }
            for id in &frame.released {
                w.released(id).map_err(write_err)?;
                self.released += 1;
            }
            for &(log, lsn) in &frame.through {
                let t = self.through.entry(log).or_default();
                *t = (*t).max(lsn);
            }
        }
        w.end_message().map_err(write_err)?;
        self.messages += 1;
        Ok(())
    }

    /// Decodes `bytes` ([`message::decode`]) and feeds it; a message that does not decode is
    /// [`RestoreError::Decode`] naming its subject and sequence.
    pub fn feed_bytes(
        &mut self,
        at: At<'_>,
        bytes: &[u8],
        w: &mut dyn Writer,
    ) -> Result<(), RestoreError> {
        let msg = message::decode(bytes).map_err(|e| RestoreError::Decode {
            subject: at.subject.to_owned(),
            sequence: at.sequence,
            error: e.to_string(),
        })?;
        self.feed(at, &msg, w)
    }

    /// The continuity check of record `r` of log `log` (module docs).
    fn check(&mut self, at: At<'_>, log: u16, r: &RecordRef<'_>) -> Result<Step, RestoreError> {
        let start = self.starts.get(&log).copied();
        let state = self.logs.entry(log).or_insert_with(|| LogState {
            first: start.unwrap_or(1),
            sums: Vec::new(),
            repeats: 0,
        });
        let expected = state.next();
        if r.lsn == expected {
            return Ok(Step::Write);
        }
        if r.lsn < state.first && start.is_some() {
            return Ok(Step::Below);
        }
        if r.lsn > expected || r.lsn < state.first {
            return Err(RestoreError::Gap {
                log,
                subject: at.subject.to_owned(),
                sequence: at.sequence,
                expected,
                found: r.lsn,
            });
        }
        if state.sums[(r.lsn - state.first) as usize] == sum(r) {
            state.repeats += 1;
            return Ok(Step::Skip);
        }
        Err(RestoreError::Conflict {
            log,
            subject: at.subject.to_owned(),
            sequence: at.sequence,
            lsn: r.lsn,
            last: state.last(),
        })
    }

    /// The logs restored so far: each log's index and last restored LSN (0: none yet).
    pub fn last_lsns(&self) -> Vec<(u16, Lsn)> {
        let logs = self.logs.iter();
        logs.map(|(&log, s)| (log, s.next().saturating_sub(1)))
            .collect()
    }

    /// The end of the stream: every log must reach the highest durable LSN its frames named
    /// ([`RestoreError::Incomplete`] otherwise); the summary.
    pub fn finish(self) -> Result<Summary, RestoreError> {
        for (&log, &through) in &self.through {
            let start = self.starts.get(&log).copied().unwrap_or(1);
            let last = self.logs.get(&log).map_or(start - 1, |s| s.next() - 1);
            if through > last {
                return Err(RestoreError::Incomplete { log, last, through });
            }
        }
        let mut logs: Vec<LogRestored> = (self.logs.iter())
            .filter(|(_, s)| !s.sums.is_empty())
            .map(|(&log, s)| LogRestored {
                log,
                first: s.first,
                last: s.last(),
                records: s.sums.len() as u64,
                repeats: s.repeats,
            })
            .collect();
        // A log whose every record is retired: restored empty, beginning at its start.
        for (&log, &first) in &self.starts {
            if !logs.iter().any(|l| l.log == log) && first > 1 {
                logs.push(LogRestored {
                    log,
                    first,
                    last: first - 1,
                    records: 0,
                    repeats: 0,
                });
            }
        }
        logs.sort_by_key(|l| l.log);
        Ok(Summary {
            logs,
            messages: self.messages,
            dead_letters: self.dead_letters,
            released: self.released,
        })
    }
}

#[cfg(test)]
mod tests;
