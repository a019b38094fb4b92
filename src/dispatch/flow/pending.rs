//! The gates' shared vocabulary: the stages and their decisions, what an engine call produces
//! ([`FlowOut`]), and an event inside the gates (`Pending`) with its keys resolved once.
//!
//! A leaf: the engine (`super::FlowEngine`) and each of its parts import it, and it imports
//! none of them, so the parts can name one event type without a cycle through the engine.
#![forbid(unsafe_code)]

use super::key::Resolver;
use super::payload::Payloads;
use super::spec::{ConcurrencyGate, FlowSpec, KeySelector};
use super::waiters;
use crate::dispatch::job::{Job, SkipReason};
use crate::wal::{EventRecord, Lsn, WalError};

/// The gates in evaluation order (the index is the metrics `gate` label's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    Batch = 0,
    Debounce = 1,
    RateLimit = 2,
    Throttle = 3,
    Singleton = 4,
    Concurrency = 5,
}

impl Stage {
    /// The gate's name (`gate` label, `[flow]` key).
    pub fn name(self) -> &'static str {
        super::metrics::GATES[self as usize]
    }
}

pub(super) const STAGES: [Stage; 6] = [
    Stage::Batch,
    Stage::Debounce,
    Stage::RateLimit,
    Stage::Throttle,
    Stage::Singleton,
    Stage::Concurrency,
];

/// A gate's decision (the metrics `decision` label's index; one per event per gate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Went on at once.
    Pass = 0,
    /// Was held, then went on.
    Wait = 1,
    /// Ended here.
    Skip = 2,
}

/// What an engine call produced.
#[derive(Debug, Default)]
pub struct FlowOut {
    /// Through every gate without being held: still holding the slot it arrived with.
    pub ready: Vec<Job>,
    /// Through every gate after being held (a batch: its carrier): needs a dispatch slot.
    pub resumed: Vec<Job>,
    /// Keys of events a gate started holding, with that gate (an event reported again when
    /// another gate holds it): their dispatch slot may be given back.
    pub held: Vec<(Lsn, Stage)>,
    pub skipped: Vec<(Job, SkipReason)>,
    /// Keys of held events whose body could not be read back ([`super::payload`]): they leave
    /// the gates without an outcome and stay pending.
    pub lost: Vec<Lsn>,
}

impl FlowOut {
    /// The jobs through the gates, released (`resumed`: true) and passed (`ready`) in one
    /// acceptance order: a key's events may leave its line both ways in one call (`horizon`),
    /// and a released one queues for a slot while a passed one may go at once. Leaves both
    /// lists empty.
    pub fn leaving(&mut self) -> Vec<(Job, bool)> {
        let both = !self.resumed.is_empty() && !self.ready.is_empty();
        let mut gone = Vec::with_capacity(self.resumed.len() + self.ready.len());
        gone.extend(self.resumed.drain(..).map(|j| (j, true)));
        gone.extend(self.ready.drain(..).map(|j| (j, false)));
        if both {
            gone.sort_by(|(a, _), (b, _)| {
                (a.event.event_id.as_str(), a.lsn).cmp(&(b.event.event_id.as_str(), b.lsn))
            });
        }
        gone
    }
}

/// A held event's deadline in the gate a reload took it from: `(stage, deadline, period)`.
pub(super) type Hint = (Stage, u64, u64);

/// An event inside the gates, with its keys resolved once.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) job: Job,
    pub(super) keys: Box<Keys>,
    /// A gate held it (it gave its dispatch slot back).
    pub(super) held: bool,
    /// The gate that holds it, as last reported in [`FlowOut::held`].
    pub(super) held_at: Option<Stage>,
    /// Its body was dropped while held ([`super::payload`]): read back before it is delivered.
    pub(super) dropped: bool,
    /// A reload took it from the gate of this stage and offers it to that stage's new gate
    /// (it leaves it as `wait`, not `pass`: it was held there).
    pub(super) retaken: Option<Stage>,
    /// Its deadline in the gate a reload took it from ([`Hint`], `collect`).
    pub(super) hint: Option<Hint>,
    /// It waits in a `throttle`/`concurrency` line only for the order horizon
    /// (`dispatch::horizon`): its gate had room for it. Held like any waiter (its dispatch slot
    /// goes back: a slot held while waiting for the horizon could keep the other cores' pumps
    /// from admitting the very events the horizon waits for), it leaves as `pass`.
    pub(super) ordered_wait: bool,
}

