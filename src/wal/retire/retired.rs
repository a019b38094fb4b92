//! What retention deleted from a log, per trigger: the `RETIRED` file beside its segments, so the
//! event ledger stays cumulative over the log's life (issue 27: "what is retired is counted and
//! the ledger says so").
//!
//! Before the commit helper deletes segments ([`Wal::retire_below`](crate::wal::Wal::retire_below)),
//! it counts their events per trigger and the statuses of their `Done` entries
//! (`retired_count`), adds them to this file's tallies and moves its `covered` LSN to the first
//! LSN it keeps, *then* advances the checkpoint and deletes. Every event below `covered` is
//! counted here and nowhere else: recovery, the offline ledger and the next count pass over the
//! records below it, so a crash between this file's write and the deletion (segments below
//! `covered` still on disk) never counts them twice. Such leftover segments are read like any
//! other (the lookups still find their events) and deleted by the next retention, as are those
//! a crash left below the checkpoint's first live LSN.
//!
//! An event whose `Done` entry was not found in the deleted segments nor within the bounded
//! forward read (`retired_count::FORWARD_BYTES`) is *owed*: listed here with its trigger, so its
//! status is counted where its `Done` entry is found later: by recovery's scan while the entry
//! is retained, and by the count that retires the entry's segment. Retention only deletes
//! segments wholly below the done cursor, so that entry is durable when its event retires.
//!
//! # File format (all integers little-endian)
//!
//! Written whole as `RETIRED.tmp`, `fdatasync`ed, renamed over `RETIRED`, directory synced
//! (`storage::replace_file_durably`): a crash leaves the old file or the new one.
//!
//! ```text
//! offset  size  field
//!      0     8  magic     b"SLUICERT"
//!      8     4  version   u32 = 1 (other values: refused)
//!     12     4  triggers  u32 n, <= MAX_TRIGGERS (65 536)
//!     16     4  owed      u32 m, <= MAX_OWED (262 144)
//!     20     4  reserved  u32 = 0
//!     24     8  covered   u64: every event with a smaller LSN is counted here
//!     32        n rows:   u16 name length (0..=256), the trigger id (UTF-8),
//!                         u64 accepted (events retired), 8 x u64 done by DoneStatus code
//!                         (index 0 is 0); done sum <= accepted
//!      .        m owed:   u64 event LSN (< covered, increasing), u32 row index (< n)
//!      .     4  crc       u32 CRC32C (Castagnoli) of every byte before it
//! ```
//!
//! Each row's `accepted - sum(done)` must equal its owed entries, the file must end right after
//! the CRC, and the names must be distinct. A file that breaks any rule is *damaged*: like a
//! damaged checkpoint, it refuses the start ([`WalError::Retired`]); with `--accept-wal-loss`
//! the log starts from an empty one (what retention deleted before is then forgotten by the
//! ledger, and said so on stderr). A log without the file (new, or written by a version before
//! it) has retired nothing.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::storage::{replace_file_durably, Storage};
use crate::wal::format::MAX_ID_BYTES;
use crate::wal::{Lsn, WalError};

/// Name of the file in a log directory.
pub const RETIRED_FILE: &str = "RETIRED";
/// Most trigger rows a file may hold.
pub const MAX_TRIGGERS: usize = 65_536;
/// Most owed events a file may hold (12 bytes each: 3 MiB). A count that would owe more keeps
/// the segments instead (retried at the next retention).
pub const MAX_OWED: usize = 262_144;
const MAGIC: &[u8; 8] = b"SLUICERT";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 32;
const ROW_FIXED_BYTES: usize = 2 + 8 * 9;
const OWED_BYTES: usize = 12;

/// A log's retired tallies (the file's contents).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retired {
    /// Every event below this LSN is counted here (0 or 1: none).
    pub covered: Lsn,
    /// Per trigger: events retired (`accepted`) and their statuses (`done`); `retired` unused.
    pub tallies: BTreeMap<String, TriggerTally>,
    /// Retired events whose `Done` entry was not found yet: LSN → trigger.
    pub owed: BTreeMap<Lsn, String>,
}

/// One trigger's events in a log over its whole life: accepted, done by
/// [`DoneStatus`](crate::wal::DoneStatus) (indexed by its code), and how many of the accepted
/// ones retention deleted (`retired`; their statuses stay counted in `done`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TriggerTally {
    pub accepted: u64,
    pub done: [u64; 8],
    pub retired: u64,
}

impl TriggerTally {
    /// Events without a `Done` entry.
    pub fn pending(&self) -> u64 {
        self.accepted.saturating_sub(self.done.iter().sum())
    }
}

/// The path of the file of log directory `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(RETIRED_FILE)
}

