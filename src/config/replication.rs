//! `[replication]`: the JetStream mirror of each core's log (issue 41). Off by default: an absent
//! section is `None`, and the embedded default stays one node with no services. Stage 1
//! ([`RawReplication`], every field documented) and stage 2 (replication's own
//! [`ReplicationSpec`]), validated by [`build_replication`].
//!
//! Names: `stream` and `node` become levels of the subjects `<stream>.<node>.core-<K>` and part
//! of the bucket name `<stream>_nodes`, so each must be a single NATS subject token. Sluice takes
//! the safe subset, `[A-Za-z0-9_-]{1,64}`: no `.` (a level), `*` or `>` (wildcards) or whitespace.
//! The default `node` is this machine's host name ([`host_name`]), reduced to such a token
//! ([`node_from_host`]).

use std::time::Duration;

use serde::Deserialize;

use super::{duration_or, err, ranged, ConfigError};
use crate::replication::ReplicationSpec;

/// `replication.max_inflight`'s default: 2 batches (and so 2 messages) per log in flight.
/// Measured (BENCHMARKS.md R1, benches/LOG.md): with the 3 nats-servers short of CPU, 8
/// in flight made messages half as large and cost the servers more per event (21–28 µs
/// against 16–18 µs per 202), for 20–25 % fewer replicated 202/s.
pub const DEFAULT_MAX_INFLIGHT: usize = 2;

/// Most `nats` servers.
const MAX_SERVERS: usize = 16;
/// The port of a `nats` URL that names none.
const DEFAULT_NATS_PORT: u16 = 4222;
/// Longest `stream` and `node`.
const MAX_TOKEN_BYTES: usize = 64;
/// `ack_timeout`'s range.
const ACK_TIMEOUT_RANGE: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(60));
/// `lease`'s range (and it must be more than twice `ack_timeout`).
const LEASE_RANGE: (Duration, Duration) = (Duration::from_secs(3), Duration::from_secs(600));

/// `[replication]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReplication {
    /// The NATS servers: `nats://host[:port]` or `tls://host[:port]` (port default 4222, IPv6
    /// hosts in brackets; no credentials, no path). Required. Range: 1..=16 entries, no two
    /// alike.
    pub nats: Vec<String>,
    /// The JetStream stream holding every node's logs. Default: `"sluice"`. Range: 1..=64 of
    /// `[A-Za-z0-9_-]`.
    pub stream: Option<String>,
    /// The stream's replicas. Default: 3. Range: 1..=5.
    pub replicas: Option<usize>,
    /// This node's name, unique per node. Default: the host name's first label, with every
    /// character outside `[A-Za-z0-9_-]` turned into `-`, cut to 64 bytes. Range: 1..=64 of
    /// `[A-Za-z0-9_-]`.
    pub node: Option<String>,
    /// How long a publish waits for JetStream's ack. Default: `2s`. Range: 100ms..=60s.
    pub ack_timeout: Option<String>,
    /// How long a node's lease lasts without a renewal. Default: `10s`. Range: 3s..=10m, and
    /// more than twice `ack_timeout`.
    pub lease: Option<String>,
    /// Batches in flight (published, ack not yet taken) per log. Default: 8. Range: 1..=64.
    pub max_inflight: Option<usize>,
}

/// Validates `[replication]`; `None` (no section): replication is off. `host_name` gives the
/// default `node` ([`host_name`] in the server; tests pass their own).
pub(super) fn build_replication(
    raw: Option<RawReplication>,
    host_name: &dyn Fn() -> Option<String>,
) -> Result<Option<ReplicationSpec>, ConfigError> {
    let Some(r) = raw else {
        return Ok(None);
    };
    let servers = servers(&r.nats)?;
    let stream = r.stream.unwrap_or_else(|| "sluice".to_string());
    check_token("replication.stream", &stream)?;
    let node = match r.node {
        Some(node) => node,
        None => default_node(host_name())?,
    };
    check_token("replication.node", &node)?;
    let (ack_timeout, lease) = timeouts(r.ack_timeout, r.lease)?;
    Ok(Some(ReplicationSpec {
        servers,
        stream,
        replicas: ranged("replication.replicas", r.replicas, 3, 1, 5)?,
        node,
        ack_timeout,
        lease,
        max_inflight: ranged(
            "replication.max_inflight",
            r.max_inflight,
            DEFAULT_MAX_INFLIGHT,
            1,
            64,
        )?,
    }))
}

