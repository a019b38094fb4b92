//! The manifest of a data directory's logs: which logs exist, so that a log (or its checkpoint)
//! that disappears is an error at start-up, never a fresh empty log.
//!
//! `DATA_DIR/wal/MANIFEST` lists every log of the data dir (`core-K`, and `legacy` for the
//! single log of older versions, `wal::layout`). Every listed log has a `CHECKPOINT` file
//! (`wal::checkpoint`): a log is listed only after it was opened, and opening writes the
//! checkpoint. So at start-up ([`check_in`], [`reconcile_in`]):
//!
//! * a listed log whose directory is gone, or whose `CHECKPOINT` is gone, is **missing**: the
//!   start-up fails naming it ([`ManifestError::Missing`]), unless `--accept-wal-loss`, which
//!   records the loss in the manifest ([`AcceptedLoss`]) so the next start does not ask again;
//! * a log on disk that is not listed (one created by a run that stopped before it wrote the
//!   manifest, or a data dir from before the manifest) is **adopted**: it is opened as usual
//!   (its own checkpoint, if any, still checks its segments) and listed from then on.
//!
//! A data dir without a `MANIFEST` (written by a version before it, or new) is adopted once, as
//! it is found: what is missing from it cannot be known. From the first start that writes the
//! manifest on, the manifest is what must exist. Deleting `MANIFEST` itself therefore makes the
//! next start adopt the logs as found (the operator's way to say "this is the data dir now").
//!
//! The manifest is rewritten, atomically (`storage::replace_file_durably`: `MANIFEST.tmp`
//! written and `fdatasync`ed, renamed, `wal/` synced), whenever the set of logs changes: a log
//! created, adopted, or accepted as lost. Before it is written, every log directory it lists
//! has a durable directory entry (`storage::create_dir_all_durably` and recovery's create path).
//!
//! # File format (text, one item a line, `\n`-terminated)
//!
//! ```text
//! sluice wal manifest 1          header and version (other versions: the manifest is damaged)
//! log core-0                     one line per log, in the order the run keys them
//! log core-1
//! lost <unix ms> <what>          a loss accepted with --accept-wal-loss (the newest 64 kept)
//! crc <8 hex digits>             CRC32C (Castagnoli) of every byte before this line
//! ```
//!
//! Anything else — an unknown line, a bad CRC, no `crc` line — is a damaged manifest: the start
//! fails naming it (`--accept-wal-loss` rebuilds it from the logs found, recording that).
#![forbid(unsafe_code)]

pub use super::error::{ManifestError, Missing, MissingKind};
use crate::storage::{self, StdFs, Storage};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Name of the manifest in `DATA_DIR/wal/`.
pub const MANIFEST_FILE: &str = "MANIFEST";
const HEADER: &str = "sluice wal manifest 1";
/// Accepted losses kept in the manifest (the oldest are dropped beyond this).
pub const MAX_ACCEPTED: usize = 64;
/// Longest `what` text of an accepted loss, in bytes (longer text is cut at a char boundary).
const MAX_WHAT_BYTES: usize = 512;

/// A loss accepted at start-up with `--accept-wal-loss`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedLoss {
    /// Unix milliseconds of the start that accepted it.
    pub at_ms: u64,
    /// What was given up, for the operator (one line).
    pub what: String,
}

/// The logs a data dir must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// Log names (`core-K`, `legacy`).
    pub logs: Vec<String>,
    /// Losses accepted so far, oldest first (at most [`MAX_ACCEPTED`]).
    pub accepted: Vec<AcceptedLoss>,
}

/// The manifest's path in the `wal/` directory `wal_dir`.
pub fn path(wal_dir: &Path) -> PathBuf {
    wal_dir.join(MANIFEST_FILE)
}

/// The directory of log `name` under `wal_dir` (`legacy` is `wal_dir` itself).
pub fn log_dir(wal_dir: &Path, name: &str) -> PathBuf {
    if name == super::layout::LEGACY_LOG_NAME {
        wal_dir.to_owned()
    } else {
        wal_dir.join(name)
    }
}

fn valid_log_name(name: &str) -> bool {
    name == super::layout::LEGACY_LOG_NAME || super::layout::core_of(name).is_some()
}

