//! `rate_limit` / `throttle` windows across restarts: one small JSON file per core,
//! `<data_dir>/flow/core-K.json`, rewritten (write to `core-K.json.tmp`, then rename) at most
//! every [`SAVE_EVERY`] while hits happen, and once more at the drain (then the file is
//! `fdatasync`ed before the rename and the directory synced after it). Every file operation goes
//! through the storage interface (`crate::storage`); the `flow/` directory is created with a
//! durable entry (`storage::create_dir_all_durably`).
//!
//! ```json
//! {"version":1,"core":0,"windows":[
//!   {"trigger":"t","gate":"throttle","key":"","hits_unix_ms":[1764560000123],
//!    "hit_tags":["5f0c…32 hex digits"]}]}
//! ```
//!
//! This file is the store (the file and what was read from it); the engine's side, which turns
//! its gates' windows into [`SavedWindow`]s and back, is `restore`.
//!
//! `hit_tags[i]` is the [`super::window::tag`] of the event that took hit `i` (32 lowercase hex
//! digits), so an event whose call was in flight when the process died passes its window
//! again after the restart without taking a second unit. A file without `hit_tags` (or with a
//! tag that does not parse) restores its hits as taken by unknown events.
//!
//! A hit is stored as Unix milliseconds (its age on the monotonic clock, rounded down, taken
//! from the wall clock at the save), and restored at start-up as `now − age` (rounded down
//! again): a restored hit is never older than it was, so a restart opens no window early. At
//! start-up every core reads every `core-*.json` (the worker count may have changed) and keeps
//! the windows of the triggers whose destination it owns now; hits of one key found in several
//! files are merged (the newest `max` kept). Only hits still inside their period are written.
//!
//! What is not covered: a crash (not a drain) within [`SAVE_EVERY`] after a hit forgets that
//! hit, and the file is not synced except at the drain, so a power loss may forget more; a
//! wall clock set back shifts the restored ages. An unreadable file is reported on stderr and
//! ignored (the windows start empty, as before this file existed). Bound: the file holds at
//! most the core's window keys × `max` hits.
#![forbid(unsafe_code)]

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::storage::{self, OpenMode, Storage};

use crate::dispatch::spec::DispatchSpec;

/// Longest time between a window hit and the save that records it (clock nanoseconds).
pub const SAVE_EVERY: u64 = 100_000_000;
const VERSION: u32 = 1;

/// One key's window as saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedWindow {
    pub trigger: String,
    /// `rate_limit` or `throttle`.
    pub gate: String,
    pub key: String,
    pub hits_unix_ms: Vec<u64>,
    /// Parallel to `hits_unix_ms`: the tag of each hit's event, hex.
    #[serde(default)]
    pub hit_tags: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct SavedFile {
    version: u32,
    core: usize,
    windows: Vec<SavedWindow>,
}

/// A core's state file, and what was read at start-up.
#[derive(Debug)]
pub struct Store {
    fs: Arc<dyn Storage>,
    path: PathBuf,
    core: usize,
    restored: Option<Vec<SavedWindow>>,
    dirty: bool,
    /// Clock nanos before which no save is made (rate limit on rewrites).
    save_at: u64,
}

impl Store {
    /// Reads every core's file in `dir` (`<data_dir>/flow`), keeping the windows of the
    /// triggers `core` owns under `config`.
    pub fn open(dir: &Path, core: usize, config: &DispatchSpec) -> Store {
        Store::open_in(storage::std_fs(), dir, core, config)
    }

    /// [`Store::open`] on `fs`.
    pub fn open_in(fs: Arc<dyn Storage>, dir: &Path, core: usize, config: &DispatchSpec) -> Store {
        let mut restored: Vec<SavedWindow> = Vec::new();
        for path in state_files(&*fs, dir) {
            match read(&*fs, &path) {
                Ok(f) => restored.extend(f.windows.into_iter().filter(|w| owns(config, core, w))),
                Err(e) => eprintln!(
                    "sluice: flow: ignoring window state {}: {e} (windows start empty)",
                    path.display()
                ),
            }
        }
        Store {
            fs,
            path: dir.join(format!("core-{core}.json")),
            core,
            restored: Some(restored),
            dirty: false,
            save_at: 0,
        }
    }

    /// The windows read at start-up, once.
    pub fn take_restored(&mut self) -> Option<Vec<SavedWindow>> {
        self.restored.take()
    }

    pub fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    /// When a save is due (clock nanos), if one is.
    pub fn due(&self) -> Option<u64> {
        self.dirty.then_some(self.save_at)
    }

    pub fn save_due(&self, clock: u64, draining: bool) -> bool {
        self.dirty && (draining || clock >= self.save_at)
    }

