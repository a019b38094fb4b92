//! Adoption (issue 41, item 3): when a node's lease runs out, one live node takes over its logs
//! and delivers their pending events.
//!
//! The adopter thread of each node watches the lease bucket (`<stream>_nodes`,
//! `replication::lease`) every `lease / 10` (between 100 ms and 1 s). A lease runs out when its
//! entry's revision has not changed for the entry's `lease_ms` **by this node's monotonic
//! clock** from the moment this node saw that revision: no two nodes' clocks are compared, and
//! a node that starts late only waits longer. Then, in order:
//!
//! 1. **Claim**: a compare-and-set of the entry on the revision seen, setting `adopted_by` to
//!    this node. Of several live nodes exactly one wins; the others see the entry adopted and
//!    leave it. A node that renews meanwhile makes the claim fail (its revision moved).
//! 2. **Fence**: each of the lost node's subjects (`<stream>.<node>.core-K`) is taken
//!    (`replication::fence::take`): a marker on each of its 16 fence subjects, each expecting
//!    that fence subject's last sequence, after which none of the lost node's messages can land
//!    (a lost node that was only paused, and publishes again, is refused, takes its subject
//!    back, finds the adopter's markers and fences itself: `replication::publish`); whatever it
//!    had acknowledged is before them, so in what step 3 reads. What it published behind a
//!    message that never landed (acknowledged to no sender) is deleted. Then a marker message
//!    (one empty frame, [`marker`]) goes on the subject, numbered after its last message and
//!    carrying that message's `through` and `first` lists forward.
//! 3. **Take over** ([`TakeOverNode::take_over`], the runtime's): rebuild the logs from the
//!    stream into `adopted/<node>/` (`replication::restore`, verified as local recovery does),
//!    open them and hand each to a core, whose pump delivers the pending events through the
//!    node's destinations, permits and shared budgets.
//!
//! An entry adopted by this node whose logs this run does not run (a restart between claim and
//! take-over, or a failed take-over) is taken over again at the next scan. An entry adopted by
//! a node whose own entry this node adopted (a chain: A adopted by B, B lost) is claimed from
//! that node the same way, so a log is never orphaned by a second loss; its events are rebuilt
//! from its own subjects, so what the lost adopter delivered is delivered again (its done
//! records for adopted logs are not replicated: README "Several nodes").
//!
//! Bounds: the scan reads every entry of the bucket (one per node); the revisions seen are one
//! per entry; each JetStream call waits at most `lease`. A take-over that fails is logged and
//! retried at the next scan.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};
use futures_util::StreamExt;

use crate::replication::catch_up::{last_message, subjects_of};
use crate::replication::fence::{self, Taker};
use crate::replication::lease::NodeEntry;
use crate::replication::message::{pack, FrameBuf, Lists};
use crate::replication::spec::ReplicationSpec;
use crate::replication::state::ReplicationState;
use crate::sync::clock::unix_millis;

/// What the runtime does to take over a node's logs once this node holds their claim.
pub trait TakeOverNode: Send {
    /// Whether node `node`'s logs already run here.
    fn runs(&self, node: &str) -> bool;
    /// Rebuilds node `node`'s logs and hands them to the cores; returns how many logs.
    fn take_over(&mut self, node: &str) -> Result<usize, String>;
}

/// One entry of the lease bucket as the scan read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub key: String,
    pub entry: NodeEntry,
    pub revision: u64,
}

/// What a scan decided for one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Its lease ran out: claim it on `revision`.
    Claim { node: String, revision: u64 },
    /// Adopted by a node whose entry this node adopted: claim it from that node.
    Chain { node: String, revision: u64 },
    /// Adopted by this node and not run here: take it over.
    Resume { node: String },
}

/// The revisions seen per entry, with when this node first saw each (its monotonic clock).
#[derive(Debug, Default)]
pub struct Watch {
    seen: HashMap<String, (u64, Instant)>,
}

