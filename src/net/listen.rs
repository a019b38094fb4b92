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
//! kernel completed for it.
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

/// Stops a listening socket from completing new connections while keeping those its accept
/// queue already holds: a classic socket filter that drops every packet the listener would
/// see (SYNs, and the last ACKs of handshakes under way). Queued connections are sockets of
/// their own, created before the filter, so they stay usable; the caller accepts them and
/// only then closes the listener. Closing a listener resets the connections still in its
/// queue, and a client (a proxy) may already have sent a request on one: without this, every
/// connection the kernel completes between the last `accept` and the `close` is reset. With
/// it, a client whose SYN was dropped sends it again about a second later and then meets a
/// closed port (or another listener of the port): refused before anything was sent.
pub fn stop_admitting(listener: &impl std::os::fd::AsFd) -> io::Result<()> {
    // `ret #0`: accept no bytes of any packet.
    let drop_all = [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: 0,
    }];
    socket2::SockRef::from(listener).attach_filter(&drop_all)
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
