//! Why the server could not start or stopped abnormally: the error of the runtime's build
//! (`sched::runtime`, `sched::context`) and of its run. A leaf, so that every part of the build
//! can return it without importing the runtime.

#![forbid(unsafe_code)]

use crate::wal;

/// Why the server could not start or stopped abnormally.
#[derive(Debug)]
pub enum RuntimeError {
    /// The WAL could not be opened or recovered.
    Wal(wal::WalError),
    /// Binding, thread spawning or another OS call failed.
    Io {
        what: String,
        source: std::io::Error,
    },
    /// A value the config validation let through but a component refused.
    Config(String),
    /// A core's thread or its commit helper died.
    ThreadDied(String),
    /// `[replication]`: JetStream unreachable at start-up, or its stream unusable.
    Replication(crate::replication::mirror::StartError),
    /// `[replication]` with an empty data dir: restoring the node's logs from the stream failed.
    Restore(crate::replication::restore::RestoreError),
}

impl std::fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuntimeError::Wal(e) => write!(f, "write-ahead log: {e}"),
            RuntimeError::Io { what, source } => write!(f, "{what}: {source}"),
            RuntimeError::Config(msg) => f.write_str(msg),
            RuntimeError::ThreadDied(name) => write!(f, "thread {name} died"),
            RuntimeError::Replication(e) => write!(f, "{e}"),
            RuntimeError::Restore(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RuntimeError {}

/// `map_err` for an OS call: the error with what was being done.
pub fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RuntimeError {
    let what = what.into();
    move |source| RuntimeError::Io { what, source }
}
