//! `[[destinations]] shared = { … }`: a destination budget shared by several nodes through
//! Redis (the mechanism is `crate::cluster`). Two stages like every table: the raw
//! serde struct ([`RawShared`], unknown keys are errors) and the validated [`SharedSpec`], which
//! the cluster defines.

use std::time::Duration;

use serde::Deserialize;

use super::duration::parse_duration;
use super::ConfigError;
pub use crate::cluster::{OnUnavailable, RedisAddr, SharedSpec};

/// Shortest `lease`: a renewal (every `lease / 3`) must fit many Redis round trips.
pub const MIN_LEASE: Duration = Duration::from_millis(500);
/// Longest `lease`: how long a dead node's permits can stay taken.
pub const MAX_LEASE: Duration = Duration::from_secs(600);
/// Longest `key`.
pub const MAX_KEY_BYTES: usize = 200;

/// `shared = { redis, key, lease, on_unavailable }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawShared {
    /// The Redis holding the budget: `redis://host[:port][/db]`. Required. Port default 6379,
    /// db default 0 (range 0..=15). No credentials and no TLS (`rediss://`) yet: refused.
    pub redis: String,
    /// The budget's name in Redis; nodes with the same `redis` and `key` share one budget.
    /// Default: the destination's uri. Range: 1..=200 bytes, no whitespace or control
    /// characters.
    pub key: Option<String>,
    /// How long a node's permits stay counted without a renewal: a killed node's permits come
    /// back within it. Default: `5s`. Range: 500ms..=10m.
    pub lease: Option<String>,
    /// What dispatch does while Redis is unreachable: `"closed"` (stop dispatching to this
    /// destination; events stay pending) or `"local"` (this node's own `max_in_flight` and
    /// `rate`: the downstream may see up to N× its budget from N nodes). Default: `"closed"`.
    pub on_unavailable: Option<String>,
}

/// Validates `raw` for the destination `uri` (`what` names it in errors).
pub fn build_shared(what: &str, uri: &str, raw: RawShared) -> Result<SharedSpec, ConfigError> {
    let fail = |msg: String| Err(ConfigError(format!("{what}: shared.{msg}")));
    let redis = match parse_redis_url(&raw.redis) {
        Ok(a) => a,
        Err(e) => return fail(format!("redis = {:?}: {e}", raw.redis)),
    };
    let key = raw.key.unwrap_or_else(|| uri.to_string());
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return fail(format!(
            "key must be 1..={MAX_KEY_BYTES} bytes, not {}",
            key.len()
        ));
    }
    if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return fail(format!(
            "key {key:?} must not contain whitespace or control characters"
        ));
    }
    let lease = match raw.lease.as_deref() {
        None => Duration::from_secs(5),
        Some(t) => match parse_duration(t) {
            Ok(d) => d,
            Err(e) => return fail(format!("lease: {e}")),
        },
    };
    if !(MIN_LEASE..=MAX_LEASE).contains(&lease) {
        return fail(format!(
            "lease = {lease:?} is out of range {MIN_LEASE:?}..={MAX_LEASE:?}"
        ));
    }
    let on_unavailable = match raw.on_unavailable.as_deref() {
        None | Some("closed") => OnUnavailable::Closed,
        Some("local") => OnUnavailable::Local,
        Some(other) => {
            return fail(format!(
                "on_unavailable must be \"closed\" or \"local\", not {other:?}"
            ))
        }
    };
    Ok(SharedSpec {
        redis,
        key,
        lease,
        on_unavailable,
    })
}

/// `redis://host[:port][/db]`.
pub fn parse_redis_url(text: &str) -> Result<RedisAddr, String> {
    if text.starts_with("rediss://") {
        return Err("TLS to Redis (rediss://) is not supported; use redis://".into());
    }
    let Some(rest) = text.strip_prefix("redis://") else {
        return Err("must start with redis://".into());
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    if authority.contains('@') {
        return Err("credentials in the URL are not supported".into());
    }
    let (host, port_text) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((h, "")) => (h, None),
            Some((h, p)) => match p.strip_prefix(':') {
                Some(p) => (h, Some(p)),
                None => return Err(format!("{authority:?} is not host:port")),
            },
            None => return Err(format!("{authority:?} has no closing ]")),
        },
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let port = match port_text {
        None => 6379,
        Some(p) => match p.parse::<u16>() {
            Ok(0) => return Err("port 0 is not a port".into()),
            Ok(n) => n,
            Err(_) => return Err(format!("port {p:?} is not a number in 1..=65535")),
        },
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '/')
    {
        return Err(format!("host {host:?} is not a host name or address"));
    }
    let db = if path.is_empty() {
        0
    } else {
        match path.parse::<u8>() {
            Ok(n) if n <= 15 => n,
            _ => return Err(format!("db {path:?} must be a number in 0..=15")),
        }
    };
    Ok(RedisAddr {
        host: host.to_string(),
        port,
        db,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(redis: &str) -> RawShared {
        RawShared {
            redis: redis.into(),
            key: None,
            lease: None,
            on_unavailable: None,
        }
    }

    #[test]
    fn defaults() {
        let c = build_shared("d", "http://x/h", raw("redis://127.0.0.1:7000/2")).unwrap();
        assert_eq!(
            c,
            SharedSpec {
                redis: RedisAddr {
                    host: "127.0.0.1".into(),
                    port: 7000,
                    db: 2
                },
                key: "http://x/h".into(),
                lease: Duration::from_secs(5),
                on_unavailable: OnUnavailable::Closed,
            }
        );
        let a = parse_redis_url("redis://cache").unwrap();
        assert_eq!((a.host.as_str(), a.port, a.db), ("cache", 6379, 0));
        let v6 = parse_redis_url("redis://[::1]:6380").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 6380));
    }

    #[test]
    fn precise_errors() {
        let e = |r: RawShared| build_shared("d", "u", r).unwrap_err().0;
        assert!(e(raw("http://x")).contains("must start with redis://"));
        assert!(e(raw("rediss://x")).contains("not supported"));
        assert!(e(raw("redis://u:p@x")).contains("credentials"));
        assert!(e(raw("redis://x:0")).contains("port 0"));
        assert!(e(raw("redis://x:99999")).contains("1..=65535"));
        assert!(e(raw("redis://x/16")).contains("0..=15"));
        assert!(e(raw("redis:///3")).contains("no host"));
        let mut r = raw("redis://x");
        r.lease = Some("100ms".into());
        assert!(e(r).contains("lease = 100ms is out of range"));
        let mut r = raw("redis://x");
        r.on_unavailable = Some("open".into());
        assert!(e(r).contains("\"closed\" or \"local\""));
        let mut r = raw("redis://x");
        r.key = Some("a b".into());
        assert!(e(r).contains("whitespace"));
        let mut r = raw("redis://x");
        r.key = Some(String::new());
        assert!(e(r).contains("1..=200"));
    }
}
