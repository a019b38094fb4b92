//! The windows' saved state ([`crate::dispatch::flow::persist`] is the file): restoring the
//! `rate_limit` / `throttle` hits read at start-up into the windows, on the engine's first
//! turn, and turning the windows into [`SavedWindow`]s when a save is due. The rules (ages
//! rounded towards "more recent", only hits inside their period written) are `persist`'s.
#![forbid(unsafe_code)]

use std::collections::HashMap;

use super::Windows;
use crate::dispatch::flow::agenda::SHIFT;
use crate::dispatch::flow::books::Books;
use crate::dispatch::flow::pending::{nanos, Stage};
use crate::dispatch::flow::persist::SavedWindow;

impl Windows {
    pub(super) fn mark_dirty(&mut self) {
        if let Some(s) = &mut self.store {
            s.mark_dirty();
        }
    }

    /// When a save is due (clock nanos).
    pub(in crate::dispatch::flow) fn save_due(&self) -> Option<u64> {
        self.store.as_ref().and_then(|s| s.due())
    }

    /// The engine's time for clock time `now`; restores the saved windows on the first call
    /// (`by_id`: trigger id → index; a key refused by the table is counted in `books`).
    pub(in crate::dispatch::flow) fn restore_once(
        &mut self,
        now: u64,
        by_id: &HashMap<String, usize>,
        books: &Books,
    ) -> u64 {
        let shifted = now.saturating_add(SHIFT);
        let Some(saved) = self.store.as_mut().and_then(|s| s.take_restored()) else {
            return shifted;
        };
        let unix_ms = crate::sync::clock::unix_millis();
        for w in saved {
            let Some(&t) = by_id.get(&w.trigger) else {
                continue;
            };
            let stage = match w.gate.as_str() {
                "rate_limit" => Stage::RateLimit,
                "throttle" => Stage::Throttle,
                _ => continue,
            };
            let f = &self.config.triggers[t].flow;
            let Some(g) = (match stage {
                Stage::RateLimit => f.rate_limit.as_ref(),
                _ => f.throttle.as_ref(),
            }) else {
                continue;
            };
            let (period, max) = (nanos(g.period), g.max);
            let key = self.key(t, stage, &w.key, shifted, books);
            let win = &mut self.map(t, stage).entry(key).or_default().window;
            for (i, hit_ms) in w.hits_unix_ms.into_iter().enumerate() {
                // Ages are rounded down: a restored hit is never older than it was.
                let age = unix_ms.saturating_sub(hit_ms).saturating_mul(1_000_000);
                let tag = w
                    .hit_tags
                    .get(i)
                    .and_then(|h| u128::from_str_radix(h, 16).ok())
                    .unwrap_or(0);
                win.restore(shifted.saturating_sub(age), tag, shifted, period, max);
            }
        }
        self.restored_until = shifted;
        shifted
    }

    /// Writes the window state when it changed (at most every
    /// [`SAVE_EVERY`](crate::dispatch::flow::persist::SAVE_EVERY), or at once while `draining`).
    pub(in crate::dispatch::flow) fn save(&mut self, clock: u64, draining: bool) {
        let Some(store) = self.store.as_mut() else {
            return;
        };
        if !store.save_due(clock, draining) {
            return;
        }
        let now = clock.saturating_add(SHIFT);
        let unix_ms = crate::sync::clock::unix_millis();
        let mut windows = Vec::new();
        for (t, g) in self.gates.iter().enumerate() {
            let f = &self.config.triggers[t].flow;
            for (gate, map, cfg) in [
                ("rate_limit", &g.rate_limit, &f.rate_limit),
                ("throttle", &g.throttle, &f.throttle),
            ] {
                let Some(cfg) = cfg else { continue };
                let period = nanos(cfg.period);
                for (key, w) in map {
                    let (hits, tags): (Vec<u64>, Vec<String>) = w
                        .window
                        .hits()
                        .filter(|&(h, _)| now.saturating_sub(h) < period)
                        .map(|(h, tag)| {
                            let ms = unix_ms.saturating_sub(now.saturating_sub(h) / 1_000_000);
                            (ms, format!("{tag:032x}"))
                        })
                        .unzip();
                    if !hits.is_empty() {
                        windows.push(SavedWindow {
                            trigger: self.config.triggers[t].id.clone(),
                            gate: gate.to_string(),
                            key: key.clone(),
                            hits_unix_ms: hits,
                            hit_tags: tags,
                        });
                    }
                }
            }
        }
        store.write(clock, windows, draining);
    }
}
