//! Reading a log: the record reader of one segment (`reader`), the pump's follower of a log
//! being written ([`tail`]), and the event index and queries behind `sluice events` and the
//! event API ([`events`]). Nothing here writes to a log.

pub mod events;
pub(super) mod reader;
pub mod tail;
