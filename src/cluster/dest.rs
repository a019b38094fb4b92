//! One shared destination at run time: its spec, its slot (the hand-off between the owner core
//! and the client thread) and its Redis keys.

use std::sync::Arc;

use super::slot::Slot;
use super::spec::{SharedDestSpec, SharedRate, SharedSpec};

/// One shared destination.
#[derive(Debug)]
pub struct SharedDest {
    pub slot: Arc<Slot>,
    pub cfg: SharedSpec,
    /// The cluster-wide `max_in_flight`.
    pub limit: usize,
    pub rate: Option<SharedRate>,
    /// The destination's uri (the metrics label).
    pub uri: String,
    /// `sluice:budget:<key>:held|want|expiry|rate|epoch`.
    pub keys: [String; 5],
}

impl SharedDest {
    /// The run-time state of `spec`: a fresh slot, the keys named after its budget.
    pub fn new(spec: SharedDestSpec) -> SharedDest {
        let base = format!("sluice:budget:{}", spec.shared.key);
        SharedDest {
            slot: Arc::new(Slot::new(spec.dest)),
            keys: ["held", "want", "expiry", "rate", "epoch"].map(|k| format!("{base}:{k}")),
            cfg: spec.shared,
            limit: spec.limit,
            rate: spec.rate,
            uri: spec.uri,
        }
    }
}
