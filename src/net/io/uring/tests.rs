//! Tests of the io_uring stream and ring over real loopback sockets.

use super::*;
use std::net::{TcpListener, TcpStream};

fn pair(u: &mut Uring) -> (UringStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (ours, _) = l.accept().unwrap();
    (u.stream(ours).unwrap(), peer)
}

/// Runs turns until `done` or 5 s: completions for the stream go to it, then it is armed.
fn turn_until(u: &mut Uring, s: &mut UringStream, mut done: impl FnMut(&mut UringStream) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut cs = Vec::new();
    while !done(s) {
        assert!(Instant::now() < deadline, "no progress");
        u.arm(0, s).unwrap();
        u.wait(Duration::from_millis(20)).unwrap();
        u.completions(&mut cs);
        for c in &cs {
            match c.op {
                Op::Recv if c.gen == s.gen => {
                    u.on_recv(s, c);
                }
                Op::Send if c.gen == s.gen => u.on_send(s, c),
                Op::Recv | Op::Send => u.on_orphan(c),
                _ => {}
            }
        }
    }
}

/// One exchange over `s`: the peer sends `msg` (one receive, as the peer waits for the answer),
/// the stream reads it and writes `reply`, the peer reads that.
fn exchange(u: &mut Uring, s: &mut UringStream, peer: &mut TcpStream, msg: &[u8], reply: &[u8]) {
    let mut buf = [0u8; 64];
    peer.write_all(msg).unwrap();
    let _ = s.read(&mut buf);
    turn_until(u, s, |s| s.inbox.len() - s.inbox_pos >= msg.len());
    let n = s.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], msg);
    assert_eq!(s.write(reply).unwrap(), reply.len());
    turn_until(u, s, |s| s.unsent() == 0 && !s.send_armed);
    let mut got = vec![0u8; reply.len()];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(got, reply);
}

fn have_uring() -> bool {
    match probe() {
        Ok(()) => true,
        Err(why) => {
            // The backend is optional by design (auto falls back); these tests say so
            // loudly rather than pass for nothing.
            eprintln!("io_uring unavailable here ({why}); uring tests not run");
            false
        }
    }
}

#[test]
fn bytes_go_both_ways_and_reads_say_would_block_until_they_arrive() {
    if !have_uring() {
        return;
    }
    let poll = ::mio::Poll::new().unwrap();
    let mut u = Uring::new(poll.as_raw_fd()).unwrap();
    let (mut s, mut peer) = pair(&mut u);
    let mut buf = [0u8; 64];
    assert_eq!(
        s.read(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    peer.write_all(b"hello").unwrap();
    turn_until(&mut u, &mut s, |s| s.inbox.len() >= 5);
    assert_eq!(s.read(&mut buf).unwrap(), 5);
    assert_eq!(&buf[..5], b"hello");
    assert_eq!(s.write(b"world").unwrap(), 5);
    turn_until(&mut u, &mut s, |s| s.unsent() == 0 && !s.send_armed);
    let mut got = [0u8; 5];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"world");
    // EOF reaches the reader as a 0-byte read.
    drop(peer);
    let _ = s.read(&mut buf);
    turn_until(&mut u, &mut s, |s| s.eof);
    assert_eq!(s.read(&mut buf).unwrap(), 0);
}

#[test]
fn receives_keep_coming_after_every_buffer_went_round_the_pool_three_times() {
    if !have_uring() {
        return;
    }
    let poll = ::mio::Poll::new().unwrap();
    let mut u = Uring::new(poll.as_raw_fd()).unwrap();
    let (mut s, mut peer) = pair(&mut u);
    // Each message is one receive (the peer waits for its echo before the next), so each takes
    // a buffer from the kernel and gives it back: 3 × BUFFERS receives go round the buffer
    // ring (or the provided buffers) three times.
    for i in 0..3 * usize::from(BUFFERS) {
        let msg = format!("m{i:05}");
        exchange(&mut u, &mut s, &mut peer, msg.as_bytes(), msg.as_bytes());
    }
    eprintln!("buffer ring: {}", u.buffer_ring());
}

#[test]
fn a_kept_stream_moves_to_a_registered_slot_and_its_close_frees_the_slot_and_closes_the_socket() {
    if !have_uring() {
        return;
    }
    let poll = ::mio::Poll::new().unwrap();
    let mut u = Uring::new(poll.as_raw_fd()).unwrap();
    if u.fixed_files().1 == 0 {
        eprintln!("no registered file table here; streams use their descriptors");
        return;
    }
    let (mut s, mut peer) = pair(&mut u);
    for _ in 0..4 {
        exchange(&mut u, &mut s, &mut peer, b"ping", b"pong");
    }
    assert_eq!(u.fixed_files().0, 1, "registered from its second receive");
    assert!(u.slot(&s).is_some(), "its operations name the slot");
    // Closed: the slot (which holds the socket open) is cleared, so the peer sees the close.
    let mut buf = [0u8; 64];
    let _ = s.read(&mut buf);
    u.arm(0, &mut s).unwrap();
    u.retire(0, s);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut cs = Vec::new();
    while u.fixed_files().0 > 0 {
        assert!(Instant::now() < deadline, "the slot was not freed");
        u.wait(Duration::from_millis(20)).unwrap();
        u.completions(&mut cs);
        for c in &cs {
            if matches!(c.op, Op::Recv | Op::Send) {
                u.on_orphan(c);
            }
        }
    }
    peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(peer.read(&mut buf).unwrap(), 0, "the socket closed");
}

#[test]
fn a_full_outbox_blocks_until_the_peer_reads() {
    if !have_uring() {
        return;
    }
    let poll = ::mio::Poll::new().unwrap();
    let mut u = Uring::new(poll.as_raw_fd()).unwrap();
    let (mut s, mut peer) = pair(&mut u);
    let chunk = vec![9u8; 64 * 1024];
    let mut accepted = 0usize;
    // Write until the outbox refuses; the ring sends what it can meanwhile.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match s.write(&chunk) {
            Ok(n) => accepted += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
        assert!(Instant::now() < deadline);
    }
    assert!(s.outbox.len() == OUT_CAP, "bounded at OUT_CAP");
    let reader = std::thread::spawn(move || {
        let mut total = 0usize;
        let mut buf = vec![0u8; 1 << 16];
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        while total < accepted {
            let n = peer.read(&mut buf).unwrap();
            assert!(n > 0);
            assert!(buf[..n].iter().all(|&b| b == 9));
            total += n;
        }
        total
    });
    turn_until(&mut u, &mut s, |s| s.unsent() == 0 && !s.send_armed);
    assert!(
        s.take_writable(),
        "the refused write is told when room came"
    );
    assert_eq!(reader.join().unwrap(), accepted);
}

