//! A worker's construction, on the main thread (bind and registration errors surface at
//! startup): its server over its listener (`net::server`, bounds from `[server]`), its ingest
//! front, its dispatcher, and the parts of its core (`CoreParts`).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::{CoreParts, Worker};
use crate::dispatch::deliver::dispatcher::Dispatcher;
use crate::dispatch::metrics::CoreDispatchMetrics;
use crate::ingest::front::Front;
use crate::ingest::sources::SourceCache;
use crate::net::server::Server;
use crate::sched::readers::ReadLink;
use crate::sched::state::Shared;

impl Worker {
    /// Builds worker `id` with its listener and the parts of its core.
    pub fn new(
        id: usize,
        listener: std::net::TcpListener,
        shared: Arc<Shared>,
        hard_stop: Arc<AtomicBool>,
        parts: CoreParts,
        reads: ReadLink,
    ) -> std::io::Result<Worker> {
        let CoreParts {
            reactor,
            committer,
            pump,
            links,
        } = parts;
        let budget = shared.ingest().body_budget.clone();
        let server = Server::new(
            id,
            listener,
            reactor.registry(),
            shared.config.server_spec(),
            budget,
        )?;
        // Staged (one batch filling) plus with the helper (one batch).
        let max_outstanding = 2 * shared.config.wal.max_batch;
        let mut dispatcher = Dispatcher::new(
            id,
            Arc::new(shared.config.dispatch_spec()),
            CoreDispatchMetrics {
                core: shared.metrics().core(id),
                shared: shared.dispatch().metrics.clone(),
            },
            pump.slots(),
            Arc::clone(&shared.clock),
        )
        .with_budgets(|d| shared.dispatch().cluster.budget_for(d))
        .with_dlq(Arc::clone(&shared.dispatch().dlq));
        // Mio until the loop sets up its backend (`Worker::run` attaches again).
        dispatcher.attach(reactor.clients()?);
        Ok(Worker {
            id,
            reactor,
            server,
            metrics: shared.metrics().core(id),
            front: Front::new(
                id,
                SourceCache::new(shared.ingest().sources.clone()),
                max_outstanding,
            ),
            view: crate::ops::reload::CoreView::new(shared.reload()),
            backend: shared.io_backend(),
            shared,
            committer,
            pump,
            links,
            hard_stop,
            draining_since: None,
            dispatcher,
            reported_quiet: false,
            turn_now: 0,
            replays: Default::default(),
            scrapes: Default::default(),
            reads,
            trimmer: Default::default(),
        })
    }
}
