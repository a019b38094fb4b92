#!/usr/bin/env bash
# Runs the loom models (src/cluster/slot, src/ring, src/sync/gcra, src/sync/publish, src/ingest/bucket, src/ingest/schedule, src/ingest/backlog and shares, the pump window in src/dispatch/outstanding, the order horizon in src/dispatch/horizon and the triggers' caps in src/dispatch/trigger_caps, the DLQ replay claims in src/dispatch/replay_claims, the durable-LSN publication and commit hand-off (and the hand-back wake-up, src/sync/handback), the metric shards, the event ledger board in src/dispatch/ledger, the retired counts in src/wal/shared, the operator readers' slots in src/sync/slots, the outcome index in src/wal/outcomes, the hand-off of adopted logs in src/sync/inbox with the log owners of src/dispatch/placement) against the real code compiled with `--cfg sluice_loom`.
# Usage: loom-tests/run.sh [extra cargo test args]
# Bounded preemptions keep the run to seconds on 2 cores; raise LOOM_MAX_PREEMPTIONS for a
# deeper (much slower) search.
set -euo pipefail
cd "$(dirname "$0")"
export RUSTFLAGS="--cfg sluice_loom ${RUSTFLAGS:-}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
exec cargo test --release "$@" -- --nocapture
