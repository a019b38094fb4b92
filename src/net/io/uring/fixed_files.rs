//! A core's registered files on its ring: sockets that stay open get a slot in the ring's file
//! table, and their sends and receives name the slot (`IOSQE_FIXED_FILE`) instead of the
//! descriptor, so the kernel does not look the file up (`fget`/`fput`, an atomic pair on a
//! multi-threaded process) for every operation.
//!
//! - A slot is taken when a stream arms its second receive ([`REGISTER_AFTER`]): a connection
//!   that carries one exchange and closes never pays for the table. The table is filled by an
//!   `IORING_OP_FILES_UPDATE` entry submitted with the turn's other operations (no system
//!   call of its own); until its completion says it worked, the stream's operations keep using
//!   the descriptor.
//! - The table holds a reference to the socket, so closing the descriptor does not close the
//!   socket: when the ring is done with a stream its slot is cleared the same way (an update to
//!   `-1`), and the slot is free again only once that completion is back, so a later stream
//!   never shares a slot with one whose clearing has not run. Operations still in flight on the
//!   old slot keep their own reference (the kernel's).
//! - Where the kernel has no sparse file table (before 5.19) or the process's descriptor limit
//!   is low, the table is smaller or absent and streams past it use their descriptors.
//!
//! Bounds: [`MAX_FIXED_FILES`] slots per core (at most the process's `RLIMIT_NOFILE`), a
//! descriptor and a state byte each here, and the kernel's table of the same size.

use std::os::fd::RawFd;

use io_uring::{opcode, squeue, Submitter};

/// Slots in a core's file table (fewer when `RLIMIT_NOFILE` is lower).
pub const MAX_FIXED_FILES: u32 = 4096;
/// A stream takes a slot when it arms this many receives (its second exchange, or the first
/// response of an outbound stream after its connect).
pub const REGISTER_AFTER: u8 = 2;

/// What the updates read for a slot being cleared.
static CLEARED: [RawFd; 1] = [-1];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Free,
    /// Its update is submitted; the stream uses its descriptor until the completion.
    Registering,
    /// The table holds the socket: operations name the slot.
    Live,
    /// The update failed: the stream keeps its descriptor; the slot is cleared with it.
    Failed,
    /// The clearing update is submitted; free once it completes.
    Clearing,
}

/// The ring's file table and which slots are in use (module docs).
#[derive(Debug)]
pub(in crate::net::io) struct FixedFiles {
    /// Per slot, the descriptor its registering update reads (a boxed slice: the kernel reads
    /// it when the update runs, so it never moves).
    fds: Box<[RawFd]>,
    slots: Box<[Slot]>,
    free: Vec<u32>,
}

impl FixedFiles {
    /// Registers a sparse table on the ring `submitter` belongs to: [`MAX_FIXED_FILES`]
    /// slots, or as many as `RLIMIT_NOFILE` allows, or none if the kernel refuses.
    pub(in crate::net::io) fn new(submitter: &Submitter<'_>) -> FixedFiles {
        let want = MAX_FIXED_FILES.min(nofile_limit());
        let n = match submitter.register_files_sparse(want) {
            Ok(()) => want,
            Err(_) => 0,
        };
        FixedFiles {
            fds: vec![-1; n as usize].into_boxed_slice(),
            slots: vec![Slot::Free; n as usize].into_boxed_slice(),
            free: (0..n).rev().collect(),
        }
    }