impl Pending {
    pub(super) fn new(job: Job, keys: Box<Keys>, held: bool, dropped: bool) -> Pending {
        Pending {
            job,
            keys,
            held,
            held_at: None,
            dropped,
            retaken: None,
            hint: None,
            ordered_wait: false,
        }
    }

    /// Acceptance order: the event id (a ULID, time-ordered across cores), then the event key.
    pub(super) fn order(&self) -> (&str, Lsn) {
        (self.job.event.event_id.as_str(), self.job.lsn)
    }

    /// Its key in the gate of `stage` (empty for a gate the trigger does not have).
    pub(super) fn key(&self, stage: Stage) -> &str {
        &self.keys.by_stage[stage as usize]
    }

    /// `w` in full: a reference is read back from its log (`payloads`), its keys resolved for
    /// `f` and marked held at `stage` ([`waiters`]). Its key and the error when it cannot be
    /// read.
    pub(super) fn from_waiter(
        w: Waiter,
        stage: Stage,
        f: &FlowSpec,
        payloads: &mut Payloads,
    ) -> Result<Pending, (Lsn, WalError)> {
        let thin = match w {
            Waiter::Full(p) => return Ok(*p),
            Waiter::Ref(thin) => thin,
        };
        let (job, retaken) = thin.read(payloads)?;
        let keys = Box::new(resolve(f, &job.event));
        let mut p = Pending::new(job, keys, true, false);
        p.held_at = Some(stage);
        p.retaken = retaken;
        Ok(p)
    }
}

#[derive(Debug, Default)]
pub(super) struct Keys {
    /// Indexed by `Stage`; empty for a gate the trigger does not have.
    pub(super) by_stage: [String; 6],
    /// Concurrency waiter rank (0 without `priority`).
    pub(super) rank: usize,
}

/// A throttle waiter's place: acceptance order (`Pending::order`).
pub(super) type ThrottlePlace = (String, Lsn);
/// A concurrency waiter's place: (priority rank, event id, event key): rank first, then
/// acceptance order (`Pending::order`).
pub(super) type WaiterPlace = (usize, String, Lsn);
/// A `throttle` or `concurrency` waiter, in full or by reference (tagged with
/// [`Pending::retaken`]; [`waiters`]).
pub(super) type Waiter = waiters::Waiter<Pending, Option<Stage>>;
/// One key's waiters in line ([`waiters`]).
pub(super) type Waiters<K> = waiters::Waiters<K, Pending, Option<Stage>>;

impl waiters::Held for Pending {
    fn job(&self) -> &Job {
        &self.job
    }
    fn horizon_only(&self) -> bool {
        self.ordered_wait
    }
}

/// `p`'s place in gate `g`'s line: its rank, then its place id ([`place_id`]) and event key.
pub(super) fn place(g: &ConcurrencyGate, p: &Pending) -> WaiterPlace {
    (p.keys.rank, place_id(g, p).to_owned(), p.job.lsn)
}

/// `p`'s place id in gate `g`'s line: its own event id, or for an `ordering` gate the replayed
/// event's (a replay waits at its original's place, [`super::ordering`]).
pub(super) fn place_id<'a>(g: &ConcurrencyGate, p: &'a Pending) -> &'a str {
    match (&g.ordering, &p.job.event.replay_of) {
        (Some(_), Some(original)) => original,
        _ => &p.job.event.event_id,
    }
}

/// Resolves every key the trigger's gates use (the body is parsed at most once).
pub(super) fn resolve(f: &FlowSpec, event: &EventRecord) -> Keys {
    let mut r = Resolver::new(event);
    let mut keys = Keys::default();
    let mut set = |stage: Stage, sel: Option<&KeySelector>| {
        if let Some(sel) = sel {
            keys.by_stage[stage as usize] = r.resolve(sel);
        }
    };
    set(Stage::Batch, f.batch.as_ref().map(|g| &g.key));
    set(Stage::Debounce, f.debounce.as_ref().map(|g| &g.key));
    set(Stage::RateLimit, f.rate_limit.as_ref().map(|g| &g.key));
    set(Stage::Throttle, f.throttle.as_ref().map(|g| &g.key));
    set(Stage::Singleton, f.singleton.as_ref().map(|g| &g.key));
    set(Stage::Concurrency, f.concurrency.as_ref().map(|g| &g.key));
    if let Some(p) = f.concurrency.as_ref().and_then(|c| c.priority.as_ref()) {
        keys.rank = p.rank(&r.resolve(&p.key));
    }
    keys
}

pub(super) fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
