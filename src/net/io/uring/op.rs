//! What each of the ring's operations is for: the [`Op`] and the stream it belongs to, packed
//! into an entry's `user_data` and read back from its completion ([`Completion`]).

/// What a completion is for (top byte of its `user_data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Recv,
    Send,
    /// The core's epoll fd became readable.
    Poll,
    Provide,
    Cancel,
    /// The one file write (and its linked `fdatasync`) finished: [`Uring::take_file_done`](crate::net::io::uring::Uring::take_file_done).
    File,
    /// A file write's or sync's own completion (internal; reported as [`Op::File`]).
    FileWrite,
    FileSync,
    /// An outbound stream's receive, send, and the watch on its non-blocking connect
    /// ([`UringStream::connecting`](crate::net::io::uring::UringStream::connecting)): the owner of outbound streams settles them
    /// (`Reactor::settle_out`), not the connection table.
    OutRecv,
    OutSend,
    OutConnect,
    /// A registered-file slot's filling or clearing finished (`fixed_files.rs`; internal).
    FileReg,
    FileClear,
}

impl Op {
    fn code(self) -> u64 {
        match self {
            Op::Recv => 1,
            Op::Send => 2,
            Op::Poll => 3,
            Op::Provide => 4,
            Op::Cancel => 5,
            Op::File => 6,
            Op::FileWrite => 7,
            Op::FileSync => 8,
            Op::OutRecv => 9,
            Op::OutSend => 10,
            Op::OutConnect => 11,
            Op::FileReg => 12,
            Op::FileClear => 13,
        }
    }

    pub(in crate::net::io) fn from_code(code: u64) -> Option<Op> {
        Some(match code {
            1 => Op::Recv,
            2 => Op::Send,
            3 => Op::Poll,
            4 => Op::Provide,
            5 => Op::Cancel,
            6 => Op::File,
            7 => Op::FileWrite,
            8 => Op::FileSync,
            9 => Op::OutRecv,
            10 => Op::OutSend,
            11 => Op::OutConnect,
            12 => Op::FileReg,
            13 => Op::FileClear,
            _ => return None,
        })
    }
}

impl Op {
    /// A stream's receive or send, on its side (inbound connection or outbound stream).
    pub(in crate::net::io) fn on_side(self, out: bool) -> Op {
        match (self, out) {
            (Op::Recv, true) => Op::OutRecv,
            (Op::Send, true) => Op::OutSend,
            (op, _) => op,
        }
    }

    /// An outbound stream's operation.
    pub fn is_out(self) -> bool {
        matches!(self, Op::OutRecv | Op::OutSend | Op::OutConnect)
    }
}

/// `user_data`: operation (8 bits) | connection slot (24 bits) | connection generation (32).
pub(in crate::net::io) fn user_data(op: Op, idx: usize, gen: u32) -> u64 {
    (op.code() << 56) | (((idx as u64) & 0xFF_FFFF) << 32) | u64::from(gen)
}

/// One completion, decoded.
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    pub op: Op,
    pub idx: usize,
    pub gen: u32,
    pub res: i32,
    pub flags: u32,
}
