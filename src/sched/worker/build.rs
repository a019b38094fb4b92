//! A worker's construction, on the main thread (bind and registration errors surface at
//! startup): its server over its listener (`net::server`, bounds from `[server]`), its ingest
//! front, its dispatcher, and the parts of its core (`CoreParts`).

use super::*;

/// The server side's bounds from the configuration.
fn server_spec(cfg: &crate::config::Config) -> ServerSpec {
    let s = &cfg.server;
    ServerSpec {
        limits: http::Limits {
            max_head_bytes: s.max_head_bytes,
            max_uri_bytes: s.max_uri_bytes,
            max_body_bytes: s.max_body_bytes,
            ..http::Limits::default()
        },
        max_connections: s.max_connections_per_core,
        max_pipeline_depth: s.max_pipeline_depth,
        max_queued_response_bytes: s.max_queued_response_bytes,
        timeouts: Timeouts::new(s.header_timeout, s.body_timeout, s.idle_timeout),
    }
}

impl Worker {
    /// Builds worker `id` with its listener and the parts of its core.
    pub fn new(
        id: usize,
        listener: std::net::TcpListener,
        shared: Arc<Shared>,
        hard_stop: Arc<AtomicBool>,
        parts: CoreParts,
        reads: crate::sched::readers::ReadLink,
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
            server_spec(&shared.config),
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
            replays: crate::dispatch::dlq::online::OnlineReplays::default(),
            edge: books::Edge::default(),
            reads,
            trimmer: Default::default(),
        })
    }
}
