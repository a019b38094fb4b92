//! The mirror thread: each core's locally committed batches published to JetStream, in log
//! order, with the official `async-nats` client on a current-thread tokio runtime of its own.
//! No core loop ever waits on it: a core's commit helper hands a frame over ([`MirrorLink::
//! submit`], a channel send) and the core's loop learns of the acknowledgement through
//! [`CoreState::acked`] and one wake.
//!
//! **Pipelined, in log order** (`replication::publish`): each core's subject has a publisher
//! that keeps up to `max_inflight` messages (at most 16) in flight and takes their
//! acknowledgements in order. The fence is beside the subject (`replication::fence`: each
//! message's `Nats-Expected-Last-Subject-Sequence` is checked on one of 16 fence subjects, with
//! `Nats-Expected-Last-Subject-Sequence-Subject`), because JetStream refuses a second message
//! with an expectation on a subject that has one in flight. A publish that fails makes the
//! publisher take its subject again: new fence markers, what landed read back, what landed
//! behind a gap deleted, the rest published again in order. Meanwhile the core is marked down
//! ([`ReplicationState::refusal`]: `replication_unavailable`).
//!
//! **Idempotent and numbered.** Every message's `Nats-Msg-Id` is `<subject>#<n>.<epoch>`: its
//! number on the subject and the fence it was published under, so a copy that landed twice is
//! answered from JetStream's duplicate window, and a reader can tell a gap.
//!
//! **Fenced.** A take refused because another node wrote a fence subject means that node took
//! the subject (it adopted this node's logs): a log line names the fence subject and both
//! sequences, the publisher stops (the log never forks), and the node refuses new events
//! (`replication_fenced`) until it is restarted.
//!
//! **Adopted logs.** A log this node adopted from a lost node (`replication::adopt`) is
//! published on that node's subject by a task of its own, opened on this thread on request
//! ([`SubjectOpener::open`]): the subject taken as a new writer (`replication::fence`), then what
//! the local copy holds beyond the stream published. Its frames hold no batch and its failures refuse nothing
//! (its state is not one of the cores'), but a refused fence fences the node as for its own.
//!
//! **The lease.** At start the node takes its entry in `<stream>_nodes` (refusing to start if
//! another node adopted its logs) and renews it every `lease / 3`; a renewal that finds the
//! entry adopted fences the node too (`replication::lease`).
//!
//! **At start** the node takes each of its subjects (`replication::fence`) before it reads how
//! far its logs are replicated, so what an earlier run left behind a gap is gone first.
//!
//! Bounds: frames per core ≤ `max_inflight` (the committer does not hand over more); messages
//! per subject in flight ≤ min(`max_inflight`, 16), each at most the server's `max_payload` and
//! kept until acknowledged (for sending again after a take);
//! the stream-size poll every `STREAM_POLL` (5 s).
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream};
use tokio::sync::{mpsc, watch};

use std::collections::HashMap;

use crate::replication::catch_up::{self, Behind, LocalLog};
use crate::replication::client;
use crate::replication::fence::{self, Taker};
use crate::replication::lease::{Adopted, Lease, Renewal};
use crate::replication::message::{merge_max, FrameMeta, MESSAGE_OVERHEAD};
pub use crate::replication::publish::{Carry, MirrorLink, Wake};
use crate::replication::publish::{CoreTask, Parts, HEADER_ROOM};
use crate::replication::retention::Retention;
use crate::replication::spec::ReplicationSpec;
use crate::replication::state::{CoreState, ReplicationState};
use crate::wal::Lsn;

/// How often the stream's size is read for `sluice_replication_stream_bytes`.
const STREAM_POLL: Duration = Duration::from_secs(5);

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
    /// The NATS server is older than the fence needs (`replication::fence`).
    ServerVersion(String),
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
            StartError::ServerVersion(v) => write!(
                f,
                "replication: the NATS server is version {v}; the fence needs 2.11 or later \
                 (Nats-Expected-Last-Subject-Sequence-Subject): upgrade the nats-servers"
            ),
        }
    }
}