    /// Writes `windows` (clock time `clock`); a failure is reported and retried at the next
    /// save.
    pub fn write(&mut self, clock: u64, windows: Vec<SavedWindow>, sync: bool) {
        self.save_at = clock.saturating_add(SAVE_EVERY);
        let file = SavedFile {
            version: VERSION,
            core: self.core,
            windows,
        };
        match write_atomically(&*self.fs, &self.path, &file, sync) {
            Ok(()) => self.dirty = false,
            Err(e) => eprintln!(
                "sluice: flow: saving window state {}: {e}",
                self.path.display()
            ),
        }
    }
}

fn state_files(fs: &dyn Storage, dir: &Path) -> Vec<PathBuf> {
    let Ok(names) = fs.list(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = names
        .into_iter()
        .filter(|n| n.starts_with("core-") && n.ends_with(".json"))
        .map(|n| dir.join(n))
        .collect();
    v.sort();
    v
}

fn read(fs: &dyn Storage, path: &Path) -> Result<SavedFile, String> {
    let bytes = fs.read(path).map_err(|e| e.to_string())?;
    let f: SavedFile = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    if f.version != VERSION {
        return Err(format!(
            "version {} (this build reads {VERSION})",
            f.version
        ));
    }
    Ok(f)
}

/// Replaces `path` with `file` through a temporary file and a rename; with `sync`, durably
/// (`storage::replace_file_durably`: data synced before the rename, directory after).
fn write_atomically(fs: &dyn Storage, path: &Path, file: &SavedFile, sync: bool) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    storage::create_dir_all_durably(fs, dir)?;
    let bytes = serde_json::to_vec(file).map_err(io::Error::other)?;
    if sync {
        return storage::replace_file_durably(fs, path, &bytes);
    }
    let tmp = path.with_extension("json.tmp");
    let mut f = fs.open(&tmp, OpenMode::REPLACE)?;
    f.write_at(0, &bytes)?;
    drop(f);
    fs.rename(&tmp, path)
}

/// Does `core` own the trigger of `w` (its handler's destination) under `config`?
fn owns(config: &DispatchSpec, core: usize, w: &SavedWindow) -> bool {
    config
        .triggers
        .iter()
        .find(|t| t.id == w.trigger)
        .and_then(|t| t.dest)
        .is_some_and(|d| {
            let uri = &config.destinations[d].handler.uri;
            crate::dispatch::placement::owner_core(uri, config.workers) == core
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (SavedWindow, SavedFile) {
        let w = SavedWindow {
            trigger: "t".into(),
            gate: "throttle".into(),
            key: "k".into(),
            hits_unix_ms: vec![5, 7],
            hit_tags: vec![format!("{:032x}", 9u128), "zz".into()],
        };
        let file = SavedFile {
            version: VERSION,
            core: 0,
            windows: vec![w.clone()],
        };
        (w, file)
    }

    #[test]
    fn a_saved_file_is_read_back_and_a_bad_one_is_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("flow");
        let fs = storage::StdFs;
        let (w, file) = sample();
        write_atomically(&fs, &dir.join("core-0.json"), &file, true).unwrap();
        std::fs::write(dir.join("core-1.json"), b"{not json").unwrap();
        std::fs::write(dir.join("other.txt"), b"x").unwrap();
        assert_eq!(state_files(&fs, &dir).len(), 2);
        assert_eq!(
            read(&fs, &dir.join("core-0.json")).unwrap().windows,
            vec![w]
        );
        assert!(read(&fs, &dir.join("core-1.json")).is_err());
        assert!(!dir.join("core-0.json.tmp").exists());
        // A file written before hits had tags still reads (its hits' events are unknown).
        let old = r#"{"version":1,"core":2,"windows":[{"trigger":"t","gate":"throttle","key":"","hits_unix_ms":[1]}]}"#;
        std::fs::write(dir.join("core-2.json"), old).unwrap();
        let read_old = read(&fs, &dir.join("core-2.json")).unwrap();
        assert!(read_old.windows[0].hit_tags.is_empty());
    }

    /// The drain's save survives a power cut right after it: the `flow/` directory entry, the
    /// file's name and its bytes are all durable (the simulation drops whatever is not).
    #[test]
    fn the_drain_save_survives_a_power_cut_on_the_simulated_disk() {
        let root = Path::new("/sim");
        let sim = storage::sim::SimFs::new(root, 5);
        let dir = root.join("data/flow");
        let (w, file) = sample();
        write_atomically(&sim, &dir.join("core-0.json"), &file, true).unwrap();
        // A periodic (unsynced) save of another core: may be lost, never a damaged file.
        write_atomically(&sim, &dir.join("core-1.json"), &file, false).unwrap();
        sim.power_cut();
        sim.reboot();
        assert_eq!(
            read(&sim, &dir.join("core-0.json")).unwrap().windows,
            vec![w]
        );
        for p in state_files(&sim, &dir) {
            assert!(read(&sim, &p).is_ok(), "{} is damaged", p.display());
        }
    }
}
