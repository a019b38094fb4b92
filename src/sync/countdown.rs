//! A one-time hand-over shared by every core: parties register before the threads start, each
//! finishes once, and a reader learns when all have — with everything each did before its
//! finish visible.
//!
//! Used for the start-up hand-over of recovered events (`dispatch::pump::shell` finishes when a core's
//! pump has handed every event recovered from its logs to the cores that gate them; the
//! flow gates hold their waiters until then, `dispatch::flow` "Restarts").
//!
//! Orderings: `finish` is a `Release` RMW, `done` an `Acquire` load; the RMWs of all finishers
//! form one release sequence, so a reader that sees 0 synchronizes with every finisher, and so
//! sees what each did before finishing (here: the jobs pushed into the cores' rings). `register`
//! is `Relaxed`: it runs before the threads that read or finish are spawned (the spawn
//! publishes it).
#![forbid(unsafe_code)]

use crate::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug, Default)]
pub struct Countdown {
    /// Parties registered and not finished.
    left: AtomicUsize,
}

impl Countdown {
    pub fn new() -> Countdown {
        Countdown::default()
    }

    /// One more party (before the threads start).
    pub fn register(&self) {
        self.left.fetch_add(1, Ordering::Relaxed);
    }

    /// A party is done (call once per `register`). True for the last one.
    pub fn finish(&self) -> bool {
        self.left.fetch_sub(1, Ordering::Release) == 1
    }

    /// Every registered party finished (none registered: true).
    pub fn done(&self) -> bool {
        self.left.load(Ordering::Acquire) == 0
    }
}

#[cfg(all(test, not(sluice_loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_last_finisher_is_told_and_done_follows() {
        let c = Countdown::new();
        assert!(c.done(), "nobody registered");
        c.register();
        c.register();
        assert!(!c.done());
        assert!(!c.finish());
        assert!(!c.done());
        assert!(c.finish(), "the last one");
        assert!(c.done());
    }
}
