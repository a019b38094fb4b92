//! The io_uring backend: a core's client sockets driven by completions on the core's own ring.
//!
//! The connection layer and the worker are written against readiness (`read` until
//! `WouldBlock`, `write` until `WouldBlock`). [`UringStream`] gives them exactly that over
//! completions, so the HTTP codec and every bound of `net::conn` stay the same on both backends:
//! - **receive**: one `IORING_OP_RECV` at a time per connection, armed only when the connection
//!   asked for more input (its inbox is empty and the worker read it dry), into a buffer the
//!   kernel picks from the core's receive buffers (`bufs.rs`: a registered buffer
//!   ring, so giving one back is a store, not a submission). The completion's bytes are copied
//!   to the connection's inbox and the buffer is given back at once, so a connection holds at
//!   most one receive ([`BUF_SIZE`]) that the worker has not read: a connection the worker stops reading
//!   (pipeline depth, body budget) stops receiving, and TCP backpressure reaches its client as
//!   with mio. The owner takes the inbox's bytes with `read` (a copy) or lends them in place
//!   ([`UringStream::read_with`]: the outbound pool parses responses there);
//! - **send**: `write` copies into the connection's outbox (at most [`OUT_CAP`] bytes, then
//!   `WouldBlock`), or [`UringStream::hand_over`] makes a whole buffer of at most [`OUT_CAP`]
//!   the outbox when the outbox is empty, without a copy (the outbound pool's requests; the
//!   outbox's empty buffer goes back to the caller); at the end of the loop turn the outbox
//!   becomes one `IORING_OP_SEND`. One send is in flight per connection; its completion is the
//!   "writable" edge;
//! - **registered files**: a stream that arms its second receive takes a slot in the ring's
//!   file table (`fixed_files.rs`), and its sends and receives name the slot, so the kernel
//!   does not look the socket up for each; its close clears the slot;
//! - **wait**: one `io_uring_enter` per turn submits the turn's operations and waits (with the
//!   loop's timeout) for completions. The ring is `SINGLE_ISSUER | DEFER_TASKRUN`: the kernel
//!   runs completions' task work only inside that enter (with `GETEVENTS`), so nothing wakes
//!   the loop while it sleeps elsewhere (a blocking file write). The core's mio poll
//!   (accepts, wakers from the commit helper and the other cores) is watched by a multishot
//!   `IORING_OP_POLL_ADD` on its epoll fd, so nothing waits in two places;
//! - **outbound streams** (`net::io::client`: the dispatcher's connections) are the same
//!   streams with their own operation codes: a non-blocking `connect(2)` watched by a one-shot
//!   `POLL_ADD(POLLOUT)` ([`UringStream::connecting`], [`Uring::on_connect`]), then receives
//!   (one armed at all times, re-armed when the owner reads the stream dry) and sends as above.
//!
//! Bounds, per core: the receive buffers are [`BUFFERS`] × [`BUF_SIZE`] (4 MiB, resident from
//! the start); the file table [`MAX_FIXED_FILES`] slots; per
//! connection, the inbox holds at most one receive (and keeps 4 KiB of capacity while idle) and the outbox plus the send in flight at
//! most 2 × [`OUT_CAP`]. A closed connection whose accepted bytes are not yet sent is kept (its
//! socket and buffers only) until the send completes, at most [`RETIRE_WAIT`], and at most
//! [`MAX_RETIRED`] of them at once (past that, a closing connection's unsent bytes are dropped,
//! as a `close` with a full socket buffer would).
//!
//! File writes ([`Uring::write_file`], the core's own log with `wal.commit = "ring"`): at most
//! one in flight per ring, its buffer one group commit (≤ `wal::MAX_BATCH_BYTES` of bodies plus
//! record headers), owned here until both of its completions are back; counted in
//! `sluice_commit_queued_records` while it is out.

use std::collections::HashMap;
use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::net::io::uring::bufs::{RecvBufs, BGID};
pub use crate::net::io::uring::bufs::{BUFFERS, BUF_SIZE};
pub use crate::net::io::uring::fixed_files::MAX_FIXED_FILES;
use crate::net::io::uring::fixed_files::{FixedFiles, REGISTER_AFTER};
use crate::net::io::uring::op::user_data;
pub use crate::net::io::uring::op::{Completion, Op};

