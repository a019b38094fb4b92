//! The WAL's settings ([`WalConfig`], validated by `wal::open`), its modes ([`Durability`],
//! [`CommitPath`]; the write path is storage's [`WritePath`]) and their size bounds.
#![forbid(unsafe_code)]

use super::error::WalError;
use super::format::{marker, max_record_bytes_for, MAX_BODY_BYTES};
use crate::storage::WritePath;
use std::fmt;
use std::path::PathBuf;

/// Smallest segment size accepted: 1 MiB.
pub const MIN_SEGMENT_BYTES: u64 = 1 << 20;

/// The smallest valid `segment_bytes` when bodies are at most `max_body` bytes: the largest
/// record plus its commit marker (one commit) must fit in an empty segment, and at least
/// [`MIN_SEGMENT_BYTES`].
pub const fn min_segment_bytes_for(max_body: usize) -> u64 {
    let commit = (max_record_bytes_for(max_body) + marker::MARKER_RECORD_BYTES) as u64;
    if commit > MIN_SEGMENT_BYTES {
        commit
    } else {
        MIN_SEGMENT_BYTES
    }
}

/// Default segment size: 64 MiB.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Default most requests per group commit.
pub const DEFAULT_MAX_BATCH: usize = 1024;
/// A batch also stops growing once its requests' bodies reach this many bytes.
pub const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;

/// When a request is reported durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// After the batch is `fdatasync`ed / `msync`ed (default).
    #[default]
    Fsync,
    /// After the write reached the page cache.
    Os,
}

/// Who writes and syncs a core's own log (`[wal] commit`; `wal::commit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommitPath {
    /// The core's commit helper thread: `pwrite` + `fdatasync`, woken once per batch (default).
    #[default]
    Helper,
    /// The core's own io_uring ring: the write linked to an `fdatasync`, submitted with the
    /// turn's sends, the 202s sent on its completion (io_uring, `fsync`, `pwrite` only).
    Ring,
}

/// The names `helper`, `ring`.
impl std::str::FromStr for CommitPath {
    type Err = UnknownVariant;
    fn from_str(s: &str) -> Result<Self, UnknownVariant> {
        match s {
            "helper" => Ok(CommitPath::Helper),
            "ring" => Ok(CommitPath::Ring),
            other => Err(UnknownVariant {
                expected: "\"helper\" or \"ring\"",
                got: other.to_string(),
            }),
        }
    }
}

/// A name that is not one of an enum's variants (`"sometimes"` for [`Durability`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVariant {
    /// The accepted names, e.g. `"fsync" or "os"`.
    pub expected: &'static str,
    pub got: String,
}

impl fmt::Display for UnknownVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "must be {}, got {:?}", self.expected, self.got)
    }
}

impl std::error::Error for UnknownVariant {}

/// The serde names (`fsync`, `os`), for command-line and environment overrides.
impl std::str::FromStr for Durability {
    type Err = UnknownVariant;
    fn from_str(s: &str) -> Result<Self, UnknownVariant> {
        match s {
            "fsync" => Ok(Durability::Fsync),
            "os" => Ok(Durability::Os),
            other => Err(UnknownVariant {
                expected: "\"fsync\" or \"os\"",
                got: other.to_string(),
            }),
        }
    }
}

/// The serde names (`pwrite`, `mmap`).
impl std::str::FromStr for WritePath {
    type Err = UnknownVariant;
    fn from_str(s: &str) -> Result<Self, UnknownVariant> {
        match s {
            "pwrite" => Ok(WritePath::Pwrite),
            "mmap" => Ok(WritePath::Mmap),
            other => Err(UnknownVariant {
                expected: "\"pwrite\" or \"mmap\"",
                got: other.to_string(),
            }),
        }
    }
}

/// WAL settings, validated by [`open`](crate::wal::open).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalConfig {
    /// The WAL directory, `DATA_DIR/wal`. Created if absent.
    pub dir: PathBuf,
    /// Size of each segment file. Default: 64 MiB. Range:
    /// `min_segment_bytes_for(max_body_bytes) ..= 2^40`, so that the largest record this log
    /// accepts, with its commit marker, fits in an empty segment.
    pub segment_bytes: u64,
    /// Largest event body this log accepts (larger: the request completes `Unavailable`).
    /// Default and maximum: [`MAX_BODY_BYTES`]. Ingest enforces the same limit first (413).
    pub max_body_bytes: usize,
    /// Default: `Fsync`.
    pub durability: Durability,
    /// Default: `Pwrite`.
    pub write_path: WritePath,
    /// Most requests per group commit. Default: 1024. Range: `1..=65536`.
    pub max_batch: usize,
    /// Open even when the checkpoint says records are missing (`serve --accept-wal-loss`):
    /// the missing ranges are logged, reported in [`RecoveryReport::lost`](crate::wal::RecoveryReport::lost) and counted; the
    /// checkpoint is then rewritten to what exists. Default: false ([`WalError::Lost`]).
    pub accept_loss: bool,
}

impl WalConfig {
    /// Defaults for everything but the directory.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        WalConfig {
            dir: dir.into(),
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            max_body_bytes: MAX_BODY_BYTES,
            durability: Durability::default(),
            write_path: WritePath::default(),
            max_batch: DEFAULT_MAX_BATCH,
            accept_loss: false,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), WalError> {
        let bad = |reason: String| Err(WalError::InvalidConfig { reason });
        if self.max_body_bytes == 0 || self.max_body_bytes > MAX_BODY_BYTES {
            return bad(format!(
                "wal max_body_bytes {} outside 1..={MAX_BODY_BYTES}",
                self.max_body_bytes
            ));
        }
        let min = min_segment_bytes_for(self.max_body_bytes);
        if self.segment_bytes < min || self.segment_bytes > 1 << 40 {
            return bad(format!(
                "wal segment_bytes {} outside {}..={} (a segment must hold the largest record: \
                 bodies up to {} bytes)",
                self.segment_bytes,
                min,
                1u64 << 40,
                self.max_body_bytes
            ));
        }
        if self.max_batch == 0 || self.max_batch > 65536 {
            return bad(format!(
                "wal max_batch {} outside 1..=65536",
                self.max_batch
            ));
        }
        Ok(())
    }
}
