//! WAL record decoding and the recovery scan over arbitrary segment bytes, on the simulated
//! disk (`sluice::storage::sim::SimFs`: everything in memory, no file system).
//!
//! Input: a control byte, then either raw segment bytes (even control byte) or a list of
//! records to encode with valid CRCs, followed by damage (odd control byte), so that the scan
//! gets past the CRC check and reaches LSN continuity, payload decoding and torn-tail logic.
//! The bytes are written as one or two segment files of an in-memory log; then: `verify`, the
//! dispatch recovery, the reader and `open` must not panic, and after a successful `open`
//! (which truncates a torn tail) the log must verify clean. The structured input also writes
//! commit markers (batch boundaries, `fsync`-ordered or not) and zeroes whole sectors (a lost
//! write), so the recovery decision (`wal::damage`: torn final batch vs damage to acknowledged
//! data) sees the shapes it decides between. When `open` refuses damage (`Corrupt`, `Lost`),
//! `--accept-wal-loss` must get past it, continue above the log's high-water reservation
//! (`wal/legacy.hw`: no LSN handed out twice), and the next plain `open` must not refuse again.
//! Control bit 7 also cuts the power
//! during that first `open` (after a number of storage operations taken from the input), reboots
//! the simulated disk and opens again: recovery interrupted by a power loss must recover too.
//!
//! An input that ends with `[first_live, durable, b'C', b'K', b'P', b'T']` also writes the log's
//! CHECKPOINT (`first_live_lsn`, `durable_lsn` from those two bytes) before recovery: damage at
//! or below the durable LSN is acknowledged data (the decision's rule 2) and a log that ends or
//! starts short of the promise is `Lost`. Then a plain `open` that succeeds must have kept every
//! LSN the checkpoint promised (`last_lsn >= durable_lsn`): nothing promised is truncated without
//! a refusal. Inputs without that trailer (the older seeds) run as before, with no checkpoint.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::storage::sim::SimFs;
use sluice::storage::{OpenMode, Storage};
use sluice::wal::checkpoint::{self, CheckpointFile};
use sluice::wal::format::marker::append_marker;
use sluice::wal::format::{append_record, decode_payload, parse_record, Parsed};
use sluice::wal::tools::Finding;
use sluice::wal::{self, Checkpoint, Durability, RecordKind, WalConfig, WalReader};
use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

/// Keeps one freed large block (at least [`SPARE_MIN`] bytes) for the next allocation of the
/// same size, instead of handing it back to the sanitizer's allocator.
///
/// Every `wal::open_in` allocates (and the drop of its `Wal` frees) a 1 MiB write buffer. Under
/// ASan a block that large is `mmap`ed, its shadow poisoned on allocation and again on free,
/// and it is then quarantined and `munmap`ed: measured with `perf record -g` at ~15 % of all
/// the fuzzer's time, as much as the whole recovery scan. Reusing the block skips that. The
/// product code runs unchanged, and the buffer is only ever touched through safe code (the
/// `wal` module denies `unsafe`), so there was nothing for ASan to catch on it; every other
/// allocation goes to ASan as before.
struct SpareLarge;

const SPARE_MIN: usize = 256 * 1024;
/// The spare block: address and size (alignment 1, as `Vec<u8>`'s); (0, 0) when none.
static SPARE: Mutex<(usize, usize)> = Mutex::new((0, 0));

fn spare() -> MutexGuard<'static, (usize, usize)> {
    SPARE.lock().unwrap_or_else(|e| e.into_inner())
}