/// Builds an entry on a stream's socket: its registered slot when it has a live one
/// (`fixed_files.rs`), else its descriptor.
macro_rules! on_socket {
    ($slot:expr, $fd:expr, |$t:ident| $build:expr) => {
        match $slot {
            Some(slot) => {
                let $t = types::Fixed(slot);
                $build
            }
            None => {
                let $t = types::Fd($fd);
                $build
            }
        }
    };
}

/// Bytes a connection's outbox accepts before `write` says `WouldBlock`.
pub const OUT_CAP: usize = 256 * 1024;
/// How long a closed connection's unsent bytes may take to leave.
pub const RETIRE_WAIT: Duration = Duration::from_secs(2);
/// Closed connections waiting for their last send, per core.
pub const MAX_RETIRED: usize = 4096;
/// Inbox capacity a connection keeps between receives; a larger one is freed once read.
const INBOX_KEEP: usize = 4 * 1024;

/// Submission queue entries per ring (the completion queue is twice that; the kernel keeps
/// overflowing completions rather than dropping them: `IORING_FEAT_NODROP`, checked by
/// [`probe`]).
const ENTRIES: u32 = 1024;

/// Whether this kernel runs the backend: a ring can be set up (not forbidden by
/// `kernel.io_uring_disabled` or a seccomp filter), waits take a timeout (`EXT_ARG`), overflowing
/// completions are kept (`NODROP`), and every opcode used is supported.
pub fn probe() -> Result<(), String> {
    let ring = IoUring::new(8).map_err(|e| format!("io_uring_setup: {e}"))?;
    if !ring.params().is_feature_ext_arg() {
        return Err("the kernel lacks IORING_FEAT_EXT_ARG (wait with a timeout)".into());
    }
    if !ring.params().is_feature_nodrop() {
        return Err("the kernel lacks IORING_FEAT_NODROP".into());
    }
    let mut probe = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| format!("IORING_REGISTER_PROBE: {e}"))?;
    for (code, name) in [
        (opcode::Recv::CODE, "RECV"),
        (opcode::Send::CODE, "SEND"),
        (opcode::PollAdd::CODE, "POLL_ADD"),
        (opcode::ProvideBuffers::CODE, "PROVIDE_BUFFERS"),
        (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
        (opcode::Write::CODE, "WRITE"),
        (opcode::Fsync::CODE, "FSYNC"),
    ] {
        if !probe.is_supported(code) {
            return Err(format!("the kernel does not support IORING_OP_{name}"));
        }
    }
    Ok(())
}

/// A client socket on the ring (module docs). `Read`/`Write` never block and never enter the
/// kernel: they move bytes between the caller and the inbox/outbox; the ring moves them
/// between those and the socket.
#[derive(Debug)]
pub struct UringStream {
    sock: std::net::TcpStream,
    gen: u32,
    inbox: Vec<u8>,
    inbox_pos: usize,
    outbox: Vec<u8>,
    /// The bytes of the send in flight (or of the next one), and how many have left.
    sending: Vec<u8>,
    sent: usize,
    recv_armed: bool,
    send_armed: bool,
    /// The reader found the inbox empty: arm a receive at the end of the turn.
    want_recv: bool,
    /// A `write` found the outbox full: the send's completion is a writable edge.
    blocked: bool,
    eof: bool,
    error: Option<i32>,
    /// `shutdown(Write)` asked for; done once everything accepted is sent.
    shut_wanted: bool,
    shut_done: bool,
    /// Queued on the worker's list of connections to arm this turn.
    pub queued: bool,
    /// An outbound stream (its operations carry the `Out*` codes).
    out: bool,
    /// An outbound stream whose non-blocking connect has not finished: nothing is sent or
    /// received until the ring's watch on it ([`Op::OutConnect`]) completes.
    connecting: bool,
    connect_armed: bool,
    /// The connect failed (`errno`), until [`UringStream::take_connect_error`].
    connect_error: Option<i32>,
    /// Its slot in the ring's file table, once it has one (`fixed_files.rs`).
    fixed: Option<u32>,
    /// Receives armed, counted up to [`REGISTER_AFTER`].
    recvs: u8,
}

impl UringStream {
    /// The connection generation (stale completions of a reused slot carry another).
    pub fn gen(&self) -> u32 {
        self.gen
    }

    /// An outbound stream over `sock`, a non-blocking socket whose connect is under way. The
    /// ring watches it for writability (`POLL_ADD`, armed at the next submit); until that
    /// completes `read` and `write` say `WouldBlock`, and its completion is the writable edge.
    /// Its operations carry generation `gen` (chosen by the owner of outbound streams).
    pub fn connecting(sock: std::net::TcpStream, gen: u32) -> UringStream {
        let mut s = UringStream::new(sock, gen);
        s.out = true;
        s.connecting = true;
        s
    }

