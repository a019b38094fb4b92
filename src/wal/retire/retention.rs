//! Retention of a log: which of its segments may go, and how many bytes stay on disk.
//!
//! A segment may be deleted once it is wholly below the log's done cursor (every record in it
//! has a durable outcome or is a record of the pump's own) and its last write is older than
//! `dispatch.retention`; never the active (last) segment, and only a prefix of the log (a
//! segment that must stay keeps every later one). The core's pump asks for it every few seconds
//! (`dispatch::pump::shell`) with the cursor the pump core reports; the log's commit helper deletes
//! (`WalShared::request_retire`: it checkpoints the new first live LSN first). The decision is
//! [`decide`], a function of the segments' first LSNs, sizes and ages; [`plan`] reads those
//! through the storage interface.
#![forbid(unsafe_code)]

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::storage::Storage;
use crate::wal::segment::list_segments_in;
use crate::wal::{Lsn, WalError};

/// One segment as retention sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentAge {
    /// The LSN of its first record (its name).
    pub first: Lsn,
    /// Its size on disk.
    pub bytes: u64,
    /// Time since its last write; `None` when unknown (it is then kept).
    pub age: Option<Duration>,
}

/// What retention decided for one log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retained {
    /// Bytes of the segments that stay.
    pub bytes: u64,
    /// Every segment below this LSN may be deleted (`None`: none may).
    pub retire_below: Option<Lsn>,
    /// Every segment below this LSN is done, whatever its age (`None`: none is): what a copy of
    /// the log elsewhere (the replication stream) need not keep.
    pub done_below: Option<Lsn>,
}

/// The decision for segments `segments` (in LSN order) of a log whose done cursor is
/// `cursor` (module docs).
pub fn decide(segments: &[SegmentAge], cursor: Lsn, retention: Duration) -> Retained {
    let mut out = Retained::default();
    let (mut deleting, mut done) = (true, true);
    for (i, s) in segments.iter().enumerate() {
        // The last LSN a segment can hold: the next segment's first, less one; the last
        // segment (active) has no bound and is never deleted.
        let last_lsn = segments.get(i + 1).map(|n| n.first.saturating_sub(1));
        let old_enough = s.age.is_some_and(|age| age >= retention);
        done = done && last_lsn.is_some_and(|l| l < cursor);
        if done {
            out.done_below = last_lsn.map(|l| l + 1);
        }
        deleting = deleting && done && old_enough;
        if deleting {
            out.retire_below = last_lsn.map(|l| l + 1);
            continue;
        }
        out.bytes += s.bytes;
    }
    out
}

/// Retention of the log in `dir` on `storage` at wall-clock time `now` (ages are measured
/// against the files' modification times). A segment whose size or age cannot be read counts
/// as neither deletable nor sized (it is kept, and so is every later one).
pub fn plan(
    storage: &dyn Storage,
    dir: &Path,
    cursor: Lsn,
    retention: Duration,
    now: SystemTime,
) -> Result<Retained, WalError> {
    let mut segments = Vec::new();
    for (first, path) in list_segments_in(storage, dir)? {
        let Ok(bytes) = storage.len(&path) else {
            segments.push(SegmentAge {
                first,
                bytes: 0,
                age: None,
            });
            continue;
        };
        let age = storage
            .modified(&path)
            .ok()
            .and_then(|m| now.duration_since(m).ok());
        segments.push(SegmentAge { first, bytes, age });
    }
    Ok(decide(&segments, cursor, retention))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn seg(first: Lsn, age_h: Option<u64>) -> SegmentAge {
        SegmentAge {
            first,
            bytes: 100,
            age: age_h.map(|h| HOUR * h as u32),
        }
    }

    #[test]
    fn only_an_old_prefix_wholly_below_the_cursor_goes() {
        let segs = [
            seg(1, Some(5)),
            seg(10, Some(5)),
            seg(20, Some(5)),
            seg(30, Some(5)),
        ];
        // Cursor 20: segments 1..=9 and 10..=19 are done.
        let r = decide(&segs, 20, HOUR);
        assert_eq!(
            r,
            Retained {
                bytes: 200,
                retire_below: Some(20),
                done_below: Some(20),
            }
        );
        // Cursor 19: the second segment still holds a pending record.
        assert_eq!(decide(&segs, 19, HOUR).retire_below, Some(10));
        // The active segment never goes, whatever the cursor.
        assert_eq!(decide(&segs, 1000, HOUR).retire_below, Some(30));
    }

    #[test]
    fn a_young_or_unknown_segment_keeps_itself_and_every_later_one() {
        let segs = [
            seg(1, Some(5)),
            seg(10, Some(0)),
            seg(20, Some(5)),
            seg(30, None),
        ];
        assert_eq!(decide(&segs, 100, HOUR).retire_below, Some(10));
        assert_eq!(
            decide(&segs, 100, HOUR).done_below,
            Some(30),
            "done, whatever their age"
        );
        let unknown = [seg(1, None), seg(10, Some(5)), seg(20, Some(5))];
        let r = decide(&unknown, 100, HOUR);
        assert_eq!(
            r,
            Retained {
                bytes: 300,
                retire_below: None,
                done_below: Some(20),
            }
        );
    }

    #[test]
    fn plan_reads_sizes_and_ages_through_the_storage() {
        let tmp = tempfile::tempdir().unwrap();
        let fs = crate::storage::StdFs;
        for first in [1u64, 10] {
            let name = tmp.path().join(format!("{first:020}.seg"));
            std::fs::write(name, vec![0u8; 64]).unwrap();
        }
        let later = SystemTime::now() + 2 * HOUR;
        let r = plan(&fs, tmp.path(), 50, HOUR, later).unwrap();
        assert_eq!(
            r,
            Retained {
                bytes: 64,
                retire_below: Some(10),
                done_below: Some(10),
            }
        );
        let now = plan(&fs, tmp.path(), 50, HOUR, SystemTime::now()).unwrap();
        assert_eq!(now.retire_below, None, "too young");
        assert_eq!(now.done_below, Some(10), "done all the same");
        assert!(plan(&fs, &tmp.path().join("gone"), 1, HOUR, later).is_err());
    }
}
