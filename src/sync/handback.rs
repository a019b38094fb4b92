//! Which way a helper thread wakes its core's loop when it hands a batch back: the loop's event
//! poll (a `mio::Waker`, an `eventfd` write) or the loop's parker (a futex).
//!
//! A core's loop waits on its event poll (epoll or io_uring): connections, accepts, other cores.
//! But while a group commit is with the commit helper (`wal::commit`) and requests wait for its
//! 202s, the next thing the loop can usefully do is take the batch back: requests arriving
//! meanwhile can only join the *next* batch, which cannot be handed over before this one
//! returns. Woken by each of them it would switch in and out several times per commit (measured
//! under `wrk -c64`: benches/LOG.md, "Figures that left DESIGN.md and the module docs"). So
//! then it parks on the helper instead, for a bounded time (`wal::commit::COMMIT_WAIT`), and
//! reads the network when the batch is back: one switch per commit.
//!
//! The protocol (a store-buffering pair, hence `SeqCst` on both sides):
//! - loop: [`Handback::begin_wait`], then look for the batch; park only if it is not there;
//!   after the park, [`Handback::end_wait`], then look again before waiting on the poll;
//! - helper: publish the batch, then [`Handback::loop_parked`]: `true` means unpark the loop,
//!   `false` wake its poll.
//!
//! Either the loop sees the batch in one of its two looks, or the helper sees which of the two
//! waits it must end: a hand-back is never left for a sleeping loop to miss (loom model
//! `handback_*` in `loom-tests/tests/durable.rs`). A stale unpark only makes a later park return
//! early, which the loop treats as "look again".

use super::atomic::{fence, AtomicBool, Ordering};

/// The loop's announcement that it waits on its parker rather than its poll.
#[derive(Debug, Default)]
pub struct Handback {
    parked: AtomicBool,
}

impl Handback {
    pub fn new() -> Handback {
        Handback::default()
    }

    /// Loop: about to park. Look for the batch *after* this.
    pub fn begin_wait(&self) {
        self.parked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Loop: back from the park. Look for the batch again *after* this, before waiting on the
    /// poll (a helper that saw the park may have unparked instead of waking the poll).
    pub fn end_wait(&self) {
        self.parked.store(false, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Helper, after publishing the batch: whether the loop is (or is about to be) parked —
    /// unpark it — rather than in its poll — wake that.
    pub fn loop_parked(&self) -> bool {
        fence(Ordering::SeqCst);
        self.parked.load(Ordering::SeqCst)
    }
}
