//! Each node's lease in the JetStream key-value bucket `<stream>_nodes` (issue 41, item 3).
//!
//! The key is the node's name; the value a [`NodeEntry`] (JSON). A node creates or takes its
//! entry at start-up and renews it every `lease / 3` with a compare-and-set on the entry's
//! revision. The lease runs out when the entry's revision has not changed for `lease`, as each
//! watching node measures it on its own monotonic clock (`replication::adopt`), so no two nodes'
//! clocks are compared.
//!
//! An entry with `adopted_by` set means another node adopted this node's logs. Then:
//! - a node starting under that name refuses to start and names the adopter ([`Adopted`]): it
//!   never serves those logs again (start it under a new `node` name, with a new data dir);
//! - a running node whose renewal finds it so fences itself at once (it would be fenced at its
//!   next publish anyway: the adopter writes its subjects).
//!
//! Adopting a lost node's logs (the compare-and-set that sets `adopted_by`, the fence, the
//! rebuild and the delivery) is `replication::adopt`'s.
#![forbid(unsafe_code)]

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use serde::{Deserialize, Serialize};

use crate::replication::spec::ReplicationSpec;

/// A node's entry in the lease bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEntry {
    pub node: String,
    /// The lease the node renews, in milliseconds (its `replication.lease`).
    pub lease_ms: u64,
    /// The node that adopted this node's logs, once one has.
    #[serde(default)]
    pub adopted_by: Option<String>,
    /// When (Unix milliseconds, the adopter's clock), for the log line.
    #[serde(default)]
    pub adopted_at_ms: Option<u64>,
}

impl NodeEntry {
    /// A live node's entry.
    pub fn live(node: &str, lease: Duration) -> NodeEntry {
        NodeEntry {
            node: node.to_owned(),
            lease_ms: lease.as_millis() as u64,
            adopted_by: None,
            adopted_at_ms: None,
        }
    }
}

/// This node's logs were adopted by another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adopted {
    pub node: String,
    pub by: String,
    pub at_ms: Option<u64>,
}

impl std::fmt::Display for Adopted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the logs of node {:?} were adopted by node {:?}{}: this node never serves them \
             again; start it under a new replication.node with a new data dir",
            self.node,
            self.by,
            self.at_ms
                .map(|ms| format!(" (at Unix ms {ms})"))
                .unwrap_or_default()
        )
    }
}

/// What a node found in its entry: nothing adopted (`Ok`), or by whom.
pub fn check(entry: Option<&NodeEntry>) -> Result<(), Adopted> {
    match entry {
        Some(NodeEntry {
            node,
            adopted_by: Some(by),
            adopted_at_ms,
            ..
        }) => Err(Adopted {
            node: node.clone(),
            by: by.clone(),
            at_ms: *adopted_at_ms,
        }),
        _ => Ok(()),
    }
}

/// Whether node `spec.node`'s logs were adopted, read from its entry (a new connection,
/// waiting at most `spec.lease`): for a start with an empty data dir, which must not restore
/// logs another node adopted. No bucket or no entry: not adopted.
pub fn adopted_blocking(spec: &ReplicationSpec) -> Result<Option<Adopted>, String> {
    let rt = crate::replication::client::runtime().map_err(|e| e.to_string())?;
    rt.block_on(async {
        let read = async {
            let client = crate::replication::client::connect(spec, "lease").await?;
            let js = jetstream::new(client);
            let Ok(store) = js.get_key_value(spec.lease_bucket()).await else {
                return Ok(None);
            };
            let entry = store.entry(&spec.node).await.map_err(|e| e.to_string())?;
            let found: Option<NodeEntry> =
                entry.and_then(|e| serde_json::from_slice(&e.value).ok());
            Ok(check(found.as_ref()).err())
        };
        match tokio::time::timeout(spec.lease, read).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {:?}", spec.lease)),
        }
    })
}

