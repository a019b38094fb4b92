//! A core's receive buffers on its ring: [`BUFFERS`] × [`BUF_SIZE`] bytes the kernel picks from
//! for each receive (`IOSQE_BUFFER_SELECT`), given back as soon as their bytes are copied out.
//!
//! How a buffer goes back to the kernel:
//! - **buffer ring** (`IORING_REGISTER_PBUF_RING`, Linux 5.19+): a page-aligned array of
//!   [`BUFFERS`] entries shared with the kernel. Giving a buffer back is two stores into that
//!   memory (the entry at the tail, then the tail with `Release` ordering): no submission, no
//!   completion, no system call;
//! - **provided buffers** (`IORING_OP_PROVIDE_BUFFERS`), where the kernel cannot register a
//!   buffer ring: each give-back is one submission entry and one completion.
//!
//! The ring has exactly as many entries as there are buffers, and a buffer is either the
//! kernel's (in the ring) or out with one completion until [`RecvBufs::give_back`], so the tail
//! never overtakes the kernel's head by more than the ring's size.
//!
//! Bounds: [`BUFFERS`] × [`BUF_SIZE`] (4 MiB) plus one page of ring entries per core, allocated
//! once and resident from the start.

use std::alloc::{self, Layout};
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::{opcode, squeue, types::BufRingEntry, Submitter};

/// Size of one provided receive buffer.
pub const BUF_SIZE: usize = 32 * 1024;
/// Provided receive buffers per core (a power of two: the buffer ring's size).
pub const BUFFERS: u16 = 128;
/// Provided-buffer group id.
pub(in crate::net::io) const BGID: u16 = 1;

/// The core's receive buffers and how they go back to the kernel (module docs).
pub(in crate::net::io) struct RecvBufs {
    /// [`BUFFERS`] × [`BUF_SIZE`]; the kernel writes into it, so it never moves or shrinks
    /// while the ring lives (the owner keeps it until the ring's operations finished).
    pool: Box<[u8]>,
    /// The registered buffer ring, or `None`: buffers go back as `PROVIDE_BUFFERS` entries.
    ring: Option<BufRing>,
}

/// The entries of a registered buffer ring, and the tail this side has published.
struct BufRing {
    entries: NonNull<BufRingEntry>,
    layout: Layout,
    tail: u16,
}

impl RecvBufs {
    /// The pool, filled (not left as untouched zero pages: the kernel touches every buffer
    /// under load and the pages stay, so they are resident from the start), and registered as
    /// a buffer ring with the ring `submitter` belongs to if the kernel can. Returns the pool
    /// and, when it could not register one, the entry that provides every buffer (to submit).
    pub(in crate::net::io) fn new(submitter: &Submitter<'_>) -> (RecvBufs, Option<squeue::Entry>) {
        let mut bufs = RecvBufs {
            pool: vec![0x5a_u8; BUFFERS as usize * BUF_SIZE].into_boxed_slice(),
            ring: None,
        };
        match BufRing::register(submitter) {
            Ok(ring) => {
                bufs.ring = Some(ring);
                for bid in 0..BUFFERS {
                    bufs.give_back(bid);
                }
                (bufs, None)
            }
            Err(_) => {
                let all = opcode::ProvideBuffers::new(
                    bufs.pool.as_mut_ptr(),
                    BUF_SIZE as i32,
                    BUFFERS,
                    BGID,
                    0,
                )
                .build();
                (bufs, Some(all))
            }
        }
    }

    /// True when buffers go back through a registered buffer ring.
    pub(in crate::net::io) fn is_ring(&self) -> bool {
        self.ring.is_some()
    }

    /// The bytes `[start, start + len)` of the pool (a completion's buffer).
    pub(in crate::net::io) fn bytes(&self, range: std::ops::Range<usize>) -> &[u8] {
        &self.pool[range]
    }

    /// Gives buffer `bid` back to the kernel: published in the buffer ring (returns `None`),
    /// or as the `PROVIDE_BUFFERS` entry to submit.
    pub(in crate::net::io) fn give_back(&mut self, bid: u16) -> Option<squeue::Entry> {
        let start = usize::from(bid) * BUF_SIZE;
        let addr = self.pool[start..].as_mut_ptr();
        match self.ring.as_mut() {
            Some(ring) => {
                ring.push(addr as u64, bid);
                None
            }
            None => Some(opcode::ProvideBuffers::new(addr, BUF_SIZE as i32, 1, BGID, bid).build()),
        }
    }

