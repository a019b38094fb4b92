//! Where a log's events not yet admitted come from ([`Source`]), and the read-back that cannot
//! be opened: the pump never drops an event because a file could not be opened.
//!
//! When a core's in-memory window overflows, the pump switches to reading its log back from the
//! first event it has not admitted ([`Source::read_back`]). Opening the log can fail (at the
//! descriptor limit, `EMFILE`); then the source becomes [`Source::Reopen`]: the events stay
//! where they are — durable in the log, below the done cursor's reach (the cursor stays at the
//! first unadmitted LSN, so retention keeps their segments) — and the open is retried with
//! exponential backoff from [`REOPEN_FIRST_DELAY`] to [`REOPEN_MAX_DELAY`]. Each failure is
//! counted (`sluice_pump_readback_open_failures_total`); the first of a run is logged, and the
//! success that ends it.
#![forbid(unsafe_code)]

use std::collections::VecDeque;

use crate::wal::{EventRecord, Lsn, Record, WalError, WalTail};

/// Most durable events of a core's own log kept in memory for dispatch.
pub const WINDOW_EVENTS: usize = 4096;
/// Most bytes (record cost) of the events in the window.
pub const WINDOW_BYTES: u64 = 64 << 20;

/// A log read back from an LSN, in LSN order, up to a durable LSN the caller supplies
/// ([`WalTail`] in the server; an in-memory log in tests).
pub trait LogTail {
    /// The next record at or below `durable`, if any.
    fn next(&mut self, durable: Lsn) -> Result<Option<(Lsn, Record)>, WalError>;
    /// The LSN the next call reads.
    fn next_lsn(&self) -> Lsn;
    /// Passes over the records below `lsn` without decoding them, where the tail can (never
    /// backwards; the default decodes them, and the caller skips them).
    fn skip_to(&mut self, _lsn: Lsn) {}
}

impl LogTail for WalTail {
    fn next(&mut self, durable: Lsn) -> Result<Option<(Lsn, Record)>, WalError> {
        WalTail::next(self, durable)
    }
    fn next_lsn(&self) -> Lsn {
        WalTail::next_lsn(self)
    }
    fn skip_to(&mut self, lsn: Lsn) {
        WalTail::skip_to(self, lsn)
    }
}

/// First wait before a failed read-back open is retried (clock nanos): 10 ms.
pub const REOPEN_FIRST_DELAY: u64 = 10_000_000;
/// Longest wait between two retries (clock nanos): 1 s.
pub const REOPEN_MAX_DELAY: u64 = 1_000_000_000;

/// Where a log's events not yet admitted are.
#[derive(Debug)]
pub(crate) enum Source<T> {
    /// Read back from the log from the tail's position (after a restart, an overflow, and for
    /// adopted logs).
    Log(T),
    /// Every durable event not yet admitted is here, in LSN order.
    Memory {
        /// Each with its trigger's row (`pump_triggers`).
        events: VecDeque<(Lsn, EventRecord, usize)>,
        bytes: u64,
    },
    /// The log must be read back from `from`, but it could not be opened: retried at
    /// `retry_at` (clock nanos). Nothing is admitted from this log meanwhile.
    Reopen(Reopen),
}

/// A read-back waiting for its retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reopen {
    /// The first event not yet admitted.
    pub(crate) from: Lsn,
    pub(crate) retry_at: u64,
    /// The wait after the next failure ([`next_delay`]).
    pub(crate) delay: u64,
    /// Failed opens in this run.
    pub(crate) failures: u64,
}

/// The wait after a failure that followed a wait of `delay`: doubled, within the bounds.
pub(crate) fn next_delay(delay: u64) -> u64 {
    delay
        .saturating_mul(2)
        .clamp(REOPEN_FIRST_DELAY, REOPEN_MAX_DELAY)
}

/// What a read-back attempt did, for the caller to count and log.
#[derive(Debug)]
pub(crate) enum Opened {
    /// Opened (after `failures` failed attempts of this run).
    Yes { failures: u64 },
    /// Failed again; retried at the source's `retry_at`. `first` for a run's first failure.
    No { error: WalError, first: bool },
}

impl<T: LogTail> Source<T> {
    /// The first LSN not yet admitted (`durable + 1` when memory holds none).
    pub(crate) fn unadmitted(&self, durable: Lsn) -> Lsn {
        match self {
            Source::Log(tail) => tail.next_lsn(),
            Source::Memory { events, .. } => events.front().map_or(durable + 1, |e| e.0),
            Source::Reopen(r) => r.from,
        }
    }