impl Watch {
    /// The actions for the entries of one scan, read at `now`, by node `me`; `runs` says
    /// whether a node's logs run here already.
    pub fn decide(
        &mut self,
        me: &str,
        entries: &[Seen],
        now: Instant,
        runs: &dyn Fn(&str) -> bool,
    ) -> Vec<Action> {
        let by_me = |node: &str| {
            entries
                .iter()
                .any(|e| e.key == node && e.entry.adopted_by.as_deref() == Some(me))
        };
        let mut out = Vec::new();
        self.seen.retain(|k, _| entries.iter().any(|e| &e.key == k));
        for e in entries.iter().filter(|e| e.key != me) {
            match e.entry.adopted_by.as_deref() {
                Some(by) if by == me => {
                    if !runs(&e.key) {
                        out.push(Action::Resume {
                            node: e.key.clone(),
                        });
                    }
                }
                Some(by) if by_me(by) => out.push(Action::Chain {
                    node: e.key.clone(),
                    revision: e.revision,
                }),
                Some(_) => {}
                None => {
                    let since = self.seen.entry(e.key.clone()).or_insert((e.revision, now));
                    if since.0 != e.revision {
                        *since = (e.revision, now);
                    }
                    let lease = Duration::from_millis(e.entry.lease_ms);
                    if now.saturating_duration_since(since.1) > lease {
                        out.push(Action::Claim {
                            node: e.key.clone(),
                            revision: e.revision,
                        });
                    }
                }
            }
        }
        out
    }

    /// Forgets what was seen of `node` (after a claim, won or lost).
    pub fn forget(&mut self, node: &str) {
        self.seen.remove(node);
    }
}

/// The marker an adopter writes on each subject of the node it adopted (module docs, step 2):
/// a message of one frame with no record, carrying forward the `through` list of the subject's
/// last message (so the subject's last frame still says how far each log is replicated). A
/// restore reads no record from it.
pub fn marker(core: usize, (through, first): &Lists) -> Vec<u8> {
    let mut frame = FrameBuf::default();
    for &(log, lsn) in through {
        frame.through(log, lsn);
    }
    for &(log, lsn) in first {
        frame.first(log, lsn);
    }
    let frame = frame.finish();
    pack(core, [&frame[..]])
}

/// Each log's highest `through` and `first` in the message `payload` (none if it does not
/// decode).
fn lists_of(payload: &[u8]) -> Lists {
    crate::replication::message::decode(payload).map_or_else(|_| Lists::default(), |d| d.lists())
}

/// The adopter thread.
#[derive(Debug)]
pub struct Adopter {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Adopter {
    /// Starts the thread (`sluice-adopt`).
    pub fn start(
        spec: ReplicationSpec,
        state: Arc<ReplicationState>,
        take: Box<dyn TakeOverNode>,
    ) -> std::io::Result<Adopter> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("sluice-adopt".into())
            .spawn(move || run(spec, state, take, stopped))?;
        Ok(Adopter {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread (after the step it is in) and joins it.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                eprintln!("sluice: the replication adopter thread panicked");
            }
        }
    }
}

impl Drop for Adopter {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How often the bucket is read.
fn scan_every(lease: Duration) -> Duration {
    (lease / 10).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

fn run(
    spec: ReplicationSpec,
    state: Arc<ReplicationState>,
    mut take: Box<dyn TakeOverNode>,
    stop: Arc<AtomicBool>,
) {
    let Ok(rt) = crate::replication::client::runtime() else {
        eprintln!("sluice: replication: the adopter's runtime did not start; no adoption");
        return;
    };
    let every = scan_every(spec.lease);
    let mut watch = Watch::default();
    let mut bucket: Option<(jetstream::Context, kv::Store)> = None;
    let mut failing = false;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(every);
        if bucket.is_none() {
            bucket = rt.block_on(bounded(spec.lease, open_bucket(&spec))).ok();
        }
        let Some((js, store)) = &bucket else {
            continue;
        };
        let entries = match rt.block_on(bounded(spec.lease, read_entries(store))) {
            Ok(e) => e,
            Err(why) => {
                if !failing {
                    eprintln!("sluice: replication: the lease bucket is not readable ({why})");
                }
                failing = true;
                bucket = None;
                continue;
            }
        };
        failing = false;
        let now = Instant::now();
        let actions = watch.decide(&spec.node, &entries, now, &|n| take.runs(n));
        for action in actions {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let node = match action {
                Action::Resume { node } => node,
                Action::Claim { node, revision } | Action::Chain { node, revision } => {
                    watch.forget(&node);
                    let claimed = rt.block_on(bounded(
                        spec.lease,
                        claim(js, store, (&spec, &state), &node, revision),
                    ));
                    match claimed {
                        Ok(true) => node,
                        Ok(false) => continue,
                        Err(why) => {
                            state.adoption_failures.fetch_add(1, Ordering::Relaxed);
                            eprintln!("sluice: replication: claiming node {node}: {why}");
                            continue;
                        }
                    }
                }
            };
            take_node(&mut *take, &state, &node);
        }
    }
}

/// Step 3 (module docs) for `node`, whose claim this node holds: counted and logged.
fn take_node(take: &mut dyn TakeOverNode, state: &ReplicationState, node: &str) {
    let t0 = Instant::now();
    match take.take_over(node) {
        Ok(logs) => {
            state.adopted_logs.fetch_add(logs, Ordering::Relaxed);
            state.note_adopted(node, logs, unix_millis());
            eprintln!(
                "sluice: replication: adopted node {node}: {logs} logs rebuilt and running \
                 here ({:?})",
                t0.elapsed()
            );
        }
        Err(why) => {
            state.adoption_failures.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "sluice: replication: taking over node {node}'s logs failed ({why}); retried \
                 at the next scan"
            );
        }
    }
}