    /// Leaks the pool and the ring's entries (the kernel may still use them: the owner could
    /// not wait for the ring's operations to finish).
    pub(in crate::net::io) fn leak(&mut self) {
        std::mem::forget(std::mem::take(&mut self.pool));
        if let Some(ring) = self.ring.take() {
            std::mem::forget(ring);
        }
    }
}

// SAFETY: `entries` is memory this struct owns alone (the kernel reads it; no other Rust
// value points at it), so moving the owner to another thread moves nothing shared.
unsafe impl Send for BufRing {}

impl BufRing {
    /// Allocates the entries (one page, zeroed, page-aligned as the kernel requires) and
    /// registers them as buffer group [`BGID`].
    fn register(submitter: &Submitter<'_>) -> io::Result<BufRing> {
        let size = usize::from(BUFFERS) * std::mem::size_of::<BufRingEntry>();
        let layout = Layout::from_size_align(size.max(4096), 4096)
            .map_err(|e| io::Error::other(e.to_string()))?;
        // SAFETY: the layout's size is non-zero (at least a page).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let entries = NonNull::new(raw.cast::<BufRingEntry>())
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        let ring = BufRing {
            entries,
            layout,
            tail: 0,
        };
        // SAFETY: the entries are `BUFFERS` valid, page-aligned `io_uring_buf`s that live until
        // `ring` is dropped, which the owner does only after the io_uring is gone (`Uring`'s
        // fields drop the ring first) or never (`RecvBufs::leak`).
        unsafe {
            submitter.register_buf_ring_with_flags(
                ring.entries.as_ptr() as u64,
                BUFFERS,
                BGID,
                0,
            )?;
        }
        Ok(ring)
    }

    /// Publishes buffer `bid` at `addr` at the tail.
    fn push(&mut self, addr: u64, bid: u16) {
        let idx = usize::from(self.tail & (BUFFERS - 1));
        // SAFETY: `idx` < `BUFFERS`, the number of entries allocated; the kernel reads only
        // entries before the published tail, and this one is past it until the store below.
        let entry = unsafe { &mut *self.entries.as_ptr().add(idx) };
        entry.set_addr(addr);
        entry.set_len(BUF_SIZE as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail is the `resv` field of the first entry, a naturally aligned `u16`
        // in memory this struct owns; the kernel reads it, this thread alone writes it.
        let tail = unsafe { &*BufRingEntry::tail(self.entries.as_ptr()).cast::<AtomicU16>() };
        // Release: the entry's fields are visible to the kernel before the tail that covers it.
        tail.store(self.tail, Ordering::Release);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `register` with this layout; the kernel no longer reads it (the
        // io_uring it was registered with is gone, `RecvBufs`'s owner drops it first).
        unsafe { alloc::dealloc(self.entries.as_ptr().cast(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use io_uring::IoUring;

    #[test]
    fn the_buffer_ring_starts_with_every_buffer_published() {
        let Ok(ring) = IoUring::new(8) else {
            eprintln!("io_uring unavailable here; buffer ring test not run");
            return;
        };
        let (bufs, provide) = RecvBufs::new(&ring.submitter());
        if !bufs.is_ring() {
            eprintln!("no buffer ring on this kernel; the provided-buffers path is used");
            assert!(provide.is_some());
            return;
        }
        assert!(provide.is_none());
        let r = bufs.ring.as_ref().unwrap();
        assert_eq!(r.tail, BUFFERS);
        // The entries name each buffer's address and id.
        for bid in 0..BUFFERS {
            // SAFETY: bid < BUFFERS entries.
            let e = unsafe { &*r.entries.as_ptr().add(usize::from(bid)) };
            assert_eq!(e.bid(), bid);
            assert_eq!(e.len() as usize, BUF_SIZE);
            assert_eq!(
                e.addr(),
                bufs.pool.as_ptr() as u64 + u64::from(bid) * BUF_SIZE as u64
            );
        }
        // The ring goes first, as in `Uring`.
        drop(ring);
        drop(bufs);
    }
}
