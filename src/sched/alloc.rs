//! The process allocator's handling of large buffers (glibc `malloc`).
//!
//! Request bodies are the large, short-lived buffers of this server: up to
//! `max_inflight_body_bytes` of them at once, each one allocation of its declared length
//! (`net::http::reader`). glibc serves an allocation of at least `M_MMAP_THRESHOLD` bytes with
//! its own `mmap` and gives it back to the kernel with `munmap` when it is freed. Left alone,
//! the threshold is dynamic: it starts at 128 KiB and, each time such a block is freed, rises
//! to that block's size (up to 32 MiB), after which bodies of that size come from the per-thread
//! arenas, where freed memory stays resident (an arena shrinks only from its top). Measured
//! here with 400 stalled 10 MiB uploads: 12–14 MiB of the bodies stayed resident after every
//! client had gone.
//!
//! [`tune`] fixes the threshold at [`MMAP_THRESHOLD`] (setting it turns the dynamic adjustment
//! off): every buffer of 1 MiB or more is its own mapping and is returned when freed; what
//! costs an `mmap` and a `munmap` per buffer is small next to receiving, copying and writing a
//! megabyte. Smaller buffers keep the arenas' reuse.
//!
//! Smaller buffers freed after a wave of connections (read buffers, heads, responses of a few
//! hundred connections) leave free chunks in the middle of the arenas, which stay resident:
//! measured, 11 MiB above idle 10 s after 400 connections had gone, with the threshold fixed.
//! [`Trimmer`] calls `malloc_trim(0)` (which also gives back free pages inside the arenas, not
//! only at their top) on a core's sweep once its open connections have fallen by
//! [`TRIM_CONNS`] or the in-flight body bytes by [`TRIM_BODY_BYTES`] since the last trim, at
//! most once per [`TRIM_EVERY`] per core.
//!
//! Other allocators (musl) have no such settings; there [`tune`] and the trim do nothing.

/// Allocations of at least this many bytes are mapped on their own and unmapped when freed.
pub const MMAP_THRESHOLD: usize = 1 << 20;

/// Sets the allocator up for large buffers (module docs). Call once at start-up, before the
/// worker threads exist. Returns false if the allocator refused the setting.
pub fn tune() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt(3) takes two integers and changes allocator parameters under the
        // allocator's own lock; no memory of ours is involved. The value fits in an `i32`.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as i32) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        true
    }
}

/// Connections a core must have lost since the last trim before it trims again.
pub const TRIM_CONNS: usize = 64;
/// In-flight body bytes the process must have lost since the last trim.
pub const TRIM_BODY_BYTES: u64 = 16 << 20;
/// The shortest time between two trims by one core.
pub const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// When a core gives the allocator's free memory back (module docs). The decision is
/// [`Trimmer::due`], a function of what the caller observed and the clock it passes.
#[derive(Debug, Default)]
pub struct Trimmer {
    conns_high: usize,
    body_high: u64,
    last: Option<u64>,
}

impl Trimmer {
    /// Records the core's open connections and the process's in-flight body bytes at `now`
    /// (clock nanos); true when a trim is due, and then the high-water marks start again from
    /// these values.
    pub fn due(&mut self, conns: usize, body: u64, now: u64) -> bool {
        self.conns_high = self.conns_high.max(conns);
        self.body_high = self.body_high.max(body);
        let fell =
            self.conns_high - conns >= TRIM_CONNS || self.body_high - body >= TRIM_BODY_BYTES;
        let rested = self.last.map_or(true, |t| {
            now.saturating_sub(t) >= TRIM_EVERY.as_nanos() as u64
        });
        if !(fell && rested) {
            return false;
        }
        (self.conns_high, self.body_high, self.last) = (conns, body, Some(now));
        true
    }

    /// [`due`](Self::due), and the trim when it is.
    pub fn sweep(&mut self, conns: usize, body: u64, now: u64) {
        if self.due(conns, body, now) {
            trim();
        }
    }
}

/// Gives the arenas' free memory back to the kernel.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim(3) takes an integer and works under the allocator's own locks; no
    // memory of ours is involved.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn a_trim_follows_a_fall_from_the_high_water_at_most_once_a_second() {
        let mut t = Trimmer::default();
        assert!(!t.due(400, 250 << 20, 0), "rising: nothing to give back");
        assert!(!t.due(400 - TRIM_CONNS + 1, 250 << 20, 1), "not far enough");
        assert!(t.due(400 - TRIM_CONNS, 250 << 20, 2), "64 connections gone");
        // The marks restart from there: another fall is needed, and a second's rest.
        assert!(!t.due(336, 250 << 20, 3));
        assert!(!t.due(336, 200 << 20, SEC));
        assert!(
            t.due(336, 200 << 20, SEC + 2),
            "50 MiB of bodies gone, a second later"
        );
        assert!(!t.due(0, 0, SEC + 3), "within the second after a trim");
        assert!(t.due(0, 0, 2 * SEC + 3));
    }

    #[test]
    fn the_threshold_is_accepted() {
        assert!(tune());
    }
}
