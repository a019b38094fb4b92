//! How a log's failing commits and rolls are logged without flooding: [`FailureLog`], kept by
//! each log (`appender::Wal`), fed by the commit path (`writer`).
#![forbid(unsafe_code)]

/// How often a streak of failing commits of one log is logged again (with the count since).
pub(crate) const REPEAT_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// One log's failing commits and rolls, as log lines: the first failure of a streak at once,
/// then at most one line per [`REPEAT_LOG_EVERY`] carrying how many failed since the last line,
/// and one line when a commit succeeds again. Bound: one line per 10 s per log while failing
/// (`sluice_wal_healthy` and the `wal_unavailable` refusals count every failure).
#[derive(Debug, Default)]
pub(crate) struct FailureLog {
    /// Failures in the current streak, and those not yet reported in a line.
    streak: u64,
    unlogged: u64,
    logged_at_ns: u64,
}

impl FailureLog {
    /// A failure at `now_ns` (the log's clock): `Some((skipped, streak))` when a line is due —
    /// the failures since the last line and the streak so far, for [`failure_line`] — so a
    /// suppressed failure formats nothing.
    pub(crate) fn failed(&mut self, now_ns: u64) -> Option<(u64, u64)> {
        self.streak += 1;
        let due = self.streak == 1
            || now_ns.saturating_sub(self.logged_at_ns) >= REPEAT_LOG_EVERY.as_nanos() as u64;
        if !due {
            self.unlogged += 1;
            return None;
        }
        let skipped = std::mem::take(&mut self.unlogged);
        self.logged_at_ns = now_ns;
        Some((skipped, self.streak))
    }

    /// A commit succeeded: the length of the streak it ends (to be logged), if there was one.
    pub(crate) fn succeeded(&mut self) -> Option<u64> {
        let streak = std::mem::take(self).streak;
        (streak > 0).then_some(streak)
    }
}

/// The line for a due failure ([`FailureLog::failed`]).
pub(crate) fn failure_line(what: &str, skipped: u64, streak: u64) -> String {
    match skipped {
        0 => format!("sluice: wal: {what}"),
        n => format!(
            "sluice: wal: {what} ({n} more failures since the last line; {streak} in a row)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streak_of_failures_is_logged_once_per_interval_with_its_count() {
        let every = REPEAT_LOG_EVERY.as_nanos() as u64;
        let mut log = FailureLog::default();
        assert_eq!(log.succeeded(), None, "no streak, nothing to say");
        let line = |due: Option<(u64, u64)>, what| due.map(|(n, s)| failure_line(what, n, s));
        assert_eq!(
            line(log.failed(5), "x failed").as_deref(),
            Some("sluice: wal: x failed")
        );
        for t in 6..1006 {
            assert_eq!(log.failed(t), None, "within the interval");
        }
        let due = line(log.failed(5 + every), "y failed").unwrap();
        assert_eq!(
            due,
            "sluice: wal: y failed (1000 more failures since the last line; 1002 in a row)"
        );
        assert_eq!(log.failed(6 + every), None);
        assert_eq!(log.succeeded(), Some(1003));
        // A new streak starts over: its first failure is logged at once.
        assert!(log.failed(7 + every).is_some());
    }
}
