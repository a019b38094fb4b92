//! Loom model of `sluice::dispatch::ledger::LedgerBoard`: two pumps publish their ledgers while
//! a reader (`/metrics`, `/api/v1/ledger`) adds them up. The reader sees each core's ledger as
//! one of its publications, never a mix: every merged row balances (`accepted = done +
//! pending`), and its counts are a sum of published ones; a live state read is absent or the
//! one published.
//!
//! Run: `loom-tests/run.sh --test ledger`.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::dispatch::ledger::{LedgerBoard, LiveState, Row};

fn row(accepted: u64, delivered: u64) -> Vec<(String, Row)> {
    let mut done = [0u64; 8];
    done[1] = delivered;
    vec![(
        "t".to_owned(),
        Row {
            accepted,
            done,
            retired: 0,
        },
    )]
}

#[test]
fn ledger_a_reader_sees_whole_publications_that_balance() {
    explore(
        "ledger_a_reader_sees_whole_publications_that_balance",
        || {
            let board = Arc::new(LedgerBoard::new(2));
            let pumps: Vec<_> = (0..2)
                .map(|core| {
                    let board = board.clone();
                    thread::spawn(move || {
                        board.publish(core, row(2, 1));
                        board.publish_live(
                            core,
                            vec![(format!("core-{core}"), vec![(7, LiveState::InFlight)])],
                        );
                        board.publish(core, row(3, 3));
                    })
                })
                .collect();
            let seen = board.merged();
            if let Some(r) = seen.get("t") {
                assert_eq!(r.accepted, r.delivered() + r.pending());
                // Each core contributes nothing, (2, 1) or (3, 3).
                assert!([2, 3, 4, 5, 6].contains(&r.accepted), "{r:?}");
                let per_core = [(0, 0), (2, 1), (3, 3)];
                let sums: Vec<(u64, u64)> = per_core
                    .iter()
                    .flat_map(|a| per_core.iter().map(move |b| (a.0 + b.0, a.1 + b.1)))
                    .collect();
                assert!(sums.contains(&(r.accepted, r.delivered())), "{r:?}");
            }
            // A live state is either not yet published or the one published.
            let live = board.live_state("core-1", 7);
            assert!(matches!(live, None | Some(LiveState::InFlight)), "{live:?}");
            for p in pumps {
                p.join().unwrap();
            }
            assert_eq!(board.live_state("core-0", 7), Some(LiveState::InFlight));
            let end = board.merged()["t"];
            assert_eq!((end.accepted, end.delivered(), end.pending()), (6, 6, 0));
        },
    );
}
