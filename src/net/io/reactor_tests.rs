//! The reactor's contract, the same on both leaves, over real loopback sockets: a connection's
//! input arrives as one settled event, written bytes leave after a submit, sources are reported
//! by their token, and an event for a connection that is gone asks nothing of its owner.

use super::*;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;

use mio::{Token, Waker};

/// A one-connection table.
struct One(Option<Stream>);

impl Streams for One {
    fn stream(&mut self, idx: usize) -> Option<&mut Stream> {
        self.0.as_mut().filter(|_| idx == 7)
    }
}

const IDX: usize = 7;
const WAKE: Token = Token(SOURCE_TOKEN_BASE + 3);

/// A reactor on `backend` (None when io_uring is unavailable here), a waker on it, and a
/// connection in slot [`IDX`] with its peer.
fn setup(backend: Backend) -> Option<(Reactor, Arc<Waker>, One, std::net::TcpStream)> {
    let poll = Poll::new().unwrap();
    let waker = Arc::new(Waker::new(poll.registry(), WAKE).unwrap());
    let mut r = Reactor::new(poll);
    if backend == Backend::Uring {
        if let Err(why) = super::super::uring::probe() {
            eprintln!("io_uring unavailable here ({why}); uring reactor test not run");
            return None;
        }
        r.start_uring().unwrap();
    }
    assert_eq!(r.backend(), backend);
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (ours, _) = l.accept().unwrap();
    ours.set_nonblocking(true).unwrap();
    let stream = r.adopt(IDX, TcpStream::from_std(ours)).unwrap();
    Some((r, waker, One(Some(stream)), peer))
}

/// Waits (submitting first, as the loop does) until an event passes `want`, at most 5 s;
/// connection events are settled on the way. Returns what `want` returned.
fn until<T>(
    r: &mut Reactor,
    conns: &mut One,
    mut want: impl FnMut(&Event, Option<Ready>) -> Option<T>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut events = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "nothing came");
        let mut failed = Vec::new();
        r.submit(conns, &mut failed);
        assert!(failed.is_empty());
        r.wait(Duration::from_millis(20), &mut events).unwrap();
        for ev in events.drain(..) {
            let (seen, ready) = match ev {
                Event::Conn(c) => {
                    let idx = c.idx();
                    let ready = r.settle(c, conns.stream(idx));
                    (
                        Event::Source {
                            token: Token(idx),
                            readable: false,
                            writable: false,
                        },
                        ready,
                    )
                }
                other => (other, None),
            };
            if let Some(t) = want(&seen, ready) {
                return t;
            }
        }
    }
}

fn both_ways(backend: Backend) {
    let Some((mut r, waker, mut conns, mut peer)) = setup(backend) else {
        return;
    };
    let s = conns.0.as_mut().unwrap();
    let mut buf = [0u8; 64];
    // Nothing yet: the read asks for more (on io_uring: a receive at the next submit).
    assert_eq!(
        s.read(&mut buf).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );
    r.touch(IDX, s);
    peer.write_all(b"hello").unwrap();
    let ready = until(&mut r, &mut conns, |ev, ready| match ev {
        Event::Source {
            token: Token(IDX), ..
        } => ready.filter(|x| x.input),
        _ => None,
    });
    assert!(ready.drive && !ready.starved, "{ready:?}");
    let s = conns.0.as_mut().unwrap();
    assert_eq!(s.read(&mut buf).unwrap(), 5);
    assert_eq!(&buf[..5], b"hello");
    // A write leaves after the next submit.
    assert_eq!(s.write(b"world").unwrap(), 5);
    r.touch(IDX, s);
    let mut failed = Vec::new();
    r.submit(&mut conns, &mut failed);
    // A source is reported by its token.
    waker.wake().unwrap();
    until(&mut r, &mut conns, |ev, _| match ev {
        Event::Source { token: WAKE, .. } => Some(()),
        _ => None,
    });
    peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = [0u8; 5];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"world");
    // The connection closes: its stream goes back, and a late event asks nothing.
    let s = conns.0.take().unwrap();
    r.release(IDX, s);
    assert_eq!(r.closing_sends(), 0, "nothing was left to send");
    peer.write_all(b"late").unwrap();
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(200);
    while Instant::now() < deadline {
        r.wait(Duration::from_millis(20), &mut events).unwrap();
        for ev in events.drain(..) {
            if let Event::Conn(c) = ev {
                assert_eq!(r.settle(c, None), None);
            }
        }
    }
    r.shutdown(&mut conns);
}

#[test]
fn mio_moves_bytes_both_ways_and_reports_sources() {
    both_ways(Backend::Mio);
}

#[test]
fn uring_moves_bytes_both_ways_and_reports_sources() {
    both_ways(Backend::Uring);
}

#[test]
fn mio_reports_the_peers_close_on_the_connection() {
    let Some((mut r, _waker, mut conns, peer)) = setup(Backend::Mio) else {
        return;
    };
    drop(peer);
    let ready = until(&mut r, &mut conns, |ev, ready| match ev {
        Event::Source {
            token: Token(IDX), ..
        } => ready.filter(|x| x.closed),
        _ => None,
    });
    assert!(ready.input && ready.drive);
    let mut buf = [0u8; 8];
    assert_eq!(conns.0.as_mut().unwrap().read(&mut buf).unwrap(), 0);
}
