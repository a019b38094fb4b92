//! The mirror thread: each core's locally committed batches published to JetStream, in log
//! order, with the official `async-nats` client on a current-thread tokio runtime of its own.
//! No core loop ever waits on it: a core's commit helper hands a frame over ([`MirrorLink::
//! submit`], a channel send) and the core's loop learns of the acknowledgement through
//! [`CoreState::acked`] and one wake.
//!
//! **One publish in flight per subject, each carrying every frame committed meanwhile.** The
//! fence is `Nats-Expected-Last-Subject-Sequence`: every publish names the stream sequence of
//! the previous message on the subject, which is known only once that message is acknowledged.
//! So a core's subject has one message on its way at a time, and the frames that commit while
//! it is (up to `max_inflight` batches per core, bounded by the core's committer) go together
//! in the next message, split only at the server's `max_payload`. The group commit grows with
//! the round trip as it grows with the `fdatasync`. Acknowledgements therefore come in log
//! order. Different cores publish concurrently (one task each).
//!
//! **Idempotent retries.** A message that is not acknowledged within `ack_timeout` (or whose
//! publish fails) is sent again, the same bytes with the same `Nats-Msg-Id`
//! (`<subject>@<expected sequence>`, unique per message of a subject), until it is
//! acknowledged: a copy that did land is answered from JetStream's duplicate window, not
//! stored twice. Meanwhile the core is marked down ([`ReplicationState::refusal`]:
//! `replication_unavailable`), and the retries back off from 50 ms to 1 s.
//!
//! **Fenced.** A publish refused for a wrong last subject sequence means another node wrote
//! this node's subject (it adopted the node's logs). The node is fenced: a log line names the
//! subject and both sequences, the task stops publishing (the log never forks), and the node
//! refuses new events (`replication_fenced`) until it is restarted.
//!
//! **Adopted logs.** A log this node adopted from a lost node (`replication::adopt`) is
//! published on that node's subject by a task of its own, opened on this thread on request
//! ([`SubjectOpener::open`]): fenced from the subject's last sequence, after publishing what the
//! local copy holds beyond the stream. Its frames hold no batch and its failures refuse nothing
//! (its state is not one of the cores'), but a refused fence fences the node as for its own.
//!
//! **The lease.** At start the node takes its entry in `<stream>_nodes` (refusing to start if
//! another node adopted its logs) and renews it every `lease / 3`; a renewal that finds the
//! entry adopted fences the node too (`replication::lease`).
//!
//! Bounds: frames per core ≤ `max_inflight` (the committer does not hand over more); one
//! message per core in flight, at most the server's `max_payload`; the stream-size poll every
//! `STREAM_POLL` (5 s).
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, context::PublishErrorKind, stream};
use bytes::Bytes;
use tokio::sync::{mpsc, watch};

use std::collections::HashMap;

use crate::replication::catch_up::{self, last_sequence, Behind, LocalLog};
use crate::replication::client;
use crate::replication::lease::{Adopted, Lease, Renewal};
use crate::replication::message::{merge_max, pack, FrameBuf, FrameMeta, Lists, MESSAGE_OVERHEAD};
use crate::replication::purge::Purger;
use crate::replication::retention::Retention;
use crate::replication::spec::ReplicationSpec;
use crate::replication::state::{CoreState, ReplicationState};
use crate::wal::Lsn;

/// Room left in a message for its headers (subject, `Nats-Msg-Id`, the expectation).
const HEADER_ROOM: usize = 512;
/// How often the stream's size is read for `sluice_replication_stream_bytes`.
const STREAM_POLL: Duration = Duration::from_secs(5);
/// Retry back-off of an unacknowledged message: from the first to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(1));

/// A frame on its way: its number (0: one the mirror added, a dead letter carried forward),
/// its bytes and what it holds.
type Pending = (u64, Vec<u8>, FrameMeta);

/// Reads the live dead letters of the given ids from the node's DLQ, each in its store's
/// encoding (`replication::retention`: carried forward); those gone are left out.
pub type Carry = Arc<dyn Fn(&[String]) -> Vec<(String, Vec<u8>)> + Send + Sync>;

/// What wakes a core's loop when its frames are acknowledged (or the node is fenced).
pub type Wake = Box<dyn Fn() + Send + Sync>;

