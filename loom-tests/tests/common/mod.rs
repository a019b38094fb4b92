//! Shared by every model file: [`explore`].
#![cfg(sluice_loom)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Runs `f` under `loom::model`, prints and returns how many interleavings were explored, and
/// asserts that there was more than one (a model that explores nothing proves nothing).
pub fn explore(name: &str, f: impl Fn() + Send + Sync + 'static) -> usize {
    let iterations = Arc::new(AtomicUsize::new(0));
    let counter = iterations.clone();
    loom::model(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        f();
    });
    let n = iterations.load(Ordering::Relaxed);
    println!("{name}: {n} iterations");
    assert!(n > 1, "{name}: the model explored only {n} interleaving(s)");
    n
}

/// [`explore`] with the model body on a loom thread of `stack` bytes: for models that build a
/// large value on the stack before it moves into its `Arc` (the return schedule: two rings of 64
/// padded words), more than loom's default coroutine stack holds.
#[allow(dead_code)] // Each model file compiles this module; only some need it.
pub fn explore_with_stack(name: &str, stack: usize, f: impl Fn() + Send + Sync + 'static) -> usize {
    let f = Arc::new(f);
    explore(name, move || {
        let f = f.clone();
        loom::thread::Builder::new()
            .stack_size(stack)
            .spawn(move || f())
            .unwrap()
            .join()
            .unwrap();
    })
}
