//! Event keys: one `u64` that names an event across the logs of a run.
//!
//! An event is named by its log and its LSN in that log. Jobs and outcomes between cores carry
//! one key: the log's index (in the run's list of logs, `sched::logs::RunLogs::logs`) in the top
//! 16 bits and the LSN in the low 48 ([`event_key`], [`split_key`]). 2^48 records per log is
//! beyond any retention; 2^16 logs beyond any worker count.
#![forbid(unsafe_code)]

use super::Lsn;

/// Bits of an event key that hold the LSN.
pub const KEY_LSN_BITS: u32 = 48;
const LSN_MASK: u64 = (1 << KEY_LSN_BITS) - 1;

/// The key of the event at `lsn` in log `log`.
pub fn event_key(log: usize, lsn: Lsn) -> u64 {
    debug_assert!(lsn <= LSN_MASK && log < 1 << (64 - KEY_LSN_BITS));
    ((log as u64) << KEY_LSN_BITS) | (lsn & LSN_MASK)
}

/// `(log, lsn)` of an event key.
pub fn split_key(key: u64) -> (usize, Lsn) {
    ((key >> KEY_LSN_BITS) as usize, key & LSN_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        for (log, lsn) in [(0, 1), (3, 12345), (65535, LSN_MASK)] {
            assert_eq!(split_key(event_key(log, lsn)), (log, lsn));
        }
        assert_ne!(event_key(1, 5), event_key(0, 5));
    }
}
