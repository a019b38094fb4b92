//! sched (being written)
