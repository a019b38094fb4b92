//! The handler side's parts as the loop lends them for one server call ([`Core`]), and the
//! books it keeps between calls ([`Scrapes`], `reads.rs`).

use std::sync::Arc;

use crate::dispatch::deliver::dispatcher::Dispatcher;
use crate::dispatch::dlq::online::OnlineReplays;
use crate::ingest::front::Front;
use crate::ops::reload::CoreView;
use crate::sched::commit::Committer;
use crate::sched::pump::CorePump;
use crate::sched::readers::ReadLink;
use crate::sched::state::Shared;

/// What a request may touch of its core, borrowed beside the core's server (module docs).
#[derive(Debug)]
pub struct Core<'a> {
    pub shared: &'a Arc<Shared>,
    pub view: &'a mut CoreView,
    pub front: &'a mut Front,
    pub committer: &'a mut Committer,
    pub replays: &'a mut OnlineReplays,
    pub scrapes: &'a mut Scrapes,
    pub pump: &'a mut CorePump,
    pub dispatcher: &'a mut Dispatcher,
    pub reads: &'a mut ReadLink,
    /// The injected clock read once per loop turn (nanos): token-bucket decisions use it.
    pub turn_now: u64,
}

impl Core<'_> {
    /// A reload: the core switches to the newest published generation; the pump learns the new
    /// trigger → destination map, the dispatcher the new destinations (limits, retry, timeouts,
    /// gates). The loop calls it at the top of a turn and before it judges the turn's jobs
    /// (which may come from a core already on a newer generation), and the handler before it
    /// routes each request: that check (one `Acquire` load) makes a reload's answer a barrier —
    /// a request sent after `POST /admin/reload` answered, or after `sluice_config_generation`
    /// showed the new number, is routed by it, even on a core that was mid-turn when the
    /// reload was published.
    pub fn follow_reload(&mut self) {
        if let Some(next) = self.view.pick_up(self.shared.reload()) {
            let draining = self.shared.accepting_stopped(self.turn_now);
            let spec = Arc::new(next.value.config.dispatch_spec());
            self.pump.learn_routes(&spec);
            self.dispatcher.reconfigure(spec, self.turn_now, draining);
        }
    }
}

/// A core's deferred `/metrics` scrapes, between the request and the turn's rendering.
#[derive(Debug, Default)]
pub struct Scrapes {
    /// Connections holding a `Slot::Deferred` scrape (duplicates possible).
    pub(super) waiting: Vec<usize>,
    /// The latest `read_at` of those connections: the rendering must start after it.
    pub(super) read_at: u64,
}

impl Scrapes {
    /// True while scrapes wait for their rendering (the loop must not sleep).
    pub fn pending(&self) -> bool {
        !self.waiting.is_empty()
    }
}