impl std::error::Error for StartError {}

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
    parts: Parts,
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

    /// Takes the adopted log's subject (`replication::fence`: this node's markers, the tail
    /// behind a gap deleted) and publishes what the local copy holds beyond the stream.
    async fn open(&self, req: &OpenSubject) -> Result<CoreTask, String> {
        let p = &self.parts;
        let taken = fence::take(
            &p.js,
            &p.stream,
            &req.subject,
            (Taker::New, &p.who),
            (0, None),
            p.ack_timeout,
        )
        .await
        .map_err(|e| e.to_string())?;
        let (link, rx) = MirrorLink::new(Arc::new(CoreState::default()), p.max_payload);
        let limit = link.frame_limit();
        let at = (req.subject.clone(), usize::from(req.log.index));
        let mut task = CoreTask::new(p, at, (link, rx), &taken);
        if req.catch_up {
            let through =
                catch_up::node_through(&p.stream, &req.node_filter, req.log.index).await?;
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
        let (js, max_payload, stream) = rt.block_on(connect(spec))?;
        let lease = acquire_lease(&rt, &js, spec)?;
        let state = Arc::new(ReplicationState::new(cores));
        let parts = Parts {
            js: js.clone(),
            stream,
            node: state.clone(),
            max_payload,
            ack_timeout: spec.ack_timeout,
            window: spec.max_inflight,
            who: spec.node.clone(),
        };
        let (taken, through) = rt.block_on(take_own(&parts, spec, cores, logs))?;
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
        let (stop, stopped) = watch::channel(false);
        let (links, mut tasks) = core_tasks(&parts, spec, taken);
        publish_missing(&rt, &mut tasks, logs, &through, spec)?;
        let retired = seed_retention(spec, &mut tasks, &carry);
        state.refresh();
        let (open_tx, open_rx) = mpsc::unbounded_channel();
        let opener = Opener {
            parts,
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

/// Each core's link and publishing task, over the subjects this node took (`taken`).
fn core_tasks(
    parts: &Parts,
    spec: &ReplicationSpec,
    mut taken: HashMap<String, fence::Taken>,
) -> (Vec<MirrorLink>, Vec<CoreTask>) {
    let mut links = Vec::new();
    let mut tasks = Vec::new();
    for (core, state) in parts.node.cores().iter().enumerate() {
        let subject = spec.subject(core);
        let took = taken.remove(&subject).unwrap_or_default();
        let (link, rx) = MirrorLink::new(state.clone(), parts.max_payload);
        tasks.push(CoreTask::new(
            parts,
            (subject, core),
            (link.clone(), rx),
            &took,
        ));
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

/// Connects and ensures the stream.
async fn connect(
    spec: &ReplicationSpec,
) -> Result<(jetstream::Context, usize, stream::Stream), StartError> {
    let unreachable = |error: String| StartError::Unreachable {
        servers: spec.servers.clone(),
        error,
    };
    let client = client::connect(spec, "mirror").await.map_err(unreachable)?;
    let info = client.server_info();
    if !fence::server_supports(&info.version) {
        return Err(StartError::ServerVersion(info.version.clone()));
    }
    let max_payload = info.max_payload;
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
    Ok((js, max_payload, stream))
}

/// Takes each of the node's subjects (`replication::fence`): its cores' and any other that
/// holds its messages (an earlier run with more cores); then each log's replicated LSN, read
/// once the tails behind a gap are gone.
async fn take_own(
    parts: &Parts,
    spec: &ReplicationSpec,
    cores: usize,
    logs: &[LocalLog],
) -> Result<(HashMap<String, fence::Taken>, HashMap<u16, Lsn>), StartError> {
    let stream_err = |error: String| StartError::Stream {
        stream: spec.stream.clone(),
        error,
    };
    let held = catch_up::subjects_of(&parts.stream, &spec.node_filter(&spec.node)).await;
    let mut subjects: Vec<String> = held.map_err(stream_err)?.into_iter().map(|s| s.0).collect();
    subjects.extend((0..cores).map(|core| spec.subject(core)));
    subjects.sort();
    subjects.dedup();
    let mut taken = HashMap::new();
    for subject in subjects {
        let by = (fence::Taker::New, parts.who.as_str());
        let took = fence::take(
            &parts.js,
            &parts.stream,
            &subject,
            by,
            (0, None),
            parts.ack_timeout,
        )
        .await
        .map_err(|e| stream_err(format!("taking {subject}: {e}")))?;
        took.report_deleted(&subject, "an earlier run", &parts.node);
        taken.insert(subject, took);
    }
    let through = catch_up::replicated_through(&parts.stream, spec, logs)
        .await
        .map_err(stream_err)?;
    Ok((taken, through))
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
                        l.wake_core();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_behind_the_stream_is_refused_naming_each_log_and_both_lsns() {
        let e = StartError::Behind(vec![
            Behind {
                log: 0,
                local: 5,
                stream: 9,
            },
            Behind {
                log: 3,
                local: 0,
                stream: 2,
            },
        ]);
        let text = e.to_string();
        assert!(text.contains("log core-0 ends at LSN 5 here, the stream has it through 9"));
        assert!(text.contains("log core-3 ends at LSN 0 here, the stream has it through 2"));
        assert!(text.contains("sluice replication restore"), "{text}");
        let e = StartError::MaxPayload {
            max_payload: 1 << 20,
            largest: 4 << 20,
        };
        assert!(e.to_string().contains("max_payload (1048576 bytes)"), "{e}");
        let e = StartError::ServerVersion("2.10.22".into());
        assert!(
            e.to_string()
                .contains("version 2.10.22; the fence needs 2.11"),
            "{e}"
        );
    }
}
