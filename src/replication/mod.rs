//! The JetStream mirror of each core's log (issue 41): each group commit is published as one
//! message on `<stream>.<node>.core-<K>`, a 202 waits for both the local fdatasync and the
//! JetStream ack, and a lost node's logs are adopted through a lease in the `<stream>_nodes`
//! key-value bucket ([`adopt`]). [`ReplicationSpec`] is what this room is configured with (`[replication]`,
//! validated by `config`; this room never reads the configuration itself).
//!
//! [`restore`] rebuilds a node's logs from its messages (`sluice replication restore`, and a
//! node started with an empty data dir); the dead letters it carries are written by the caller's
//! store (`ops::restore`), as this room never names dispatch.

pub mod adopt;
pub mod catch_up;
pub mod client;
pub mod fence;
pub mod lease;
pub mod message;
pub mod mirror;
pub mod publish;
pub mod purge;
pub mod restore;
pub mod retention;
pub mod spec;
pub mod state;

pub use spec::ReplicationSpec;