/// Why the mirror did not start.
#[derive(Debug)]
pub enum StartError {
    /// No JetStream server answered within the start-up wait.
    Unreachable { servers: Vec<String>, error: String },
    /// The stream exists with fewer replicas than `replication.replicas`.
    Replicas {
        stream: String,
        have: usize,
        want: usize,
    },
    /// The stream could not be created or read.
    Stream { stream: String, error: String },
    /// The server's `max_payload` is below the largest record this node may write.
    MaxPayload { max_payload: usize, largest: usize },
    /// The stream holds more of a log than the local disk (it lost acknowledged records).
    Behind(Vec<Behind>),
    /// The records the local logs hold beyond the stream could not be published.
    CatchUp(String),
    /// Another node adopted this node's logs (`replication::lease`).
    Adopted(Adopted),
    /// The mirror thread could not be started.
    Thread(std::io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Unreachable { servers, error } => write!(
                f,
                "replication: no JetStream server answered ({}): {error}",
                servers.join(", ")
            ),
            StartError::Replicas { stream, have, want } => write!(
                f,
                "replication: stream {stream:?} has {have} replicas, replication.replicas = \
                 {want}: raise the stream's replicas (nats stream edit) or lower the setting"
            ),
            StartError::Stream { stream, error } => {
                write!(f, "replication: stream {stream:?}: {error}")
            }
            StartError::MaxPayload {
                max_payload,
                largest,
            } => write!(
                f,
                "replication: the NATS servers' max_payload ({max_payload} bytes) is below the \
                 largest record this node may write ({largest} bytes with its headers, from \
                 server.max_body_bytes): raise max_payload in the nats-server configuration \
                 (up to 8MB) or lower server.max_body_bytes"
            ),
            StartError::Behind(logs) => {
                write!(f, "replication: the stream holds more than this disk:")?;
                for b in logs {
                    write!(
                        f,
                        " log core-{} ends at LSN {} here, the stream has it through {};",
                        b.log, b.local, b.stream
                    )?;
                }
                write!(
                    f,
                    " the disk lost acknowledged events (or another node wrote these logs): \
                     restore them (`sluice replication restore` into an empty data dir)"
                )
            }
            StartError::CatchUp(e) => write!(
                f,
                "replication: publishing the records this disk holds beyond the stream: {e}"
            ),
            StartError::Adopted(a) => write!(f, "replication: {a}"),
            StartError::Thread(e) => write!(f, "replication: mirror thread: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// One core's way to the mirror, owned by its commit helper.
#[derive(Clone)]
pub struct MirrorLink {
    state: Arc<CoreState>,
    /// The largest frame a message can carry (the server's `max_payload` less the overhead).
    frame_limit: usize,
    tx: mpsc::UnboundedSender<Pending>,
    wake: Arc<OnceLock<Wake>>,
}

impl fmt::Debug for MirrorLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MirrorLink")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl MirrorLink {
    /// A link over `state`, for messages of at most `max_payload` bytes, and the receiving end
    /// of its frames (its publishing task's).
    fn new(
        state: Arc<CoreState>,
        max_payload: usize,
    ) -> (MirrorLink, mpsc::UnboundedReceiver<Pending>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let link = MirrorLink {
            state,
            frame_limit: max_payload.saturating_sub(MESSAGE_OVERHEAD + HEADER_ROOM),
            tx,
            wake: Arc::new(OnceLock::new()),
        };
        (link, rx)
    }

    /// Hands a committed batch's frame over; returns its number (the core's
    /// [`CoreState::acked`] reaches it once JetStream has it). The channel is unbounded here
    /// because its producer bounds it: the committer holds at most `max_inflight` batches
    /// unacknowledged.
    pub fn submit(&self, (frame, meta): (Vec<u8>, FrameMeta)) -> u64 {
        let n = self.state.next_frame();
        // A closed channel is a stopping node: the frame stays unacknowledged, so its batch is
        // never settled as replicated.
        let _ = self.tx.send((n, frame, meta));
        n
    }

    /// The largest frame a message can carry: a commit helper cuts a batch's frame there.
    pub fn frame_limit(&self) -> usize {
        self.frame_limit
    }

    /// The core's mirror state (the committer reads `acked`).
    pub fn state(&self) -> &Arc<CoreState> {
        &self.state
    }

    /// Sets how the core's loop is woken on an acknowledgement (once, at the core's start).
    pub fn set_wake(&self, wake: Wake) {
        let _ = self.wake.set(wake);
    }
}

/// The mirror thread, its links and the node's replication state.
#[derive(Debug)]
pub struct Mirror {
    links: Vec<MirrorLink>,
    state: Arc<ReplicationState>,
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
    opener: SubjectOpener,
    /// Per log, the highest retired point the node's messages announced in earlier runs.
    retired: Vec<(u16, Lsn)>,
}

/// The way to publish on another node's subject: the logs this node adopted
/// ([`SubjectOpener::open`]), their done records written where that node's were.
#[derive(Clone, Debug)]
pub struct SubjectOpener {
    tx: mpsc::UnboundedSender<OpenSubject>,
    lease: Duration,
}

/// A request to the mirror thread for an adopted log's link.
#[derive(Debug)]
struct OpenSubject {
    subject: String,
    /// The subjects of the log's node (`<stream>.<node>.>`), for how far the log is replicated.
    node_filter: String,
    /// The log (its `index` is its `core-K`'s `K`, as frames name it).
    log: LocalLog,
    /// Publish its records beyond the stream first (a restart: the copy here may be ahead).
    catch_up: bool,
    reply: std::sync::mpsc::Sender<Result<MirrorLink, String>>,
}

impl SubjectOpener {
    /// A link that publishes the frames of adopted log `log` on `subject`, fenced from the
    /// subject's last sequence as read now. With `catch_up`, the records `log` holds beyond
    /// what the frames on `node_filter` say is replicated are published first, in order. The
    /// link's frames hold no batch: an adopted log takes no ingest, and an outcome not yet
    /// replicated is at worst delivered again by a later adopter. Waits at most twice `lease`.
    pub fn open(
        &self,
        subject: String,
        node_filter: String,
        log: LocalLog,
        catch_up: bool,
    ) -> Result<MirrorLink, String> {
        let (reply, answer) = std::sync::mpsc::channel();
        let req = OpenSubject {
            subject,
            node_filter,
            log,
            catch_up,
            reply,
        };
        (self.tx.send(req)).map_err(|_| "the mirror thread has stopped".to_string())?;
        let within = self.lease * 2;
        (answer.recv_timeout(within))
            .map_err(|_| format!("the mirror did not answer within {within:?}"))?
    }
}

/// What the mirror thread needs to open an adopted log's subject.
struct Opener {
    js: jetstream::Context,
    stream: String,
    node: Arc<ReplicationState>,
    max_payload: usize,
    ack_timeout: Duration,
    lease: Duration,
}

impl Opener {
    /// Serves [`SubjectOpener::open`]: each request's task runs on the thread from then on.
    async fn serve(self, mut requests: mpsc::UnboundedReceiver<OpenSubject>) {
        while let Some(req) = requests.recv().await {
            let subject = req.subject.clone();
            let opened = self.open(&req).await;
            let answer = match opened {
                Ok(task) => {
                    let link = task.link.clone();
                    tokio::task::spawn_local(task.run());
                    Ok(link)
                }
                Err(e) => Err(format!("{subject}: {e}")),
            };
            let _ = req.reply.send(answer);
        }
    }

    async fn open(&self, req: &OpenSubject) -> Result<CoreTask, String> {
        let stream = (self.js.get_stream_no_info(&self.stream).await).map_err(|e| e.to_string())?;
        let expected = last_sequence(&stream, &req.subject).await?;
        let (link, rx) = MirrorLink::new(Arc::new(CoreState::default()), self.max_payload);
        let limit = link.frame_limit;
        let mut task = CoreTask {
            js: self.js.clone(),
            subject: req.subject.clone(),
            core: usize::from(req.log.index),
            link,
            node: self.node.clone(),
            rx,
            max_payload: self.max_payload,
            ack_timeout: self.ack_timeout,
            expected,
            retention: None,
            carrying: false,
            counted: 0,
            lists: Default::default(),
            purger: Arc::default(),
        };
        if req.catch_up {
            let through = catch_up::node_through(&stream, &req.node_filter, req.log.index).await?;
            let frames = catch_up::missing_frames(&req.log, through, limit)?;
            if !frames.is_empty() {
                eprintln!(
                    "sluice: replication: publishing LSNs {}..={} of adopted log core-{} on {} \
                     (durable here, not yet in the stream)",
                    through + 1,
                    req.log.last_lsn,
                    req.log.index,
                    req.subject
                );
                let published = tokio::time::timeout(self.lease, task.publish_all(frames)).await;
                match published {
                    Ok(true) => {}
                    Ok(false) => return Err("fenced".into()),
                    Err(_) => return Err(format!("not acknowledged within {:?}", self.lease)),
                }
            }
        }
        Ok(task)
    }
}

impl Mirror {
    /// Connects to `spec.servers` (waiting at most `spec.lease` for an answer), creates the
    /// stream if missing (`spec.replicas`, file storage, subjects `<stream>.>`) or checks its
    /// replicas, reads the last sequence of each core's subject, and starts the thread.
    /// `largest_record`: the largest WAL record this node may write (a message must carry one).
    /// Before it returns, the records `logs` hold beyond the stream are published
    /// (`replication::catch_up`), so the cores start with every local record replicated.
    pub fn start(
        spec: &ReplicationSpec,
        cores: usize,
        largest_record: usize,
        logs: &[LocalLog],
        carry: Carry,
    ) -> Result<Mirror, StartError> {
        let rt = crate::replication::client::runtime().map_err(StartError::Thread)?;
        let (js, max_payload, last, through) = rt.block_on(connect(spec, cores, logs))?;
        let lease = acquire_lease(&rt, &js, spec)?;
        let behind = catch_up::behind(logs, &through);
        if !behind.is_empty() {
            return Err(StartError::Behind(behind));
        }
        let largest = largest_record + MESSAGE_OVERHEAD + HEADER_ROOM + 64;
        if largest > max_payload {
            return Err(StartError::MaxPayload {
                max_payload,
                largest,
            });
        }
        let state = Arc::new(ReplicationState::new(cores));
        let (stop, stopped) = watch::channel(false);
        let (links, mut tasks) = core_tasks(&js, spec, &state, max_payload, last);
        publish_missing(&rt, &mut tasks, logs, &through, spec)?;
        let retired = seed_retention(spec, &mut tasks, &carry);
        state.refresh();
        let (open_tx, open_rx) = mpsc::unbounded_channel();
        let opener = Opener {
            js: js.clone(),
            stream: spec.stream.clone(),
            node: state.clone(),
            max_payload,
            ack_timeout: spec.ack_timeout,
            lease: spec.lease,
        };
        let poll = (js, spec.stream.clone(), state.clone());
        let renew = Renew {
            lease,
            every: spec.lease / 3,
            node: state.clone(),
            links: links.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("sluice-mirror".into())
            .spawn(move || rt.block_on(run(tasks, poll, renew, (opener, open_rx), stopped)))
            .map_err(StartError::Thread)?;
        Ok(Mirror {
            links,
            state,
            stop,
            thread: Some(thread),
            opener: SubjectOpener {
                tx: open_tx,
                lease: spec.lease,
            },
            retired,
        })
    }

    /// Core `core`'s link, for its commit helper.
    pub fn link(&self, core: usize) -> Option<MirrorLink> {
        self.links.get(core).cloned()
    }

    /// The node's replication state.
    pub fn state(&self) -> &Arc<ReplicationState> {
        &self.state
    }

    /// Per log (its `core-K`'s `K`), the highest retired point the node's messages in the
    /// stream announce: the node's own frames must never announce a lower one (the runtime
    /// gives it to each log's state at start-up, `WalShared::note_done_below`).
    pub fn retired(&self) -> &[(u16, Lsn)] {
        &self.retired
    }

    /// The way to publish an adopted log's frames on its node's subject.
    pub fn opener(&self) -> &SubjectOpener {
        &self.opener
    }

    /// Stops the thread (frames not yet acknowledged stay so) and joins it.
    pub fn close(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                eprintln!("sluice: the replication mirror thread panicked");
            }
        }
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.close();
    }
}

/// Each core's task learns what its subject already holds (every message of the node, read
/// once in stream order with the restore's reader), so that retention drops what earlier runs
/// wrote too. A failure is logged: retention then starts from this run's messages.
fn seed_retention(
    spec: &ReplicationSpec,
    tasks: &mut [CoreTask],
    carry: &Carry,
) -> Vec<(u16, Lsn)> {
    let mut firsts = Vec::new();
    for t in tasks.iter_mut() {
        t.retention = Some((Retention::default(), carry.clone()));
    }
    let mut seed = || -> Result<u64, crate::replication::restore::RestoreError> {
        let source = crate::replication::restore::fetch::Source::connect(spec, &spec.node)?;
        let subjects = source.subjects()?;
        source.read(&subjects, &mut |at, bytes| {
            let Ok(d) = crate::replication::message::decode(bytes) else {
                return Ok(());
            };
            let mut meta = FrameMeta::default();
            for f in &d.frames {
                meta.merge(f.meta());
            }
            merge_max(&mut firsts, meta.first.clone());
            let Some(task) = tasks.iter_mut().find(|t| t.subject == at.subject) else {
                return Ok(());
            };
            merge_max(&mut task.lists.0, meta.through.clone());
            merge_max(&mut task.lists.1, meta.first.clone());
            if let Some((r, _)) = task.retention.as_mut() {
                r.acked(at.sequence, meta);
            }
            Ok(())
        })
    };
    let seeded = seed();
    for t in tasks.iter_mut() {
        t.count_kept();
    }
    if let Err(e) = seeded {
        eprintln!(
            "sluice: replication: reading the node's messages for retention failed ({e}); \
             the stream keeps what earlier runs wrote"
        );
    }
    firsts
}

/// Each core's link and publishing task, `last[core]` being its subject's last sequence.
fn core_tasks(
    js: &jetstream::Context,
    spec: &ReplicationSpec,
    state: &Arc<ReplicationState>,
    max_payload: usize,
    last: Vec<u64>,
) -> (Vec<MirrorLink>, Vec<CoreTask>) {
    let mut links = Vec::new();
    let mut tasks = Vec::new();
    for (core, expected) in last.into_iter().enumerate() {
        let (link, rx) = MirrorLink::new(state.cores()[core].clone(), max_payload);
        tasks.push(CoreTask {
            js: js.clone(),
            subject: spec.subject(core),
            core,
            link: link.clone(),
            node: state.clone(),
            rx,
            max_payload,
            ack_timeout: spec.ack_timeout,
            expected,
            retention: None,
            carrying: false,
            counted: 0,
            lists: Default::default(),
            purger: Arc::default(),
        });
        links.push(link);
    }
    (links, tasks)
}

/// This node's lease (`replication::lease`), retried until `spec.lease` has passed: after a
/// JetStream restart the bucket's stream may still be electing its leader ("no responders").
fn acquire_lease(
    rt: &tokio::runtime::Runtime,
    js: &jetstream::Context,
    spec: &ReplicationSpec,
) -> Result<Lease, StartError> {
    let deadline = std::time::Instant::now() + spec.lease;
    loop {
        match rt.block_on(Lease::acquire(js, spec)) {
            Ok(Ok(lease)) => return Ok(lease),
            Ok(Err(adopted)) => return Err(StartError::Adopted(adopted)),
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => {
                return Err(StartError::Stream {
                    stream: spec.stream.clone(),
                    error: e,
                })
            }
        }
    }
}

/// The start-up catch-up (`replication::catch_up`): each log's records above its replicated
/// LSN published by its core's task, each message acknowledged within `spec.lease`.
fn publish_missing(
    rt: &tokio::runtime::Runtime,
    tasks: &mut [CoreTask],
    logs: &[LocalLog],
    through: &HashMap<u16, Lsn>,
    spec: &ReplicationSpec,
) -> Result<(), StartError> {
    for log in logs {
        let Some(task) = tasks.get_mut(log.core) else {
            continue;
        };
        let limit = task
            .max_payload
            .saturating_sub(MESSAGE_OVERHEAD + HEADER_ROOM);
        let from = through.get(&log.index).copied().unwrap_or(0);
        let frames = catch_up::missing_frames(log, from, limit).map_err(StartError::CatchUp)?;
        if frames.is_empty() {
            continue;
        }
        eprintln!(
            "sluice: replication: publishing LSNs {}..={} of log core-{} (durable here, not \
             yet in the stream) before the cores start",
            from + 1,
            log.last_lsn,
            log.index
        );
        let within = spec.lease;
        let published =
            rt.block_on(async { tokio::time::timeout(within, task.publish_all(frames)).await });
        match published {
            Ok(true) => {}
            Ok(false) => return Err(StartError::CatchUp("this node is fenced".into())),
            Err(_) => {
                let why = format!("not acknowledged within {within:?}");
                return Err(StartError::CatchUp(why));
            }
        }
    }
    Ok(())
}

/// Connects, ensures the stream, and reads each core's subject's last sequence.
async fn connect(
    spec: &ReplicationSpec,
    cores: usize,
    logs: &[LocalLog],
) -> Result<(jetstream::Context, usize, Vec<u64>, HashMap<u16, Lsn>), StartError> {
    let unreachable = |error: String| StartError::Unreachable {
        servers: spec.servers.clone(),
        error,
    };
    let client = client::connect(spec, "mirror").await.map_err(unreachable)?;
    let max_payload = client.server_info().max_payload;
    let js = jetstream::new(client);
    let stream_err = |error: String| StartError::Stream {
        stream: spec.stream.clone(),
        error,
    };
    let deadline = Instant::now() + spec.lease;
    let stream = loop {
        let config = stream::Config {
            name: spec.stream.clone(),
            subjects: vec![format!("{}.>", spec.stream)],
            num_replicas: spec.replicas,
            storage: stream::StorageType::File,
            duplicate_window: Duration::from_secs(120),
            allow_direct: true,
            ..Default::default()
        };
        match js.get_or_create_stream(config).await {
            Ok(s) => break s,
            // No quorum yet (a cluster still electing): wait, within the start-up bound.
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(stream_err(e.to_string())),
        }
    };
    let have = stream.cached_info().config.num_replicas;
    if have < spec.replicas {
        return Err(StartError::Replicas {
            stream: spec.stream.clone(),
            have,
            want: spec.replicas,
        });
    }
    let mut last = Vec::with_capacity(cores);
    for core in 0..cores {
        last.push(
            last_sequence(&stream, &spec.subject(core))
                .await
                .map_err(stream_err)?,
        );
    }
    let through = catch_up::replicated_through(&stream, spec, logs)
        .await
        .map_err(stream_err)?;
    Ok((js, max_payload, last, through))
}

/// The thread's body: every core's task, the stream-size poll, until stopped.
async fn run(
    tasks: Vec<CoreTask>,
    (js, name, state): (jetstream::Context, String, Arc<ReplicationState>),
    renew: Renew,
    (opener, requests): (Opener, mpsc::UnboundedReceiver<OpenSubject>),
    mut stopped: watch::Receiver<bool>,
) {
    let set = tokio::task::LocalSet::new();
    for t in tasks {
        set.spawn_local(t.run());
    }
    set.spawn_local(renew.run());
    set.spawn_local(opener.serve(requests));
    set.spawn_local(async move {
        loop {
            if let Ok(mut s) = js.get_stream(&name).await {
                if let Ok(info) = s.info().await {
                    let bytes = info.state.bytes;
                    state
                        .stream_bytes
                        .store(bytes, std::sync::atomic::Ordering::Relaxed);
                }
            }
            tokio::time::sleep(STREAM_POLL).await;
        }
    });
    set.run_until(async move {
        let _ = stopped.wait_for(|s| *s).await;
    })
    .await;
}

/// The lease's renewal every `lease / 3` (`replication::lease`).
struct Renew {
    lease: Lease,
    every: Duration,
    node: Arc<ReplicationState>,
    links: Vec<MirrorLink>,
}

impl Renew {
    async fn run(mut self) {
        let mut failing = false;
        loop {
            tokio::time::sleep(self.every).await;
            match self.lease.renew().await {
                Ok(()) => failing = false,
                Err(Renewal::Adopted(a)) => {
                    eprintln!("sluice: replication: FENCED: {a}; this node stops accepting");
                    self.node.fence();
                    for l in &self.links {
                        if let Some(w) = l.wake.get() {
                            w();
                        }
                    }
                    return;
                }
                Err(Renewal::Failed(why)) => {
                    (self.node.renewal_failures).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if !failing {
                        eprintln!("sluice: replication: lease not renewed ({why}); retrying");
                    }
                    failing = true;
                }
            }
        }
    }
}

/// One core's publisher (module docs).
struct CoreTask {
    js: jetstream::Context,
    subject: String,
    core: usize,
    link: MirrorLink,
    node: Arc<ReplicationState>,
    rx: mpsc::UnboundedReceiver<Pending>,
    max_payload: usize,
    ack_timeout: Duration,
    /// The stream sequence of the last message on the subject (0: none).
    expected: u64,
    /// The node's own subject: what it may drop (`replication::retention`), and the way to
    /// its DLQ for the dead letters carried forward.
    retention: Option<(Retention, Carry)>,
    /// A frame of dead letters carried forward is on its way.
    carrying: bool,
    /// The messages its retention remembers, as last added to `retained_messages`.
    counted: usize,
    /// The `through` and `first` lists the subject's acknowledged frames named last, per log:
    /// a frame the mirror adds carries them, so the subject's last message always says how
    /// far each log is replicated and where it begins.
    lists: Lists,
    /// The subject's purges, off the publishing path.
    purger: Arc<Purger>,
}

/// How one publish ended.
enum Sent {
    Acked(u64),
    Fenced,
    Failed(String),
}

impl CoreTask {
    async fn run(mut self) {
        let mut pending: VecDeque<Pending> = VecDeque::new();
        loop {
            if pending.is_empty() {
                match self.rx.recv().await {
                    Some(f) => pending.push_back(f),
                    None => return,
                }
            }
            while let Ok(f) = self.rx.try_recv() {
                pending.push_back(f);
            }
            let n = frames_that_fit(&pending, self.max_payload);
            let last_frame = pending.iter().take(n).map(|f| f.0).max().unwrap_or(0);
            let message = pack(self.core, pending.iter().take(n).map(|f| &f.1[..]));
            if !self.publish(Bytes::from(message)).await {
                return;
            }
            let mut meta = FrameMeta::default();
            for (number, _, m) in pending.drain(..n) {
                self.carrying &= number != 0;
                meta.merge(m);
            }
            if last_frame > 0 {
                self.link.state.set_acked(last_frame);
                self.wake();
            }
            self.retain(meta, &mut pending).await;
        }
    }

