//! Outcome classes of one delivery attempt.
//!
//! | attempt result | class | pauses the destination |
//! |---|---|---|
//! | status 200..=299 | `Delivered` | |
//! | status 408, 425 | `Retryable` | |
//! | status 429, 503 with `Retry-After` > 0 | `Retryable` | for `Retry-After` |
//! | status 429, 503 without it | `Retryable` | |
//! | other status 500..=599 | `Retryable` | |
//! | other status 100..=499 (1xx, 3xx: redirects are not followed; 4xx) | `Permanent` (→ DLQ) | |
//! | status outside 100..=599 | `Permanent` | |
//! | connect error, timeout | `Retryable` | |
//! | TLS certificate or handshake failure (`tls_error`) | `Retryable` | |
//! | I/O error during the exchange (reset, truncated response) | `Retryable` | |
//!
//! An I/O error after the request was sent may mean the downstream processed it; retrying is
//! still right because delivery is at least once and every event carries a stable id for
//! idempotency (DESIGN.md). Only `Retryable` results feed the circuit (reference §6.3, §7).
#![forbid(unsafe_code)]

use std::time::Duration;

use crate::dispatch::deliver::adaptive::Sample;
use crate::net::outbound::{Exchange, Failure};

/// What happened to one attempt, as the outbound client reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptResult {
    /// A complete response. `retry_after` is the parsed `Retry-After` header (delta-seconds, or
    /// an HTTP date converted to a delay), if present.
    Status {
        code: u16,
        retry_after: Option<Duration>,
    },
    /// The TCP connection could not be established (refused, unreachable, DNS failure).
    ConnectError,
    /// The destination's `timeout` elapsed before a complete response.
    Timeout,
    /// The connection failed mid-exchange.
    Io,
    /// The TLS handshake failed: the server's certificate was not trusted or not valid for the
    /// name, the server rejected us, or it hung up during the handshake. Retried like a connect
    /// error (a rotated certificate or a fixed CA file heals it), counted as `tls_error`.
    TlsError(crate::net::tls::TlsFault),
}

impl From<Exchange> for AttemptResult {
    /// What the outbound pool (`net::outbound`) reports, as an attempt result.
    fn from(e: Exchange) -> AttemptResult {
        match e {
            Exchange::Response {
                status,
                retry_after,
            } => AttemptResult::Status {
                code: status,
                retry_after,
            },
            Exchange::Failed(Failure::Connect) => AttemptResult::ConnectError,
            Exchange::Failed(Failure::Timeout) => AttemptResult::Timeout,
            Exchange::Failed(Failure::Tls(f)) => AttemptResult::TlsError(f),
            Exchange::Failed(Failure::Broken) => AttemptResult::Io,
        }
    }
}

impl AttemptResult {
    /// A TLS failure (`sluice_dispatch_attempts_total{outcome="tls_error"}`).
    pub const fn is_tls_error(&self) -> bool {
        matches!(self, AttemptResult::TlsError(_))
    }
}

/// The class of an attempt result. See the module table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Delivered,
    /// Try again (backoff permitting); `pause` is how long the destination asked everyone to
    /// wait (429/503 with `Retry-After`).
    Retryable {
        pause: Option<Duration>,
    },
    /// Do not retry: dead-letter it.
    Permanent,
}

impl Class {
    pub const fn is_retryable(&self) -> bool {
        matches!(self, Class::Retryable { .. })
    }
}

/// How the log records `result` (`wal::AttemptOutcome`), and the `Retry-After` it carried in
/// milliseconds (saturating).
pub fn recorded(result: &AttemptResult) -> (crate::wal::AttemptOutcome, Option<u32>) {
    use crate::wal::AttemptOutcome as O;
    match *result {
        AttemptResult::Status { code, retry_after } => (
            O::Status(code),
            retry_after.map(|d| d.as_millis().min(u128::from(u32::MAX - 1)) as u32),
        ),
        AttemptResult::ConnectError => (O::Connect, None),
        AttemptResult::Timeout => (O::Timeout, None),
        AttemptResult::Io => (O::Io, None),
        AttemptResult::TlsError(_) => (O::Tls, None),
    }
}

/// Classifies one attempt result (the module table).
pub fn classify(result: &AttemptResult) -> Class {
    match *result {
        AttemptResult::Status { code, retry_after } => match code {
            200..=299 => Class::Delivered,
            429 | 503 => Class::Retryable {
                pause: retry_after.filter(|d| !d.is_zero()),
            },
            408 | 425 | 500..=599 => Class::Retryable { pause: None },
            _ => Class::Permanent,
        },
        AttemptResult::ConnectError
        | AttemptResult::Timeout
        | AttemptResult::Io
        | AttemptResult::TlsError(_) => Class::Retryable { pause: None },
    }
}