/// `replication.nats`: 1..=16 URLs, each normalised to `scheme://host:port`, no two alike.
fn servers(list: &[String]) -> Result<Vec<String>, ConfigError> {
    if list.is_empty() || list.len() > MAX_SERVERS {
        return err(format!(
            "replication.nats must list 1..={MAX_SERVERS} servers, not {}",
            list.len()
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for (i, text) in list.iter().enumerate() {
        let url = parse_nats_url(text)
            .map_err(|e| ConfigError(format!("replication.nats[{i}] = {text:?}: {e}")))?;
        if out.contains(&url) {
            return err(format!(
                "replication.nats[{i}] = {text:?}: {url} is listed twice"
            ));
        }
        out.push(url);
    }
    Ok(out)
}

/// `nats://host[:port]` or `tls://host[:port]`, as `scheme://host:port`.
fn parse_nats_url(text: &str) -> Result<String, String> {
    let (scheme, rest) = match (text.strip_prefix("nats://"), text.strip_prefix("tls://")) {
        (Some(rest), _) => ("nats", rest),
        (_, Some(rest)) => ("tls", rest),
        _ => return Err("must start with nats:// or tls://".into()),
    };
    if rest.contains('@') {
        return Err("credentials in the URL are not supported".into());
    }
    if rest.contains(['/', '?', '#']) {
        return Err(format!("must be {scheme}://host[:port], with no path"));
    }
    let (host, port) = split_host_port(rest)?;
    let port = match port {
        None => DEFAULT_NATS_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n >= 1 => n,
            _ => return Err(format!("port {p:?} is not a number in 1..=65535")),
        },
    };
    Ok(format!("{scheme}://{host}:{port}"))
}

/// `host[:port]` or `[v6][:port]`: the host as written in a URL (brackets kept) and the port's
/// text, if any.
fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(v6) = authority.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else {
            return Err(format!("{authority:?} has no closing ]"));
        };
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("[{addr}] is not an IPv6 address"));
        }
        let host = &authority[..addr.len() + 2];
        return match after {
            "" => Ok((host, None)),
            _ => match after.strip_prefix(':') {
                Some(p) => Ok((host, Some(p))),
                None => Err(format!("{authority:?} is not host:port")),
            },
        };
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    let name_byte = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_');
    if host.len() > 253 || !host.bytes().all(name_byte) {
        return Err(format!("host {host:?} is not a host name or address"));
    }
    Ok((host, port))
}

/// A single NATS subject token of sluice's subset: 1..=64 of `[A-Za-z0-9_-]`.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_TOKEN_BYTES
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn check_token(key: &str, value: &str) -> Result<(), ConfigError> {
    if is_token(value) {
        return Ok(());
    }
    err(format!(
        "{key} = {value:?} must be 1..={MAX_TOKEN_BYTES} bytes of [A-Za-z0-9_-] (a single NATS \
         subject token: no '.', '*', '>' or whitespace)"
    ))
}

/// The default `node`: the host name reduced by [`node_from_host`].
fn default_node(host: Option<String>) -> Result<String, ConfigError> {
    let Some(host) = host else {
        return err(
            "replication.node has no default: the host name is unknown (gethostname and \
             /proc/sys/kernel/hostname gave none); set replication.node"
                .to_string(),
        );
    };
    match node_from_host(&host) {
        Some(node) => Ok(node),
        None => err(format!(
            "replication.node has no default: the host name {host:?} gives no node name; set \
             replication.node"
        )),
    }
}

/// A host name as a node name: its first label (up to the first `.`), every character outside
/// `[A-Za-z0-9_-]` turned into `-`, cut to 64 bytes; `None` when that label is empty.
/// `"web-1.example.com"` → `"web-1"`, `"büro"` → `"b-ro"`.
pub fn node_from_host(host: &str) -> Option<String> {
    let label = host.trim().split('.').next().unwrap_or("");
    let token: String = label
        .chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                true => c,
                false => '-',
            },
        )
        .take(MAX_TOKEN_BYTES)
        .collect();
    (!token.is_empty()).then_some(token)
}