async fn bounded<T>(
    limit: Duration,
    f: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {limit:?}")),
    }
}

async fn open_bucket(spec: &ReplicationSpec) -> Result<(jetstream::Context, kv::Store), String> {
    let client = crate::replication::client::connect(spec, "adopt").await?;
    let js = jetstream::new(client);
    let store = (js.get_key_value(spec.lease_bucket()).await).map_err(|e| e.to_string())?;
    Ok((js, store))
}

/// Every entry of the bucket that parses (one per node).
async fn read_entries(store: &kv::Store) -> Result<Vec<Seen>, String> {
    let mut keys = store.keys().await.map_err(|e| e.to_string())?;
    let mut names = Vec::new();
    while let Some(k) = keys.next().await {
        names.push(k.map_err(|e| e.to_string())?);
    }
    let mut out = Vec::new();
    for key in names {
        let Some(e) = store.entry(&key).await.map_err(|e| e.to_string())? else {
            continue;
        };
        if e.operation != kv::Operation::Put {
            continue;
        }
        if let Ok(entry) = serde_json::from_slice::<NodeEntry>(&e.value) {
            out.push(Seen {
                key,
                entry,
                revision: e.revision,
            });
        }
    }
    Ok(out)
}

/// Steps 1 and 2 (module docs): the compare-and-set on `revision`, then the marker on each of
/// the node's subjects. `Ok(false)`: another node won, or the node renewed.
async fn claim(
    js: &jetstream::Context,
    store: &kv::Store,
    (spec, state): (&ReplicationSpec, &ReplicationState),
    node: &str,
    revision: u64,
) -> Result<bool, String> {
    let Some(e) = store.entry(node).await.map_err(|e| e.to_string())? else {
        return Ok(false);
    };
    let Ok(mut entry) = serde_json::from_slice::<NodeEntry>(&e.value) else {
        return Ok(false);
    };
    if e.revision != revision {
        return Ok(false);
    }
    let from = entry.adopted_by.clone();
    entry.adopted_by = Some(spec.node.clone());
    entry.adopted_at_ms = Some(unix_millis());
    let value = serde_json::to_vec(&entry).map_err(|e| e.to_string())?;
    match store.update(node, value.into(), e.revision).await {
        Ok(_) => {}
        Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => return Ok(false),
        Err(e) => return Err(e.to_string()),
    }
    match from {
        None => eprintln!(
            "sluice: replication: node {node}'s lease ran out ({} ms without renewal): this \
             node adopts its logs",
            entry.lease_ms
        ),
        Some(by) => eprintln!(
            "sluice: replication: node {node}'s logs were adopted by node {by}, whose own logs \
             this node adopted: this node adopts them"
        ),
    }
    fence(js, spec, node, state).await?;
    Ok(true)
}

