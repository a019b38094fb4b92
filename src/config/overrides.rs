//! Command-line overrides: the highest precedence, over the environment and the manifest.

use std::path::PathBuf;

/// Command-line overrides (highest precedence).
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub workers: Option<usize>,
    pub durability: Option<String>,
    pub pump_max_outstanding: Option<usize>,
    /// `--drain-grace` (wins over `server.drain_grace`).
    pub drain_grace: Option<String>,
    /// `--accept-wal-loss` (there is no manifest key: it is a decision for one start).
    pub accept_wal_loss: bool,
    /// `--io` (wins over `SLUICE_IO` and `server.io`).
    pub io: Option<String>,
}
