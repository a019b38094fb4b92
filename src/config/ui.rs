//! `[server] ui`: who may see the dashboard (`GET /ui`) and its data (`GET /api/v1/state`).
//!
//! - `"public"`: anyone who can reach the listen address. The default when the server listens on
//!   a loopback address (`127.0.0.0/8`, `::1`).
//! - `"token"`: `/api/v1/state` needs `Authorization: Bearer <SLUICE_ADMIN_TOKEN>`; `/ui` (a
//!   static page without data) is served to anyone and sends the token it reads from its URL
//!   fragment (`/ui#token=…`, never sent to the server or logged). The default on any other
//!   address. Written explicitly, it needs `SLUICE_ADMIN_TOKEN` set (an error otherwise); as the
//!   default without a token, `/api/v1/state` answers `401` to every request.
//! - `"off"`: both paths are `404`.

#![forbid(unsafe_code)]

use std::net::SocketAddr;

use super::ConfigError;

/// The validated `server.ui`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UiMode {
    Public,
    Token,
    Off,
}

impl UiMode {
    pub const fn as_str(self) -> &'static str {
        match self {
            UiMode::Public => "public",
            UiMode::Token => "token",
            UiMode::Off => "off",
        }
    }
}

/// `server.ui` as written (`None`: the default for `listen`).
pub(super) fn build(raw: Option<&str>, listen: SocketAddr) -> Result<UiMode, ConfigError> {
    match raw {
        None if listen.ip().is_loopback() => Ok(UiMode::Public),
        None => Ok(UiMode::Token),
        Some("public") => Ok(UiMode::Public),
        Some("token") => Ok(UiMode::Token),
        Some("off") => Ok(UiMode::Off),
        Some(other) => Err(ConfigError(format!(
            "server.ui must be \"public\", \"token\" or \"off\", not {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_listen_address() {
        let lo: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let lo6: SocketAddr = "[::1]:8080".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(build(None, lo).unwrap(), UiMode::Public);
        assert_eq!(build(None, lo6).unwrap(), UiMode::Public);
        assert_eq!(build(None, any).unwrap(), UiMode::Token);
        assert_eq!(build(Some("off"), lo).unwrap(), UiMode::Off);
        assert_eq!(build(Some("public"), any).unwrap(), UiMode::Public);
        let e = build(Some("open"), lo).unwrap_err();
        assert!(e.0.contains("server.ui"), "{e}");
    }
}
