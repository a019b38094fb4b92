//! The ring's one file write ([`Uring::write_file`]): the core's own log written and
//! `fdatasync`ed on its ring with `wal.commit = "ring"` (`wal::commit`). At most one in flight
//! per ring; its buffer (one group commit) is owned by the ring (`Uring`'s `file_op`) until both
//! of its completions are back, so the kernel never reads freed memory.

use std::io;
use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types};

use super::{settled, user_data, Completion, FileDone, FileOp, Op, Uring};

impl Uring {
    /// Writes `buf` at `offset` of the regular file `fd` and, if `sync`, then `fdatasync`s it
    /// (linked: the sync starts only after the whole write, and is cancelled if the write fails
    /// or is short). Both are submitted with the turn's other operations; their end is one
    /// [`Op::File`] completion, then [`Uring::take_file_done`]. One file write at a time: if
    /// one is in flight, or the ring cannot take both entries, the buffer comes back with the
    /// error and nothing was submitted.
    ///
    /// `fd` must stay open until the write is done (the caller owns the file).
    pub fn write_file(
        &mut self,
        fd: RawFd,
        offset: u64,
        buf: Vec<u8>,
        sync: bool,
    ) -> Result<(), (io::Error, Vec<u8>)> {
        if self.file_op.is_some() || self.file_done.is_some() {
            return Err((io::Error::other("a file write is already in flight"), buf));
        }
        let Ok(len) = u32::try_from(buf.len()) else {
            return Err((io::Error::other("file write over 4 GiB"), buf));
        };
        // Both entries must go in one submission, or the link would end with the first.
        if self.room() < 2 {
            if let Err(e) = settled(self.ring.submit()) {
                return Err((e, buf));
            }
            self.drain_into_backlog();
            if self.room() < 2 {
                return Err((io::Error::other("io_uring submission queue full"), buf));
            }
        }
        let mut write = opcode::Write::new(types::Fd(fd), buf.as_ptr(), len)
            .offset(offset)
            .build()
            .user_data(user_data(Op::FileWrite, 0, 0));
        if sync {
            write = write.flags(squeue::Flags::IO_LINK);
        }
        let fsync = opcode::Fsync::new(types::Fd(fd))
            .flags(types::FsyncFlags::DATASYNC)
            .build()
            .user_data(user_data(Op::FileSync, 0, 0));
        // The buffer is owned by `file_op` before the kernel can see the entry.
        self.file_op = Some(FileOp {
            buf,
            written: None,
            synced: if sync { None } else { Some(0) },
        });
        // Room for both was checked above, so neither push submits on its own and neither
        // fails; if one still did, what was submitted is reported as usual.
        if let Err(e) = self.push(&write) {
            let op = self.file_op.take().expect("set above");
            return Err((e, op.buf));
        }
        if sync {
            if let Err(e) = self.push(&fsync) {
                // The write is in flight: its completion ends the operation, as a failed sync.
                eprintln!("sluice: io_uring: submitting a file sync: {e}");
                if let Some(op) = self.file_op.as_mut() {
                    op.synced = Some(-libc::EIO);
                }
            }
        }
        Ok(())
    }

    /// Free entries in the submission queue.
    fn room(&mut self) -> usize {
        let sq = self.ring.submission();
        sq.capacity() - sq.len()
    }

    /// One of the file write's completions; true when that ends it.
    pub(super) fn on_file_completion(&mut self, c: &Completion) -> bool {
        let Some(op) = self.file_op.as_mut() else {
            return false;
        };
        match c.op {
            Op::FileWrite => op.written = Some(c.res),
            _ => op.synced = Some(c.res),
        }
        let (Some(written), Some(synced)) = (op.written, op.synced) else {
            return false;
        };
        let op = self.file_op.take().expect("checked above");
        self.file_done = Some(FileDone {
            buf: op.buf,
            written,
            synced,
        });
        true
    }

    /// The file write that finished ([`Op::File`]), if any.
    pub fn take_file_done(&mut self) -> Option<FileDone> {
        self.file_done.take()
    }

    /// A file write is in flight or its result not yet taken.
    pub fn file_busy(&self) -> bool {
        self.file_op.is_some() || self.file_done.is_some()
    }
}
