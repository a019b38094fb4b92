//! Unit tests of the recovery decision (`damage.rs`) over segments built in memory.
use super::*;
use crate::wal::format::marker::append_marker;
use crate::wal::format::tests::sample_event;
use crate::wal::format::{append_record, encode_event_into};
use crate::wal::recover::scanner::{Scanner, Step};

/// A segment of `batches` batches of `per` events (bodies of ~700 bytes, so a batch spans
/// several sectors), each closed by its marker; returns the bytes (with a zero tail) and, per
/// batch, `(start, marker_offset, end)`.
fn segment(batches: usize, per: usize, ordered: bool) -> (Vec<u8>, Vec<(usize, usize, usize)>) {
    let mut out = Vec::new();
    let mut spans = Vec::new();
    let mut lsn = 1;
    for b in 0..batches {
        let start = out.len();
        for _ in 0..per {
            let ev = sample_event(lsn, 650 + (lsn as usize * 37) % 100);
            append_record(&mut out, lsn, ev.kind(), |o| encode_event_into(&ev, o)).unwrap();
            lsn += 1;
        }
        let marker = out.len();
        let first = lsn - per as u64;
        append_marker(&mut out, start, b as u64 + 1, first, lsn, ordered);
        spans.push((start, marker, out.len()));
    }
    out.resize(out.len() + 64 * 1024, 0);
    (out, spans)
}

/// Scans `bytes` as the last segment (or not) and classifies the first damage found.
fn verdict(bytes: &[u8], promised: Option<Lsn>, last_segment: bool) -> Option<Verdict> {
    let mut sc = Scanner::new(1);
    let mut ordered = None;
    loop {
        let step = sc.step(bytes);
        if let Some(m) = sc.last_marker {
            ordered = Some(m.ordered);
        }
        match step {
            Step::Record(..) | Step::Gap { .. } => {}
            Step::End => return None,
            Step::Bad { offset, .. } => {
                return Some(classify(&Damage {
                    bytes,
                    offset: offset as usize,
                    lsn: sc.next_lsn,
                    batch_start: sc.batch_start,
                    ordered,
                    promised,
                    last_segment,
                }))
            }
        }
    }
}

fn acked(v: Option<Verdict>) -> String {
    match v {
        Some(Verdict::Acked(why)) => why,
        other => panic!("expected Acked, got {other:?}"),
    }
}

#[test]
fn a_clean_segment_has_no_damage() {
    let (bytes, _) = segment(3, 4, true);
    assert_eq!(verdict(&bytes, None, true), None);
}

#[test]
fn a_flipped_byte_before_a_later_batch_is_acknowledged_data() {
    let (mut bytes, spans) = segment(3, 4, true);
    bytes[spans[1].0 + 100] ^= 0x01;
    // The batch's own marker is followed by the third batch: written after its sync.
    let why = acked(verdict(&bytes, None, true));
    assert!(why.contains("made after this batch was synced"), "{why}");
    // Its marker damaged too: the third batch's marker is the proof.
    let mut b = bytes.clone();
    b[spans[1].1 + 20] ^= 0x01;
    let why = acked(verdict(&b, None, true));
    assert!(why.contains("later batch (commit 3"), "{why}");
    // Even with the checkpoint far behind: the later marker is the proof.
    assert!(matches!(
        verdict(&bytes, Some(0), true),
        Some(Verdict::Acked(_))
    ));
}

#[test]
fn a_flipped_byte_in_the_final_batch_is_acknowledged_a_lost_sector_is_torn() {
    let (pristine, spans) = segment(3, 4, true);
    let (start, marker, end) = spans[2];
    // A changed byte inside written sectors: not what a power cut leaves.
    let mut b = pristine.clone();
    b[start + 900] ^= 0x40;
    let why = acked(verdict(&b, Some(0), true));
    assert!(why.contains("changed byte"), "{why}");
    // A flipped length field of the last record: its own marker still bounds the batch.
    let mut b = pristine.clone();
    b[marker - 1] ^= 0x01;
    acked(verdict(&b, Some(0), true));
    // One whole sector of the final write never reached the disk: torn.
    let mut b = pristine.clone();
    let s = (start / SECTOR + 2) * SECTOR;
    b[s..s + SECTOR].fill(0);
    assert_eq!(verdict(&b, Some(0), true), Some(Verdict::Torn));
    // Only a prefix of the final write reached the disk (its marker too is missing): torn.
    let mut b = pristine.clone();
    let cut = (start / SECTOR + 3) * SECTOR;
    b[cut..end].fill(0);
    assert_eq!(verdict(&b, Some(0), true), Some(Verdict::Torn));
    // The final batch's marker alone damaged (a changed byte): acknowledged framing.
    let mut b = pristine.clone();
    b[marker + 20] ^= 0x08;
    acked(verdict(&b, Some(0), true));
}

#[test]
fn a_lost_synced_sector_before_a_later_batch_is_acknowledged() {
    let (mut bytes, spans) = segment(3, 4, true);
    let s = (spans[0].0 / SECTOR + 1) * SECTOR;
    bytes[s..s + SECTOR].fill(0);
    acked(verdict(&bytes, None, true));
    // The whole first batch's marker sector lost, the next batch intact: still proven.
    let (mut bytes, spans) = segment(3, 4, true);
    let m = spans[0].1;
    bytes[m..m + 42].fill(0);
    acked(verdict(&bytes, None, true));
}

#[test]
fn the_partial_sector_where_the_final_write_began_can_be_lost() {
    let (mut bytes, spans) = segment(3, 4, true);
    let (start, _, end) = spans[2];
    assert_ne!(start % SECTOR, 0, "the final batch starts mid-sector");
    // The first sector of the final write reverts to what the disk held: the previous
    // batch's bytes, zeros from where this write began.
    let next = start.div_ceil(SECTOR) * SECTOR;
    bytes[start..next].fill(0);
    assert!(next < end);
    assert_eq!(verdict(&bytes, Some(0), true), Some(Verdict::Torn));
}

#[test]
fn os_mode_and_checkpoint_rules() {
    // `os` durability (not ORDERED): a later batch proves nothing; the checkpoint decides.
    let (mut bytes, spans) = segment(3, 4, false);
    bytes[spans[1].0 + 100] ^= 0x01;
    assert_eq!(verdict(&bytes, Some(4), true), Some(Verdict::Torn));
    let why = acked(verdict(&bytes, Some(5), true));
    assert!(why.contains("checkpoint records LSNs up to 5"), "{why}");
    // Not the last segment: always acknowledged.
    acked(verdict(&bytes, Some(0), false));
    // No checkpoint and no markers' proof: the earlier rule (a valid record follows).
    acked(verdict(&bytes, None, true));
}

#[test]
fn resume_points_and_zero_scans() {
    let (bytes, spans) = segment(2, 3, true);
    let (p, r) = next_valid(&bytes, 1, 1).unwrap();
    assert_eq!(r.lsn, 2);
    assert!(p > 0 && p < spans[0].1);
    let (p, r) = next_valid(&bytes, spans[0].1, 4).unwrap();
    assert_eq!((p, r.lsn, r.kind), (spans[0].1, 4, RecordKind::Marker));
    assert!(next_valid(&bytes, spans[1].2, 1).is_none());
    let mut b = vec![0u8; 200 * 1024];
    assert!(all_zero(&b));
    assert_eq!(last_non_zero(&b), None);
    for at in [0, 65_535, 65_536, 131_073, b.len() - 1] {
        b[at] = 7;
        assert!(!all_zero(&b));
        assert_eq!(last_non_zero(&b), Some(at), "{at}");
    }
}