/// What an attempt tells the adaptive limit: an answer's latency, an overload (timeout,
/// connect error, 429, 503), or nothing (a 5xx other than 503, a broken connection: failures
/// of the downstream the circuit handles, not signs of its capacity).
pub fn adaptive_sample(result: &AttemptResult, rtt: u64) -> Option<Sample> {
    match result {
        AttemptResult::Timeout | AttemptResult::ConnectError => Some(Sample::Overload),
        AttemptResult::Status {
            code: 429 | 503, ..
        } => Some(Sample::Overload),
        AttemptResult::Status { code, .. } if *code < 500 => Some(Sample::Answered { rtt }),
        // A handshake or certificate failure says nothing about the downstream's capacity.
        AttemptResult::Status { .. } | AttemptResult::Io | AttemptResult::TlsError(_) => None,
    }
}

/// `last_error` text for an attempt.
pub fn describe(result: &AttemptResult, uri: &str) -> String {
    match result {
        AttemptResult::Status { code, .. } => format!("{uri} answered {code}"),
        AttemptResult::ConnectError => format!("cannot connect to {uri}"),
        AttemptResult::Timeout => format!("{uri} did not answer within the timeout"),
        AttemptResult::Io => format!("connection to {uri} broke before a complete response"),
        AttemptResult::TlsError(f) => format!("TLS handshake with {uri} failed: {f}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, retry_after: Option<u64>) -> Class {
        classify(&AttemptResult::Status {
            code,
            retry_after: retry_after.map(Duration::from_secs),
        })
    }

    #[test]
    fn results_are_recorded_with_their_class_and_retry_after() {
        use crate::wal::AttemptOutcome as O;
        let r = AttemptResult::Status {
            code: 503,
            retry_after: Some(Duration::from_secs(7)),
        };
        assert_eq!(recorded(&r), (O::Status(503), Some(7000)));
        let huge = AttemptResult::Status {
            code: 429,
            retry_after: Some(Duration::from_secs(u64::MAX / 4)),
        };
        // Saturates below the on-disk "none" value instead of wrapping.
        assert_eq!(recorded(&huge), (O::Status(429), Some(u32::MAX - 1)));
        assert_eq!(recorded(&AttemptResult::ConnectError), (O::Connect, None));
        assert_eq!(recorded(&AttemptResult::Timeout), (O::Timeout, None));
        assert_eq!(recorded(&AttemptResult::Io), (O::Io, None));
        let tls = AttemptResult::TlsError(crate::net::tls::TlsFault::UnknownIssuer);
        assert_eq!(recorded(&tls), (O::Tls, None));
    }

    #[test]
    fn each_exchange_maps_to_its_attempt_result() {
        let tls = crate::net::tls::TlsFault::NameMismatch;
        let pause = Some(Duration::from_secs(3));
        for (e, want) in [
            (
                Exchange::Response {
                    status: 503,
                    retry_after: pause,
                },
                AttemptResult::Status {
                    code: 503,
                    retry_after: pause,
                },
            ),
            (
                Exchange::Failed(Failure::Connect),
                AttemptResult::ConnectError,
            ),
            (Exchange::Failed(Failure::Timeout), AttemptResult::Timeout),
            (
                Exchange::Failed(Failure::Tls(tls)),
                AttemptResult::TlsError(tls),
            ),
            (Exchange::Failed(Failure::Broken), AttemptResult::Io),
        ] {
            assert_eq!(AttemptResult::from(e), want);
        }
    }

    #[test]
    fn the_table() {
        let retry = Class::Retryable { pause: None };
        for code in [200, 201, 204, 299] {
            assert_eq!(status(code, None), Class::Delivered, "{code}");
        }
        for code in [408, 425, 429, 500, 502, 503, 504, 599] {
            assert_eq!(status(code, None), retry, "{code}");
        }
        for code in [
            0, 99, 100, 101, 199, 300, 301, 304, 400, 401, 403, 404, 409, 410, 413, 422, 499, 600,
            999,
        ] {
            assert_eq!(status(code, None), Class::Permanent, "{code}");
        }
        for r in [
            AttemptResult::ConnectError,
            AttemptResult::Timeout,
            AttemptResult::Io,
            AttemptResult::TlsError(crate::net::tls::TlsFault::UnknownIssuer),
            AttemptResult::TlsError(crate::net::tls::TlsFault::HandshakeAborted),
        ] {
            assert_eq!(classify(&r), retry);
            assert!(classify(&r).is_retryable());
        }
        assert!(!Class::Permanent.is_retryable());
    }

    #[test]
    fn only_429_and_503_pause() {
        let five = Some(Duration::from_secs(5));
        assert_eq!(status(429, Some(5)), Class::Retryable { pause: five });
        assert_eq!(status(503, Some(5)), Class::Retryable { pause: five });
        assert_eq!(status(503, Some(0)), Class::Retryable { pause: None });
        for code in [500, 502, 408] {
            assert_eq!(status(code, Some(5)), Class::Retryable { pause: None });
        }
        assert_eq!(status(200, Some(5)), Class::Delivered);
        assert_eq!(status(400, Some(5)), Class::Permanent);
    }
}
