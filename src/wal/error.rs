//! The WAL's errors ([`WalError`], sized to the caller's decision) and what they carry: the
//! ranges of LSNs a log lost ([`LostRange`]), a damaged checkpoint ([`Damaged`]), a damaged or
//! incomplete manifest ([`ManifestError`]). A leaf of the `wal` folder: it names only the
//! record format, so every other file of the WAL can return these without a cycle.
#![forbid(unsafe_code)]

use super::format::{EncodeError, Lsn};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Errors of the WAL, sized to the caller's decision.
#[derive(Debug)]
pub enum WalError {
    /// An I/O error on `path`.
    Io { path: PathBuf, source: io::Error },
    /// The log is damaged at `offset` of `segment` (not a torn tail): startup must stop.
    Corrupt {
        segment: PathBuf,
        offset: u64,
        reason: String,
    },
    /// [`WalConfig`](crate::wal::WalConfig) is out of range.
    InvalidConfig { reason: String },
    /// Another process holds the WAL directory's lock file (`LOCK`): two writers on one log
    /// would interleave LSNs and destroy acknowledged events.
    Locked { path: PathBuf },
    /// A record exceeds the WAL's field bounds.
    Encode(EncodeError),
    /// The checkpoint of log directory `dir` promises LSNs the segments do not hold (segment
    /// files deleted or truncated). Startup stops unless `--accept-wal-loss`.
    Lost {
        dir: PathBuf,
        ranges: Vec<LostRange>,
    },
    /// The checkpoint file exists but no slot of it is valid.
    CheckpointDamaged(Damaged),
    /// The data dir's manifest of logs is damaged, or lists a log or checkpoint that is gone.
    Manifest(ManifestError),
    /// A log's `RETIRED` file (what retention deleted, per trigger) is damaged.
    Retired { path: PathBuf, reason: String },
    /// A log's high-water record (`wal::high_water`) exists but no slot of it is valid.
    HighWaterDamaged(Damaged),
    /// A log's `CHECKPOINT` is gone (or damaged) although its high-water record shows it had
    /// one: what it promised is checked against the record's copy only with
    /// `--accept-wal-loss`.
    CheckpointLost {
        checkpoint: PathBuf,
        high_water: PathBuf,
        /// Unix milliseconds of the copy's last update.
        copied_at_ms: u64,
    },
}

impl WalError {
    pub(crate) fn io(path: &Path, source: io::Error) -> Self {
        WalError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

impl fmt::Display for WalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalError::Io { path, source } => {
                write!(f, "WAL I/O error on {}: {source}", path.display())
            }
            WalError::Corrupt {
                segment,
                offset,
                reason,
            } => {
                write!(
                    f,
                    "WAL corrupt: {} at offset {offset}: {reason}",
                    segment.display()
                )
            }
            WalError::InvalidConfig { reason } => write!(f, "invalid WAL config: {reason}"),
            WalError::Locked { path } => write!(
                f,
                "WAL directory is in use by another process (lock {} is held)",
                path.display()
            ),
            WalError::Encode(e) => write!(f, "cannot append record: {e}"),
            WalError::Lost { dir, ranges } => {
                write!(f, "WAL records lost in {}:", dir.display())?;
                for r in ranges {
                    write!(f, " {r};")?;
                }
                write!(
                    f,
                    " start with --accept-wal-loss to run without them (they cannot be recovered)"
                )
            }
            WalError::CheckpointDamaged(d) => write!(
                f,
                "{d}; start with --accept-wal-loss to rebuild it from the segments"
            ),
            WalError::Manifest(e) => write!(f, "{e}"),
            WalError::Retired { path, reason } => write!(
                f,
                "{} is damaged ({reason}): the ledger's retired counts cannot be read; start with \
                 --accept-wal-loss to start from empty ones",
                path.display()
            ),
            WalError::HighWaterDamaged(d) => write!(
                f,
                "high-water record {} is damaged: {}: the highest LSN the log handed out is \
                 unknown; start with --accept-wal-loss to rebuild it from the log (LSNs handed \
                 out before may then be handed out again)",
                d.path.display(),
                d.reason
            ),
            WalError::CheckpointLost {
                checkpoint,
                high_water,
                copied_at_ms,
            } => write!(
                f,
                "checkpoint {} is lost (its log's high-water record {} shows it existed): what the \
                 log must hold cannot be checked; start with --accept-wal-loss to check it against \
                 the record's copy (written at unix ms {copied_at_ms}) and give up what is missing",
                checkpoint.display(),
                high_water.display()
            ),
        }
    }
}

