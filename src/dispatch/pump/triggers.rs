//! A pump's triggers by dense index: what admission needs of an event's trigger — its
//! destination, its slot of the window's caps, its backlog slot, its flow-gate cells — resolved
//! by name once per trigger and configuration generation, not once per event.
//!
//! The index is the trigger's row in the pump's ledger (`dispatch::ledger::PumpLedger::slot`):
//! an event gets it once, when it enters the pump (`PumpCore::on_durable` for an event from
//! memory, admission for one read back from a log), and carries it through the window and the
//! parked queue into its `Live` entry. A row is never given to another trigger, so an index
//! carried across a reload still names the same trigger.
//!
//! Reloads: [`Triggers::learn`] (each new generation's routes) makes every row stale; a stale
//! row is resolved again by name at its next use. Of what a row holds, only the destination
//! changes with a reload; the cap slot and the backlog slot are fixed at start
//! (`TriggerCaps::slot`, `Backlog::slot`: a trigger a reload adds shares the default route's),
//! and flow-gate cells, once a trigger has them, are its own for the run
//! (`dispatch::flow::metrics`: a claimed cell keeps its trigger id). A trigger without cells when
//! it was resolved (a reload may claim some for it later, on any core) is asked by name
//! (`PumpEnv::gates_full`), as before.
//!
//! Bound: one row per trigger id the pump has seen, as the ledger's rows.
#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};

/// What admission needs of one trigger, as of configuration generation `gen`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Resolved {
    /// The generation it was resolved in (0: never).
    gen: u64,
    /// Its destination id (`None`: no handler).
    pub(super) dest: Option<usize>,
    /// Where it is fixed for the run (or, for its gate cells, once it has some).
    pub(super) at: Slots,
}

/// A trigger's slots that a reload does not move (module docs), looked up by name.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Slots {
    /// Its slot of the dispatch window's caps (`TriggerCaps::slot`).
    pub(super) caps: usize,
    /// Its backlog slot (`PumpEnv::trigger_slot`).
    pub(super) backlog: usize,
    /// Its flow-gate cells, if it had some when resolved (`PumpEnv::gate_cells`).
    pub(super) cells: Option<usize>,
    /// It had flow gates when resolved (`PumpEnv::gated`).
    pub(super) gated: bool,
}

impl Resolved {
    const STALE: Resolved = Resolved {
        gen: 0,
        dest: None,
        at: Slots {
            caps: 0,
            backlog: 0,
            cells: None,
            gated: false,
        },
    };
}

/// A pump's triggers (module docs).
#[derive(Debug)]
pub(super) struct Triggers {
    /// The configuration generation learnt last (from 1; [`Resolved::STALE`] has 0).
    gen: u64,
    /// By ledger row.
    rows: Vec<Resolved>,
    /// Trigger id → destination id, over every generation learnt (a removed trigger keeps its
    /// last destination: its events already in the logs are still delivered).
    handlers: HashMap<String, Option<usize>>,
    /// Trigger ids no configuration named, reported once each.
    unknown: HashSet<String>,
    /// The default route's trigger id: no handler by design (not reported).
    default_trigger: &'static str,
}

impl Triggers {
    pub(super) fn new() -> Triggers {
        Triggers {
            gen: 0,
            rows: Vec::new(),
            handlers: HashMap::new(),
            unknown: HashSet::new(),
            default_trigger: "",
        }
    }

    /// A configuration generation's routes (`Routes::handlers`, `Routes::default_trigger`):
    /// every row is resolved again at its next use.
    pub(super) fn learn(
        &mut self,
        handlers: &[(String, Option<usize>)],
        default_trigger: &'static str,
    ) {
        for (id, dest) in handlers {
            self.handlers.insert(id.clone(), *dest);
        }
        self.default_trigger = default_trigger;
        self.gen += 1;
    }

    /// Row `row`'s trigger, named `name` (the same trigger: the caller's event carries both);
    /// `slots` looks its fixed slots up by name, called only when the row is stale.
    pub(super) fn get(
        &mut self,
        row: usize,
        name: &str,
        slots: impl FnOnce(&str) -> Slots,
    ) -> Resolved {
        if let Some(r) = self.rows.get(row).filter(|r| r.gen == self.gen) {
            return *r;
        }
        let r = Resolved {
            gen: self.gen,
            dest: self.dest_of(name),
            at: slots(name),
        };
        if row >= self.rows.len() {
            self.rows.resize(row + 1, Resolved::STALE);
        }
        self.rows[row] = r;
        r
    }

    /// Whether row `row`'s trigger had flow-gate cells when last resolved (its parked events
    /// hold the order horizon back, `dispatch::horizon`).
    pub(super) fn has_gates(&self, row: usize) -> bool {
        self.rows.get(row).is_some_and(|r| r.at.gated)
    }

    /// The destination of trigger `id`. A trigger this run's configurations never named: the
    /// default route's (no handler, by design), or one a manifest named before a restart, whose
    /// destination is then unknown. It is recorded `no_handler` like a default-route event
    /// (`sluice wal inspect` lists it; it can be posted again): said on stderr once per id.
    fn dest_of(&mut self, id: &str) -> Option<usize> {
        if let Some(d) = self.handlers.get(id) {
            return *d;
        }
        if id != self.default_trigger && self.unknown.insert(id.to_string()) {
            eprintln!(
                "sluice: pump: events of trigger {id:?}, which the configuration does not name \
                 (removed before this start?), are recorded as no_handler: their destination is \
                 unknown"
            );
        }
        None
    }
}
