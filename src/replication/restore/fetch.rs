//! Reading a node's messages from the stream, in stream order (the restore's I/O part).
//!
//! [`Source::connect`] connects with the official client on a current-thread runtime of its own
//! (as the mirror does), waiting at most `lease` for a server, and gets the stream
//! ([`RestoreError::NoStream`] when it does not exist). [`Source::subjects`] lists the node's
//! subjects under `<stream>.<node>.*` with their message counts and last sequences.
//! [`Source::read`] then reads every message under the filter with an ordered pull consumer from
//! the first, in stream order (so a log whose records moved from one core's subject to another's,
//! when the worker count changed, reads in the order it was written), until the highest of those
//! last sequences. A message whose number (`Nats-Msg-Id`) does not follow on from its subject's
//! previous one, and every later one of that subject, is skipped: it went out behind a message
//! that never landed (`replication::fence`). Every wait is bounded: a read that gets no message
//! for `ack_timeout` × 5 while short of its end fails ([`RestoreError::Stalled`]).
#![forbid(unsafe_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures_util::StreamExt;

use super::{At, RestoreError};
use std::collections::BTreeMap;

use crate::replication::catch_up::{last_message, last_sequence, subjects_of};
use crate::replication::client;
use crate::replication::fence::{number_in, Numbering};
use crate::replication::message;
use crate::replication::spec::ReplicationSpec;
use crate::wal::Lsn;

/// How many `ack_timeout`s a read waits for its next message before it calls the read stalled.
pub const STALL_ACK_TIMEOUTS: u32 = 5;

/// What [`Source::read`] hands each message to: where it was read, and its bytes.
pub type Each<'a> = dyn FnMut(At<'_>, &[u8]) -> Result<(), RestoreError> + 'a;

/// One subject of the node: `<stream>.<node>.core-<K>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectInfo {
    pub subject: String,
    /// Messages the stream holds on it.
    pub messages: u64,
    /// The stream sequence of its last message.
    pub last: u64,
}

/// A connection to the stream, for one node's messages.
pub struct Source {
    rt: tokio::runtime::Runtime,
    stream: stream::Stream,
    name: String,
    filter: String,
    stall: Duration,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("stream", &self.name)
            .field("filter", &self.filter)
            .finish_non_exhaustive()
    }
}

impl Source {
    /// Connects to `spec.servers` and gets `spec.stream`, for node `node`'s messages.
    pub fn connect(spec: &ReplicationSpec, node: &str) -> Result<Source, RestoreError> {
        if !super::valid_node(node) {
            return Err(RestoreError::BadNode(node.to_owned()));
        }
        let rt = crate::replication::client::runtime().map_err(|e| RestoreError::Write {
            what: "the NATS client's runtime".into(),
            error: e.to_string(),
        })?;
        let stream = rt.block_on(open(spec))?;
        Ok(Source {
            rt,
            stream,
            name: spec.stream.clone(),
            filter: spec.node_filter(node),
            stall: spec.ack_timeout * STALL_ACK_TIMEOUTS,
        })
    }

    fn stream_err(&self, error: impl ToString) -> RestoreError {
        RestoreError::Stream {
            stream: self.name.clone(),
            error: error.to_string(),
        }
    }

    /// Runs `f` on this source's runtime, bounded by the stall wait.
    fn bounded<T>(&self, what: &str, f: impl Future<Output = T>) -> Result<T, RestoreError> {
        let waited = self.stall;
        (self
            .rt
            .block_on(async { tokio::time::timeout(waited, f).await }))
        .map_err(|_| self.stream_err(format!("{what}: no answer within {waited:?}")))
    }

    /// The node's subjects, in subject order, each with its message count and last sequence;
    /// empty when the stream holds no message of the node.
    pub fn subjects(&self) -> Result<Vec<SubjectInfo>, RestoreError> {
        let listed = self.bounded("the node's subjects", async {
            subjects_of(&self.stream, &self.filter).await
        })?;
        let mut listed = listed.map_err(|e| self.stream_err(e))?;
        listed.sort();
        let mut out = Vec::with_capacity(listed.len());
        for (subject, messages) in listed.into_iter().filter(|(_, n)| *n > 0) {
            let last = self.bounded("a subject's last sequence", async {
                last_sequence(&self.stream, &subject).await
            })?;
            let last = last.map_err(|e| self.stream_err(e))?;
            out.push(SubjectInfo {
                subject,
                messages: messages as u64,
                last,
            });
        }
        Ok(out)
    }