/// The manifest's bytes.
pub fn encode(m: &Manifest) -> Vec<u8> {
    let mut s = format!("{HEADER}\n");
    for log in &m.logs {
        s.push_str(&format!("log {log}\n"));
    }
    for a in &m.accepted {
        s.push_str(&format!("lost {} {}\n", a.at_ms, one_line(&a.what)));
    }
    let crc = crc32c::crc32c(s.as_bytes());
    s.push_str(&format!("crc {crc:08x}\n"));
    s.into_bytes()
}

/// `what` as one line of at most [`MAX_WHAT_BYTES`] bytes.
fn one_line(what: &str) -> String {
    let mut s: String = what
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if s.len() > MAX_WHAT_BYTES {
        let mut end = MAX_WHAT_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// Parses manifest bytes; `Err(reason)` if they are not a valid manifest.
pub fn decode(bytes: &[u8]) -> Result<Manifest, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())?;
    let body_end = text
        .rfind("crc ")
        .filter(|&i| i == 0 || text.as_bytes()[i - 1] == b'\n')
        .ok_or("no crc line")?;
    let (body, crc_line) = text.split_at(body_end);
    let want = crc_line
        .strip_prefix("crc ")
        .and_then(|c| c.strip_suffix('\n'))
        .filter(|c| c.len() == 8)
        .and_then(|c| u32::from_str_radix(c, 16).ok())
        .ok_or("the crc line is not `crc` and 8 hex digits")?;
    if crc32c::crc32c(body.as_bytes()) != want {
        return Err("CRC mismatch".to_owned());
    }
    let mut lines = body.lines();
    if lines.next() != Some(HEADER) {
        return Err(format!("the first line is not `{HEADER}`"));
    }
    let mut m = Manifest::default();
    for line in lines {
        if let Some(name) = line.strip_prefix("log ") {
            if !valid_log_name(name) || m.logs.iter().any(|l| l == name) {
                return Err(format!("bad or repeated log name in `{line}`"));
            }
            m.logs.push(name.to_owned());
        } else if let Some(rest) = line.strip_prefix("lost ") {
            let (at, what) = rest.split_once(' ').unwrap_or((rest, ""));
            let at_ms = at.parse().map_err(|_| format!("bad time in `{line}`"))?;
            let what = what.to_owned();
            m.accepted.push(AcceptedLoss { at_ms, what });
        } else {
            return Err(format!("unknown line `{line}`"));
        }
    }
    Ok(m)
}

/// The manifest of `wal_dir`: `Ok(None)` when there is none (a new data dir, or one from
/// before the manifest).
pub fn read_in(fs: &dyn Storage, wal_dir: &Path) -> Result<Option<Manifest>, ManifestError> {
    let p = path(wal_dir);
    let bytes = match fs.read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ManifestError::Io { path: p, source }),
    };
    decode(&bytes)
        .map(Some)
        .map_err(|reason| ManifestError::Damaged { path: p, reason })
}

/// Writes `m` as the manifest of `wal_dir`, atomically and durably (module docs).
pub fn write_in(fs: &dyn Storage, wal_dir: &Path, m: &Manifest) -> Result<(), ManifestError> {
    let p = path(wal_dir);
    storage::replace_file_durably(fs, &p, &encode(m))
        .map_err(|source| ManifestError::Io { path: p, source })
}

/// The listed logs of `m` (and their checkpoints) that are not on disk.
pub fn missing_in(fs: &dyn Storage, wal_dir: &Path, m: &Manifest) -> Vec<Missing> {
    let mut out = Vec::new();
    for log in &m.logs {
        let dir = log_dir(wal_dir, log);
        let checkpoint = super::checkpoint::path(&dir);
        let (kind, path) = if !fs.is_dir(&dir) {
            (MissingKind::LogDir, dir)
        } else if fs.len(&checkpoint).is_err() {
            (MissingKind::Checkpoint, checkpoint)
        } else {
            continue;
        };
        out.push(Missing {
            log: log.clone(),
            kind,
            path,
        });
    }
    out
}

/// What [`check_in`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// The manifest, `None` when the data dir has none (its logs are adopted at the next start).
    pub manifest: Option<Manifest>,
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.manifest {
            None => write!(
                f,
                "manifest: none (written at the next start; the logs found then are adopted)"
            ),
            Some(m) => {
                write!(f, "manifest: OK, {} logs listed", m.logs.len())?;
                if !m.accepted.is_empty() {
                    write!(f, ", {} accepted losses recorded", m.accepted.len())?;
                }
                Ok(())
            }
        }
    }
}

