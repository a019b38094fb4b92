//! The dead-letter queue: events that will not be delivered without an operator, kept durably
//! (full event, reason, attempts, last error) until discarded or replayed.
//!
//! # Storage
//!
//! `DATA_DIR/dlq/` holds batch files: each group commit of the core's commit helper writes its
//! dead letters as one file (one write, one `fdatasync`, one rename, one directory `fsync`),
//! with tombstones for removed entries and an in-memory index rebuilt at open
//! ([`crate::dispatch::dlq::batch`] spells out the names and the format, [`crate::dispatch::dlq::index`] the index,
//! [`crate::dispatch::dlq::store`] the store, [`crate::dispatch::dlq::entry`] one entry's format). The entry id is
//! the dead-lettered event's `event_id`, 26 characters `[0-9A-Z]`, validated before any use as
//! a file name. Entry files of the
//! one-file-per-entry layout of earlier versions (`dlq/<ID>`) are still read, listed, replayed
//! and removed; new entries are never written that way. Every file operation goes through the
//! storage interface (`crate::storage`), so the power-loss simulation covers the DLQ too.
//!
//! # Bounds
//!
//! At most `max_entries` live entries: past it a put refuses the new ids with
//! [`DlqError::Full`] and the caller keeps the event pending (never loses it). Each record is at
//! most [`MAX_DLQ_RECORD_BYTES`]; reads hold one batch file (at most
//! [`crate::dispatch::dlq::batch::MAX_FILE_BYTES`]) or one entry in memory at a time.
//!
//! This file only re-exports: the entry and its codec are `entry.rs`, the store
//! `store/`; they import each other's files directly, never this one.
#![forbid(unsafe_code)]

pub mod batch;
pub mod bulk;
pub mod claims;
pub mod entry;
pub mod index;
pub mod online;
pub mod store;
pub mod tools;
pub use crate::dispatch::dlq::entry::{
    check_record, decode_entry, encode_entry, encode_entry_into, valid_id, DlqEntry, DlqError,
    DlqReason, DlqSummary, ID_LEN, MAX_DESTINATION_BYTES, MAX_DLQ_RECORD_BYTES,
};
pub use crate::dispatch::dlq::store::{DlqGauges, DlqListing, DlqStore, Unreadable};