    /// Switches to reading the log back from `from` (the window overflowed), opened by `open`.
    /// The events in memory leave it: all are durable in the log at `from` or after. If the
    /// log cannot be opened they stay pending there, as [`Source::Reopen`].
    pub(crate) fn read_back(
        &mut self,
        open: impl FnOnce(Lsn) -> Result<T, WalError>,
        from: Lsn,
        now: u64,
    ) -> Opened {
        let r = Reopen {
            from,
            retry_at: now,
            delay: 0,
            failures: 0,
        };
        let (source, opened) = attempt(open, r, now);
        *self = source;
        opened
    }

    /// Retries a [`Source::Reopen`] whose time has come; `None` otherwise.
    pub(crate) fn retry_open(
        &mut self,
        open: impl FnOnce(Lsn) -> Result<T, WalError>,
        now: u64,
    ) -> Option<Opened> {
        let Source::Reopen(r) = self else { return None };
        if now < r.retry_at {
            return None;
        }
        let (source, opened) = attempt(open, *r, now);
        *self = source;
        Some(opened)
    }
}

/// One open of the read-back `r` at `now`: the new source and what happened.
fn attempt<T>(
    open: impl FnOnce(Lsn) -> Result<T, WalError>,
    mut r: Reopen,
    now: u64,
) -> (Source<T>, Opened) {
    match open(r.from) {
        Ok(tail) => (
            Source::Log(tail),
            Opened::Yes {
                failures: r.failures,
            },
        ),
        Err(error) => {
            let first = r.failures == 0;
            r.failures += 1;
            r.delay = next_delay(r.delay);
            r.retry_at = now.saturating_add(r.delay);
            (Source::Reopen(r), Opened::No { error, first })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::format::tests::sample_event;
    use crate::wal::{open, WalConfig, WalTail};
    use std::path::Path;

    fn at(dir: &Path) -> impl FnOnce(Lsn) -> Result<WalTail, WalError> + '_ {
        move |from| WalTail::open(dir, from)
    }

    #[test]
    fn the_backoff_doubles_from_the_first_delay_to_the_cap() {
        let mut d = 0;
        let mut seen = Vec::new();
        for _ in 0..10 {
            d = next_delay(d);
            seen.push(d / 1_000_000);
        }
        assert_eq!(seen, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
    }

    /// An open that fails keeps the events pending from the same LSN and retries on time; once
    /// the log can be opened, reading resumes at that LSN.
    #[test]
    fn a_failed_read_back_stays_pending_and_is_retried_with_backoff() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let cfg = WalConfig {
            segment_bytes: 1 << 20,
            max_body_bytes: 4096,
            ..WalConfig::new(&dir)
        };
        let (mut wal, _) = open(&cfg).unwrap();
        wal.append_events(&(1..=5).map(|i| sample_event(i, 10)).collect::<Vec<_>>())
            .unwrap();
        wal.sync().unwrap();
        let mut events = VecDeque::new();
        events.push_back((3, sample_event(3, 10), 0));
        let mut src: Source<WalTail> = Source::Memory { events, bytes: 1 };
        // The directory cannot be opened (it is not there): pending from LSN 3.
        let missing = tmp.path().join("gone");
        let got = src.read_back(at(&missing), 3, 100);
        assert!(matches!(got, Opened::No { first: true, .. }), "{got:?}");
        assert_eq!(
            src.unadmitted(9),
            3,
            "the cursor stays at the first unadmitted event"
        );
        let Source::Reopen(r) = &src else { panic!() };
        assert_eq!((r.retry_at, r.failures), (100 + REOPEN_FIRST_DELAY, 1));
        assert!(
            src.retry_open(at(&missing), 100 + REOPEN_FIRST_DELAY - 1)
                .is_none(),
            "too soon"
        );
        let got = src.retry_open(at(&missing), 100 + REOPEN_FIRST_DELAY);
        assert!(
            matches!(got, Some(Opened::No { first: false, .. })),
            "{got:?}"
        );
        let Source::Reopen(r) = &src else { panic!() };
        assert_eq!(r.delay, 2 * REOPEN_FIRST_DELAY);
        // The log opens: reading resumes at LSN 3, nothing skipped.
        let got = src.retry_open(at(&dir), u64::MAX);
        assert!(matches!(got, Some(Opened::Yes { failures: 2 })), "{got:?}");
        let Source::Log(mut tail) = src else { panic!() };
        let (lsn, _) = tail.next(5).unwrap().unwrap();
        assert_eq!(lsn, 3);
    }
}
