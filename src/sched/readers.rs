//! Operator reads off the core loops (issue 39, items 1 and 3): event lookups and lists
//! (`/api/v1/events…`), the ledger (`/api/v1/ledger`) and the dashboard's data
//! (`/api/v1/state`) are answered by reader threads, never on an ingest core's loop; so are an
//! online bulk DLQ replay's listing and entry reads ([`ReadWork::Replay`]: the core only
//! appends what the reader picked). A list
//! scans log segments for tens or hundreds of milliseconds; on the loop that held every
//! connection of the core, `/healthz` included, for as long.
//!
//! # The hand-off
//!
//! The core that frames such a request queues a `Slot::Deferred` on the connection (with a
//! ticket of its own, so answers keep their request order), takes one of the node's
//! [`MAX_READS`] read slots and sends the request to the readers' queue
//! ([`ReadLink::submit`]). A reader answers it from the node's shared state
//! (`Shared::ops_view`, the same code as before: `ops::events_api`, `ops::dashboard`), pushes
//! the answer on the asking core's reply ring and wakes that core's poll. The core takes its
//! replies at the end of each turn ([`ReadLink::take`]), which gives the slot back, fills the
//! connection's slot and writes. A reply for a connection closed meanwhile is dropped.
//!
//! # Bounds
//!
//! - **Reads outstanding, node-wide: [`MAX_READS`]** — queued, being read, or answered and not
//!   yet taken by their core. Past it a read is refused at once: `503
//!   {"status":"refused","reason":"readers_busy"}` with `Retry-After: 1`, counted in
//!   `sluice_ops_reads_total{result="refused"}`. So the job queue and each core's reply ring
//!   (capacity [`MAX_READS`]) never fill.
//! - **Readers: [`READERS`] threads**, `sluice-reader-K`, each at nice [`READER_NICE`] (19): a
//!   read competes for CPU with the cores at 15/1024 of their weight, so a loop of reads slows
//!   itself, not the ingest (`benches/scenarios/reads.sh` measures it); a read still gets its
//!   share on a saturated machine: it is not `SCHED_IDLE`.
//! - A read's own cost is the routes' (`ops::events_api`: a list is bounded by its `limit`, a
//!   lookup by `MAX_RECORDS_AFTER`; an online bulk DLQ replay's listing and reads by
//!   `max_dlq_entries`, its pick by `dispatch::dlq::bulk::ONLINE_CHUNK` entries and
//!   `ONLINE_PICK_BYTES`). A reader keeps up to `storage::map_cache::CAPACITY` segment
//!   maps for reuse (a deleted segment's map is dropped within a second).
//!
//! # Stopping
//!
//! Readers hold the node's shared state; [`Readers::stop`] (after the cores have exited, so no
//! core sends any more) closes the queue and joins them, waiting at most [`STOP_WAIT`] for a read
//! in progress (then the thread is left to finish it alone: the process is exiting).
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::dispatch::dlq::bulk::{pick, Pick, ReplayFilter};
use crate::ingest::router::OpsEndpoint;
use crate::net::io::Waker;
use crate::ops::dashboard::Answer;
use crate::ops::view::OpsView;
use crate::ring;
pub use crate::sched::read_board::{ReadBoard, MAX_READS};
use crate::sched::state::Shared;

/// Reader threads.
pub const READERS: usize = 1;
/// The readers' nice value (Linux: per thread).
pub const READER_NICE: i32 = 19;
/// How long [`Readers::stop`] waits for a read in progress.
pub const STOP_WAIT: Duration = Duration::from_secs(2);

/// One operator read, as the core framed it (owned: it crosses to a reader thread).
#[derive(Debug, Clone)]
pub struct ReadRequest {
    pub ep: OpsEndpoint,
    pub path: String,
    pub query: Option<String>,
    pub authorization: Option<Vec<u8>>,
}

/// What a reader does for a core.
#[derive(Debug)]
pub enum ReadWork {
    /// An operator read, answered whole.
    Ops(ReadRequest),
    /// An online bulk DLQ replay's listing and reads (`dispatch::dlq::bulk::pick`); the core
    /// appends what was picked and answers (`sched::worker::replay`).
    Replay(ReplayFilter),
}

impl From<ReadRequest> for ReadWork {
    fn from(req: ReadRequest) -> Self {
        ReadWork::Ops(req)
    }
}

/// What a reader sends back.
#[derive(Debug)]
pub enum ReadOutput {
    Answer(Answer),
    /// The entries a bulk replay picked, or why the DLQ could not be listed.
    Replay(Result<Pick, String>),
}