// SAFETY: every block handed out is one `System` allocated with the same size and alignment
// (the spare is only reused for an exact match) and is owned by one caller at a time.
unsafe impl GlobalAlloc for SpareLarge {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= SPARE_MIN && layout.align() == 1 {
            let mut s = spare();
            if s.0 != 0 && s.1 == layout.size() {
                let p = s.0 as *mut u8;
                *s = (0, 0);
                return p;
            }
        }
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() >= SPARE_MIN && layout.align() == 1 {
            let mut s = spare();
            let old = std::mem::replace(&mut *s, (ptr as usize, layout.size()));
            drop(s);
            if old.0 != 0 {
                System.dealloc(
                    old.0 as *mut u8,
                    Layout::from_size_align_unchecked(old.1, 1),
                );
            }
            return;
        }
        System.dealloc(ptr, layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: SpareLarge = SpareLarge;

fn structured(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut lsn = 1u64;
    // The batch not yet closed by a commit marker: its start and first LSN.
    let mut batch = (0usize, 1u64);
    let mut rest = data;
    while rest.len() >= 3 {
        // Every kind a record header may carry but the framing ones (6, 7), which the
        // 0xD0.. byte below writes as the writer does.
        let kind = [1u8, 2, 3, 4, 5, 8, 9, 10][usize::from(rest[0]) % 8];
        let kind = RecordKind::from_u8(kind).unwrap_or(RecordKind::Event);
        let len = usize::from(rest[1]).min(rest.len() - 2);
        let payload = &rest[2..2 + len];
        rest = &rest[2 + len..];
        let _ = append_record::<()>(&mut out, lsn, kind, |o| {
            o.extend_from_slice(payload);
            Ok(())
        });
        lsn += 1;
        if let Some((&d, r)) = rest.split_first() {
            // 0xF0.. flips a byte; 0xE0.. skips an LSN; 0xD0.. closes the batch with a commit
            // marker (ORDERED when bit 0 is set), as the writer does; 0xC0.. zeroes the
            // 512-byte sector holding a byte (a lost write); else nothing.
            rest = r;
            if d >= 0xF0 && !out.is_empty() {
                let i = usize::from(d) * 7 % out.len();
                out[i] ^= 0x5A;
            } else if (0xE0..0xF0).contains(&d) {
                lsn += 1;
            } else if (0xD0..0xE0).contains(&d) && batch.1 < lsn {
                append_marker(&mut out, batch.0, u64::from(d), batch.1, lsn, d & 1 == 1);
                batch = (out.len(), lsn);
            } else if (0xC0..0xD0).contains(&d) && !out.is_empty() {
                let i = usize::from(d) * 131 % out.len();
                let start = i - i % 512;
                let end = (start + 512).min(out.len());
                out[start..end].fill(0);
            }
        }
    }
    out
}

/// The input trailer that writes a CHECKPOINT (see the module header).
const CHECKPOINT_TRAILER: &[u8] = b"CKPT";

/// Splits the checkpoint trailer off `data`: the rest, and the checkpoint it asks for.
fn split_checkpoint(data: &[u8]) -> (&[u8], Option<Checkpoint>) {
    let n = data.len().saturating_sub(2 + CHECKPOINT_TRAILER.len());
    match &data[n..] {
        [first, durable, tag @ ..] if tag == CHECKPOINT_TRAILER => (
            &data[..n],
            Some(Checkpoint {
                first_live_lsn: u64::from(*first),
                durable_lsn: u64::from(*durable),
            }),
        ),
        _ => (data, None),
    }
}

/// The checkpoint on the simulated disk now, if one is there and valid.
fn promise(fs: &SimFs, dir: &Path) -> Option<Checkpoint> {
    match checkpoint::read_in(fs, dir) {
        Ok(Some(Ok(c))) => Some(c),
        _ => None,
    }
}

fn segment_name(lsn: u64) -> String {
    format!("{lsn:020}.seg")
}

fn check(ctl: u8, segments: &[(u64, &[u8])], ckpt: Option<Checkpoint>) {
    let root = Path::new("/fuzz");
    let wal_dir = root.join("wal");
    let fs = SimFs::new(root, u64::from(ctl));
    let storage: Arc<dyn Storage> = Arc::new(fs.clone());
    fs.create_dir_all(&wal_dir).unwrap();
    for (lsn, bytes) in segments {
        let path = wal_dir.join(segment_name(*lsn));
        let mut f = fs.open(&path, OpenMode::CREATE).unwrap();
        f.write_at(0, bytes).unwrap();
        f.sync_data().unwrap();
    }
    fs.sync_dir(&wal_dir).unwrap();
    if let Some(c) = ckpt {
        CheckpointFile::open_or_create(&fs, &wal_dir, c, 0).unwrap();
    }
    let _ = wal::tools::verify_log_in(&fs, &wal_dir, &mut sluice::tools::progress::Silent);
    let _ = wal::recover_dispatch_in(&fs, &wal_dir);
    if let Ok(mut reader) = WalReader::open_in(storage.clone(), &wal_dir, 0) {
        for _ in 0..100_000 {
            match reader.next_record() {
                Some(Ok(_)) => {}
                _ => break,
            }
        }
    }
    let cfg = WalConfig {
        segment_bytes: wal::MIN_SEGMENT_BYTES,
        max_body_bytes: 4096,
        durability: Durability::Os,
        ..WalConfig::new(&wal_dir)
    };
    if ctl & 0x80 != 0 {
        // A power cut part-way through recovery (it zeroes a torn tail, syncs, writes the
        // checkpoint); the second recovery below runs on what survived.
        fs.power_cut_after(1 + u64::from(ctl & 0x0F));
        let _ = wal::open_in(storage.clone(), &cfg);
        fs.reboot();
    }
    let promised = promise(&fs, &wal_dir);
    let opened = match wal::open_in(storage.clone(), &cfg) {
        Err(wal::WalError::Corrupt { .. } | wal::WalError::Lost { .. }) => {
            // Refused, naming the damage: accepting the loss must always get past it (lost-range
            // records written over it), and the next plain start must not ask again.
            let accept = WalConfig {
                accept_loss: true,
                ..cfg.clone()
            };
            // The highest LSN the log may have handed out: an accepted loss continues above it.
            let reserved = wal::high_water::path_of(&wal_dir)
                .and_then(|p| wal::high_water::read_in(&fs, &p).ok().flatten())
                .and_then(Result::ok)
                .map_or(0, |hw| hw.reserved);
            match wal::open_in(storage.clone(), &accept) {
                Ok((log, report)) => {
                    assert!(
                        report.last_lsn >= reserved,
                        "an accepted loss continued at {} below the reservation {reserved}",
                        report.last_lsn + 1
                    );
                    drop(log)
                }
                Err(wal::WalError::Io { .. }) => return,
                // Segments whose names overlap (never written so; which copy of an LSN is
                // right cannot be told): refused even when accepting loss, by design.
                Err(wal::WalError::Corrupt { reason, .. })
                    if reason.starts_with("LSN gap: segment starts at") =>
                {
                    return
                }
                Err(e) => panic!("--accept-wal-loss refused: {e}"),
            }
            let again = wal::open_in(storage.clone(), &cfg);
            assert!(
                !matches!(
                    again,
                    Err(wal::WalError::Corrupt { .. } | wal::WalError::Lost { .. })
                ),
                "asked again after the loss was accepted: {:?}",
                again.err()
            );
            again
        }
        Ok((log, report)) => {
            // Not refused: then nothing the checkpoint promised was given up (damage at or
            // below its durable LSN is refused above, never truncated as a torn tail).
            if let Some(c) = promised.filter(|c| c.durable_lsn >= c.first_live_lsn) {
                assert!(
                    report.last_lsn >= c.durable_lsn,
                    "open kept LSNs up to {} but the checkpoint promised {c:?} (truncated: {:?})",
                    report.last_lsn,
                    report.truncated_tail
                );
            }
            Ok((log, report))
        }
        other => other,
    };
    if let Ok((log, report)) = opened {
        drop(log);
        // `open` checks framing (length, CRC, kind, LSN continuity) and truncates a torn tail;
        // `verify` also decodes every payload. After a successful open: no torn tail is left,
        // the framing agrees, and a payload that does not decode makes the dispatch recovery
        // (the next start-up step) refuse too, never skip it silently.
        let v = wal::tools::verify_log_in(&fs, &wal_dir, &mut sluice::tools::progress::Silent)
            .expect("verify after open");
        assert!(v.lost.is_empty(), "lost ranges left after open: {v}");
        match &v.finding {
            None => assert_eq!(v.records, report.records, "{v}"),
            Some(Finding::TornTail { .. }) => panic!("torn tail left after open: {v}"),
            Some(Finding::Corrupt { .. }) => assert!(
                wal::recover_dispatch_in(&fs, &wal_dir).is_err(),
                "undecodable payload accepted by the dispatch recovery: {v}"
            ),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (data, ckpt) = split_checkpoint(data);
    let Some((&ctl, body)) = data.split_first() else {
        return;
    };
    let bytes = if ctl & 1 == 1 {
        structured(body)
    } else {
        body.to_vec()
    };
    // Record-level decoding over every offset of the bytes (bounded by the input size).
    let mut off = 0;
    while off < bytes.len() {
        match parse_record(&bytes[off..]) {
            Parsed::Record(r) => {
                assert!(r.len >= 17 && r.len <= bytes.len() - off);
                let _ = decode_payload(r.kind, r.payload);
                off += r.len;
            }
            Parsed::End | Parsed::Bad(_) => off += 1,
        }
    }
    // ctl bit 1: split into two segments at a point chosen by the next bits.
    if ctl & 2 == 2 && bytes.len() > 1 {
        let split = (usize::from(ctl >> 2) * bytes.len() / 64).clamp(1, bytes.len() - 1);
        let second_lsn = 1 + u64::from(ctl >> 4);
        check(
            ctl,
            &[(1, &bytes[..split]), (second_lsn, &bytes[split..])],
            ckpt,
        );
    } else {
        check(ctl, &[(1, &bytes)], ckpt);
    }
});
