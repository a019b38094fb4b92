//! A reload's change of the triggers' `max_pending` shares ([`Backlog::resize_shares`]): the
//! split recomputed from the new explicit shares, applied live by [`ShareDim::resize`](crate::ingest::shares::ShareDim::resize) (which
//! keeps the bound and drops nothing; see there).

use super::{Backlog, SharePlan, TriggerShare};

impl Backlog {
    /// A reload's `max_pending` values (`shares`: the new configuration's triggers): each
    /// trigger with a slot of its own takes its new explicit share; one the reload removed keeps
    /// its last (its events may still be pending there). Then every share and the pool are
    /// recomputed and resized live (`ShareDim::resize`: a shrunk share waits for its events
    /// to drain — nothing held is dropped — and the bound holds throughout). `Ok(false)`: nothing
    /// changed. `Err` (nothing changed) when a trigger without a slot of its own (one a reload
    /// added: its events use the default route's slot) has an explicit share, or when the
    /// explicit shares, the removed triggers' included, pass a bound.
    pub fn resize_shares(&self, shares: &[TriggerShare<'_>]) -> Result<bool, String> {
        let mut plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
        let next = self.next_plan(&plan, shares)?;
        if next == *plan {
            return Ok(false);
        }
        let (events, bytes) = self.split_plan(&next)?;
        // Only the dimensions whose explicit shares changed (the split is a function of them).
        if next.events != plan.events {
            self.share_events.resize(&events);
        }
        if next.bytes != plan.bytes {
            self.share_bytes.resize(&bytes);
        }
        *plan = next;
        Ok(true)
    }

    /// Whether [`Backlog::resize_shares`] would accept `shares`, changing nothing: a reload
    /// asks before it claims anything for the new configuration (`ops::reload`).
    pub fn check_shares(&self, shares: &[TriggerShare<'_>]) -> Result<(), String> {
        let plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
        let next = self.next_plan(&plan, shares)?;
        self.split_plan(&next).map(|_| ())
    }

    /// `plan` with the explicit shares of `shares` (module docs of [`Backlog::resize_shares`]).
    fn next_plan(
        &self,
        plan: &SharePlan,
        shares: &[TriggerShare<'_>],
    ) -> Result<SharePlan, String> {
        let mut next = plan.clone();
        for t in shares {
            match self.slot_of.get(t.id) {
                Some(&s) => (next.events[s], next.bytes[s]) = (t.events, t.bytes),
                None if t.events.is_some() || t.bytes.is_some() => {
                    return Err(format!(
                        "trigger {:?}: max_pending: the trigger was not configured at start, so it \
                         has no backlog share of its own (its events use the default route's); \
                         restart to give it one",
                        t.id
                    ))
                }
                None => {}
            }
        }
        Ok(next)
    }
}
