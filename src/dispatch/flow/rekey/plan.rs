//! What a reload keeps, decided once: for each old trigger, its new index (by id) and which of
//! its gates are unchanged. Each part of the engine carries its own state by it
//! (`Agenda::rekey`, `Windows::rekey`, `Collect::rekey`, `InProgress::rekey`, `Stops::rekey`),
//! so they all agree on what a kept gate is.
//!
//! A leaf: the parts import it without going through the engine.
#![forbid(unsafe_code)]

use std::collections::HashMap;

use crate::dispatch::flow::pending::{Stage, STAGES};
use crate::dispatch::flow::spec::FlowSpec;
use crate::dispatch::spec::DispatchSpec;

/// A reload's plan (module docs).
#[derive(Debug)]
pub(in crate::dispatch::flow) struct Plan {
    /// Indexed like the old triggers.
    carried: Vec<Carried>,
}

/// What a reload does with one old trigger's state: the new index of the trigger (`None`:
/// removed or without gates) and which stages' state is kept as it is.
#[derive(Debug)]
struct Carried {
    to: Option<usize>,
    kept: [bool; 6],
}

/// Is gate `stage` configured in `f`?
pub(in crate::dispatch::flow) fn has(f: &FlowSpec, stage: Stage) -> bool {
    match stage {
        Stage::Batch => f.batch.is_some(),
        Stage::Debounce => f.debounce.is_some(),
        Stage::RateLimit => f.rate_limit.is_some(),
        Stage::Throttle => f.throttle.is_some(),
        Stage::Singleton => f.singleton.is_some(),
        Stage::Concurrency => f.concurrency.is_some(),
    }
}

/// Is gate `stage` the same in `a` and `b` (both absent included)?
fn same(a: &FlowSpec, b: &FlowSpec, stage: Stage) -> bool {
    match stage {
        Stage::Batch => a.batch == b.batch,
        Stage::Debounce => a.debounce == b.debounce,
        Stage::RateLimit => a.rate_limit == b.rate_limit,
        Stage::Throttle => a.throttle == b.throttle,
        Stage::Singleton => a.singleton == b.singleton,
        Stage::Concurrency => a.concurrency == b.concurrency,
    }
}

impl Plan {
    /// The plan from `old` to `new`, whose gated triggers are `new_by_id` (id → index).
    pub(in crate::dispatch::flow) fn new(
        old: &DispatchSpec,
        new: &DispatchSpec,
        new_by_id: &HashMap<String, usize>,
    ) -> Plan {
        let empty = FlowSpec::default();
        let carried = (old.triggers.iter())
            .map(|o| {
                let to = new_by_id.get(&o.id).copied();
                let n = to.map_or(&empty, |t| &new.triggers[t].flow);
                let mut kept = [false; 6];
                for stage in STAGES {
                    kept[stage as usize] =
                        to.is_some() && has(&o.flow, stage) && same(&o.flow, n, stage);
                }
                Carried { to, kept }
            })
            .collect();
        Plan { carried }
    }

    /// Old trigger `o`'s new index (`None`: removed, or without gates now).
    pub(in crate::dispatch::flow) fn to(&self, o: usize) -> Option<usize> {
        self.carried.get(o)?.to
    }

    /// Old trigger `o`'s new index when its gate `stage` is kept as it is (unchanged).
    pub(in crate::dispatch::flow) fn kept(&self, o: usize, stage: Stage) -> Option<usize> {
        let c = self.carried.get(o)?;
        c.to.filter(|_| c.kept[stage as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::flow::gated;
    use crate::dispatch::flow::tests::rig_config;

    #[test]
    fn a_gate_is_kept_only_when_its_trigger_stays_and_it_is_unchanged() {
        let old = rig_config("throttle = { period = \"1s\", max = 1 }\nsingleton = {}");
        let new = rig_config("throttle = { period = \"2s\", max = 1 }\nsingleton = {}");
        let plan = Plan::new(&old, &new, &gated(&new));
        assert_eq!(plan.to(0), Some(0));
        assert_eq!(plan.kept(0, Stage::Singleton), Some(0));
        assert_eq!(plan.kept(0, Stage::Throttle), None, "changed");
        assert_eq!(plan.kept(0, Stage::Batch), None, "absent: nothing to keep");
        assert_eq!(plan.to(1), None, "`plain` has no gates");
        let none = rig_config("");
        let plan = Plan::new(&old, &none, &gated(&none));
        assert_eq!((plan.to(0), plan.kept(0, Stage::Singleton)), (None, None));
        assert_eq!(plan.to(7), None);
    }
}