/// Step 2 (module docs): each subject of `node` taken (`replication::fence`: this node's
/// markers on its fence subjects, so none of `node`'s messages can land after them; the tail
/// published behind a message that never landed deleted), then the marker on the subject,
/// after its last message.
async fn fence(
    js: &jetstream::Context,
    spec: &ReplicationSpec,
    node: &str,
    state: &ReplicationState,
) -> Result<(), String> {
    let stream = (js.get_stream(&spec.stream).await).map_err(|e| e.to_string())?;
    for (subject, _) in subjects_of(&stream, &spec.node_filter(node)).await? {
        let core = (subject.rsplit('.').next())
            .and_then(crate::wal::layout::core_of)
            .unwrap_or(0);
        let by = (Taker::New, spec.node.as_str());
        let taken = fence::take(js, &stream, &subject, by, (0, None), spec.lease)
            .await
            .map_err(|e| format!("taking {subject}: {e}"))?;
        taken.report_deleted(&subject, &format!("node {node}"), state);
        let previous = last_message(&stream, &subject).await?;
        let lists = previous.as_deref().map(lists_of).unwrap_or_default();
        let payload = marker(core, &lists).into();
        let publish = taken.slots.message(&subject, taken.next, payload);
        let ack = match js.send_publish(subject.clone(), publish).await {
            Ok(ack) => ack.await,
            Err(e) => return Err(format!("fencing {subject}: {e}")),
        };
        ack.map_err(|e| format!("the marker on {subject}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(key: &str, revision: u64, adopted_by: Option<&str>) -> Seen {
        let mut entry = NodeEntry::live(key, Duration::from_secs(2));
        entry.adopted_by = adopted_by.map(str::to_owned);
        Seen {
            key: key.into(),
            entry,
            revision,
        }
    }

    #[test]
    fn a_lease_runs_out_after_its_length_without_a_new_revision_by_the_watchers_clock() {
        let mut w = Watch::default();
        let t0 = Instant::now();
        let never = |_: &str| false;
        let entries = [seen("b", 1, None), seen("a", 7, None)];
        assert!(
            w.decide("b", &entries, t0, &never).is_empty(),
            "first sight"
        );
        let t1 = t0 + Duration::from_millis(1_900);
        assert!(w.decide("b", &entries, t1, &never).is_empty(), "within");
        // A renewal restarts the wait.
        let renewed = [seen("b", 1, None), seen("a", 8, None)];
        let t2 = t0 + Duration::from_millis(2_100);
        assert!(w.decide("b", &renewed, t2, &never).is_empty());
        let t3 = t2 + Duration::from_millis(2_001);
        assert_eq!(
            w.decide("b", &renewed, t3, &never),
            [Action::Claim {
                node: "a".into(),
                revision: 8
            }]
        );
        // Its own entry is never claimed, however old.
        let alone = [seen("b", 1, None)];
        assert!(w
            .decide("b", &alone, t3 + Duration::from_secs(60), &never)
            .is_empty());
    }

    #[test]
    fn an_entry_adopted_here_and_not_running_is_resumed_and_a_chain_is_claimed() {
        let mut w = Watch::default();
        let now = Instant::now();
        let entries = [
            seen("c", 1, None),
            seen("b", 5, Some("c")),
            seen("a", 9, Some("b")),
            seen("x", 2, Some("y")),
        ];
        let got = w.decide("c", &entries, now, &|_| false);
        assert_eq!(
            got,
            [
                Action::Resume { node: "b".into() },
                Action::Chain {
                    node: "a".into(),
                    revision: 9
                }
            ]
        );
        assert!(w
            .decide("c", &entries, now, &|n| n == "b")
            .iter()
            .all(|a| !matches!(a, Action::Resume { .. })));
    }

    #[test]
    fn the_marker_holds_no_record_and_carries_the_last_messages_through_forward() {
        let previous = marker(3, &(vec![(3, 40), (5, 7)], vec![(3, 12)]));
        let lists = lists_of(&previous);
        assert_eq!(lists, (vec![(3, 40), (5, 7)], vec![(3, 12)]));
        let m = marker(3, &lists);
        let d = crate::replication::message::decode(&m).unwrap();
        assert_eq!(d.frames.len(), 1);
        assert!(d.frames[0].parts.is_empty() && d.frames[0].dead.is_empty());
        assert_eq!(d.frames[0].through, [(3, 40), (5, 7)]);
        assert_eq!(d.frames[0].first, [(3, 12)]);
        assert_eq!(lists_of(b"not a message"), Lists::default());
    }
}