    fn new(sock: std::net::TcpStream, gen: u32) -> UringStream {
        UringStream {
            sock,
            gen,
            inbox: Vec::new(),
            inbox_pos: 0,
            outbox: Vec::new(),
            sending: Vec::new(),
            sent: 0,
            recv_armed: false,
            send_armed: false,
            want_recv: false,
            blocked: false,
            eof: false,
            error: None,
            shut_wanted: false,
            shut_done: false,
            queued: false,
            out: false,
            connecting: false,
            connect_armed: false,
            connect_error: None,
            fixed: None,
            recvs: 0,
        }
    }

    /// The connect's error, once (as `take_error` on a connecting socket).
    pub fn take_connect_error(&mut self) -> Option<io::Error> {
        self.connect_error.take().map(io::Error::from_raw_os_error)
    }

    /// True once a `write` found the outbox full and the send since made room.
    pub fn take_writable(&mut self) -> bool {
        std::mem::take(&mut self.blocked)
    }

    fn unsent(&self) -> usize {
        self.outbox.len() + self.sending.len() - self.sent
    }

    /// Bytes from the client not yet read: in the inbox, or in the socket. (A receive that
    /// completed with them is not seen here; its completion is on its way to the loop.)
    pub fn input_waiting(&self) -> bool {
        self.inbox_pos < self.inbox.len() || crate::net::io::sock::peek(&self.sock)
    }

    /// Shuts down a direction. A write shutdown waits for the bytes accepted so far.
    pub fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        match how {
            Shutdown::Write => {
                self.shut_wanted = true;
                Ok(())
            }
            _ => self.sock.shutdown(how),
        }
    }
}

impl UringStream {
    /// Reads without copying: `f` is given every byte received and not yet read (at most one
    /// receive, [`BUF_SIZE`]), in the inbox where the completion put them, and they count as
    /// read once it returns. `Ok(None)` at the end of the stream; errors and `WouldBlock` as
    /// [`Read::read`] says them.
    pub fn read_with<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> io::Result<Option<R>> {
        if self.inbox_pos < self.inbox.len() {
            let r = f(&self.inbox[self.inbox_pos..]);
            self.consumed(self.inbox.len() - self.inbox_pos);
            return Ok(Some(r));
        }
        self.nothing_to_read().map(|()| None)
    }

    /// Takes `buf` whole as the bytes to send next, without copying them, and gives back the
    /// outbox's empty buffer in its place (a reusable allocation for the caller): when the
    /// outbox is empty and `buf` fits in it ([`OUT_CAP`]), on a connected stream with no
    /// error or shutdown pending. Returns false, taking nothing, otherwise: `write` it.
    pub fn hand_over(&mut self, buf: &mut Vec<u8>) -> bool {
        let open = self.error.is_none() && !self.shut_wanted && !self.connecting;
        if !open || !self.outbox.is_empty() || buf.is_empty() || buf.len() > OUT_CAP {
            return false;
        }
        std::mem::swap(&mut self.outbox, buf);
        buf.clear();
        true
    }

    /// `n` bytes of the inbox were read. Read dry, it keeps a small buffer for the next receive
    /// (as `Conn::trim` keeps a small read buffer), frees a large one, and asks for more.
    fn consumed(&mut self, n: usize) {
        self.inbox_pos += n;
        if self.inbox_pos == self.inbox.len() {
            if self.inbox.capacity() > INBOX_KEEP {
                self.inbox = Vec::new();
            } else {
                self.inbox.clear();
            }
            self.inbox_pos = 0;
            self.want_recv = !self.eof && self.error.is_none();
        }
    }

    /// A read found the inbox empty: the stream's error, the end of the stream (`Ok`), or
    /// `WouldBlock` with a receive asked for.
    fn nothing_to_read(&mut self) -> io::Result<()> {
        if let Some(errno) = self.error {
            return Err(io::Error::from_raw_os_error(errno));
        }
        if self.eof {
            return Ok(());
        }
        self.want_recv = true;
        // (While connecting, the receive waits for the connect: `Uring::arm`.)
        Err(io::ErrorKind::WouldBlock.into())
    }
}

