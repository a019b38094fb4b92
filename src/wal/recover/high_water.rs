//! Recovery's use of the high-water record (`wal::high_water`): reading it, checking the
//! segments against its copy of a lost checkpoint, and continuing above its reservation after
//! anything was given up.
#![forbid(unsafe_code)]

use crate::storage::Storage;
use crate::sync::clock::unix_millis;
use crate::wal::append::Wal;
use crate::wal::checkpoint::{self, Checkpoint, LostRange};
use crate::wal::high_water::{self, HighWater, HighWaterFile, STEP};
use crate::wal::WalError;
use std::path::{Path, PathBuf};

/// The high-water record of the log in `dir`, as recovery found it.
#[derive(Debug, Default)]
pub(super) struct Found {
    /// Where it lives (`None`: a bare log, which has none).
    pub(super) path: Option<PathBuf>,
    /// Its contents (`None`: no file, or a damaged one given up).
    pub(super) record: Option<HighWater>,
    /// A damaged record was given up (`--accept-wal-loss`): what it reserved is unknown.
    pub(super) damaged_given_up: bool,
}

/// Reads the record of the log in `dir`. A damaged one fails the open unless `accept_loss`.
pub(super) fn read(fs: &dyn Storage, dir: &Path, accept_loss: bool) -> Result<Found, WalError> {
    let Some(path) = high_water::path_of(dir) else {
        return Ok(Found::default());
    };
    let (record, damaged_given_up) = match high_water::read_in(fs, &path)? {
        None => (None, false),
        Some(Ok(hw)) => (Some(hw), false),
        Some(Err(d)) if accept_loss => {
            eprintln!(
                "sluice: wal {}: ACCEPTING LOSS (--accept-wal-loss): {}",
                dir.display(),
                WalError::HighWaterDamaged(d)
            );
            (None, true)
        }
        Some(Err(d)) => return Err(WalError::HighWaterDamaged(d)),
    };
    Ok(Found {
        path: Some(path),
        record,
        damaged_given_up,
    })
}

/// What the segments are checked against: the checkpoint read (`checkpoint`), or, when it is
/// gone or was given up while the high-water record shows the log had one, the record's copy
/// — only with `accept_loss`, else [`WalError::CheckpointLost`]. Returns the promise and
/// whether it is the copy (a loss accepted now).
pub(super) fn promise(
    dir: &Path,
    checkpoint: Option<Checkpoint>,
    found: &Found,
    accept_loss: bool,
) -> Result<(Option<Checkpoint>, bool), WalError> {
    let (Some(path), Some(hw), None) = (&found.path, &found.record, checkpoint) else {
        return Ok((checkpoint, false));
    };
    if !accept_loss {
        return Err(WalError::CheckpointLost {
            checkpoint: checkpoint::path(dir),
            high_water: path.clone(),
            copied_at_ms: hw.written_at_ms,
        });
    }
    eprintln!(
        "sluice: wal {}: ACCEPTING LOSS (--accept-wal-loss): checkpoint {} is lost; checking \
         the segments against the copy in the high-water record {} (written at unix ms {})",
        dir.display(),
        checkpoint::path(dir).display(),
        path.display(),
        hw.written_at_ms
    );
    Ok((Some(hw.checkpoint), true))
}

/// After recovery gave something up (`gave_up`: a loss accepted), continues `wal` above the reservation, naming the LSNs skipped above the ranges already
/// named (`named`); then opens (or creates) the record with a reservation [`STEP`] ahead.
/// Returns the range named as skipped (`None`: nothing was skipped beyond `named`).
pub(super) fn continue_above(
    fs: &dyn Storage,
    wal: &mut Wal,
    found: &Found,
    gave_up: bool,
    named: &[LostRange],
) -> Result<Option<LostRange>, WalError> {
    let Some(path) = &found.path else {
        return Ok(None);
    };
    let from = named
        .iter()
        .map(|r| r.last + 1)
        .fold(wal.next_lsn(), Ord::max);
    let skipped = match &found.record {
        Some(hw) if gave_up && hw.reserved >= wal.next_lsn() => {
            wal.skip_to(hw.reserved + 1)?;
            let range = LostRange {
                first: from,
                last: hw.reserved,
                why: format!(
                    "skipped: the high-water record {} reserved up to LSN {}, so some of them \
                     may have been handed out before what was given up; none is handed out \
                     again (the log continues at {})",
                    path.display(),
                    hw.reserved,
                    hw.reserved + 1
                ),
            };
            let range = Some(range).filter(|r| r.first <= r.last);
            if let Some(r) = &range {
                eprintln!(
                    "sluice: wal {}: LSNs {}..={} {}",
                    wal.dir().display(),
                    r.first,
                    r.last,
                    r.why
                );
            }
            range
        }
        _ => None,
    };
    if found.damaged_given_up {
        eprintln!(
            "sluice: wal {}: the high-water record was given up: the log continues at LSN {}, \
             and an LSN handed out before the damage may be handed out again",
            wal.dir().display(),
            wal.next_lsn()
        );
    }
    let c = wal.checkpoint().unwrap_or(Checkpoint {
        first_live_lsn: wal.next_lsn(),
        durable_lsn: wal.last_lsn(),
    });
    let reserved = found.record.map_or(0, |hw| hw.reserved);
    let hw = HighWater {
        checkpoint: c,
        reserved: reserved.max(wal.last_lsn() + STEP),
        written_at_ms: unix_millis(),
    };
    wal.high_water = Some(HighWaterFile::open_or_create(fs, path, hw)?);
    Ok(skipped)
}
