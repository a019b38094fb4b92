//! Port safety for `SO_REUSEPORT` listeners, and closing one without resets.
//!
//! Each worker binds its own `SO_REUSEPORT` listener on the server's address, so the kernel
//! spreads connections across them. The same option would let a *second* process (same user)
//! bind the port silently and take a share of the traffic into its own WAL. So before binding,
//! [`ensure_free`] binds a probe socket **without** `SO_REUSEPORT` (with `SO_REUSEADDR`, so
//! connections of a previous run in `TIME_WAIT` do not count): if any other socket holds the
//! address, the probe fails with `EADDRINUSE`; otherwise it is closed at once and the workers
//! bind. A process that binds in the microseconds between the probe and the workers' binds is
//! not detected (it would itself fail its probe against ours if it is a `sluice serve`).
//!
//! At the end, [`stop_admitting`] lets a listener be closed without resetting connections the
//! kernel completed for it, or was completing when accepting stopped.
#![forbid(unsafe_code)]

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

/// Fails with `AddrInUse` if another socket holds `addr`. Port 0 is always free (the kernel
/// picks an unused port), so it is not probed.
pub fn ensure_free(addr: SocketAddr) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    probe.set_reuse_address(true)?;
    probe.bind(&addr.into())
    // Dropped here: the address is free again for the workers' SO_REUSEPORT listeners.
}

/// One classic-BPF instruction (`code`, jump if true, jump if false, `k`).
fn bpf(code: u32, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// Stops a listening socket from taking new connections while letting the ones under way
/// complete: a classic socket filter that drops every segment with `SYN` set. A new client's SYN
/// is dropped (it sends it again about a second later and then meets a closed port, or another
/// listener of the port: refused before anything was sent). A handshake the kernel already
/// answered with its SYN-ACK is not touched: its client counts the connection as open as soon
/// as the SYN-ACK arrives and may send a request at once, and the final ACK (or that request)
/// still completes it into the accept queue. Dropping those segments too would leave such a
/// handshake unfinished, and when the listener closes the client's request meets no socket
/// and is answered with a reset. Connections already queued are sockets of their own and stay
/// usable. The caller keeps accepting for about a round trip (`sched/worker/drain.rs`) and
/// only then closes the listener: closing it resets whatever its queue still holds.
pub fn stop_admitting(listener: &impl std::os::fd::AsFd) -> io::Result<()> {
    // The filter sees a segment from its TCP header: byte 13 holds the flags, SYN is 0x02.
    //   ldb [13]; jset #0x02, drop, keep; keep: ret #-1 (all of it); drop: ret #0.
    let syn_dropped = [
        bpf(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS, 0, 0, 13),
        bpf(libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K, 1, 0, 0x02),
        bpf(libc::BPF_RET | libc::BPF_K, 0, 0, u32::MAX),
        bpf(libc::BPF_RET | libc::BPF_K, 0, 0, 0),
    ];
    socket2::SockRef::from(listener).attach_filter(&syn_dropped)
}

/// The start-up error text for a failed probe or bind of `addr`.
pub fn describe_bind_error(addr: SocketAddr, e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::AddrInUse {
        format!("address {addr} in use by another process (refusing to share the port)")
    } else {
        format!("binding {addr}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_that_stops_admitting_keeps_its_queue_and_completes_nothing_new() {
        use std::io::{Read, Write};
        use std::time::Duration;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // Completed by the kernel, not yet accepted, a request already sent on it.
        let mut queued = std::net::TcpStream::connect(addr).unwrap();
        queued.write_all(b"ping").unwrap();
        stop_admitting(&listener).unwrap();
        let late = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300));
        assert!(late.is_err(), "a handshake completed after the filter");
        let (mut ours, _) = listener.accept().unwrap();
        let mut got = [0u8; 4];
        ours.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        ours.write_all(b"pong").unwrap();
        queued.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"pong", "the queued connection works end to end");
    }

    #[test]
    fn a_handshake_under_way_when_admitting_stops_completes_and_is_accepted() {
        use std::io::{Read, Write};
        use std::time::{Duration, Instant};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // Hold a handshake half-way: the SYN is answered, every other segment (the client's
        // final ACK, its request) is dropped, so the client counts the connection as open
        // while the listener still has only a request socket for it.
        let only_syn = [
            bpf(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS, 0, 0, 13),
            bpf(libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K, 0, 1, 0x02),
            bpf(libc::BPF_RET | libc::BPF_K, 0, 0, u32::MAX),
            bpf(libc::BPF_RET | libc::BPF_K, 0, 0, 0),
        ];
        socket2::SockRef::from(&listener)
            .attach_filter(&only_syn)
            .unwrap();
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client.write_all(b"ping").unwrap();
        listener.set_nonblocking(true).unwrap();
        assert_eq!(
            listener.accept().unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "the handshake was meant to be held half-way"
        );
        // Admitting stops now: the client's retransmitted request (which carries the ACK)
        // must complete the handshake, not be dropped until the listener closes on it.
        stop_admitting(&listener).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut ours = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(
                        Instant::now() < deadline,
                        "the handshake under way never completed"
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        ours.set_nonblocking(false).unwrap();
        ours.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = [0u8; 4];
        ours.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        ours.write_all(b"pong").unwrap();
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"pong", "the connection works end to end");
        // And nothing new completes.
        let late = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300));
        assert!(late.is_err(), "a handshake completed after the filter");
    }

    #[test]
    fn a_held_address_is_refused_and_a_free_one_is_not() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let e = ensure_free(addr).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(describe_bind_error(addr, &e).contains(&format!("address {addr} in use")));
        drop(held);
        ensure_free(addr).unwrap();
        ensure_free("127.0.0.1:0".parse().unwrap()).unwrap();
    }

    #[test]
    fn a_reuseport_holder_is_refused_too() {
        let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        s.set_reuse_port(true).unwrap();
        s.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        s.listen(8).unwrap();
        let addr = s.local_addr().unwrap().as_socket().unwrap();
        assert_eq!(
            ensure_free(addr).unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
    }
}