/// A buffer handed over becomes the outbox itself (no copy) and the stream's empty one comes
/// back; with bytes in the outbox, or a buffer past `OUT_CAP`, nothing is taken.
#[test]
fn a_handed_over_buffer_is_sent_without_a_copy_and_an_empty_one_comes_back() {
    if !have_uring() {
        return;
    }
    let poll = ::mio::Poll::new().unwrap();
    let mut u = Uring::new(poll.as_raw_fd()).unwrap();
    let (mut s, mut peer) = pair(&mut u);
    let mut request = b"the whole request".to_vec();
    let at = request.as_ptr();
    s.outbox.reserve(100);
    let outbox_at = s.outbox.as_ptr();
    assert!(s.hand_over(&mut request));
    assert_eq!(s.outbox.as_ptr(), at, "the request's own memory");
    assert_eq!(
        (request.len(), request.as_ptr()),
        (0, outbox_at),
        "the outbox's buffer back"
    );
    // The outbox holds bytes now: a second buffer is refused (it would be written instead).
    let mut more = b"more".to_vec();
    assert!(!s.hand_over(&mut more));
    assert_eq!(more, b"more");
    turn_until(&mut u, &mut s, |s| s.unsent() == 0 && !s.send_armed);
    let mut got = vec![0u8; 17];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(got, b"the whole request");
    let mut big = vec![1u8; OUT_CAP + 1];
    assert!(
        !s.hand_over(&mut big),
        "past OUT_CAP: written in pieces instead"
    );
    assert!(!s.hand_over(&mut Vec::new()), "nothing to take");
    s.shutdown(Shutdown::Write).unwrap();
    assert!(!s.hand_over(&mut b"late".to_vec()), "shut down: refused");
}

/// `read_with` lends the inbox's unread bytes (after a partial `read`, the rest only), counts
/// them read, asks for the next receive, and tells the end of the stream as `None`.
#[test]
fn read_with_lends_the_unread_inbox_and_tells_the_end() {
    if !have_uring() {
        return;
    }
    let poll = ::mio::Poll::new().unwrap();
    let mut u = Uring::new(poll.as_raw_fd()).unwrap();
    let (mut s, mut peer) = pair(&mut u);
    let err = s.read_with(|_| panic!("nothing yet")).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    peer.write_all(b"hello world").unwrap();
    turn_until(&mut u, &mut s, |s| s.inbox.len() >= 11);
    assert_eq!(s.read(&mut [0u8; 6]).unwrap(), 6);
    let inbox_at = s.inbox.as_ptr() as usize;
    let seen = s.read_with(|b| (b.to_vec(), b.as_ptr() as usize)).unwrap();
    assert_eq!(seen, Some((b"world".to_vec(), inbox_at + 6)), "in place");
    assert!(s.want_recv, "read dry: the next receive is asked for");
    drop(peer);
    turn_until(&mut u, &mut s, |s| s.eof);
    assert_eq!(s.read_with(|_| ()).unwrap(), None);
}