    /// Moves `retained_messages` by what its retention remembers since the last count.
    fn count_kept(&mut self) {
        let Some((retention, _)) = self.retention.as_ref() else {
            return;
        };
        let (now, was) = (retention.kept(), self.counted);
        let gauge = &self.node.retained_messages;
        let at = std::sync::atomic::Ordering::Relaxed;
        if now >= was {
            gauge.fetch_add((now - was) as u64, at);
        } else {
            gauge.fetch_sub((was - now) as u64, at);
        }
        self.counted = now;
    }

    /// After message `self.expected` (holding `meta`) was acknowledged: drops what the subject
    /// no longer needs, or carries forward the dead letters that hold it back
    /// (`replication::retention`). A failed purge is logged and done by a later one.
    async fn retain(&mut self, meta: FrameMeta, pending: &mut VecDeque<Pending>) {
        let Some((retention, carry)) = self.retention.as_mut() else {
            return;
        };
        merge_max(&mut self.lists.0, meta.through.clone());
        merge_max(&mut self.lists.1, meta.first.clone());
        retention.acked(self.expected, meta);
        let step = retention.step();
        if !step.carry.is_empty() && !self.carrying {
            let mut frame = FrameBuf::default();
            for (id, entry) in carry(&step.carry) {
                frame.dead_letter(&id, entry);
            }
            if !frame.is_empty() {
                for &(log, lsn) in &self.lists.0 {
                    frame.through(log, lsn);
                }
                for &(log, lsn) in &self.lists.1 {
                    frame.first(log, lsn);
                }
                let (bytes, meta) = frame.take();
                pending.push_back((0, bytes, meta));
                self.carrying = true;
            }
        }
        self.count_kept();
        if let Some(below) = step.purge_below {
            self.purger.want(below, &self.js, &self.subject, &self.node);
        }
    }

