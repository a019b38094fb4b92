//! The core's loop on io_uring (`net::io::uring`): one `io_uring_enter` per turn submits the
//! turn's receives and sends and waits for completions. A receive's completion is the
//! connection's readable edge, a send's the writable one; the rest of the turn (requests,
//! commits, dispatch, sweep, drain) is the same code as on mio. The core's mio poll still
//! carries accepts, wakers and the outbound dispatch sockets: its epoll fd is watched by the
//! ring, and drained without waiting when it fires.

use super::*;
use crate::net::io::uring::{Completion, Op};

impl Worker {
    pub(super) fn run_uring(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut completions: Vec<Completion> = Vec::new();
        let mut last_sweep = self.now();
        // Drain the poll once at the start: the listener may already have connections.
        let mut poll_ready = true;
        loop {
            self.finish_scrapes();
            self.arm_touched();
            let timeout = if poll_ready {
                Duration::ZERO
            } else {
                self.turn_timeout()
            };
            let Some(ring) = self.uring.as_deref_mut() else {
                return;
            };
            if let Err(e) = ring.wait(timeout) {
                eprintln!("sluice: worker {}: io_uring wait failed: {e}", self.id);
                return;
            }
            ring.completions(&mut completions);
            self.begin_turn();
            for c in &completions {
                match c.op {
                    Op::Poll => poll_ready = true,
                    Op::Recv | Op::Send => self.on_completion(c),
                    // The own log's commit is back (`sched::commit`): answered at turn end.
                    Op::File => {
                        let ring = self.uring.as_deref_mut();
                        if let Some(done) = ring.and_then(|r| r.take_file_done()) {
                            self.committer.on_ring_done(done);
                        }
                    }
                    Op::Provide | Op::Cancel | Op::FileWrite | Op::FileSync => {}
                }
            }
            if poll_ready {
                if let Err(e) = self.poll.poll(&mut events, Some(Duration::ZERO)) {
                    if e.kind() != io::ErrorKind::Interrupted {
                        eprintln!("sluice: worker {}: poll failed: {e}", self.id);
                        return;
                    }
                }
                // A full batch may have left events behind: drain again next turn.
                let mut n = 0;
                for ev in events.iter() {
                    n += 1;
                    self.on_event(ev);
                }
                poll_ready = n == events.capacity();
            }
            if let Some(ring) = self.uring.as_deref() {
                self.metrics.set_io_retired(ring.retired() as u64);
            }
            if self.end_turn(&mut last_sweep) {
                break;
            }
        }
        self.arm_touched();
        if let Some(ring) = self.uring.as_deref_mut() {
            ring.cancel_all();
        }
    }

    /// A receive or send completed for connection `c.idx`.
    fn on_completion(&mut self, c: &Completion) {
        let Some(ring) = self.uring.as_deref_mut() else {
            return;
        };
        let live = self.conns.get_mut(c.idx).and_then(Option::as_mut);
        let Some(conn) = live.filter(|conn| match &conn.stream {
            Stream::Uring(s) => s.gen() == c.gen,
            Stream::Mio(_) => false,
        }) else {
            return ring.on_orphan(c);
        };
        let Stream::Uring(s) = &mut conn.stream else {
            return;
        };
        match c.op {
            Op::Recv => {
                if !ring.on_recv(s, c) {
                    // The buffer pool was empty: try again at the end of the turn.
                    self.metrics.incr_io_pool_empty();
                    return self.note_io(c.idx);
                }
                conn.readable = true;
                self.drive(c.idx);
            }
            _ => {
                ring.on_send(s, c);
                // Room in the outbox (or an error to find): carry on where writing stopped.
                let wake = s.take_writable() || c.res < 0;
                self.note_io(c.idx);
                if wake {
                    self.drive(c.idx);
                }
            }
        }
    }

    /// Marks a connection for arming at the end of the turn (io_uring only).
    pub(super) fn note_io(&mut self, idx: usize) {
        if self.uring.is_none() {
            return;
        }
        if let Some(Some(conn)) = self.conns.get_mut(idx) {
            if let Stream::Uring(s) = &mut conn.stream {
                if !s.queued {
                    s.queued = true;
                    self.touched.push(idx);
                }
            }
        }
    }

    /// Submits what the connections touched this turn need: sends of what they wrote,
    /// receives for those that read dry, deferred write shutdowns.
    fn arm_touched(&mut self) {
        let Some(ring) = self.uring.as_deref_mut() else {
            return;
        };
        let mut failed = Vec::new();
        for idx in self.touched.drain(..) {
            let Some(Some(conn)) = self.conns.get_mut(idx) else {
                continue;
            };
            let Stream::Uring(s) = &mut conn.stream else {
                continue;
            };
            s.queued = false;
            if let Err(e) = ring.arm(idx, s) {
                eprintln!("sluice: io_uring: submitting for a connection: {e}");
                failed.push(idx);
            }
        }
        for idx in failed {
            self.close(idx);
        }
    }
}