    /// Where each log begins: per log, the highest `first` LSN the frames of the last message
    /// of each of `subjects` name (a node's frames carry its logs' retired points, and a
    /// subject's last message is never purged). Empty for a stream that never dropped anything.
    pub fn firsts(&self, subjects: &[SubjectInfo]) -> Result<BTreeMap<u16, Lsn>, RestoreError> {
        let mut firsts: BTreeMap<u16, Lsn> = BTreeMap::new();
        for s in subjects {
            let last = self.bounded("a subject's last message", async {
                last_message(&self.stream, &s.subject).await
            })?;
            let Some(payload) = last.map_err(|e| self.stream_err(e))? else {
                continue;
            };
            let d = message::decode(&payload).map_err(|e| RestoreError::Decode {
                subject: s.subject.clone(),
                sequence: s.last,
                error: e.to_string(),
            })?;
            for (log, lsn) in d.lists().1 {
                let f = firsts.entry(log).or_default();
                *f = (*f).max(lsn);
            }
        }
        firsts.retain(|_, lsn| *lsn > 1);
        Ok(firsts)
    }

    /// Reads every message under the node's filter in stream order, up to the highest last
    /// sequence of `subjects`, handing each to `each`; returns how many were read.
    pub fn read(&self, subjects: &[SubjectInfo], each: &mut Each<'_>) -> Result<u64, RestoreError> {
        let end = subjects.iter().map(|s| s.last).max().unwrap_or(0);
        if end == 0 {
            return Ok(0);
        }
        let config = consumer::pull::OrderedConfig {
            filter_subject: self.filter.clone(),
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        };
        let messages = self.bounded("an ordered consumer", async {
            let c = self.stream.create_consumer(config).await?;
            c.messages().await.map_err(|e| e.to_string().into())
        })?;
        let mut messages: consumer::pull::Ordered =
            messages.map_err(|e: async_nats::Error| self.stream_err(e))?;
        let (mut at, mut read) = (0u64, 0u64);
        let mut numbering: BTreeMap<String, Numbering> = BTreeMap::new();
        while at < end {
            let stall = self.stall;
            let next = self
                .rt
                .block_on(async { tokio::time::timeout(stall, messages.next()).await });
            let m = match next {
                Ok(Some(Ok(m))) => m,
                Ok(Some(Err(e))) => return Err(self.stream_err(format!("reading: {e}"))),
                Ok(None) => return Err(self.stream_err("the consumer ended early")),
                Err(_) => {
                    return Err(RestoreError::Stalled {
                        filter: self.filter.clone(),
                        at,
                        end,
                        waited: stall,
                    })
                }
            };
            let info = m.info().map_err(|e| self.stream_err(e))?;
            at = info.stream_sequence;
            if at > end {
                break;
            }
            let number = m.headers.as_ref().and_then(number_in);
            let count = numbering.entry(m.subject.to_string()).or_default();
            if !count.keep(number) {
                // Published behind a message that never landed, and not yet deleted by a
                // take (`replication::fence`): acknowledged to no sender.
                continue;
            }
            each(
                At {
                    subject: m.subject.as_str(),
                    sequence: at,
                },
                &m.payload,
            )?;
            read += 1;
        }
        Ok(read)
    }
}

/// Connects and gets the stream: an unknown stream is [`RestoreError::NoStream`]; other
/// failures are retried until `spec.lease` has passed (a cluster still electing).
async fn open(spec: &ReplicationSpec) -> Result<stream::Stream, RestoreError> {
    let unreachable = |error: String| RestoreError::Unreachable {
        servers: spec.servers.clone(),
        error,
    };
    let client = client::connect(spec, "restore")
        .await
        .map_err(unreachable)?;
    let js = jetstream::new(client);
    let deadline = Instant::now() + spec.lease;
    loop {
        match js.get_stream(&spec.stream).await {
            Ok(s) => return Ok(s),
            Err(e) => {
                if let jetstream::context::GetStreamErrorKind::JetStream(j) = e.kind() {
                    if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND {
                        return Err(RestoreError::NoStream {
                            stream: spec.stream.clone(),
                        });
                    }
                }
                if Instant::now() >= deadline {
                    return Err(RestoreError::Stream {
                        stream: spec.stream.clone(),
                        error: e.to_string(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