    /// Publishes `frames` (the start-up catch-up) as messages under `max_payload`, each until
    /// acknowledged; false if fenced.
    async fn publish_all(&mut self, frames: Vec<Vec<u8>>) -> bool {
        let mut pending: VecDeque<Pending> = (frames.into_iter())
            .map(|f| (0, f, FrameMeta::default()))
            .collect();
        while !pending.is_empty() {
            let n = frames_that_fit(&pending, self.max_payload);
            let message = pack(self.core, pending.iter().take(n).map(|f| &f.1[..]));
            if !self.publish(Bytes::from(message)).await {
                return false;
            }
            pending.drain(..n);
        }
        true
    }

    /// Publishes `message` until acknowledged (true) or fenced (false).
    async fn publish(&mut self, message: Bytes) -> bool {
        let id = format!("{}@{}", self.subject, self.expected);
        let mut backoff = BACKOFF.0;
        let mut failing = false;
        loop {
            let t0 = Instant::now();
            match self.send(&id, message.clone()).await {
                Sent::Acked(seq) => {
                    (self.node.ack_seconds).observe_nanos(t0.elapsed().as_nanos() as u64);
                    self.expected = seq;
                    if failing {
                        eprintln!("sluice: replication: {} acknowledged again", self.subject);
                    }
                    self.link.state.set_down(false);
                    self.node.refresh();
                    return true;
                }
                Sent::Fenced => {
                    let actual = match self.js.get_stream_no_info(stream_of(&self.subject)).await {
                        Ok(s) => last_sequence(&s, &self.subject).await.unwrap_or_default(),
                        Err(_) => 0,
                    };
                    eprintln!(
                        "sluice: replication: FENCED: another node wrote {} (this node expected \
                         its last sequence {}, the stream has {actual}); this node stops \
                         accepting until restarted, and never writes the subject again",
                        self.subject, self.expected
                    );
                    self.node.fence();
                    self.wake();
                    return false;
                }
                Sent::Failed(why) => {
                    if !failing {
                        eprintln!(
                            "sluice: replication: {} not acknowledged ({why}); retrying the same \
                             message, refusing new events meanwhile",
                            self.subject
                        );
                    }
                    failing = true;
                    self.link.state.set_down(true);
                    self.node.refresh();
                    self.wake();
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF.1);
                }
            }
        }
    }

