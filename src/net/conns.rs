//! A core's table of client connections, by slot, and their deadlines. Generic over `P`, the
//! owner's record in a response it fills in later (`net::conn::Slot::Pending`): the table
//! knows no domain type.
//!
//! - **Slots.** A connection lives in slot `idx` (its reactor token, `net::io`) from
//!   [`Conns::put`] to [`Conns::take`]; freed slots are reused first, so the table is as long
//!   as the most connections open at once. Bound: at most `max_open` connections
//!   ([`Conns::is_full`]: the owner refuses the next one), so at most `max_open` slots.
//! - **Deadlines** ([`Timeouts::check`], a pure function of a connection's phase, how long it
//!   has been in it and how long its output has waited): a client that stops reading its
//!   responses, a head or a body that does not arrive in time, an idle keep-alive connection,
//!   a half-closed one past [`LINGER`]. What to do about one (a `408`, a half-close, a close) is
//!   the owner's.
//! - **Answers.** A response filled in later ([`Conns::answer`]: a `Slot::Pending` becoming its
//!   bytes) puts its connection on the table's answered list, once until it is taken
//!   ([`Conns::take_answered`]): the server writes those at the end of the turn
//!   (`net::server::Server::answer`). Bound: one entry per open connection (plus
//!   connections closed since, whose slot the server skips or drives harmlessly).

use std::time::Duration;

use crate::net::conn::{Conn, Phase, Slot, LINGER};
use crate::net::io::{Stream, Streams};

/// The connections of one core (module docs).
#[derive(Debug)]
pub struct Conns<P> {
    slots: Vec<Option<Conn<P>>>,
    /// Slots not in use, reused before the table grows.
    free: Vec<usize>,
    open: usize,
    max_open: usize,
    /// Connections answered since the server last wrote them (module docs).
    answered: Vec<usize>,
}

impl<P> Conns<P> {
    /// An empty table for at most `max_open` connections.
    pub fn new(max_open: usize) -> Conns<P> {
        Conns {
            slots: Vec::new(),
            free: Vec::new(),
            open: 0,
            max_open,
            answered: Vec::new(),
        }
    }

    /// Connections open.
    pub fn open(&self) -> usize {
        self.open
    }

    /// True at `max_open`: the next connection is refused.
    pub fn is_full(&self) -> bool {
        self.open >= self.max_open
    }

    /// A slot for the next connection: put it there ([`Conns::put`]) or give the slot back
    /// ([`Conns::unreserve`]).
    pub fn reserve(&mut self) -> usize {
        match self.free.pop() {
            Some(idx) => idx,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        }
    }

    /// A reserved slot that got no connection.
    pub fn unreserve(&mut self, idx: usize) {
        self.free.push(idx);
    }

    /// Opens `conn` in the reserved slot `idx`.
    pub fn put(&mut self, idx: usize, conn: Conn<P>) {
        debug_assert!(self.slots[idx].is_none());
        self.slots[idx] = Some(conn);
        self.open += 1;
    }

    /// Closes slot `idx`: its connection, if it was open. The slot is free for reuse.
    pub fn take(&mut self, idx: usize) -> Option<Conn<P>> {
        let conn = self.slots.get_mut(idx).and_then(Option::take)?;
        self.free.push(idx);
        self.open -= 1;
        Some(conn)
    }

    pub fn get(&self, idx: usize) -> Option<&Conn<P>> {
        self.slots.get(idx).and_then(Option::as_ref)
    }

    pub fn get_mut(&mut self, idx: usize) -> Option<&mut Conn<P>> {
        self.slots.get_mut(idx).and_then(Option::as_mut)
    }

    /// Fills the response at `pos` of connection `idx` (`Conn::fill_slot`) and lists the
    /// connection as answered, for the server to write ([`Conns::take_answered`]). False if
    /// the connection is gone.
    pub fn answer(&mut self, idx: usize, pos: usize, slot: Slot<P>) -> bool {
        let Some(conn) = self.get_mut(idx) else {
            return false;
        };
        conn.fill_slot(pos, slot);
        if !conn.answered {
            conn.answered = true;
            self.answered.push(idx);
        }
        true
    }

    /// The connections answered since the last call, in the order they were first answered;
    /// each leaves the list (answered again later, it is listed again). `into` is cleared
    /// first (the caller's buffer, reused).
    pub fn take_answered(&mut self, into: &mut Vec<usize>) {
        into.clear();
        std::mem::swap(into, &mut self.answered);
        for &idx in into.iter() {
            if let Some(conn) = self.get_mut(idx) {
                conn.answered = false;
            }
        }
    }