/// The node's hold on its entry.
#[derive(Debug)]
pub struct Lease {
    store: kv::Store,
    key: String,
    value: bytes::Bytes,
    revision: u64,
}

/// Why a renewal did not go through.
#[derive(Debug)]
pub enum Renewal {
    /// Another node adopted this node's logs.
    Adopted(Adopted),
    /// JetStream did not take it (unavailable): try again at the next renewal.
    Failed(String),
}

impl Lease {
    /// Opens (creating it if missing, with the stream's replicas) the bucket, and takes this
    /// node's entry: created if missing, rewritten if live or expired, refused if adopted.
    pub async fn acquire(
        js: &jetstream::Context,
        spec: &ReplicationSpec,
    ) -> Result<Result<Lease, Adopted>, String> {
        let bucket = spec.lease_bucket();
        let store = match js.get_key_value(&bucket).await {
            Ok(s) => s,
            Err(_) => js
                .create_key_value(kv::Config {
                    bucket: bucket.clone(),
                    history: 1,
                    num_replicas: spec.replicas,
                    storage: jetstream::stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .map_err(|e| format!("lease bucket {bucket}: {e}"))?,
        };
        let key = spec.node.clone();
        let value = serde_json::to_vec(&NodeEntry::live(&spec.node, spec.lease))
            .map_err(|e| e.to_string())?
            .into();
        let entry = (store.entry(&key).await).map_err(|e| format!("lease {key}: {e}"))?;
        let revision = match entry {
            None => (store.create(&key, Clone::clone(&value)).await)
                .map_err(|e| format!("lease {key}: {e}"))?,
            Some(e) => {
                let found: Option<NodeEntry> = serde_json::from_slice(&e.value).ok();
                if let Err(adopted) = check(found.as_ref()) {
                    return Ok(Err(adopted));
                }
                (store.update(&key, Clone::clone(&value), e.revision).await)
                    .map_err(|e| format!("lease {key}: {e}"))?
            }
        };
        Ok(Ok(Lease {
            store,
            key,
            value,
            revision,
        }))
    }

    /// Renews the entry (compare-and-set on its revision).
    pub async fn renew(&mut self) -> Result<(), Renewal> {
        let value = Clone::clone(&self.value);
        match self.store.update(&self.key, value, self.revision).await {
            Ok(rev) => {
                self.revision = rev;
                Ok(())
            }
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                let entry = self.store.entry(&self.key).await;
                let entry = entry.map_err(|e| Renewal::Failed(e.to_string()))?;
                let found = entry
                    .as_ref()
                    .and_then(|e| serde_json::from_slice(&e.value).ok());
                check(found.as_ref()).map_err(Renewal::Adopted)?;
                // Rewritten by nobody who adopted (an operator, a restart of this node): take it.
                if let Some(e) = entry {
                    self.revision = e.revision;
                }
                Err(Renewal::Failed("the entry changed; retaken".into()))
            }
            Err(e) => Err(Renewal::Failed(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adopted_entry_refuses_and_names_the_adopter_a_live_one_does_not() {
        let live = NodeEntry::live("a", Duration::from_secs(10));
        assert_eq!(check(Some(&live)), Ok(()));
        assert_eq!(check(None), Ok(()));
        let adopted = NodeEntry {
            adopted_by: Some("b".into()),
            adopted_at_ms: Some(5),
            ..live.clone()
        };
        let e = check(Some(&adopted)).unwrap_err();
        assert_eq!(e.by, "b");
        assert!(e.to_string().contains("adopted by node \"b\""), "{e}");
        let json = serde_json::to_string(&live).unwrap();
        assert_eq!(serde_json::from_str::<NodeEntry>(&json).unwrap(), live);
        let old: NodeEntry = serde_json::from_str(r#"{"node":"a","lease_ms":10}"#).unwrap();
        assert_eq!(old.adopted_by, None, "fields added later default");
    }
}
