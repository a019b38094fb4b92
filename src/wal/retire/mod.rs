//! Retiring a log's old segments: which segments retention may delete ([`retention`]), and what
//! their events were, counted per trigger into the log's `RETIRED` file before they go
//! ([`retired`] the file, `count` the helper's sliced count), so the ledger stays cumulative.

pub(super) mod count;
pub mod retention;
pub mod retired;