    /// Every slot the table has had (open or free): `0..slots()`.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }
}

impl<P> Streams for Conns<P> {
    fn stream(&mut self, idx: usize) -> Option<&mut Stream> {
        self.get_mut(idx).map(|c| &mut c.stream)
    }
}

/// A connection deadline that passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// Output waited longer than the body timeout: the client stopped reading.
    Write,
    /// A head started and did not end within the header timeout (also: a fresh connection
    /// that sent nothing).
    Header,
    /// A body started and did not end within the body timeout.
    Body,
    /// Idle between requests past the idle timeout.
    Idle,
    /// Half-closed past [`LINGER`].
    Linger,
}

/// The connection timeouts (nanos).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub header: u64,
    pub body: u64,
    pub idle: u64,
}

impl Timeouts {
    pub fn new(header: Duration, body: Duration, idle: Duration) -> Timeouts {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Timeouts {
            header: nanos(header),
            body: nanos(body),
            idle: nanos(idle),
        }
    }

    /// The deadline `phase` (entered `age` nanos ago) passed, if any; `write_wait`: how long
    /// output has waited to be written (0 when nothing is unwritten). A stalled write counts
    /// first, whatever the phase.
    pub fn check(&self, phase: Phase, age: u64, write_wait: u64) -> Option<Expired> {
        if write_wait > self.body {
            return Some(Expired::Write);
        }
        match phase {
            Phase::Head if age > self.header => Some(Expired::Header),
            Phase::Body if age > self.body => Some(Expired::Body),
            Phase::Idle if age > self.idle => Some(Expired::Idle),
            Phase::Linger if age > LINGER.as_nanos() as u64 => Some(Expired::Linger),
            _ => None,
        }
    }