/// Checks the manifest of `wal_dir` without modifying anything: every listed log and its
/// checkpoint exist. For `sluice wal verify`.
pub fn check(wal_dir: &Path) -> Result<CheckReport, ManifestError> {
    check_in(&StdFs, wal_dir)
}

/// [`check`] on `fs`.
pub fn check_in(fs: &dyn Storage, wal_dir: &Path) -> Result<CheckReport, ManifestError> {
    let manifest = read_in(fs, wal_dir)?;
    if let Some(m) = &manifest {
        let missing = missing_in(fs, wal_dir, m);
        if !missing.is_empty() {
            return Err(ManifestError::Missing {
                manifest: path(wal_dir),
                missing,
            });
        }
    }
    Ok(CheckReport { manifest })
}

/// The start-up decision, before any log is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciled {
    /// The manifest as read (or rebuilt), with the losses accepted now appended; the caller
    /// replaces its `logs` with the logs it opened and [`finish_in`] writes it.
    pub manifest: Manifest,
    /// The manifest as it was on disk (`None`: none, or damaged and rebuilt).
    pub before: Option<Manifest>,
    /// Listed logs to open although no segment may be on disk (their checkpoint says what
    /// they must hold; recovery compares).
    pub listed: Vec<String>,
    /// What was missing and is accepted as lost (empty unless `accept_loss`).
    pub accepted_now: Vec<Missing>,
}

/// Reads and checks the manifest of `wal_dir` at start-up. Missing logs or checkpoints are an
/// error naming them unless `accept_loss`; then they are logged to stderr and recorded.
pub fn reconcile_in(
    fs: &dyn Storage,
    wal_dir: &Path,
    accept_loss: bool,
    now_ms: u64,
) -> Result<Reconciled, ManifestError> {
    let mut accepted_damage = None;
    let before = match read_in(fs, wal_dir) {
        Ok(m) => m,
        Err(e @ ManifestError::Damaged { .. }) if accept_loss => {
            eprintln!("sluice: wal: ACCEPTING LOSS (--accept-wal-loss): {e}");
            accepted_damage = Some(AcceptedLoss {
                at_ms: now_ms,
                what: format!("damaged manifest rebuilt from the logs found: {e}"),
            });
            None
        }
        Err(e) => return Err(e),
    };
    let mut manifest = before.clone().unwrap_or_default();
    manifest.accepted.extend(accepted_damage);
    let missing = missing_in(fs, wal_dir, &manifest);
    if !missing.is_empty() && !accept_loss {
        return Err(ManifestError::Missing {
            manifest: path(wal_dir),
            missing,
        });
    }
    for m in &missing {
        eprintln!("sluice: wal: ACCEPTING LOSS (--accept-wal-loss): {m}");
        manifest.accepted.push(AcceptedLoss {
            at_ms: now_ms,
            what: m.to_string(),
        });
    }
    let excess = manifest.accepted.len().saturating_sub(MAX_ACCEPTED);
    manifest.accepted.drain(..excess);
    let gone: Vec<&str> = missing
        .iter()
        .filter(|m| m.kind == MissingKind::LogDir)
        .map(|m| m.log.as_str())
        .collect();
    let listed = manifest
        .logs
        .iter()
        .filter(|l| !gone.contains(&l.as_str()))
        .cloned()
        .collect();
    Ok(Reconciled {
        manifest,
        before,
        listed,
        accepted_now: missing,
    })
}

/// Writes the manifest of the logs opened (`logs`, in key order) if it differs from what is
/// on disk. Every log directory in `logs` must have a durable entry already.
pub fn finish_in(
    fs: &dyn Storage,
    wal_dir: &Path,
    mut r: Reconciled,
    logs: Vec<String>,
) -> Result<Manifest, ManifestError> {
    r.manifest.logs = logs;
    if r.before.as_ref() != Some(&r.manifest) {
        write_in(fs, wal_dir, &r.manifest)?;
    }
    Ok(r.manifest)
}

#[cfg(test)]
#[path = "manifest_tests.rs"]
mod tests;
