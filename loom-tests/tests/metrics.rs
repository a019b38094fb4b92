//! Loom model of the sharded counters (`src/metrics/counter.rs`): two cores increment their own
//! shards while a scrape sums them. A scrape never sees a count go down, never more than was
//! added, and after the cores stop it sees the exact total.
//!
//! Run: `loom-tests/run.sh --test metrics`.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::metrics::counter::{Metrics, Route};

#[test]
fn metric_shards_a_scrape_is_monotonic_and_exact_after_the_cores_stop() {
    explore(
        "metric_shards_a_scrape_is_monotonic_and_exact_after_the_cores_stop",
        || {
            let m = Arc::new(Metrics::new(2));
            let cores: Vec<_> = (0..2)
                .map(|i| {
                    let core = m.core(i);
                    thread::spawn(move || {
                        core.incr_http(Route::Webhook, 202);
                        core.incr_http(Route::Webhook, 202);
                    })
                })
                .collect();
            let first = m.http_requests(Route::Webhook, 202);
            let second = m.http_requests(Route::Webhook, 202);
            assert!(
                first <= second && second <= 4,
                "scraped {first} then {second}"
            );
            for c in cores {
                c.join().unwrap();
            }
            assert_eq!(m.http_requests(Route::Webhook, 202), 4);
        },
    );
}
