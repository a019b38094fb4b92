//! Scheduling policy of the core's helper threads.
//!
//! The commit helper (`wal::commit`) runs as `SCHED_BATCH`: the same fair share of the CPU as
//! any normal thread, but its wake-ups do not preempt the thread that is running. Its wake-ups
//! are the loop's hand-over of a batch and the disk's completion of a write; with the default
//! policy, on a core shared with its loop (one pinned CPU, or a busy machine), each preempted the
//! loop in the middle of its turn (measured under `wrk -c64`: benches/LOG.md, "Zeros ahead, the
//! loop parked on its commit"), although the loop waits (on io_uring) or parks on the helper
//! (on mio, `sync::handback`) a moment later. As `SCHED_BATCH` the helper runs when the loop
//! waits, or on another CPU.
//!
//! The operator readers (`sched::readers`) run at nice 19: 15/1024 of a core loop's weight when
//! both want the CPU.
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::io;

/// Puts the calling thread under `SCHED_BATCH` (static priority 0). Errors are returned, not
/// fatal: the thread then keeps the default policy.
pub fn set_current_batch() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `sched_setscheduler(0, …)` changes only the calling thread's policy and reads
    // `param`, a valid local, during the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets the calling thread's nice value to `nice` (Linux: `setpriority(PRIO_PROCESS, 0, …)`
/// applies to the calling thread only). Errors are returned, not fatal.
pub fn set_current_nice(nice: i32) -> io::Result<()> {
    // SAFETY: `setpriority` takes plain integers; it changes only the calling thread's nice
    // value.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The calling thread's nice value.
pub fn current_nice() -> io::Result<i32> {
    // SAFETY: `getpriority` takes plain integers. -1 is also a valid nice value, so errno tells
    // an error apart: cleared before, read after.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: as above.
    let n = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let err = io::Error::last_os_error();
    if n == -1 && err.raw_os_error() != Some(0) {
        Err(err)
    } else {
        Ok(n)
    }
}

/// The calling thread's scheduling policy (`libc::SCHED_*`).
pub fn current_policy() -> io::Result<i32> {
    // SAFETY: `sched_getscheduler(0)` reads the calling thread's policy; no memory is passed.
    let rc = unsafe { libc::sched_getscheduler(0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_can_switch_itself_to_batch() {
        std::thread::spawn(|| {
            assert_eq!(current_policy().unwrap(), libc::SCHED_OTHER);
            set_current_batch().unwrap();
            assert_eq!(current_policy().unwrap(), libc::SCHED_BATCH);
        })
        .join()
        .unwrap();
        // Only that thread changed.
        assert_eq!(current_policy().unwrap(), libc::SCHED_OTHER);
    }
}
