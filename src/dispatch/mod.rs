//! Delivery to destinations: permits, retries, circuits, the dead-letter queue.
//!
//! Not built yet: the ingest edge stores events durably and marks events of triggers without a
//! handler as done. Dispatch arrives with the pump (see DESIGN.md, "The backpressure chain").

pub mod dlq;
pub mod dlq_tools;
