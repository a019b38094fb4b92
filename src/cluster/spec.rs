//! What the cluster needs to know, as `config` validated it: where a shared budget lives
//! ([`RedisAddr`], [`SharedSpec`]), what dispatch does while Redis is unreachable
//! ([`OnUnavailable`]), and each shared destination's own budget ([`SharedDestSpec`],
//! [`SharedRate`]). `config`
//! builds these (`[[destinations]] shared = { … }`); the cluster imports nothing of `config`.

use std::time::Duration;

/// Where the Redis is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisAddr {
    pub host: String,
    pub port: u16,
    pub db: u8,
}

impl std::fmt::Display for RedisAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "redis://{}:{}/{}", self.host, self.port, self.db)
    }
}

/// `on_unavailable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUnavailable {
    /// No dispatch to the destination until Redis answers again.
    Closed,
    /// This node's own budget until Redis answers again.
    Local,
}

/// A validated `shared` table of one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedSpec {
    pub redis: RedisAddr,
    /// The budget's name (the Redis keys are `sluice:budget:<key>:…`).
    pub key: String,
    pub lease: Duration,
    pub on_unavailable: OnUnavailable,
}

/// One destination whose budget is shared: its index among the destinations, its `shared`
/// table, and the budget the nodes share (its `max_in_flight` and `rate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedDestSpec {
    /// The destination's index (the order of `[[destinations]]`, the dispatcher's too).
    pub dest: usize,
    pub shared: SharedSpec,
    /// The cluster-wide `max_in_flight`.
    pub limit: usize,
    pub rate: Option<SharedRate>,
    /// The destination's uri (the metrics label).
    pub uri: String,
}

/// The shared GCRA's parameters: the destination's `rate = { per_sec, burst }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedRate {
    pub per_sec: u64,
    pub burst: u64,
}
