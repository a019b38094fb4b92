//! metrics (being written)