    /// [`Timeouts::check`] for `conn` at `now` (clock nanos).
    pub fn check_conn<P>(&self, conn: &Conn<P>, now: u64) -> Option<Expired> {
        let write_wait = match conn.unwritten() {
            0 => 0,
            _ => now.saturating_sub(conn.write_since),
        };
        self.check(conn.phase, now.saturating_sub(conn.phase_since), write_wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn t() -> Timeouts {
        let ms = Duration::from_millis;
        Timeouts::new(ms(100), ms(200), ms(300))
    }

    #[test]
    fn each_phase_has_its_own_deadline_and_busy_has_none() {
        let t = t();
        assert_eq!(
            t.check(Phase::Head, 100 * MS, 0),
            None,
            "at the deadline: not past"
        );
        assert_eq!(t.check(Phase::Head, 100 * MS + 1, 0), Some(Expired::Header));
        assert_eq!(t.check(Phase::Body, 150 * MS, 0), None);
        assert_eq!(t.check(Phase::Body, 201 * MS, 0), Some(Expired::Body));
        assert_eq!(t.check(Phase::Idle, 250 * MS, 0), None);
        assert_eq!(t.check(Phase::Idle, 301 * MS, 0), Some(Expired::Idle));
        let linger = LINGER.as_nanos() as u64;
        assert_eq!(t.check(Phase::Linger, linger, 0), None);
        assert_eq!(t.check(Phase::Linger, linger + 1, 0), Some(Expired::Linger));
        assert_eq!(
            t.check(Phase::Busy, u64::MAX, 0),
            None,
            "the server owes the answer"
        );
    }

    #[test]
    fn a_stalled_write_expires_in_any_phase_first() {
        let t = t();
        for phase in [Phase::Idle, Phase::Head, Phase::Body, Phase::Busy] {
            assert_eq!(
                t.check(phase, 0, 201 * MS),
                Some(Expired::Write),
                "{phase:?}"
            );
            assert_eq!(t.check(phase, 0, 200 * MS), None, "{phase:?}");
        }
        // Past its own deadline too: the stalled write is what is reported.
        assert_eq!(
            t.check(Phase::Head, 500 * MS, 201 * MS),
            Some(Expired::Write)
        );
    }

    #[test]
    fn durations_past_u64_nanos_saturate_rather_than_wrap() {
        let t = Timeouts::new(Duration::MAX, Duration::from_secs(1), Duration::MAX);
        assert_eq!(t.header, u64::MAX);
        assert_eq!(t.check(Phase::Head, u64::MAX, 0), None);
    }

    /// A table without sockets: slots are reused, the bound is counted, and a slot given back
    /// unused is not counted open.
    #[test]
    fn slots_are_reused_and_the_bound_counts_open_connections() {
        let mut c: Conns<()> = Conns::new(2);
        let a = c.reserve();
        let b = c.reserve();
        assert_ne!(a, b);
        assert_eq!(c.open(), 0, "reserved is not open");
        c.unreserve(b);
        assert_eq!(c.reserve(), b, "a slot given back is reused first");
        assert!(c.take(a).is_none(), "nothing was put there");
        assert_eq!(c.open(), 0);
        assert!(!c.is_full());
        assert_eq!(c.slots(), 2);
    }
}

#[cfg(test)]
mod table_tests {
    use super::*;
    use crate::net::budget::BodyBudget;
    use crate::net::http::{Limits, RequestReader};

    fn conn() -> (Conn<()>, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (ours, _) = l.accept().unwrap();
        ours.set_nonblocking(true).unwrap();
        let stream = Stream::Mio(mio::net::TcpStream::from_std(ours));
        let budget = crate::sync::Arc::new(BodyBudget::new(1 << 20));
        let reader = RequestReader::new(Limits::default());
        (Conn::new(stream, reader, budget, 0), peer)
    }

    #[test]
    fn open_connections_fill_the_table_to_its_bound_and_closed_slots_are_reused() {
        let mut c: Conns<()> = Conns::new(2);
        let (x, _px) = conn();
        let (y, _py) = conn();
        let a = c.reserve();
        c.put(a, x);
        let b = c.reserve();
        c.put(b, y);
        assert_eq!(c.open(), 2);
        assert!(c.is_full());
        assert!(c.get(a).is_some() && c.stream(b).is_some());
        assert!(c.take(a).is_some());
        assert!(c.get(a).is_none() && c.stream(a).is_none());
        assert!(c.take(a).is_none(), "closed once");
        assert_eq!(c.open(), 1);
        assert!(!c.is_full());
        assert_eq!(c.reserve(), a, "the closed slot is reused");
        assert_eq!(c.slots(), 2);
    }

    #[test]
    fn an_answered_connection_is_listed_once_until_taken_and_again_after() {
        use crate::net::conn::Slot;
        let mut c: Conns<()> = Conns::new(4);
        let (x, _px) = conn();
        let (y, _py) = conn();
        let (a, b) = (c.reserve(), c.reserve());
        c.put(a, x);
        c.put(b, y);
        for idx in [a, b] {
            let conn = c.get_mut(idx).unwrap();
            conn.push(Slot::Pending(()));
            conn.push(Slot::Pending(()));
        }
        let ready = || Slot::Ready {
            bytes: b"HTTP/1.1 202 Accepted\r\n\r\n".to_vec(),
            close: false,
        };
        assert!(c.answer(b, 0, ready()));
        assert!(c.answer(a, 0, ready()));
        assert!(c.answer(b, 1, ready()), "listed already: not twice");
        let mut got = vec![99];
        c.take_answered(&mut got);
        assert_eq!(got, vec![b, a], "in the order first answered, once each");
        assert!(matches!(c.get(b).unwrap().slots[1], Slot::Ready { .. }));
        c.take_answered(&mut got);
        assert!(got.is_empty(), "taken: the list is empty");
        assert!(c.answer(a, 1, ready()));
        c.take_answered(&mut got);
        assert_eq!(
            got,
            vec![a],
            "answered again after it was taken: listed again"
        );
        c.take(a);
        assert!(
            !c.answer(a, 0, ready()),
            "a closed connection is not answered"
        );
        c.take_answered(&mut got);
        assert!(got.is_empty());
    }

    #[test]
    fn a_connection_with_unwritten_output_expires_by_its_write_clock() {
        let (mut x, _peer) = conn();
        let t = Timeouts::new(
            Duration::from_secs(1),
            Duration::from_millis(10),
            Duration::from_secs(1),
        );
        x.set_phase(Phase::Busy, 0);
        assert_eq!(t.check_conn(&x, 1 << 40), None, "nothing unwritten");
        // 8 MiB to a peer that does not read: the socket fills and output waits.
        let body: std::sync::Arc<[u8]> = std::sync::Arc::from(vec![1u8; 8 << 20]);
        let head = b"head".to_vec();
        x.push(crate::net::conn::Slot::Shared {
            head,
            body,
            close: false,
        });
        assert_eq!(x.flush(5).unwrap(), crate::net::conn::Flush::Blocked);
        assert!(x.unwritten() > 0);
        let since = x.write_since;
        assert_eq!(t.check_conn(&x, since + 10 * 1_000_000), None);
        assert_eq!(
            t.check_conn(&x, since + 10 * 1_000_000 + 1),
            Some(Expired::Write)
        );
    }
}