    /// One publish with its fence and id, bounded by `ack_timeout`.
    async fn send(&self, id: &str, message: Bytes) -> Sent {
        let publish = async_nats::jetstream::message::PublishMessage::build()
            .payload(message)
            .message_id(id)
            .expected_last_subject_sequence(self.expected);
        let subject = self.subject.clone();
        let attempt = async {
            let ack = self.js.send_publish(subject, publish).await?;
            ack.await
        };
        match tokio::time::timeout(self.ack_timeout, attempt).await {
            Ok(Ok(ack)) => Sent::Acked(ack.sequence),
            Ok(Err(e)) if e.kind() == PublishErrorKind::WrongLastSequence => Sent::Fenced,
            Ok(Err(e)) => Sent::Failed(e.to_string()),
            Err(_) => Sent::Failed(format!("no acknowledgement within {:?}", self.ack_timeout)),
        }
    }

    fn wake(&self) {
        if let Some(w) = self.link.wake.get() {
            w();
        }
    }
}

/// How many frames from the front of `pending` go in the next message under `max_payload`
/// (at least one: a commit's frame is bounded by `MAX_BATCH_BYTES` plus the pump's records; a
/// larger one than the server takes is refused and retried, visibly, and README says to raise
/// the server's `max_payload` to 8 MiB).
fn frames_that_fit(pending: &VecDeque<Pending>, max_payload: usize) -> usize {
    let room = max_payload.saturating_sub(MESSAGE_OVERHEAD + HEADER_ROOM);
    let mut size = 0;
    let mut n = 0;
    for (_, f, _) in pending {
        if n > 0 && size + f.len() > room {
            break;
        }
        size += f.len();
        n += 1;
    }
    n
}

/// The stream name of a subject `<stream>.<node>.core-K`.
fn stream_of(subject: &str) -> &str {
    subject.split('.').next().unwrap_or(subject)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_takes_the_frames_that_fit_under_max_payload_and_always_one() {
        let overhead = MESSAGE_OVERHEAD + HEADER_ROOM;
        let frames: VecDeque<Pending> = (1..=4)
            .map(|n| (n, vec![0; 100], FrameMeta::default()))
            .collect();
        assert_eq!(frames_that_fit(&frames, overhead + 400), 4);
        assert_eq!(frames_that_fit(&frames, overhead + 399), 3);
        assert_eq!(frames_that_fit(&frames, overhead + 100), 1);
        assert_eq!(
            frames_that_fit(&frames, 10),
            1,
            "one frame goes whatever its size"
        );
    }

    #[test]
    fn the_stream_of_a_subject_is_its_first_token() {
        assert_eq!(stream_of("sluice.node-a.core-3"), "sluice");
    }
}