impl std::error::Error for WalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WalError::Io { source, .. } => Some(source),
            WalError::Encode(e) => Some(e),
            WalError::Manifest(e) => Some(e),
            _ => None,
        }
    }
}

/// LSNs `first..=last` the checkpoint promises and the log does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostRange {
    pub first: Lsn,
    pub last: Lsn,
    /// What is missing, for the operator (names the segment when one is known).
    pub why: String,
}

impl LostRange {
    /// How many LSNs the range covers (0 for `last = first - 1`: damaged framing only).
    pub fn len(&self) -> u64 {
        (self.last + 1).saturating_sub(self.first)
    }

    /// True for damaged framing between two records that loses no LSN.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Display for LostRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            // `first..=first - 1` would read as a range backwards; say what it is.
            let after = self.first.saturating_sub(1);
            return write!(
                f,
                "damaged bytes after LSN {after}, no LSN missing: {}",
                self.why
            );
        }
        write!(
            f,
            "LSNs {}..={} missing: {}",
            self.first, self.last, self.why
        )
    }
}

#[cfg(test)]
mod lost_range_tests {
    use super::LostRange;

    #[test]
    fn a_range_names_its_lsns_and_damage_that_loses_none_says_so() {
        let range = |first, last| LostRange {
            first,
            last,
            why: "segment 2 damaged".into(),
        };
        assert_eq!(
            range(3, 5).to_string(),
            "LSNs 3..=5 missing: segment 2 damaged"
        );
        assert_eq!((range(3, 5).len(), range(3, 5).is_empty()), (3, false));
        let none = range(3, 2);
        assert_eq!((none.len(), none.is_empty()), (0, true));
        assert_eq!(
            none.to_string(),
            "damaged bytes after LSN 2, no LSN missing: segment 2 damaged"
        );
    }
}

/// Why `checkpoint::read` found no usable checkpoint in an existing file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damaged {
    pub path: PathBuf,
    pub reason: String,
}

impl fmt::Display for Damaged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "checkpoint {} is damaged: {}",
            self.path.display(),
            self.reason
        )
    }
}

/// What of a listed log is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingKind {
    /// The log's directory.
    LogDir,
    /// The log's `CHECKPOINT` file (its directory is there).
    Checkpoint,
}

/// A listed log, or its checkpoint, that is not on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub log: String,
    pub kind: MissingKind,
    /// The path that does not exist.
    pub path: PathBuf,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            MissingKind::LogDir => write!(
                f,
                "log {} is missing: directory {} does not exist (every event in it is lost)",
                self.log,
                self.path.display()
            ),
            MissingKind::Checkpoint => write!(
                f,
                "log {} has lost its checkpoint: {} does not exist (what the log must hold is \
                 checked against the copy in its high-water record, {}.hw, if it has one)",
                self.log,
                self.path.display(),
                self.log
            ),
        }
    }
}

/// Errors of the manifest, sized to the caller's decision.
#[derive(Debug)]
pub enum ManifestError {
    /// An I/O error on `path`.
    Io { path: PathBuf, source: io::Error },
    /// The manifest exists but does not parse or its CRC fails.
    Damaged { path: PathBuf, reason: String },
    /// Logs or checkpoints the manifest lists are not on disk.
    Missing {
        manifest: PathBuf,
        missing: Vec<Missing>,
    },
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManifestError::Io { path, source } => {
                write!(f, "manifest I/O error on {}: {source}", path.display())
            }
            ManifestError::Damaged { path, reason } => write!(
                f,
                "manifest {} is damaged: {reason}; start with --accept-wal-loss to rebuild it \
                 from the logs found",
                path.display()
            ),
            ManifestError::Missing { manifest, missing } => {
                write!(f, "{} lists what is not on disk:", manifest.display())?;
                for m in missing {
                    write!(f, " {m};")?;
                }
                write!(
                    f,
                    " start with --accept-wal-loss to run without it (it cannot be recovered)"
                )
            }
        }
    }
}

impl std::error::Error for ManifestError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ManifestError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
