//! One `/metrics` rendering shared by concurrent scrapes.
//!
//! A scrape is answered with a rendering that *started after the scrape's request was read*
//! ([`SharedRendering::get`]'s `not_before`), so a client never sees a state older than its own
//! request: a test or an operator that scrapes after an action sees the action. Within that
//! rule every scrape reuses the latest rendering: the worker collects the scrapes it reads in
//! one loop turn and renders once for all of them (`sched::worker`), and a worker whose scrapes
//! were read before another worker's rendering started reuses that one. Concurrent scrapes
//! therefore cost one rendering, not one each, and the body is an `Arc<[u8]>` queued on every
//! connection by reference (`net::conn::Slot::Shared`), not copied per connection.
//!
//! The lock is held while rendering, so two workers that need a new rendering at once make
//! one and the second reuses it (it started after the second's scrapes were read). It is taken
//! only by scrapes, never on the ingest path. Memory: the one cached rendering plus the ones
//! still referenced by queued responses (each connection's queue is bounded by
//! `max_queued_response_bytes`).
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::Counter;

/// The latest rendering and when it started (clock nanos).
#[derive(Debug, Default)]
pub struct SharedRendering {
    latest: Mutex<Option<(u64, Arc<[u8]>)>>,
    /// Size of the latest rendering: the expected size of a scrape not yet answered.
    last_len: AtomicUsize,
    renders: Counter,
    shared: Counter,
}

impl SharedRendering {
    /// A rendering that started at or after `not_before`: the latest one if it qualifies, else
    /// a new one from `render` (started at `now`, which must be ≥ `not_before`).
    pub fn get(&self, not_before: u64, now: u64, render: impl FnOnce() -> String) -> Arc<[u8]> {
        let mut latest = self.latest.lock();
        if let Some((started, body)) = latest.as_ref() {
            if *started >= not_before {
                self.shared.incr();
                return Arc::clone(body);
            }
        }
        let body: Arc<[u8]> = Arc::from(render().into_bytes());
        // Relaxed: a size hint for the queued-bytes estimate, publishing nothing.
        self.last_len.store(body.len(), Ordering::Relaxed);
        self.renders.incr();
        *latest = Some((now, Arc::clone(&body)));
        body
    }

    /// Size of the latest rendering (0 before the first).
    pub fn last_len(&self) -> usize {
        self.last_len.load(Ordering::Relaxed)
    }

    /// `sluice_metrics_renders_total` and `sluice_metrics_renders_shared_total`.
    pub fn render_prometheus(&self, w: &mut super::PromWriter) {
        let (renders, shared) = self.counts();
        w.counter(
            "sluice_metrics_renders_total",
            "Renderings of /metrics (each serves every scrape read before it started).",
            renders,
        );
        w.counter(
            "sluice_metrics_renders_shared_total",
            "Times a worker's scrapes reused a rendering made for others instead of rendering.",
            shared,
        );
    }

    /// Renderings made / scrape batches that reused one made for others.
    pub fn counts(&self) -> (u64, u64) {
        (self.renders.get(), self.shared.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_only_renderings_started_after_the_request_was_read() {
        let cache = SharedRendering::default();
        let mut n = 0;
        let mut render = |tag: &str| {
            n += 1;
            format!("{tag}{n}")
        };
        assert_eq!(&*cache.get(10, 20, || render("a")), b"a1");
        assert_eq!(cache.last_len(), 2);
        // Read at 15 ≤ 20: the rendering started after it, reuse.
        assert_eq!(&*cache.get(15, 30, || render("b")), b"a1");
        assert_eq!(&*cache.get(20, 30, || render("b")), b"a1");
        // Read at 21 > 20: it may have seen effects the rendering missed, render again.
        assert_eq!(&*cache.get(21, 40, || render("c")), b"c2");
        assert_eq!(&*cache.get(40, 41, || render("d")), b"c2");
        assert_eq!(cache.counts(), (2, 3));
    }
}
