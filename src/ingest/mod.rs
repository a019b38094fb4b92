//! ingest (being written)
