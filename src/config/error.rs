//! The configuration's error and the small validators every section uses: a key and its
//! problem in one message ([`ConfigError`]), a number in its range ([`ranged`]), a duration or
//! its default ([`duration_or`]). A leaf of `config`: the sections import it, it imports none
//! of them.

use std::time::Duration;

use super::duration::parse_duration;

/// A configuration error: which key, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

pub(crate) fn err<T>(msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(msg.into()))
}

pub(crate) fn duration_or(
    key: &str,
    v: Option<String>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(default),
        Some(t) => parse_duration(&t).map_err(|e| ConfigError(format!("{key}: {e}"))),
    }
}

pub(crate) fn ranged<T: PartialOrd + std::fmt::Display + Copy>(
    key: &str,
    v: Option<T>,
    default: T,
    lo: T,
    hi: T,
) -> Result<T, ConfigError> {
    let x = v.unwrap_or(default);
    if x < lo || x > hi {
        return err(format!("{key} = {x} is out of range ({lo}..={hi})"));
    }
    Ok(x)
}