/// A reader's answer, for the connection `conn` of the asking core, slot `ticket`.
#[derive(Debug)]
pub struct ReadReply {
    pub conn: usize,
    pub ticket: u64,
    pub output: ReadOutput,
}

#[derive(Debug)]
struct Job {
    core: usize,
    conn: usize,
    ticket: u64,
    work: ReadWork,
}

/// A core's end of the readers: its sender into the queue and its reply ring.
#[derive(Debug)]
pub struct ReadLink {
    core: usize,
    jobs: SyncSender<Job>,
    replies: ring::Receiver<ReadReply>,
    next_ticket: u64,
}

impl ReadLink {
    /// Sends `req` for connection `conn` to the readers: `Some(ticket)` for the connection's
    /// deferred slot, or `None` when [`MAX_READS`] reads are outstanding (counted; the caller
    /// answers `503 readers_busy`).
    pub fn submit(
        &mut self,
        board: &ReadBoard,
        conn: usize,
        work: impl Into<ReadWork>,
    ) -> Option<u64> {
        if !board.try_take() {
            return None;
        }
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        let job = Job {
            core: self.core,
            conn,
            ticket,
            work: work.into(),
        };
        // The slot taken bounds the queue to MAX_READS: `Full` cannot happen; `Disconnected`
        // only once the readers are gone (stopping).
        if self.jobs.try_send(job).is_err() {
            board.give_back();
            board.refuse();
            return None;
        }
        Some(ticket)
    }

    /// The next answer for this core, giving its read slot back.
    /// True when no answer waits to be taken (the loop then skips [`ReadLink::take`]'s call).
    pub fn nothing_back(&self) -> bool {
        self.replies.is_empty()
    }

    pub fn take(&mut self, board: &ReadBoard) -> Option<ReadReply> {
        let reply = self.replies.try_pop()?;
        board.give_back();
        Some(reply)
    }
}