impl Read for UringStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.inbox_pos < self.inbox.len() {
            let n = (self.inbox.len() - self.inbox_pos).min(buf.len());
            buf[..n].copy_from_slice(&self.inbox[self.inbox_pos..self.inbox_pos + n]);
            self.consumed(n);
            return Ok(n);
        }
        self.nothing_to_read().map(|()| 0)
    }
}

impl Write for UringStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if let Some(errno) = self.error {
            return Err(io::Error::from_raw_os_error(errno));
        }
        if self.shut_wanted {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        if self.connecting {
            // Nothing is accepted before the connect finished (so an outbound writer can tell
            // a connect failure from a broken exchange, as on mio); the connect's completion
            // is the writable edge.
            self.blocked = true;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let room = OUT_CAP.saturating_sub(self.outbox.len());
        if room == 0 && bufs.iter().any(|b| !b.is_empty()) {
            self.blocked = true;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut taken = 0;
        for b in bufs {
            let n = b.len().min(room - taken);
            self.outbox.extend_from_slice(&b[..n]);
            taken += n;
            if taken == room {
                break;
            }
        }
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for UringStream {
    /// A stream dropped while its send is in flight (its owner dropped it without retiring
    /// it: at exit, after the ring cancelled everything, or an owner dropped before the ring)
    /// leaks the send's buffer rather than let the kernel read freed memory.
    fn drop(&mut self) {
        if self.send_armed {
            std::mem::forget(std::mem::take(&mut self.sending));
        }
    }
}

/// A closed connection kept until its last send completes.
#[derive(Debug)]
struct Retired {
    stream: UringStream,
    idx: usize,
    until: Instant,
    forced: bool,
}

/// A core's ring, its receive-buffer pool and its retired connections.
pub struct Uring {
    ring: IoUring,
    /// The receive buffers (`bufs.rs`); the kernel writes into them, so they never move
    /// or shrink while the ring lives (`Drop` waits for the ring's operations first, and the
    /// ring, declared above, is dropped before them).
    bufs: RecvBufs,
    /// The registered sockets (`fixed_files.rs`).
    files: FixedFiles,
    next_gen: u32,
    /// By side (outbound or not) and generation: each side numbers its own streams.
    retired: HashMap<(bool, u32), Retired>,
    /// Operations submitted whose last completion has not come back.
    in_flight: usize,
    /// Completions taken off the queue while making room for submissions.
    backlog: Vec<Completion>,
    /// The turn's completions before they are sorted out ([`Uring::completions`]); kept so
    /// that a turn allocates nothing. Empty between turns; its capacity is the most
    /// completions one turn has taken, which the operations in flight bound (one receive and
    /// one send per connection, plus the ring's own).
    drained: Vec<Completion>,
    epoll_fd: RawFd,
    /// Set by [`Uring::cancel_all`]: the epoll watch it cancels is not armed again (else
    /// the wait for the last operations never ends before its deadline).
    closing: bool,
    /// The file write in flight ([`Uring::write_file`]): at most one. Its buffer is kept here
    /// until both of its completions are back, so the kernel never reads freed memory.
    file_op: Option<FileOp>,
    /// The finished file write, until the caller takes it ([`Uring::take_file_done`]).
    file_done: Option<FileDone>,
}

#[derive(Debug)]
struct FileOp {
    buf: Vec<u8>,
    written: Option<i32>,
    /// `None` until the sync's completion; `Some(0)` from the start when no sync was asked.
    synced: Option<i32>,
}

/// A file write (and sync) that finished: the buffer back, and the kernel's results.
#[derive(Debug)]
pub struct FileDone {
    pub buf: Vec<u8>,
    /// Bytes written, or `-errno`.
    pub written: i32,
    /// `0`, or `-errno` of the `fdatasync` (`-ECANCELED` when the write failed or was short:
    /// the sync is linked to it).
    pub synced: i32,
}

impl std::fmt::Debug for Uring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uring")
            .field("in_flight", &self.in_flight)
            .field("retired", &self.retired.len())
            .finish()
    }
}

/// An `io_uring_enter` result with the outcomes that are not failures taken as success: the
/// wait timed out (`ETIME`), a signal interrupted it (`EINTR`), or the completion queue is full
/// (`EBUSY`: the caller reaps and submits again next turn).
fn settled(res: io::Result<usize>) -> io::Result<()> {
    match res {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

impl Uring {
    /// Sets up the core's ring (call on the core's thread: the ring is single-issuer), hands
    /// the kernel the buffer pool and starts watching `epoll_fd` (the core's mio poll).
    pub fn new(epoll_fd: RawFd) -> io::Result<Uring> {
        // Completions' task work deferred to the loop's own `io_uring_enter` (Linux 6.1+):
        // a turn's completions run at once in the loop's wait, and the loop is not woken from
        // any other sleep by every receive that completes, as it is with the default or
        // `COOP_TASKRUN` (the kernel's task-work notification wakes an interruptible sleep).
        // Older kernels: cooperative task work, then the default.
        let build = |defer: bool, coop: bool| {
            let mut b = IoUring::builder();
            b.setup_cqsize(4 * ENTRIES);
            if defer || coop {
                b.setup_single_issuer();
            }
            if defer {
                b.setup_defer_taskrun();
            } else if coop {
                b.setup_coop_taskrun();
            }
            b.build(ENTRIES)
        };
        let ring = build(true, false)
            .or_else(|_| build(false, true))
            .or_else(|_| build(false, false))?;
        // The pool is filled, not left as untouched zero pages (`bufs.rs`): a core's
        // idle memory is what it keeps after load (measured: 4 MiB per core more after a
        // burst of 400 connections otherwise).
        let (bufs, provide_all) = RecvBufs::new(&ring.submitter());
        let files = FixedFiles::new(&ring.submitter());
        let mut u = Uring {
            ring,
            bufs,
            files,
            next_gen: 0,
            retired: HashMap::new(),
            in_flight: 0,
            backlog: Vec::new(),
            drained: Vec::new(),
            epoll_fd,
            closing: false,
            file_op: None,
            file_done: None,
        };
        if let Some(provide) = provide_all {
            u.push(&provide.user_data(user_data(Op::Provide, 0, 0)))?;
        }
        u.arm_poll()?;
        u.ring.submit()?;
        Ok(u)
    }

    /// Wraps an accepted socket for the ring.
    pub fn stream(&mut self, sock: std::net::TcpStream) -> io::Result<UringStream> {
        // The ring waits for the socket itself; a non-blocking socket would only make it
        // retry through its poll path.
        sock.set_nonblocking(false)?;
        sock.set_nodelay(true)?;
        self.next_gen = self.next_gen.wrapping_add(1);
        Ok(UringStream::new(sock, self.next_gen))
    }

    fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        for _ in 0..3 {
            // Every entry built by this module points only at memory that outlives the
            // operation: the pool (freed after the ring's operations finished, `Drop`), a
            // stream's `sending` buffer (not touched while its send is armed; a closed
            // stream's is kept in `retired` until the completion; a stream dropped with its
            // send armed leaks it, `UringStream`'s `Drop`), a file write's buffer (owned by
            // `file_op` until both its completions are back), a registered-file update's
            // descriptor (the file table's boxed slice, which lives as long as the ring, or a
            // static), or nothing (a connect's watch, a cancel).
            // SAFETY: the entry's buffers outlive the operation (above).
            let pushed = unsafe { self.ring.submission().push(entry) };
            if pushed.is_ok() {
                self.in_flight += 1;
                return Ok(());
            }
            // The queue is full: submit what is there. Completions that came back meanwhile
            // are kept for the turn ([`Uring::completions`]).
            match self.ring.submit() {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => self.drain_into_backlog(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            self.drain_into_backlog();
        }
        Err(io::Error::other("io_uring submission queue stays full"))
    }

    fn drain_into_backlog(&mut self) {
        let mut backlog = std::mem::take(&mut self.backlog);
        self.take_cq(&mut backlog);
        self.backlog = backlog;
    }

    fn arm_poll(&mut self) -> io::Result<()> {
        let e = opcode::PollAdd::new(types::Fd(self.epoll_fd), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(user_data(Op::Poll, 0, 0));
        self.push(&e)
    }

    /// Submits the turn's operations and waits for at least one completion, at most `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        if !self.backlog.is_empty() {
            return settled(self.ring.submit());
        }
        let ts = types::Timespec::new()
            .sec(timeout.as_secs())
            .nsec(timeout.subsec_nanos());
        let args = types::SubmitArgs::new().timespec(&ts);
        settled(self.ring.submitter().submit_with_args(1, &args))
    }

    fn take_cq(&mut self, out: &mut Vec<Completion>) {
        for cqe in self.ring.completion() {
            let ud = cqe.user_data();
            let Some(op) = Op::from_code(ud >> 56) else {
                continue;
            };
            if !cqueue::more(cqe.flags()) {
                self.in_flight = self.in_flight.saturating_sub(1);
            }
            out.push(Completion {
                op,
                idx: ((ud >> 32) & 0xFF_FFFF) as usize,
                gen: ud as u32,
                res: cqe.result(),
                flags: cqe.flags(),
            });
        }
    }

    /// The completions that came back, in order. Re-arms the epoll watch when the kernel
    /// ended it, and handles completions of the ring's own housekeeping and of retired
    /// connections; the rest are the worker's.
    pub fn completions(&mut self, out: &mut Vec<Completion>) {
        out.clear();
        let mut all = std::mem::take(&mut self.drained);
        all.append(&mut self.backlog);
        self.take_cq(&mut all);
        for c in all.drain(..) {
            match c.op {
                Op::Poll => {
                    if !cqueue::more(c.flags) && !self.closing {
                        if let Err(e) = self.arm_poll() {
                            eprintln!("sluice: io_uring: re-arming the poll watch: {e}");
                        }
                    }
                    out.push(c);
                }
                Op::Provide | Op::Cancel => {
                    if c.op == Op::Provide && c.res < 0 {
                        eprintln!(
                            "sluice: io_uring: providing receive buffers failed: {}",
                            io::Error::from_raw_os_error(-c.res)
                        );
                    }
                }
                Op::Recv | Op::Send | Op::File => out.push(c),
                Op::OutRecv | Op::OutSend | Op::OutConnect => out.push(c),
                Op::FileWrite | Op::FileSync => {
                    if self.on_file_completion(&c) {
                        out.push(Completion { op: Op::File, ..c });
                    }
                }
                Op::FileReg => self.files.on_registered(c.idx as u32, c.res),
                Op::FileClear => self.files.on_cleared(c.idx as u32),
            }
        }
        self.drained = all;
    }

    /// A receive completed on a live stream: its bytes go to the inbox and the buffer back to
    /// the pool. Returns false if the pool was empty (the stream re-arms next turn).
    pub fn on_recv(&mut self, s: &mut UringStream, c: &Completion) -> bool {
        s.recv_armed = false;
        if let Some(range) = self.take_buffer(c) {
            if c.res > 0 {
                if s.inbox_pos == s.inbox.len() {
                    s.inbox.clear();
                    s.inbox_pos = 0;
                }
                s.inbox.extend_from_slice(self.bufs.bytes(range.clone()));
            }
            self.give_back(range.start / BUF_SIZE);
        }
        match c.res {
            n if n > 0 => true,
            0 => {
                s.eof = true;
                true
            }
            n if -n == libc::ENOBUFS => {
                s.want_recv = true;
                false
            }
            n => {
                s.error = Some(-n);
                true
            }
        }
    }

    /// The pool range a completion's bytes are in.
    fn take_buffer(&self, c: &Completion) -> Option<std::ops::Range<usize>> {
        let bid = cqueue::buffer_select(c.flags)? as usize;
        let start = bid * BUF_SIZE;
        let len = usize::try_from(c.res).unwrap_or(0).min(BUF_SIZE);
        Some(start..start + len)
    }

    fn give_back(&mut self, bid: usize) {
        let Some(e) = self.bufs.give_back(bid as u16) else {
            return; // published in the buffer ring
        };
        if let Err(e) = self.push(&e.user_data(user_data(Op::Provide, 0, 0))) {
            eprintln!("sluice: io_uring: returning a receive buffer: {e}");
        }
    }

    /// True when receive buffers go back through a registered buffer ring (no submission per
    /// receive), false on kernels without one (`bufs.rs`).
    pub fn buffer_ring(&self) -> bool {
        self.bufs.is_ring()
    }

    /// The watch on an outbound stream's connect completed: the connect finished, or failed
    /// (its error is the socket's, asked once). A connected socket becomes blocking, as an
    /// accepted one is (the ring waits for it, [`Uring::stream`]).
    pub fn on_connect(&mut self, s: &mut UringStream, c: &Completion) {
        s.connect_armed = false;
        s.connecting = false;
        s.blocked = true;
        let errno = match s.sock.take_error() {
            Ok(Some(e)) | Err(e) => e.raw_os_error().or(Some(libc::ECONNREFUSED)),
            Ok(None) if c.res < 0 => Some(-c.res),
            Ok(None) => s
                .sock
                .set_nonblocking(false)
                .err()
                .and_then(|e| e.raw_os_error()),
        };
        if let Some(errno) = errno {
            s.connect_error = Some(errno);
            s.error = Some(errno);
        } else {
            // A client reads whatever comes, whenever (the response, or the server's close of
            // an idle connection, as mio's readable edge would say): a receive is armed from
            // the start and re-armed each time the owner reads the stream dry.
            s.want_recv = true;
        }
    }

    /// A send completed on a live stream.
    pub fn on_send(&mut self, s: &mut UringStream, c: &Completion) {
        s.send_armed = false;
        if c.res < 0 {
            s.error = Some(-c.res);
            s.sending.clear();
            s.sent = 0;
            return;
        }
        s.sent += c.res as usize;
    }

    /// Submits what the stream needs after the worker's turn: the next send, a deferred write
    /// shutdown, a receive.
    pub fn arm(&mut self, idx: usize, s: &mut UringStream) -> io::Result<()> {
        if s.connecting {
            if !s.connect_armed {
                let e = opcode::PollAdd::new(types::Fd(s.sock.as_raw_fd()), libc::POLLOUT as u32)
                    .build()
                    .user_data(user_data(Op::OutConnect, idx, s.gen));
                self.push(&e)?;
                s.connect_armed = true;
            }
            return Ok(());
        }
        if !s.send_armed && s.error.is_none() {
            if s.sent >= s.sending.len() {
                s.sending.clear();
                s.sent = 0;
                if !s.outbox.is_empty() {
                    std::mem::swap(&mut s.outbox, &mut s.sending);
                }
            }
            if s.sent < s.sending.len() {
                let rest = &s.sending[s.sent..];
                let len = u32::try_from(rest.len()).unwrap_or(u32::MAX);
                let e = on_socket!(self.slot(s), s.sock.as_raw_fd(), |f| {
                    opcode::Send::new(f, rest.as_ptr(), len)
                        .flags(libc::MSG_NOSIGNAL)
                        .build()
                })
                .user_data(user_data(Op::Send.on_side(s.out), idx, s.gen));
                self.push(&e)?;
                s.send_armed = true;
            }
        }
        if s.unsent() == 0 {
            if s.shut_wanted && !s.shut_done {
                s.shut_done = true;
                s.sock.shutdown(Shutdown::Write)?;
            }
            // An idle connection keeps no large output buffers.
            for b in [&mut s.outbox, &mut s.sending] {
                if b.capacity() > 16 * 1024 {
                    *b = Vec::new();
                }
            }
        }
        if s.want_recv && !s.recv_armed && !s.eof && s.error.is_none() {
            s.recvs = s.recvs.saturating_add(1);
            if s.recvs == REGISTER_AFTER && s.fixed.is_none() {
                self.register(s);
            }
            let e = on_socket!(self.slot(s), s.sock.as_raw_fd(), |f| {
                opcode::Recv::new(f, std::ptr::null_mut(), BUF_SIZE as u32)
                    .buf_group(BGID)
                    .build()
            })
            .flags(squeue::Flags::BUFFER_SELECT)
            .user_data(user_data(Op::Recv.on_side(s.out), idx, s.gen));
            self.push(&e)?;
            s.recv_armed = true;
            s.want_recv = false;
        }
        Ok(())
    }

    /// The stream's live slot in the file table, if it has one.
    fn slot(&self, s: &UringStream) -> Option<u32> {
        s.fixed.filter(|&slot| self.files.live(slot))
    }

    /// Gives the stream a slot in the file table, if one is free: the update goes out with the
    /// turn; the stream names the slot once it completed.
    fn register(&mut self, s: &mut UringStream) {
        let Some((slot, e)) = self.files.register(s.sock.as_raw_fd()) else {
            return;
        };
        match self.push(&e.user_data(user_data(Op::FileReg, slot as usize, 0))) {
            Ok(()) => s.fixed = Some(slot),
            Err(_) => self.files.unsubmitted(slot),
        }
    }

    /// The ring is done with a stream: its slot (which holds the socket open) is cleared, and
    /// the stream dropped, which closes its descriptor.
    fn close(&mut self, mut s: UringStream) {
        if let Some(slot) = s.fixed.take() {
            let e = self.files.release(slot);
            if self
                .push(&e.user_data(user_data(Op::FileClear, slot as usize, 0)))
                .is_err()
            {
                self.files.clear_now(&self.ring.submitter(), slot);
            }
        }
    }

    /// Registered-file slots in use and the table's size (`fixed_files.rs`).
    pub fn fixed_files(&self) -> (usize, usize) {
        (self.files.in_use(), self.files.capacity())
    }

    /// Takes over a closed connection's stream: its receive is cancelled; bytes it accepted
    /// and has not sent still leave (as `close(2)` would send a socket buffer), within
    /// [`RETIRE_WAIT`]; then the socket closes.
    pub fn retire(&mut self, idx: usize, mut s: UringStream) {
        // A connect's watch holds no memory of ours: cancelled, its completion is an orphan.
        let armed = [
            (s.recv_armed, Op::Recv.on_side(s.out)),
            (s.connect_armed, Op::OutConnect),
        ];
        for (_, op) in armed.into_iter().filter(|(on, _)| *on) {
            let e = opcode::AsyncCancel::new(user_data(op, idx, s.gen))
                .build()
                .user_data(user_data(Op::Cancel, 0, 0));
            if self.push(&e).is_err() {
                let how = if op == Op::OutConnect {
                    Shutdown::Both
                } else {
                    Shutdown::Read
                };
                let _ = s.sock.shutdown(how);
            }
        }
        s.want_recv = false;
        let full = self.retired.len() >= MAX_RETIRED;
        if full && s.send_armed {
            // No room to wait: the pending send is cut short.
            let _ = s.sock.shutdown(Shutdown::Both);
        }
        if !s.send_armed && (full || s.error.is_some() || s.unsent() == 0) {
            return self.close(s); // the socket closes
        }
        if !s.send_armed && self.arm(idx, &mut s).is_err() {
            return self.close(s);
        }
        let until = Instant::now() + RETIRE_WAIT;
        self.retired.insert(
            (s.out, s.gen),
            Retired {
                stream: s,
                idx,
                until,
                forced: full,
            },
        );
    }

    /// A completion for a connection that is no longer live (a retired stream, or a stale
    /// receive of a closed one): the buffer goes back; a retired stream sends on or closes.
    pub fn on_orphan(&mut self, c: &Completion) {
        match c.op {
            Op::Recv | Op::OutRecv => {
                if let Some(range) = self.take_buffer(c) {
                    self.give_back(range.start / BUF_SIZE);
                }
                return;
            }
            Op::Send | Op::OutSend => {}
            _ => return,
        }
        let key = (c.op.is_out(), c.gen);
        let Some(mut r) = self.retired.remove(&key) else {
            return;
        };
        self.on_send(&mut r.stream, c);
        let idx = r.idx;
        if r.stream.error.is_none() && r.stream.unsent() > 0 && self.arm(idx, &mut r.stream).is_ok()
        {
            self.retired.insert(key, r);
        } else {
            self.close(r.stream);
        }
    }

    /// Cuts short retired connections past [`RETIRE_WAIT`] (their send then completes with an
    /// error and they close). Called on the loop's sweep.
    pub fn sweep(&mut self, now: Instant) {
        for r in self.retired.values_mut() {
            if !r.forced && now >= r.until {
                r.forced = true;
                let _ = r.stream.sock.shutdown(Shutdown::Both);
            }
        }
    }

    /// Closed connections still sending.
    pub fn retired(&self) -> usize {
        self.retired.len()
    }

    /// Cancels every operation and waits (at most a second) for them to finish, so no
    /// operation outlives the buffers it uses. Returns false if some did not finish. The
    /// ring is done with: the epoll watch is not armed again.
    pub fn cancel_all(&mut self) -> bool {
        self.closing = true;
        if self.in_flight == 0 {
            return true;
        }
        let e = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(user_data(Op::Cancel, 0, 0));
        let _ = self.push(&e);
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut sink = Vec::new();
        while self.in_flight > 0 && Instant::now() < deadline {
            let _ = self.wait(Duration::from_millis(50));
            self.completions(&mut sink);
        }
        self.in_flight == 0
    }
}

impl Drop for Uring {
    fn drop(&mut self) {
        if !self.cancel_all() {
            // Operations still reference the pool: leak it rather than let the kernel write
            // into freed memory (this happens only at exit).
            self.bufs.leak();
            std::mem::forget(self.file_op.take());
            for r in std::mem::take(&mut self.retired).into_values() {
                std::mem::forget(r);
            }
        }
    }
}

mod log_write;

pub(super) mod bufs;
pub(super) mod fixed_files;
pub mod leaf;
pub(super) mod op;
#[cfg(test)]
mod tests;