impl Retired {
    /// Events retired per trigger, for the ledger's `retired` (cumulative).
    pub fn counts(&self) -> Vec<(String, u64)> {
        self.tallies
            .iter()
            .map(|(t, x)| (t.clone(), x.accepted))
            .collect()
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_BYTES + 4 + self.owed.len() * OWED_BYTES);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&(self.tallies.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.owed.len() as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&self.covered.to_le_bytes());
        let mut index = BTreeMap::new();
        for (i, (name, t)) in self.tallies.iter().enumerate() {
            index.insert(name.as_str(), i as u32);
            b.extend_from_slice(&(name.len() as u16).to_le_bytes());
            b.extend_from_slice(name.as_bytes());
            b.extend_from_slice(&t.accepted.to_le_bytes());
            for d in t.done {
                b.extend_from_slice(&d.to_le_bytes());
            }
        }
        for (lsn, name) in &self.owed {
            b.extend_from_slice(&lsn.to_le_bytes());
            b.extend_from_slice(&index.get(name.as_str()).copied().unwrap_or(0).to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses file bytes; `Err(reason)` for anything the format does not allow (module docs).
    pub fn decode(bytes: &[u8]) -> Result<Retired, String> {
        let body_len = bytes
            .len()
            .checked_sub(4)
            .filter(|&n| n >= HEADER_BYTES)
            .ok_or_else(|| format!("{} bytes: shorter than its header", bytes.len()))?;
        let (body, crc) = bytes.split_at(body_len);
        if &body[..8] != MAGIC {
            return Err("not a RETIRED file (bad magic)".to_owned());
        }
        let mut c = Cursor { rest: &body[8..] };
        let version = c.u32()?;
        if version != VERSION {
            return Err(format!("version {version}, this build reads {VERSION}"));
        }
        if crc32c::crc32c(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err("CRC mismatch".to_owned());
        }
        let (n, m) = (c.u32()? as usize, c.u32()? as usize);
        if n > MAX_TRIGGERS || m > MAX_OWED || c.u32()? != 0 {
            return Err(format!(
                "{n} triggers, {m} owed, or reserved bits: out of bounds"
            ));
        }
        let covered = c.u64()?;
        let mut names = Vec::with_capacity(n);
        let mut r = Retired {
            covered,
            ..Retired::default()
        };
        for _ in 0..n {
            let (name, t) = c.row()?;
            if r.tallies.insert(name.clone(), t).is_some() {
                return Err(format!("trigger {name:?} listed twice"));
            }
            names.push(name);
        }
        let mut owed_per = vec![0u64; n];
        for _ in 0..m {
            let (lsn, i) = (c.u64()?, c.u32()? as usize);
            let name = names.get(i).ok_or("owed entry names no row")?;
            let last = r.owed.last_key_value().map_or(0, |e| *e.0);
            if lsn >= covered || (lsn <= last && !r.owed.is_empty()) {
                return Err(format!("owed LSN {lsn}: not increasing below {covered}"));
            }
            owed_per[i] += 1;
            r.owed.insert(lsn, name.clone());
        }
        if !c.rest.is_empty() {
            return Err(format!("{} bytes after the owed entries", c.rest.len()));
        }
        for (name, owed) in names.iter().zip(owed_per) {
            if r.tallies[name].pending() != owed {
                return Err(format!(
                    "trigger {name:?}: counts disagree with its owed entries"
                ));
            }
        }
        Ok(r)
    }
}

struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.rest.len() < n {
            return Err("truncated".to_owned());
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Ok(a)
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let mut x = [0u8; 8];
        x.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(x))
    }

    /// One trigger row (module docs).
    fn row(&mut self) -> Result<(String, TriggerTally), String> {
        if self.rest.len() < ROW_FIXED_BYTES {
            return Err("truncated".to_owned());
        }
        let len = self.take(2)?;
        let len = u16::from_le_bytes([len[0], len[1]]) as usize;
        if len > MAX_ID_BYTES {
            return Err(format!("trigger id of {len} bytes"));
        }
        let name = std::str::from_utf8(self.take(len)?)
            .map_err(|_| "trigger id is not UTF-8".to_owned())?
            .to_owned();
        let mut t = TriggerTally {
            accepted: self.u64()?,
            ..TriggerTally::default()
        };
        for d in t.done.iter_mut() {
            *d = self.u64()?;
        }
        let done = t.done.iter().try_fold(0u64, |a, &d| a.checked_add(d));
        if t.done[0] != 0 || !done.is_some_and(|d| d <= t.accepted) {
            return Err(format!("trigger {name:?}: more done than retired"));
        }
        Ok((name, t))
    }
}

/// The file of log directory `dir`: `Ok(None)` when there is none, `Ok(Some(Err(reason)))`
/// when it is damaged.
pub fn read_in(fs: &dyn Storage, dir: &Path) -> Result<Option<Result<Retired, String>>, WalError> {
    let p = path(dir);
    match fs.read(&p) {
        Ok(bytes) => Ok(Some(Retired::decode(&bytes))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(WalError::io(&p, e)),
    }
}

/// The file of `dir` for a reader: empty when absent, [`WalError::Retired`] when damaged.
pub fn load(fs: &dyn Storage, dir: &Path) -> Result<Retired, WalError> {
    match read_in(fs, dir)? {
        None => Ok(Retired::default()),
        Some(Ok(r)) => Ok(r),
        Some(Err(reason)) => Err(WalError::Retired {
            path: path(dir),
            reason,
        }),
    }
}

/// The file of `dir` at open: as [`load`], but with `accept_loss` a damaged file is replaced by
/// an empty one (said on stderr).
pub fn load_at_open(fs: &dyn Storage, dir: &Path, accept_loss: bool) -> Result<Retired, WalError> {
    match load(fs, dir) {
        Err(WalError::Retired { path, reason }) if accept_loss => {
            eprintln!(
                "sluice: wal: {}: damaged ({reason}); replaced by an empty one \
                 (--accept-wal-loss): the ledger forgets what retention deleted before",
                path.display()
            );
            let empty = Retired::default();
            write(fs, dir, &empty).map_err(|e| WalError::io(&path, e))?;
            Ok(empty)
        }
        other => other,
    }
}

/// Writes `r` as the file of `dir` (tmp, `fdatasync`, rename, directory sync).
pub fn write(fs: &dyn Storage, dir: &Path, r: &Retired) -> io::Result<()> {
    replace_file_durably(fs, &path(dir), &r.encode())
}

#[cfg(test)]
#[path = "retired_tests.rs"]
mod tests;
