//! Loom models of `sluice::sync::publish`, the configuration generations cores pick up at the
//! top of a loop turn (`ops::reload`): a core never goes back to an older generation, never
//! finds a value older than the number it loaded, and sees the last publication once the
//! publisher is done.
//!
//! Run: `loom-tests/run.sh --test publish`.
#![cfg(sluice_loom)]

mod common;
use common::explore;

use loom::sync::Arc;
use loom::thread;
use sluice::sync::publish::{Publisher, Subscription};

#[test]
fn publish_a_core_never_goes_back_and_ends_on_the_latest() {
    explore(
        "publish_a_core_never_goes_back_and_ends_on_the_latest",
        || {
            let p = Arc::new(Publisher::new(10u64));
            let mut sub = Subscription::new(&p);
            let publisher = {
                let p = p.clone();
                thread::spawn(move || {
                    assert_eq!(p.publish(20), 2);
                    assert_eq!(p.publish(30), 3);
                })
            };
            let mut seen = vec![1u64];
            for _ in 0..2 {
                let loaded = p.number();
                if let Some(g) = sub.pick_up(&p) {
                    assert!(
                        g.number >= loaded,
                        "found generation {} after loading {loaded}",
                        g.number
                    );
                    assert_eq!(
                        g.value,
                        g.number * 10,
                        "a number with another generation's value"
                    );
                    seen.push(g.number);
                }
            }
            assert!(seen.windows(2).all(|w| w[0] < w[1]), "went back: {seen:?}");
            publisher.join().unwrap();
            sub.pick_up(&p);
            assert_eq!(sub.held().number, 3);
            assert_eq!(sub.held().value, 30);
        },
    );
}

#[test]
fn publish_two_cores_each_pick_up_every_value_once_at_most() {
    explore(
        "publish_two_cores_each_pick_up_every_value_once_at_most",
        || {
            let p = Arc::new(Publisher::new(1u64));
            let core = |p: Arc<Publisher<u64>>| {
                thread::spawn(move || {
                    let mut sub = Subscription::new(&p);
                    let first = sub.held().number;
                    let next = sub.pick_up(&p).map(|g| g.number);
                    if let Some(n) = next {
                        assert!(n > first);
                    }
                    assert!(
                        sub.pick_up(&p).is_none()
                            || next.is_none()
                            || p.number() > next.unwrap_or(0)
                    );
                })
            };
            let a = core(p.clone());
            let b = core(p.clone());
            p.publish(2);
            a.join().unwrap();
            b.join().unwrap();
            assert_eq!(p.current().number, 2);
        },
    );
}