#[test]
fn a_retired_stream_still_sends_what_it_accepted_then_closes() {
    if !have_uring() {
        return;
    }
    let poll = ::mio::Poll::new().unwrap();
    let mut u = Uring::new(poll.as_raw_fd()).unwrap();
    let (mut s, mut peer) = pair(&mut u);
    s.write_all(b"last words").unwrap();
    let _ = s.read(&mut [0u8; 8]); // arms a receive, to be cancelled
    u.arm(3, &mut s).unwrap();
    u.retire(3, s);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut cs = Vec::new();
    while u.retired() > 0 {
        assert!(Instant::now() < deadline);
        u.wait(Duration::from_millis(20)).unwrap();
        u.completions(&mut cs);
        for c in &cs {
            if matches!(c.op, Op::Recv | Op::Send) {
                u.on_orphan(c);
            }
        }
    }
    let mut got = Vec::new();
    peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    peer.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"last words", "sent, then closed (EOF)");
}

/// Turns until the ring's file write is done (5 s at most).
fn file_done(u: &mut Uring) -> FileDone {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut cs = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "the file write never ended");
        u.wait(Duration::from_millis(20)).unwrap();
        u.completions(&mut cs);
        if cs.iter().any(|c| c.op == Op::File) {
            return u.take_file_done().expect("reported done");
        }
    }
}

#[test]
fn a_file_write_and_its_linked_sync_end_as_one_completion_with_the_buffer_back() {
    if !have_uring() {
        return;
    }
    let poll = ::mio::Poll::new().unwrap();
    let mut u = Uring::new(poll.as_raw_fd()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("f");
    let file = std::fs::File::create(&path).unwrap();
    u.write_file(file.as_raw_fd(), 3, b"hello".to_vec(), true)
        .unwrap();
    assert!(u.file_busy());
    let (e, back) = u
        .write_file(file.as_raw_fd(), 0, b"second".to_vec(), true)
        .unwrap_err();
    assert_eq!(
        back, b"second",
        "refused with its buffer: one write at a time"
    );
    assert!(e.to_string().contains("in flight"), "{e}");
    let done = file_done(&mut u);
    assert_eq!((done.written, done.synced), (5, 0));
    assert_eq!(done.buf, b"hello");
    assert!(!u.file_busy());
    assert_eq!(std::fs::read(&path).unwrap(), b"\0\0\0hello");
    // A write that fails cancels its sync: a read-only descriptor.
    let ro = std::fs::File::open(&path).unwrap();
    u.write_file(ro.as_raw_fd(), 0, b"x".to_vec(), true)
        .unwrap();
    let done = file_done(&mut u);
    assert_eq!(
        (done.written, done.synced),
        (-libc::EBADF, -libc::ECANCELED)
    );
}

/// `cancel_all` (the loop's exit and `Drop`) ends every operation, the epoll watch included:
/// the watch it cancels is not armed again, so the wait ends when the last completion is back
/// (it used to re-arm the watch and spin until its one-second deadline, twice per shutdown).
#[test]
fn cancel_all_ends_every_operation_and_does_not_rearm_the_epoll_watch() {
    if !have_uring() {
        return;
    }
    let poll = ::mio::Poll::new().unwrap();
    let mut u = Uring::new(poll.as_raw_fd()).unwrap();
    let (mut s, _peer) = pair(&mut u);
    // A receive in flight beside the watch.
    let mut buf = [0u8; 8];
    assert_eq!(
        s.read(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    u.arm(0, &mut s).unwrap();
    u.wait(Duration::ZERO).unwrap();
    assert!(u.in_flight >= 2, "the watch and the receive: {u:?}");
    assert!(u.cancel_all(), "every operation ended: {u:?}");
    assert_eq!(u.in_flight, 0);
    // Completions taken after the cancel arm nothing again.
    let mut cs = Vec::new();
    u.completions(&mut cs);
    assert_eq!(u.in_flight, 0, "nothing re-armed: {u:?}");
    // `Drop` calls it again: nothing left to wait for.
    assert!(u.cancel_all());
}