/// The reader threads (module docs).
#[derive(Debug)]
pub struct Readers {
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl Readers {
    /// Starts [`READERS`] threads answering from `shared`; returns one [`ReadLink`] per core,
    /// `wakers[k]` waking core `k`.
    pub fn start(
        shared: Arc<Shared>,
        wakers: Vec<Arc<Waker>>,
    ) -> std::io::Result<(Readers, Vec<ReadLink>)> {
        let (links, jobs_rx, reply_tx) = wire(wakers.len());
        let jobs_rx = Arc::new(Mutex::new(jobs_rx));
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for k in 0..READERS {
            let r = Reader {
                shared: shared.clone(),
                jobs: jobs_rx.clone(),
                replies: reply_tx.clone(),
                wakers: wakers.clone(),
                stop: stop.clone(),
            };
            let h = std::thread::Builder::new()
                .name(format!("sluice-reader-{k}"))
                .spawn(move || r.run())?;
            threads.push(h);
        }
        Ok((Readers { threads, stop }, links))
    }

    /// Stops the readers (call once the cores have exited): queued reads are dropped, a read in
    /// progress gets [`STOP_WAIT`].
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let deadline = Instant::now() + STOP_WAIT;
        while self.threads.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        for h in self.threads {
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }
}

/// The links of `cores` cores, the readers' end of the queue and the reply rings' senders.
type Wired = (Vec<ReadLink>, Receiver<Job>, Vec<ring::Sender<ReadReply>>);

fn wire(cores: usize) -> Wired {
    let (jobs_tx, jobs_rx) = sync_channel::<Job>(MAX_READS);
    let (mut reply_tx, mut links) = (Vec::new(), Vec::new());
    for core in 0..cores {
        let (tx, rx) = ring::channel(MAX_READS);
        reply_tx.push(tx);
        links.push(ReadLink {
            core,
            jobs: jobs_tx.clone(),
            replies: rx,
            next_ticket: 0,
        });
    }
    (links, jobs_rx, reply_tx)
}

struct Reader {
    shared: Arc<Shared>,
    jobs: Arc<Mutex<Receiver<Job>>>,
    replies: Vec<ring::Sender<ReadReply>>,
    wakers: Vec<Arc<Waker>>,
    stop: Arc<AtomicBool>,
}

impl Reader {
    fn run(self) {
        if let Err(e) = crate::sched::thread_policy::set_current_nice(READER_NICE) {
            eprintln!("sluice: a reader thread keeps the default priority ({e})");
        }
        // A lookup maps the same segments again and again: keep the maps (bounded).
        crate::storage::map_cache::keep_maps_on_this_thread();
        loop {
            // Held only while waiting for the next job: one reader waits, the others queue on
            // the lock (none is busy then).
            let job = match self.jobs.lock() {
                Ok(rx) => rx.recv_timeout(Duration::from_millis(100)),
                Err(_) => return,
            };
            let job = match job {
                Ok(job) => job,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if self.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    continue;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            };
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            let board = self.shared.reads();
            let started = Instant::now();
            let output = match &job.work {
                ReadWork::Ops(req) => ReadOutput::Answer(answer(&self.shared.ops_view(), req)),
                ReadWork::Replay(filter) => {
                    let store = &self.shared.dispatch().dlq;
                    ReadOutput::Replay(pick(store, filter).map_err(|e| e.to_string()))
                }
            };
            let spent = started.elapsed().as_nanos() as u64;
            board.served(spent, crate::storage::map_cache::kept() as u64);
            let reply = ReadReply {
                conn: job.conn,
                ticket: job.ticket,
                output,
            };
            // The ring holds MAX_READS and at most MAX_READS replies are outstanding, so the
            // push fails only when the core has exited (ring closed): give the slot back.
            if self.replies[job.core].try_push(reply).is_err() {
                board.give_back();
                continue;
            }
            let _ = self.wakers[job.core].wake();
        }
    }
}

/// The answer to `req`, computed from `view` (the same routes the cores served before).
pub fn answer(view: &OpsView<'_>, req: &ReadRequest) -> Answer {
    let auth = req.authorization.as_deref();
    let query = req.query.as_deref();
    match req.ep {
        OpsEndpoint::Event => crate::ops::events_api::answer(view, &req.path, query, auth),
        OpsEndpoint::Events => crate::ops::events_api::answer_list(view, query, auth),
        ep => crate::ops::dashboard::answer(view, ep, auth),
    }
}

/// Whether `ep` is answered by the readers.
pub fn is_read(ep: OpsEndpoint) -> bool {
    matches!(
        ep,
        OpsEndpoint::State | OpsEndpoint::Ledger | OpsEndpoint::Event | OpsEndpoint::Events
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ReadRequest {
        ReadRequest {
            ep: OpsEndpoint::Events,
            path: "/api/v1/events".into(),
            query: Some("limit=5".into()),
            authorization: None,
        }
    }

    /// The bound counts a read from its submission until its core takes the answer; past it a
    /// read is refused and counted, and a taken answer makes room again.
    #[test]
    fn reads_are_bounded_from_submission_to_the_taken_answer() {
        let board = ReadBoard::default();
        let (mut links, jobs, replies) = wire(2);
        let mut tickets = Vec::new();
        for i in 0..MAX_READS {
            let link = &mut links[i % 2];
            tickets.push(link.submit(&board, 7, request()).expect("room"));
        }
        assert_eq!(board.outstanding(), MAX_READS as u64);
        assert_eq!(links[0].submit(&board, 7, request()), None);
        assert_eq!(board.refused(), 1);
        // Each core numbers its own reads, in order.
        assert_eq!(&tickets[..4], &[1, 1, 2, 2]);
        // A reader takes a job and answers core 1: the slot stays taken until core 1 takes it.
        let job = jobs.try_recv().unwrap();
        assert_eq!((job.core, job.conn, job.ticket), (0, 7, 1));
        let answer = Answer::json(200, b"{}".to_vec());
        let reply = ReadReply {
            conn: job.conn,
            ticket: job.ticket,
            output: ReadOutput::Answer(answer),
        };
        replies[0].try_push(reply).unwrap();
        assert_eq!(links[0].submit(&board, 7, request()), None, "still taken");
        assert!(links[1].take(&board).is_none(), "not core 1's");
        let got = links[0].take(&board).expect("core 0's answer");
        let ReadOutput::Answer(a) = &got.output else {
            panic!("{got:?}")
        };
        assert_eq!((got.conn, got.ticket, a.status), (7, 1, 200));
        assert_eq!(board.outstanding(), MAX_READS as u64 - 1);
        assert!(
            links[1].submit(&board, 3, request()).is_some(),
            "room again"
        );
    }

    /// Once the readers are gone a submission is refused, and its slot is not kept.
    #[test]
    fn a_read_without_readers_is_refused_and_keeps_no_slot() {
        let board = ReadBoard::default();
        let (mut links, jobs, _replies) = wire(1);
        drop(jobs);
        assert_eq!(links[0].submit(&board, 0, request()), None);
        assert_eq!(board.outstanding(), 0);
    }

    #[test]
    fn the_readers_answer_lookups_lists_ledger_and_state_only() {
        use OpsEndpoint::*;
        let read: Vec<_> = [Healthz, Readyz, Metrics, Ui, State, Ledger, Event, Events]
            .into_iter()
            .filter(|&e| is_read(e))
            .collect();
        assert_eq!(read, [State, Ledger, Event, Events]);
    }
}
