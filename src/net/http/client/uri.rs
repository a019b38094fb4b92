//! Handler URIs: the grammar of the address an outbound call goes to, parsed and normalized
//! once (when the configuration is read) into the [`HandlerUri`] the client connects to and
//! writes its `Host` and request target from.
//!
//! ```text
//! http://host[:port][/path][?query]      host = IPv4, [IPv6] or a DNS name; port default 80
//! https://host[:port][/path][?query]     the same over TLS (rustls); port default 443
//! ```
//!
//! No userinfo (`user@`), no fragment (`#…`), nothing but visible ASCII (spaces and control
//! characters must be percent-encoded), at most [`MAX_HANDLER_URI_BYTES`]. Normalization
//! lower-cases the scheme and host, drops the scheme's default port and supplies the `/` path:
//! `HTTP://Example.com:80` and `http://example.com/` are the same destination
//! ([`HandlerUri::uri`], the destination key).
#![forbid(unsafe_code)]

use std::net::{Ipv4Addr, Ipv6Addr};

/// Longest handler URI, in bytes.
pub const MAX_HANDLER_URI_BYTES: usize = 2048;

/// A parsed, normalized handler URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerUri {
    /// Handler kind; `"http"` is the only one so far (`https` is kind `http` over TLS).
    pub kind: &'static str,
    /// `https://`: the connection speaks TLS.
    pub tls: bool,
    /// Lower-cased host to connect to: a DNS name, an IPv4 address, or an IPv6 address without
    /// its brackets.
    pub host: String,
    /// TCP port (80, or 443 for `https`, when not written).
    pub port: u16,
    /// `host[:port]` exactly as written in the manifest (the `Host` header value).
    pub authority: String,
    /// Request target: path (default `/`) and query, as written.
    pub path_and_query: String,
    /// Normalized URI, the destination key: `http://` (or `https://`) + host (IPv6 in
    /// brackets) + `:port` unless the scheme's default + path_and_query.
    pub uri: String,
}

impl HandlerUri {
    /// The circuit key, handler kind + target URI (Harn reference §7): `"http:" + uri`.
    pub fn circuit_key(&self) -> String {
        format!("{}:{}", self.kind, self.uri)
    }

    /// Parses and normalizes a handler URI. The error text names what is wrong, not the key; the
    /// caller prefixes the key.
    pub fn parse(text: &str) -> Result<HandlerUri, String> {
        if text.len() > MAX_HANDLER_URI_BYTES {
            return Err(format!(
                "handler URI is longer than {MAX_HANDLER_URI_BYTES} bytes"
            ));
        }
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(format!("{text:?} is not a URI like http://host:port/path"));
        };
        let (tls, default_port) = match scheme.to_ascii_lowercase().as_str() {
            "http" => (false, 80),
            "https" => (true, 443),
            _ => {
                return Err(format!(
                    "{text:?}: unsupported handler scheme {scheme:?} (only http:// and https:// are supported)"
                ))
            }
        };
        if let Some(b) = rest.bytes().find(|b| !(0x21..=0x7e).contains(b)) {
            return Err(format!(
                "{text:?} contains byte 0x{b:02x} (spaces and control characters must be percent-encoded)"
            ));
        }
        if rest.contains('#') {
            return Err(format!("{text:?}: a handler URI may not have a fragment"));
        }
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, target) = rest.split_at(split);
        if authority.contains('@') {
            return Err(format!(
                "{text:?}: a handler URI may not have userinfo (put credentials in headers)"
            ));
        }
        let (host, port) =
            parse_authority(authority, default_port).map_err(|e| format!("{text:?}: {e}"))?;
        let path_and_query = match target.as_bytes().first() {
            None => "/".to_string(),
            Some(b'?') => format!("/{target}"),
            Some(_) => target.to_string(),
        };
        let host_in_uri = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.clone()
        };
        let scheme = if tls { "https" } else { "http" };
        let uri = if port == default_port {
            format!("{scheme}://{host_in_uri}{path_and_query}")
        } else {
            format!("{scheme}://{host_in_uri}:{port}{path_and_query}")
        };
        Ok(HandlerUri {
            kind: "http",
            tls,
            host,
            port,
            authority: authority.to_string(),
            path_and_query,
            uri,
        })
    }
}

