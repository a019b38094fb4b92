//! WAL record decoding and the recovery scan over arbitrary segment bytes.
//!
//! Input: a control byte, then either raw segment bytes (even control byte) or a list of
//! records to encode with valid CRCs, followed by damage (odd control byte), so that the scan
//! gets past the CRC check and reaches LSN continuity, payload decoding and torn-tail logic.
//! The bytes are written as one or two segment files in a temp dir; then: `verify`, the
//! dispatch recovery, the reader and `open` must not panic, and after a successful `open`
//! (which truncates a torn tail) the log must verify clean.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::wal::format::{append_record, decode_payload, parse_record, Parsed};
use sluice::wal::tools::Finding;
use sluice::wal::{self, Durability, RecordKind, WalConfig, WalReader};
use std::path::Path;

fn structured(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut lsn = 1u64;
    let mut rest = data;
    while rest.len() >= 3 {
        let kind = RecordKind::from_u8(1 + rest[0] % 5).unwrap_or(RecordKind::Event);
        let len = usize::from(rest[1]).min(rest.len() - 2);
        let payload = &rest[2..2 + len];
        rest = &rest[2 + len..];
        let _ = append_record::<()>(&mut out, lsn, kind, |o| {
            o.extend_from_slice(payload);
            Ok(())
        });
        lsn += 1;
        if let Some((&d, r)) = rest.split_first() {
            // Damage: 0xF0.. flips a byte; 0xE0.. skips an LSN; else nothing.
            rest = r;
            if d >= 0xF0 && !out.is_empty() {
                let i = usize::from(d) * 7 % out.len();
                out[i] ^= 0x5A;
            } else if (0xE0..0xF0).contains(&d) {
                lsn += 1;
            }
        }
    }
    out
}

fn segment_name(lsn: u64) -> String {
    format!("{lsn:020}.seg")
}

fn check(root: &Path, segments: &[(u64, &[u8])]) {
    let wal_dir = root.join("wal");
    std::fs::create_dir_all(&wal_dir).unwrap();
    for (lsn, bytes) in segments {
        std::fs::write(wal_dir.join(segment_name(*lsn)), bytes).unwrap();
    }
    let _ = wal::tools::verify(root);
    let _ = wal::recover_dispatch(&wal_dir);
    if let Ok(mut reader) = WalReader::open(&wal_dir) {
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
    let opened = wal::open(&cfg);
    if let Ok((log, report)) = opened {
        drop(log);
        // `open` checks framing (length, CRC, kind, LSN continuity) and truncates a torn tail;
        // `verify` also decodes every payload. After a successful open: no torn tail is left,
        // the framing agrees, and a payload that does not decode makes the dispatch recovery
        // (the next start-up step) refuse too, never skip it silently.
        let v = wal::tools::verify(root).expect("verify after open");
        match &v.finding {
            None => assert_eq!(v.records, report.records, "{v}"),
            Some(Finding::TornTail { .. }) => panic!("torn tail left after open: {v}"),
            Some(Finding::Corrupt { .. }) => assert!(
                wal::recover_dispatch(&wal_dir).is_err(),
                "undecodable payload accepted by the dispatch recovery: {v}"
            ),
        }
    }
}

fuzz_target!(|data: &[u8]| {
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
    let base = std::env::var_os("SLUICE_FUZZ_TMP")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("sluice-fuzz-wal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    // ctl bit 1: split into two segments at a point chosen by the next bits.
    if ctl & 2 == 2 && bytes.len() > 1 {
        let split = (usize::from(ctl >> 2) * bytes.len() / 64).clamp(1, bytes.len() - 1);
        let second_lsn = 1 + u64::from(ctl >> 4);
        check(
            &root,
            &[(1, &bytes[..split]), (second_lsn, &bytes[split..])],
        );
    } else {
        check(&root, &[(1, &bytes)]);
    }
    let _ = std::fs::remove_dir_all(&root);
});
