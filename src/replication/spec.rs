//! What replication runs with: the NATS servers, the JetStream stream and the names derived from
//! it, this node's name, and the bounds of the publish pipeline. Built by `config` from the
//! `[replication]` section (validated there: every string here is already a well-formed URL or a
//! single NATS subject token); this room only reads it.
//!
//! Names, all derived from `stream` and a node name (both single NATS subject tokens, made only
//! of `[A-Za-z0-9_-]`, so none can add a level or a wildcard):
//!
//! | name | form | what |
//! |---|---|---|
//! | subject | `<stream>.<node>.core-<K>` | core K's log of that node ([`ReplicationSpec::subject_of`]) |
//! | node filter | `<stream>.<node>.*` | every log of that node, not their fence subjects ([`ReplicationSpec::node_filter`]) |
//! | fence subjects | `<stream>.<node>.core-<K>.fence.<k>`, `k` < 16 | the fence of that log's subject (`replication::fence`) |
//! | lease bucket | `<stream>_nodes` | the key-value bucket of the nodes' leases ([`ReplicationSpec::lease_bucket`]) |

#![forbid(unsafe_code)]

use std::time::Duration;

/// The validated `[replication]` section. Immutable for a run (a reload that changes it is
/// refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationSpec {
    /// The NATS servers to connect to, each `nats://host:port` or `tls://host:port` (the port
    /// always written, 4222 when the manifest left it out; IPv6 hosts in brackets). 1..=16,
    /// no two alike.
    pub servers: Vec<String>,
    /// The JetStream stream holding every node's logs; a single subject token of at most 64
    /// bytes.
    pub stream: String,
    /// The stream's replica count, 1..=5.
    pub replicas: usize,
    /// This node's name, a single subject token of at most 64 bytes; unique per node.
    pub node: String,
    /// How long a publish waits for JetStream's ack before its batch counts as unreplicated;
    /// 100ms..=60s.
    pub ack_timeout: Duration,
    /// How long a node's lease in the lease bucket lasts without a renewal; 3s..=10m and more
    /// than twice `ack_timeout`.
    pub lease: Duration,
    /// Batches in flight (published, ack not yet taken) per log; 1..=64, default 2. The
    /// messages in flight per subject are at most this and 16 (`replication::fence`).
    pub max_inflight: usize,
}

impl ReplicationSpec {
    /// This node's subject for core `core`'s log: `<stream>.<node>.core-<core>`.
    pub fn subject(&self, core: usize) -> String {
        self.subject_of(&self.node, core)
    }

    /// Node `node`'s subject for its core `core`'s log: `<stream>.<node>.core-<core>` (an
    /// adopted log is read, and its done records written, on its own node's subjects).
    pub fn subject_of(&self, node: &str, core: usize) -> String {
        format!("{}.{node}.core-{core}", self.stream)
    }

    /// The subject filter of every log of node `node`: `<stream>.<node>.*` (one token more:
    /// the fence subjects below each log's, `replication::fence`, are left out).
    pub fn node_filter(&self, node: &str) -> String {
        format!("{}.{node}.*", self.stream)
    }

    /// The key-value bucket holding the nodes' leases: `<stream>_nodes`.
    pub fn lease_bucket(&self) -> String {
        format!("{}_nodes", self.stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ReplicationSpec {
        ReplicationSpec {
            servers: vec!["nats://127.0.0.1:4222".into()],
            stream: "sluice".into(),
            replicas: 3,
            node: "node-a".into(),
            ack_timeout: Duration::from_secs(2),
            lease: Duration::from_secs(10),
            max_inflight: 8,
        }
    }

    #[test]
    fn subjects_are_stream_node_core() {
        let s = spec();
        assert_eq!(s.subject(0), "sluice.node-a.core-0");
        assert_eq!(s.subject(12), "sluice.node-a.core-12");
        assert_eq!(s.subject_of("node_b", 3), "sluice.node_b.core-3");
        assert_eq!(s.subject(5), s.subject_of(&s.node, 5));
    }

    #[test]
    fn the_node_filter_covers_every_core_of_one_node_only() {
        let s = spec();
        assert_eq!(s.node_filter("node-b"), "sluice.node-b.*");
        let filter = s.node_filter("node-a");
        let prefix = filter.trim_end_matches('*');
        assert!(s.subject(7).starts_with(prefix));
        assert!(
            !s.subject(7)[prefix.len()..].contains('.'),
            "one token: the log's"
        );
        assert!(!s.subject_of("node-ab", 7).starts_with(prefix));
    }

    #[test]
    fn the_lease_bucket_is_named_after_the_stream() {
        let mut s = spec();
        assert_eq!(s.lease_bucket(), "sluice_nodes");
        s.stream = "orders-eu".into();
        assert_eq!(s.lease_bucket(), "orders-eu_nodes");
        assert_eq!(s.subject(1), "orders-eu.node-a.core-1");
    }
}
