//! Replication messages (`replication::message::decode`), as read back from JetStream by a
//! restore or the start-up catch-up: arbitrary bytes never panic; a message that decodes has a
//! valid CRC and its records' LSNs and payloads decode or are refused, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::replication::message::decode;
use sluice::wal::decode_payload;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = decode(data) {
        for f in &m.frames {
            for (_, records) in &f.parts {
                for r in records {
                    let _ = decode_payload(r.kind, r.payload);
                }
            }
            assert!(f.released.iter().all(|id| id.len() <= u16::MAX as usize));
        }
    }
});
