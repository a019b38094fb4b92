//! Port safety for `SO_REUSEPORT` listeners.
//!
//! Each worker binds its own `SO_REUSEPORT` listener on the server's address, so the kernel
//! spreads connections across them. The same option would let a *second* process (same user)
//! bind the port silently and take a share of the traffic into its own WAL. So before binding,
//! [`ensure_free`] binds a probe socket **without** `SO_REUSEPORT` (with `SO_REUSEADDR`, so
//! connections of a previous run in `TIME_WAIT` do not count): if any other socket holds the
//! address, the probe fails with `EADDRINUSE`; otherwise it is closed at once and the workers
//! bind. A process that binds in the microseconds between the probe and the workers' binds is
//! not detected (it would itself fail its probe against ours if it is a `sluice serve`).
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