    /// Slots in the table.
    pub(in crate::net::io) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Slots taken (registering, live, or being cleared).
    pub(in crate::net::io) fn in_use(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Takes a free slot for `fd`: the slot, and the update to submit (its `user_data` is the
    /// caller's). `None` when the table is full.
    pub(in crate::net::io) fn register(&mut self, fd: RawFd) -> Option<(u32, squeue::Entry)> {
        let slot = self.free.pop()?;
        self.fds[slot as usize] = fd;
        self.slots[slot as usize] = Slot::Registering;
        let e = opcode::FilesUpdate::new(&self.fds[slot as usize], 1)
            .offset(slot as i32)
            .build();
        Some((slot, e))
    }

    /// The registering update for `slot` could not be submitted: the slot is free again.
    pub(in crate::net::io) fn unsubmitted(&mut self, slot: u32) {
        self.slots[slot as usize] = Slot::Free;
        self.free.push(slot);
    }

    /// True when operations may name `slot`.
    pub(in crate::net::io) fn live(&self, slot: u32) -> bool {
        self.slots.get(slot as usize) == Some(&Slot::Live)
    }

    /// The registering update of `slot` completed with `res` (`1`: one slot updated).
    pub(in crate::net::io) fn on_registered(&mut self, slot: u32, res: i32) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            if *s == Slot::Registering {
                *s = if res == 1 { Slot::Live } else { Slot::Failed };
            }
        }
    }

    /// The stream on `slot` is done with: the update that clears it, to submit.
    pub(in crate::net::io) fn release(&mut self, slot: u32) -> squeue::Entry {
        self.slots[slot as usize] = Slot::Clearing;
        opcode::FilesUpdate::new(CLEARED.as_ptr(), 1)
            .offset(slot as i32)
            .build()
    }

    /// The clearing update of `slot` could not be submitted either: cleared with a system call
    /// instead (the slot holds the socket open until it is), and free.
    pub(in crate::net::io) fn clear_now(&mut self, submitter: &Submitter<'_>, slot: u32) {
        if let Err(e) = submitter.register_files_update(slot, &CLEARED) {
            // The slot keeps its socket until the ring closes; it is not handed out again.
            eprintln!("sluice: io_uring: clearing a registered file: {e}");
            return;
        }
        self.on_cleared(slot);
    }

    /// The clearing update of `slot` completed: the slot is free.
    pub(in crate::net::io) fn on_cleared(&mut self, slot: u32) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            if *s == Slot::Clearing {
                *s = Slot::Free;
                self.free.push(slot);
            }
        }
    }
}

/// The soft `RLIMIT_NOFILE` (the kernel refuses a larger table), as a slot count.
fn nofile_limit() -> u32 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` into the valid struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 0;
    }
    u32::try_from(lim.rlim_cur).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(n: u32) -> FixedFiles {
        FixedFiles {
            fds: vec![-1; n as usize].into_boxed_slice(),
            slots: vec![Slot::Free; n as usize].into_boxed_slice(),
            free: (0..n).rev().collect(),
        }
    }

    #[test]
    fn a_slot_is_live_only_after_its_update_worked_and_free_only_after_its_clearing() {
        let mut t = table(2);
        let (a, _) = t.register(10).unwrap();
        assert!(!t.live(a), "not before the update's completion");
        t.on_registered(a, 1);
        assert!(t.live(a));
        let (b, _) = t.register(11).unwrap();
        t.on_registered(b, -libc::EBADF);
        assert!(
            !t.live(b),
            "a failed update leaves the stream on its descriptor"
        );
        assert!(t.register(12).is_none(), "full");
        let _ = t.release(a);
        assert!(!t.live(a));
        assert!(
            t.register(12).is_none(),
            "a slot being cleared is not handed out"
        );
        t.on_cleared(a);
        assert_eq!(t.in_use(), 1);
        let (c, _) = t.register(12).unwrap();
        assert_eq!(c, a, "reused once cleared");
    }

    #[test]
    fn a_stream_released_while_registering_stays_cleared_when_the_update_completes() {
        let mut t = table(1);
        let (a, _) = t.register(10).unwrap();
        let _ = t.release(a);
        // The registering update's completion comes back first (submitted first).
        t.on_registered(a, 1);
        assert!(!t.live(a), "a released slot is not named again");
        t.on_cleared(a);
        assert_eq!(t.in_use(), 0);
    }

    #[test]
    fn an_unsubmitted_update_frees_its_slot() {
        let mut t = table(1);
        let (a, _) = t.register(10).unwrap();
        t.unsubmitted(a);
        assert_eq!(t.in_use(), 0);
        assert_eq!(t.capacity(), 1);
    }
}
