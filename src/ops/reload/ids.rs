//! Stable destination ids across reloads.
//!
//! A destination's **id** is its index in a generation's [`Config::destinations`], and it is the
//! same in every generation of the run: per-destination state is keyed by it everywhere (the
//! owner core's permits, circuit, adaptive limit, rate budget, pause, queue and outbound
//! connections in `dispatch::deliver::dispatcher`; the metric cells in `dispatch::metrics`; the jobs the
//! pumps send, `Job::dest`). At start the ids are the start-up configuration's order (first use
//! by the triggers). A reload lays the new configuration out by id ([`assign`]):
//! - a handler URI the running generation knows keeps its id (and so its state: calls in
//!   flight, circuit, counters);
//! - a new URI takes the next id;
//! - a URI no trigger uses any more is *removed*: it keeps its id and its last settings in the
//!   new generation's `destinations`, so the events accepted for it before the reload (which
//!   the pumps still route to it, by the trigger's last handler) are delivered with them. Its
//!   metric series stop being exported ([`in_use`]); a later reload that names the URI again
//!   finds its id, its state and its counters.
//!
//! **Bound.** Ids are never reused within a run: at most the start-up destinations plus
//! [`RELOAD_DESTINATIONS`] ids exist, removed ones included (`sluice_destinations{state}`). A
//! reload that would need more is refused, naming the URI; a restart starts the count again.
//! So `destinations` of any generation, each core's per-destination tables and the metric
//! cells hold at most that many entries.

#![forbid(unsafe_code)]

use std::collections::HashMap;

use crate::config::Config;

/// Destination ids a run's reloads may add beyond the start-up destinations (dispatch's bound
/// on its per-destination tables).
pub use crate::dispatch::spec::RELOAD_DESTINATIONS;

/// `new` (just validated, its destinations in its own order of first use) laid out by the ids of
/// `running`; `start` is the number of start-up destinations (the bound is `start +`
/// [`RELOAD_DESTINATIONS`]). `Err` names the first URI past the bound.
pub fn assign(running: &Config, mut new: Config, start: usize) -> Result<Config, String> {
    let by_uri: HashMap<&str, usize> = running
        .destinations
        .iter()
        .enumerate()
        .map(|(id, d)| (d.handler.uri.as_str(), id))
        .collect();
    let bound = start + RELOAD_DESTINATIONS;
    // Every id of the running generation, with its running settings until the manifest says
    // otherwise (a removed destination keeps them).
    let mut laid_out = running.destinations.clone();
    let mut id_of = Vec::with_capacity(new.destinations.len());
    for d in std::mem::take(&mut new.destinations) {
        let id = match by_uri.get(d.handler.uri.as_str()) {
            Some(&id) => id,
            None if laid_out.len() >= bound => {
                return Err(format!(
                    "destination {:?} would be destination number {} of this run, past the \
                     bound of {bound} (the {start} at start plus {RELOAD_DESTINATIONS} added by \
                     reloads, removed ones included); restart to add it",
                    d.handler.uri,
                    laid_out.len() + 1
                ));
            }
            None => {
                laid_out.push(d.clone());
                laid_out.len() - 1
            }
        };
        laid_out[id] = d;
        id_of.push(id);
    }
    for t in &mut new.triggers {
        t.handler = t.handler.map(|i| id_of[i]);
    }
    new.destinations = laid_out;
    Ok(new)
}

/// Per id: true when a trigger of `config` names the destination (false: removed by a reload,
/// kept only to finish the events accepted for it).
pub fn in_use(config: &Config) -> Vec<bool> {
    let mut used = vec![false; config.destinations.len()];
    for d in config.triggers.iter().filter_map(|t| t.handler) {
        used[d] = true;
    }
    used
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::reload::diff::tests::cfg;

    fn trig(id: &str, uri: &str) -> String {
        format!("[[triggers]]\nid = \"{id}\"\nprovider = \"p\"\npath = \"/{id}\"\nhandler = \"{uri}\"\n")
    }

    fn uris(c: &Config) -> Vec<&str> {
        c.destinations
            .iter()
            .map(|d| d.handler.uri.as_str())
            .collect()
    }

    #[test]
    fn kept_uris_keep_their_ids_new_ones_append_removed_ones_stay() {
        let a = "http://127.0.0.1:1/";
        let b = "http://127.0.0.1:2/";
        let c = "http://127.0.0.1:3/";
        let start = cfg(&format!("{}{}", trig("ta", a), trig("tb", b)));
        // The new manifest names c first, then b (its own order would be c=0, b=1); a is gone.
        let next = cfg(&format!(
            "{}{}[[destinations]]\nuri = \"{b}\"\nmax_in_flight = 9\n",
            trig("tc", c),
            trig("tb", b)
        ));
        let laid = assign(&start, next, 2).unwrap();
        assert_eq!(uris(&laid), [a, b, c]);
        assert_eq!(
            laid.destinations[1].max_in_flight, 9,
            "b has its new settings"
        );
        let handler = |id: &str| laid.triggers.iter().find(|t| t.id == id).unwrap().handler;
        assert_eq!((handler("tb"), handler("tc")), (Some(1), Some(2)));
        assert_eq!(in_use(&laid), [false, true, true]);
        // a comes back: its old id.
        let again = cfg(&format!("{}{}", trig("ta", a), trig("tc", c)));
        let laid2 = assign(&laid, again, 2).unwrap();
        assert_eq!(uris(&laid2), [a, b, c]);
        assert_eq!(in_use(&laid2), [true, false, true]);
    }

    #[test]
    fn ids_past_the_bound_are_refused_by_uri() {
        let mut running = cfg(&trig("t0", "http://127.0.0.1:1/"));
        for i in 0..RELOAD_DESTINATIONS {
            let next = cfg(&trig("t", &format!("http://127.0.0.1:{}/", 100 + i)));
            running = assign(&running, next, 1).unwrap();
        }
        assert_eq!(running.destinations.len(), 1 + RELOAD_DESTINATIONS);
        let past = cfg(&trig("t", "http://127.0.0.1:9999/"));
        let e = assign(&running, past, 1).unwrap_err();
        assert!(e.contains("127.0.0.1:9999") && e.contains("restart"), "{e}");
        // A URI the run already knows is still fine at the bound.
        let known = cfg(&trig("t", "http://127.0.0.1:1/"));
        assert!(assign(&running, known, 1).is_ok());
    }
}