/// This machine's host name: `gethostname(2)`, else `/proc/sys/kernel/hostname`; `None` when
/// neither gives a non-empty name.
pub fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes for the whole call;
    // gethostname writes at most that many bytes into it and keeps no pointer to it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let from_libc = (rc == 0).then(|| {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).trim().to_string()
    });
    from_libc
        .filter(|h| !h.is_empty())
        .or_else(|| {
            let h = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
            Some(h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
}

/// `ack_timeout` (100ms..=60s, default 2s) and `lease` (3s..=10m, default 10s, more than twice
/// `ack_timeout`).
fn timeouts(
    ack_timeout: Option<String>,
    lease: Option<String>,
) -> Result<(Duration, Duration), ConfigError> {
    let ack = duration_or(
        "replication.ack_timeout",
        ack_timeout,
        Duration::from_secs(2),
    )?;
    if !(ACK_TIMEOUT_RANGE.0..=ACK_TIMEOUT_RANGE.1).contains(&ack) {
        return err(format!(
            "replication.ack_timeout = {ack:?} is out of range (100ms..=60s)"
        ));
    }
    let lease = duration_or("replication.lease", lease, Duration::from_secs(10))?;
    if !(LEASE_RANGE.0..=LEASE_RANGE.1).contains(&lease) {
        return err(format!(
            "replication.lease = {lease:?} is out of range (3s..=10m)"
        ));
    }
    if lease <= 2 * ack {
        return err(format!(
            "replication.lease = {lease:?} must be more than twice replication.ack_timeout = \
             {ack:?}"
        ));
    }
    Ok((ack, lease))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Overrides, ENV_WAL_COMMIT};

    fn host() -> Option<String> {
        Some("web-1.example.com".to_string())
    }

    fn build(section: &str) -> Result<Option<ReplicationSpec>, ConfigError> {
        let raw = Config::parse_manifest(section)?;
        build_replication(raw.replication, &host)
    }

    /// `[replication]` with `nats = [one server]` and `extra` keys.
    fn with(extra: &str) -> String {
        format!("[replication]\nnats = [\"nats://10.0.0.5\"]\n{extra}")
    }

    fn error(text: &str) -> String {
        match build(text) {
            Ok(spec) => panic!("{text:?} validated: {spec:?}"),
            Err(e) => e.0,
        }
    }

    #[test]
    fn absent_is_off_and_the_embedded_default_has_none() {
        assert_eq!(build("").unwrap(), None);
        let c = Config::build(Default::default(), &|_| None, &Overrides::default()).unwrap();
        assert_eq!(c.replication, None);
    }

    #[test]
    fn defaults() {
        let spec = build(&with("")).unwrap().unwrap();
        assert_eq!(
            spec,
            ReplicationSpec {
                servers: vec!["nats://10.0.0.5:4222".into()],
                stream: "sluice".into(),
                replicas: 3,
                node: "web-1".into(),
                ack_timeout: Duration::from_secs(2),
                lease: Duration::from_secs(10),
                max_inflight: 2,
            }
        );
    }

    #[test]
    fn every_key_given() {
        let text = "[replication]\n\
                    nats = [\"nats://a:4223\", \"tls://b\", \"nats://[::1]:5000\", \"tls://10.0.0.7:1\"]\n\
                    stream = \"orders_EU-1\"\nreplicas = 5\nnode = \"node-a\"\n\
                    ack_timeout = \"100ms\"\nlease = \"10m\"\nmax_inflight = 64\n";
        let spec = build(text).unwrap().unwrap();
        assert_eq!(
            spec.servers,
            [
                "nats://a:4223",
                "tls://b:4222",
                "nats://[::1]:5000",
                "tls://10.0.0.7:1"
            ]
        );
        assert_eq!(
            (spec.stream.as_str(), spec.replicas, spec.node.as_str()),
            ("orders_EU-1", 5, "node-a")
        );
        assert_eq!(spec.ack_timeout, Duration::from_millis(100));
        assert_eq!(spec.lease, Duration::from_secs(600));
        assert_eq!(spec.max_inflight, 64);
        let low = with("replicas = 1\nmax_inflight = 1\nack_timeout = \"60s\"\nlease = \"10m\"\n");
        let spec = build(&low).unwrap().unwrap();
        assert_eq!((spec.replicas, spec.max_inflight), (1, 1));
        assert_eq!(spec.ack_timeout, Duration::from_secs(60));
    }

    #[test]
    fn bad_urls_are_named_with_their_index() {
        for (url, why) in [
            ("http://10.0.0.5:4222", "must start with nats:// or tls://"),
            ("10.0.0.5:4222", "must start with nats:// or tls://"),
            ("NATS://a", "must start with nats:// or tls://"),
            ("nats://", "no host"),
            ("nats://:4222", "no host"),
            ("nats://a:0", "port \"0\" is not a number in 1..=65535"),
            (
                "nats://a:65536",
                "port \"65536\" is not a number in 1..=65535",
            ),
            ("nats://a:", "port \"\" is not a number in 1..=65535"),
            ("nats://a:x", "port \"x\" is not a number in 1..=65535"),
            ("nats://u:p@a:4222", "credentials"),
            ("nats://a:4222/", "no path"),
            ("nats://a:4222?x=1", "no path"),
            ("nats://a b", "is not a host name or address"),
            ("nats://::1", "is not a host name or address"),
            ("nats://[::1", "no closing ]"),
            ("nats://[zz]:1", "is not an IPv6 address"),
            ("nats://[::1]x", "is not host:port"),
        ] {
            let text = format!("[replication]\nnats = [\"nats://ok\", {url:?}]\n");
            let e = error(&text);
            let want = format!("replication.nats[1] = {url:?}: ");
            assert!(e.starts_with(&want) && e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn the_server_list_is_bounded_and_has_no_duplicates() {
        let e = error("[replication]\nnats = []\n");
        assert_eq!(e, "replication.nats must list 1..=16 servers, not 0");
        let many: Vec<String> = (1..=17).map(|i| format!("\"nats://h{i}\"")).collect();
        let e = error(&format!("[replication]\nnats = [{}]\n", many.join(", ")));
        assert_eq!(e, "replication.nats must list 1..=16 servers, not 17");
        let sixteen = format!("[replication]\nnats = [{}]\n", many[..16].join(", "));
        assert_eq!(build(&sixteen).unwrap().unwrap().servers.len(), 16);
        let e = error("[replication]\nnats = [\"nats://a\", \"nats://a:4222\"]\n");
        assert!(
            e.contains("replication.nats[1]") && e.contains("listed twice"),
            "{e}"
        );
        let e = error("[replication]\nstream = \"s\"\n");
        assert!(e.contains("missing field `nats`"), "{e}");
    }

    #[test]
    fn counts_out_of_range_are_named() {
        for (extra, want) in [
            (
                "replicas = 0",
                "replication.replicas = 0 is out of range (1..=5)",
            ),
            (
                "replicas = 6",
                "replication.replicas = 6 is out of range (1..=5)",
            ),
            (
                "max_inflight = 0",
                "replication.max_inflight = 0 is out of range (1..=64)",
            ),
            (
                "max_inflight = 65",
                "replication.max_inflight = 65 is out of range (1..=64)",
            ),
        ] {
            assert_eq!(error(&with(&format!("{extra}\n"))), want);
        }
        let e = error(&with("replicas = -1\n"));
        assert!(e.contains("replicas"), "{e}");
    }

    #[test]
    fn stream_and_node_must_be_single_subject_tokens() {
        let long = "x".repeat(65);
        for key in ["stream", "node"] {
            for bad in ["a.b", "a*", ">", "a b", "", "tab\t", "é", long.as_str()] {
                let e = error(&with(&format!("{key} = {bad:?}\n")));
                let want =
                    format!("replication.{key} = {bad:?} must be 1..=64 bytes of [A-Za-z0-9_-]");
                assert!(e.starts_with(&want), "{key} {bad:?}: {e}");
            }
            let ok = "x".repeat(64);
            assert!(build(&with(&format!("{key} = {ok:?}\n"))).is_ok());
        }
    }

    #[test]
    fn durations_out_of_range_are_named() {
        for (extra, want) in [
            (
                "ack_timeout = \"99ms\"",
                "replication.ack_timeout = 99ms is out of range (100ms..=60s)",
            ),
            (
                "ack_timeout = \"61s\"\nlease = \"10m\"",
                "replication.ack_timeout = 61s is out of range (100ms..=60s)",
            ),
            (
                "lease = \"2999ms\"\nack_timeout = \"100ms\"",
                "replication.lease = 2.999s is out of range (3s..=10m)",
            ),
            (
                "lease = \"11m\"",
                "replication.lease = 660s is out of range (3s..=10m)",
            ),
            (
                "lease = \"4s\"",
                "replication.lease = 4s must be more than twice replication.ack_timeout = 2s",
            ),
            (
                "lease = \"3s\"\nack_timeout = \"1500ms\"",
                "replication.lease = 3s must be more than twice replication.ack_timeout = 1.5s",
            ),
        ] {
            assert_eq!(error(&with(&format!("{extra}\n"))), want);
        }
        let e = error(&with("ack_timeout = \"2 s\"\n"));
        assert!(e.starts_with("replication.ack_timeout: duration"), "{e}");
        let e = error(&with("lease = \"0s\"\n"));
        assert!(e.starts_with("replication.lease: duration"), "{e}");
        let just = with("lease = \"3s\"\nack_timeout = \"1499ms\"\n");
        assert_eq!(build(&just).unwrap().unwrap().lease, Duration::from_secs(3));
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = error(&with("replica = 3\n"));
        assert!(e.contains("unknown field `replica`"), "{e}");
        assert!(e.contains("replicas"), "the accepted keys are listed: {e}");
    }

    #[test]
    fn the_default_node_is_the_host_names_first_label_as_a_token() {
        assert_eq!(
            node_from_host("web-1.example.com").as_deref(),
            Some("web-1")
        );
        assert_eq!(node_from_host(" db_2 \n").as_deref(), Some("db_2"));
        assert_eq!(node_from_host("büro").as_deref(), Some("b-ro"));
        assert_eq!(node_from_host("a*b>c d").as_deref(), Some("a-b-c-d"));
        let long = "h".repeat(100);
        assert_eq!(node_from_host(&long), Some("h".repeat(64)));
        assert_eq!(node_from_host(".example.com"), None);
        assert_eq!(node_from_host(""), None);
        let raw = Config::parse_manifest(&with("")).unwrap().replication;
        let e = build_replication(raw, &|| None).unwrap_err().0;
        assert!(
            e.starts_with("replication.node has no default: the host name is unknown"),
            "{e}"
        );
        let raw = Config::parse_manifest(&with("")).unwrap().replication;
        let e = build_replication(raw, &|| Some(".local".into()))
            .unwrap_err()
            .0;
        assert!(
            e.contains("the host name \".local\" gives no node name"),
            "{e}"
        );
        let raw = Config::parse_manifest(&with("node = \"given\"\n"))
            .unwrap()
            .replication;
        assert_eq!(
            build_replication(raw, &|| None).unwrap().unwrap().node,
            "given"
        );
    }

    #[test]
    fn this_machines_host_name_gives_a_node() {
        let host = host_name().expect("a host name");
        let node = node_from_host(&host).expect("a node from the host name");
        assert!(is_token(&node), "{node:?}");
    }

    #[test]
    fn replication_refuses_the_ring_commit_path() {
        let text = with("node = \"a\"\n[wal]\ncommit = \"ring\"\n");
        let raw = Config::parse_manifest(&text).unwrap();
        let e = Config::build(raw, &|_| None, &Overrides::default()).unwrap_err();
        assert!(
            e.0.starts_with("replication needs wal.commit = \"helper\""),
            "{e}"
        );
        let ring = |k: &str| (k == ENV_WAL_COMMIT).then(|| "ring".to_string());
        let raw = Config::parse_manifest(&with("node = \"a\"\n")).unwrap();
        let e = Config::build(raw, &ring, &Overrides::default()).unwrap_err();
        assert!(
            e.0.starts_with("replication needs wal.commit = \"helper\""),
            "{e}"
        );
        let raw = Config::parse_manifest(&with("node = \"a\"\n")).unwrap();
        let c = Config::build(raw, &|_| None, &Overrides::default()).unwrap();
        assert_eq!(c.replication.map(|r| r.node), Some("a".to_string()));
    }
}