/// `host[:port]` → (lower-cased host without brackets, port).
fn parse_authority(authority: &str, default_port: u16) -> Result<(String, u16), String> {
    let (host, port_text) = if let Some(inner) = authority.strip_prefix('[') {
        let Some((v6, after)) = inner.split_once(']') else {
            return Err("unterminated [IPv6] host".into());
        };
        if v6.parse::<Ipv6Addr>().is_err() {
            return Err(format!("{v6:?} is not an IPv6 address"));
        }
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| format!("unexpected {p:?} after the IPv6 host"))?,
            ),
        };
        (v6.to_ascii_lowercase(), port)
    } else {
        let (h, p) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        let h = h.to_ascii_lowercase();
        if h.is_empty() {
            return Err("the host is empty".into());
        }
        let looks_numeric = h.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        if looks_numeric {
            if h.parse::<Ipv4Addr>().is_err() {
                return Err(format!("{h:?} is not an IPv4 address"));
            }
        } else if !is_dns_name(&h) {
            return Err(format!("{h:?} is not a host name"));
        }
        (h, p)
    };
    let port = match port_text {
        None => default_port,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n >= 1 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(format!("port {p:?} is not in 1..=65535")),
        },
    };
    Ok((host, port))
}

/// Letters, digits and `-` in dot-separated labels of 1..=63 bytes, ≤ 253 bytes in all; no label
/// starts or ends with `-`. Underscores are allowed too (common in internal service names).
fn is_dns_name(h: &str) -> bool {
    h.len() <= 253
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handler_parsing_and_normalization() {
        let h = HandlerUri::parse("http://Example.COM:8080/a/b?x=1").unwrap();
        assert_eq!(h.kind, "http");
        assert_eq!(h.host, "example.com");
        assert_eq!(h.port, 8080);
        assert_eq!(h.authority, "Example.COM:8080");
        assert_eq!(h.path_and_query, "/a/b?x=1");
        assert_eq!(h.uri, "http://example.com:8080/a/b?x=1");
        assert_eq!(h.circuit_key(), "http:http://example.com:8080/a/b?x=1");

        let d = HandlerUri::parse("HTTP://10.0.0.1").unwrap();
        assert_eq!((d.host.as_str(), d.port), ("10.0.0.1", 80));
        assert_eq!(d.path_and_query, "/");
        assert_eq!(d.uri, "http://10.0.0.1/");
        assert_eq!(
            HandlerUri::parse("http://10.0.0.1:80/").unwrap().uri,
            "http://10.0.0.1/"
        );
        assert_eq!(
            HandlerUri::parse("http://h?q=1").unwrap().path_and_query,
            "/?q=1"
        );

        let v6 = HandlerUri::parse("http://[::1]:9000/x").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 9000));
        assert_eq!(v6.authority, "[::1]:9000");
        assert_eq!(v6.uri, "http://[::1]:9000/x");
        assert_eq!(
            HandlerUri::parse("http://[::1]").unwrap().uri,
            "http://[::1]/"
        );
    }

    #[test]
    fn handler_rejections() {
        let cases = [
            ("ftp://a/b", "unsupported handler scheme"),
            ("a/b", "not a URI"),
            ("http://user:pw@a/b", "userinfo"),
            ("http://a/b#frag", "fragment"),
            ("http://a b/", "0x20"),
            ("http://a/\r\n", "0x0d"),
            ("http:///x", "host is empty"),
            ("http://a:0/", "port"),
            ("http://a:65536/", "port"),
            ("http://a:/", "port"),
            ("http://a:+1/", "port"),
            ("http://999.1.1.1/", "not an IPv4"),
            ("http://[zz]/", "not an IPv6"),
            ("http://[::1/", "unterminated"),
            ("http://[::1]x/", "after the IPv6"),
            ("http://-a.b/", "not a host name"),
            ("http://a..b/", "not a host name"),
            ("http://a%20b/", "not a host name"),
        ];
        for (text, needle) in cases {
            let e = HandlerUri::parse(text).unwrap_err();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
        let long = format!("http://a/{}", "x".repeat(MAX_HANDLER_URI_BYTES));
        assert!(HandlerUri::parse(&long).unwrap_err().contains("longer"));
    }
}
