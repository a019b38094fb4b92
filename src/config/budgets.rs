//! Validation of the connection-layer memory budgets of `[server]` (README "Bounds").

use super::{err, ranged, ConfigError};

/// Default `server.max_queued_response_bytes`: 64 KiB.
pub const DEFAULT_MAX_QUEUED_RESPONSE_BYTES: usize = 64 * 1024;

/// `server.max_inflight_body_bytes`: default 256 MiB, at most 64 GiB, and at least one body of
/// `server.max_body_bytes`, or such a body could never be admitted.
pub(super) fn inflight_body_bytes(v: Option<u64>, max_body_bytes: u64) -> Result<u64, ConfigError> {
    let x = v.unwrap_or(crate::net::budget::DEFAULT_MAX_INFLIGHT_BODY_BYTES);
    if x < max_body_bytes {
        return err(format!(
            "server.max_inflight_body_bytes = {x} is below server.max_body_bytes = \
             {max_body_bytes}: a body of the largest accepted size could never be received"
        ));
    }
    ranged("server.max_inflight_body_bytes", Some(x), x, 1, 64 << 30)
}

/// `server.max_queued_response_bytes`: default 64 KiB, 4 KiB..=64 MiB.
pub(super) fn queued_response_bytes(v: Option<usize>) -> Result<usize, ConfigError> {
    ranged(
        "server.max_queued_response_bytes",
        v,
        DEFAULT_MAX_QUEUED_RESPONSE_BYTES,
        4 * 1024,
        64 << 20,
    )
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Overrides};

    fn load(toml: &str) -> Result<Config, String> {
        let raw = Config::parse_manifest(toml).map_err(|e| e.0)?;
        Config::build(raw, &|_| None, &Overrides::default()).map_err(|e| e.0)
    }

    #[test]
    fn defaults_and_documented_ranges() {
        let c = load("").unwrap();
        assert_eq!(c.server.max_inflight_body_bytes, 256 << 20);
        assert_eq!(c.server.max_queued_response_bytes, 64 << 10);
        assert_eq!(c.ingest.metrics_top_sources, 100);
        let c = load("[server]\nmax_inflight_body_bytes = 10485760\nmax_queued_response_bytes = 4096\n[ingest]\nmetrics_top_sources = 0\n").unwrap();
        assert_eq!(c.server.max_inflight_body_bytes, 10 << 20);
        assert_eq!(c.server.max_queued_response_bytes, 4096);
        assert_eq!(c.ingest.metrics_top_sources, 0);
    }

    #[test]
    fn out_of_range_budgets_are_errors_naming_the_key() {
        for (toml, key) in [
            (
                "[server]\nmax_inflight_body_bytes = 1048576\n",
                "server.max_inflight_body_bytes",
            ),
            (
                "[server]\nmax_inflight_body_bytes = 68719476737\n",
                "server.max_inflight_body_bytes",
            ),
            (
                "[server]\nmax_queued_response_bytes = 4095\n",
                "server.max_queued_response_bytes",
            ),
            (
                "[server]\nmax_queued_response_bytes = 67108865\n",
                "server.max_queued_response_bytes",
            ),
            (
                "[ingest]\nmetrics_top_sources = 10001\n",
                "ingest.metrics_top_sources",
            ),
        ] {
            let e = load(toml).unwrap_err();
            assert!(e.contains(key), "{toml:?}: {e}");
        }
        // Below max_body_bytes says why.
        let e =
            load("[server]\nmax_body_bytes = 2048\nmax_inflight_body_bytes = 1024\n").unwrap_err();
        assert!(e.contains("max_body_bytes = 2048"), "{e}");
    }
}
