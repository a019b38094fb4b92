//! The effective configuration as text: what `sluice check --config F` prints after the manifest
//! validated (manifest, environment, command-line overrides and embedded defaults merged).
//!
//! The output is a manifest: valid TOML in the keys and forms the manifest parser accepts, every
//! default filled in, so that feeding it back (`sluice check --config OUT` with the same
//! environment and flags) validates and prints the same text. Secrets are never printed: a secret
//! shows as its reference (`{ env = "NAME" }`, `{ file = "/path" }`, with `encoding` when it was
//! given). Trigger verification and flow gates are the manifest's own keys (`verify`, `secrets`,
//! `tolerance`, `hmac`, `dedupe`, `concurrency`, `ordering`, `priority`, `throttle`, `rate_limit`,
//! `debounce`, `singleton`, `batch`). Durations are printed in the largest unit that divides
//! them (`"1m"`, `"1500ms"`); strings through the `toml` crate's own quoting.

#![forbid(unsafe_code)]

use std::fmt::Write;
use std::time::Duration;

use crate::config::flow::KeySelector;
use crate::config::Config;

/// Renders `cfg` as TOML-shaped text (see the module header).
pub fn render(cfg: &Config) -> String {
    let mut o = Out(String::new());
    server(&mut o, cfg);
    ingest(&mut o, cfg);
    wal(&mut o, cfg);
    o.section("orchestrator.pumps");
    o.kv("max_outstanding", cfg.pump.max_outstanding);
    dispatch(&mut o, cfg);
    o.section("flow");
    o.kv("max_gate_keys", cfg.flow.max_gate_keys);
    o.kv("max_held", cfg.flow.max_held);
    o.kv("max_held_per_key", cfg.flow.max_held_per_key);
    o.kv("max_held_bytes", cfg.flow.max_held_bytes);
    if let Some(r) = &cfg.replication {
        replication(&mut o, r);
    }
    for t in &cfg.triggers {
        trigger(&mut o, cfg, t);
    }
    for d in &cfg.destinations {
        destination(&mut o, d);
    }
    o.line(&format!(
        "# admin routes: {}",
        match &cfg.admin_token {
            Some(_) => "on (SLUICE_ADMIN_TOKEN set)",
            None => "off (SLUICE_ADMIN_TOKEN unset)",
        }
    ));
    o.0
}

struct Out(String);

impl Out {
    fn section(&mut self, name: &str) {
        if !self.0.is_empty() {
            self.0.push('\n');
        }
        let _ = writeln!(self.0, "[{name}]");
    }
    fn array_item(&mut self, name: &str) {
        self.0.push('\n');
        let _ = writeln!(self.0, "[[{name}]]");
    }
    /// A number or boolean (its `Display` is its TOML).
    fn kv(&mut self, key: &str, v: impl std::fmt::Display) {
        let _ = writeln!(self.0, "{key} = {v}");
    }
    fn s(&mut self, key: &str, v: &str) {
        let _ = writeln!(self.0, "{key} = {}", quote(v));
    }
    /// A float: `{:?}` always has a fraction or exponent (`1.0`), so it stays a TOML float.
    fn f(&mut self, key: &str, v: f64) {
        let _ = writeln!(self.0, "{key} = {v:?}");
    }
    fn dur(&mut self, key: &str, d: Duration) {
        self.s(key, &duration_text(d));
    }
    fn line(&mut self, text: &str) {
        let _ = writeln!(self.0, "{text}");
    }
}

/// A TOML string (basic or literal, escaped as TOML wants).
fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// An inline table `{ k = v, … }` of already-rendered values.
fn inline(fields: &[(&str, String)]) -> String {
    if fields.is_empty() {
        return "{}".to_string();
    }
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    format!("{{ {} }}", body.join(", "))
}

/// A duration as the manifest writes it: the largest of `d`, `h`, `m`, `s`, `ms` that divides
/// it; `"0s"` for zero. (Sub-millisecond parts cannot come from a manifest; such a value is
/// printed as `Debug` would.)
pub fn duration_text(d: Duration) -> String {
    if d.subsec_nanos() % 1_000_000 != 0 {
        return format!("{d:?}");
    }
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_string();
    }
    for (unit, per) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms % per == 0 {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

fn dq(d: Duration) -> String {
    quote(&duration_text(d))
}

/// A key selector as written; `None` for the trigger-wide gate (no `key`).
fn selector(k: &KeySelector) -> Option<String> {
    let text = match k {
        KeySelector::Global => return None,
        KeySelector::Source => "event.source".to_string(),
        KeySelector::Trigger => "event.trigger".to_string(),
        KeySelector::Header(h) => format!("event.headers.{h}"),
        KeySelector::Body(path) => format!("event.body.{}", path.join(".")),
    };
    Some(quote(&text))
}

/// `key = "…"` first when the gate has one, then `rest`.
fn keyed(k: &KeySelector, rest: Vec<(&'static str, String)>) -> String {
    let mut fields: Vec<(&str, String)> = selector(k).map(|q| ("key", q)).into_iter().collect();
    fields.extend(rest);
    inline(&fields)
}

fn server(o: &mut Out, cfg: &Config) {
    let s = &cfg.server;
    o.section("server");
    o.s("listen", &s.listen.to_string());
    o.s("data_dir", &s.data_dir.to_string_lossy());
    o.kv("workers", s.workers);
    o.kv("max_connections_per_core", s.max_connections_per_core);
    o.dur("header_timeout", s.header_timeout);
    o.dur("body_timeout", s.body_timeout);
    o.dur("idle_timeout", s.idle_timeout);
    o.dur("shutdown_timeout", s.shutdown_timeout);
    o.dur("drain_grace", s.drain_grace);
    o.kv("max_body_bytes", s.max_body_bytes);
    o.kv("max_head_bytes", s.max_head_bytes);
    o.kv("max_uri_bytes", s.max_uri_bytes);
    o.kv("max_pipeline_depth", s.max_pipeline_depth);
    o.kv("max_inflight_body_bytes", s.max_inflight_body_bytes);
    o.kv("max_queued_response_bytes", s.max_queued_response_bytes);
    o.s("ui", s.ui.as_str());
    o.s("io", &format!("{:?}", s.io).to_lowercase());
}

fn ingest(o: &mut Out, cfg: &Config) {
    let i = &cfg.ingest;
    o.section("ingest");
    o.kv("global_capacity", i.global_capacity);
    o.kv("per_source_capacity", i.per_source_capacity);
    o.kv("refill_per_sec", i.refill_per_sec);
    o.kv("max_sources", i.max_sources);
    o.kv("metrics_top_sources", i.metrics_top_sources);
    o.dur("offer_timeout", i.offer_timeout);
    o.kv("default_route", i.default_route);
    if let Some(m) = i.default_route_max_pending {
        let mut share = Vec::new();
        share.extend(m.events.map(|e| ("events", e.to_string())));
        share.extend(m.bytes.map(|b| ("bytes", b.to_string())));
        o.line(&format!("default_route_max_pending = {}", inline(&share)));
    }
    let headers: Vec<String> = i.stored_headers.iter().map(|h| quote(h)).collect();
    o.line(&format!("stored_headers = [{}]", headers.join(", ")));
    o.kv("dedupe_max_keys", i.dedupe_max_keys);
}

fn wal(o: &mut Out, cfg: &Config) {
    let w = &cfg.wal;
    o.section("wal");
    o.s(
        "durability",
        match w.durability {
            crate::wal::Durability::Fsync => "fsync",
            crate::wal::Durability::Os => "os",
        },
    );
    o.kv("segment_bytes", w.segment_bytes);
    o.s(
        "write_path",
        match w.write_path {
            crate::wal::WritePath::Pwrite => "pwrite",
            crate::wal::WritePath::Mmap => "mmap",
        },
    );
    o.kv("max_batch", w.max_batch);
    if let Some(n) = w.ring_capacity {
        o.kv("ring_capacity", n);
    }
    o.s(
        "commit",
        match w.commit {
            crate::wal::CommitPath::Helper => "helper",
            crate::wal::CommitPath::Ring => "ring",
        },
    );
}

/// `[replication]` with every default filled in (`node` as resolved, the host name's by default).
fn replication(o: &mut Out, r: &crate::replication::ReplicationSpec) {
    o.section("replication");
    let servers: Vec<String> = r.servers.iter().map(|s| quote(s)).collect();
    o.line(&format!("nats = [{}]", servers.join(", ")));
    o.s("stream", &r.stream);
    o.kv("replicas", r.replicas);
    o.s("node", &r.node);
    o.dur("ack_timeout", r.ack_timeout);
    o.dur("lease", r.lease);
    o.kv("max_inflight", r.max_inflight);
}

/// What `sluice check` prints about `[replication]` (to stderr, prefixed `replication:`); `None`
/// when the section is absent.
pub fn replication_summary(config: &Config) -> Option<String> {
    let r = config.replication.as_ref()?;
    let last = config.server.workers.saturating_sub(1);
    Some(format!(
        "replication: servers {}; stream {:?}, replicas {}; node {:?} (subjects {:?}..{:?}, \
         lease bucket {:?}); ack_timeout {}, lease {}, max_inflight {} batches per log",
        r.servers.join(", "),
        r.stream,
        r.replicas,
        r.node,
        r.subject(0),
        r.subject(last),
        r.lease_bucket(),
        duration_text(r.ack_timeout),
        duration_text(r.lease),
        r.max_inflight,
    ))
}

fn dispatch(o: &mut Out, cfg: &Config) {
    let d = &cfg.dispatch;
    o.section("dispatch");
    o.kv("max_pending_events", d.max_pending_events);
    o.kv("max_pending_bytes", d.max_pending_bytes);
    o.f("saturated_high", d.saturated_high);
    o.f("saturated_low", d.saturated_low);
    o.dur("retention", d.retention);
    o.kv("max_wal_bytes", d.max_wal_bytes);
    o.kv("max_dlq_entries", d.max_dlq_entries);
    o.kv("absorb_max_bytes", d.absorb_max_bytes);
    o.f("reserved_fraction", d.reserved_fraction);
}

fn trigger(o: &mut Out, cfg: &Config, t: &crate::config::TriggerConfig) {
    o.array_item("triggers");
    o.s("id", &t.id);
    o.s("provider", &t.provider);
    o.s("path", &t.path);
    if let Some(h) = t.handler.and_then(|i| cfg.destinations.get(i)) {
        o.s("handler", &h.handler.uri);
    }
    o.s(
        "when_backlog_full",
        match t.when_backlog_full {
            crate::ingest::backlog::WhenFull::Refuse => "refuse",
            crate::ingest::backlog::WhenFull::Absorb => "absorb",
        },
    );
    let mut share = Vec::new();
    share.extend(t.max_pending.events.map(|e| ("events", e.to_string())));
    share.extend(t.max_pending.bytes.map(|b| ("bytes", b.to_string())));
    if !share.is_empty() {
        o.line(&format!("max_pending = {}", inline(&share)));
    }
    trigger_auth(o, &t.auth);
    trigger_flow(o, &t.flow);
}

/// `verify`, `secrets` (as references), `tolerance`, `hmac`, `dedupe`.
fn trigger_auth(o: &mut Out, a: &crate::config::TriggerAuth) {
    use crate::ingest::verify::Scheme;
    if let Some(v) = &a.verify {
        o.s("verify", v.scheme().name());
        let refs: Vec<String> = a.secrets.iter().map(|r| r.toml()).collect();
        o.line(&format!("secrets = [{}]", refs.join(", ")));
        if v.scheme().has_timestamp() {
            o.dur("tolerance", v.tolerance());
        }
        if let Scheme::Hmac(h) = v.scheme() {
            let lower = |d: &dyn std::fmt::Debug| quote(&format!("{d:?}").to_lowercase());
            o.line(&format!(
                "hmac = {}",
                inline(&[
                    ("header", quote(&h.header)),
                    ("prefix", quote(&h.prefix)),
                    ("algorithm", lower(&h.algorithm)),
                    ("encoding", lower(&h.encoding)),
                ])
            ));
        }
    }
    if let Some(d) = &a.dedupe {
        o.line(&format!("dedupe = {}", inline(&[("window", dq(d.window))])));
    }
}

/// The eight gate keys, in the manifest's forms.
fn trigger_flow(o: &mut Out, f: &crate::config::flow::FlowSpec) {
    if let Some(c) = f.ordering() {
        let on = match c.holds() {
            false => "dlq",
            true => "hold",
        };
        let g = keyed(&c.key, vec![("on_exhausted", quote(on))]);
        o.line(&format!("ordering = {g}"));
    } else if let Some(c) = &f.concurrency {
        let g = keyed(&c.key, vec![("max", c.max.to_string())]);
        o.line(&format!("concurrency = {g}"));
        if let Some(p) = &c.priority {
            let order: Vec<String> = p.order.iter().map(|v| quote(v)).collect();
            let order = format!("[{}]", order.join(", "));
            o.line(&format!(
                "priority = {}",
                keyed(&p.key, vec![("order", order)])
            ));
        }
    }
    for (name, w) in [("throttle", &f.throttle), ("rate_limit", &f.rate_limit)] {
        if let Some(w) = w {
            let rest = vec![("period", dq(w.period)), ("max", w.max.to_string())];
            o.line(&format!("{name} = {}", keyed(&w.key, rest)));
        }
    }
    if let Some(d) = &f.debounce {
        let g = keyed(&d.key, vec![("period", dq(d.period))]);
        o.line(&format!("debounce = {g}"));
    }
    if let Some(s) = &f.singleton {
        o.line(&format!("singleton = {}", keyed(&s.key, Vec::new())));
    }
    if let Some(b) = &f.batch {
        let rest = vec![("size", b.size.to_string()), ("timeout", dq(b.timeout))];
        o.line(&format!("batch = {}", keyed(&b.key, rest)));
    }
}

fn destination(o: &mut Out, d: &crate::config::DestinationSpec) {
    o.array_item("destinations");
    o.s("uri", &d.handler.uri);
    match d.adaptive {
        Some(a) => {
            o.s("max_in_flight", "auto");
            o.kv("min_in_flight", a.min);
            o.kv("max_in_flight_cap", a.cap);
        }
        None => o.kv("max_in_flight", d.max_in_flight),
    }
    o.dur("timeout", d.timeout);
    if let Some(r) = d.rate {
        o.line(&format!(
            "rate = {{ per_sec = {}, burst = {} }}",
            r.per_sec, r.burst
        ));
    }
    let on_open = match d.circuit.on_open {
        crate::config::OnOpen::Dlq => "dlq",
        crate::config::OnOpen::Hold => "hold",
    };
    o.line(&format!(
        "circuit = {{ failures = {}, open_for = {}, on_open = \"{on_open}\" }}",
        d.circuit.failures,
        dq(d.circuit.open_for),
    ));
    o.line(&format!(
        "retry = {{ max_attempts = {}, base = {}, cap = {} }}",
        d.retry.max_attempts,
        dq(d.retry.base),
        dq(d.retry.cap)
    ));
    if !d.headers.is_empty() {
        let fields: Vec<String> = d
            .headers
            .iter()
            .map(|(name, value)| format!("{} = {}", quote(name), quote(value)))
            .collect();
        o.line(&format!("headers = {{ {} }}", fields.join(", ")));
    }
    if let Some(r) = &d.signing_secret {
        o.line(&format!("signing_secret = {r}"));
    }
    if let Some(b) = d.batch {
        o.line(&format!(
            "batch = {{ max_events = {}, max_bytes = {}, linger = {} }}",
            b.max_events,
            b.max_bytes,
            dq(b.linger)
        ));
    }
    destination_tls_shared(o, d);
}

fn destination_tls_shared(o: &mut Out, d: &crate::config::DestinationSpec) {
    if let Some(t) = &d.tls {
        let t = &t.source;
        let path = |p: &std::path::Path| quote(&p.to_string_lossy());
        let mut fields = Vec::new();
        fields.extend(t.ca_file.as_deref().map(|p| ("ca_file", path(p))));
        fields.extend(t.client_cert.as_deref().map(|p| ("client_cert", path(p))));
        fields.extend(t.client_key.as_deref().map(|p| ("client_key", path(p))));
        fields.push(("server_name", quote(&t.server_name)));
        o.line(&format!("tls = {}", inline(&fields)));
    }
    if let Some(s) = &d.shared {
        let on_unavailable = match s.on_unavailable {
            crate::config::shared::OnUnavailable::Closed => "closed",
            crate::config::shared::OnUnavailable::Local => "local",
        };
        o.line(&format!(
            "shared = {}",
            inline(&[
                ("redis", quote(&s.redis.to_string())),
                ("key", quote(&s.key)),
                ("lease", dq(s.lease)),
                ("on_unavailable", quote(on_unavailable)),
            ])
        ));
    }
}

/// What `serve` logs at start and `sluice check` prints (to stderr, one line each, prefixed
/// `routes:`): every route that takes events, the share of the durable backlog it holds, and
/// the common pool (the split of [`crate::ingest::shares::split_slots`], as the server makes it).
pub fn routes_summary(config: &Config) -> Vec<String> {
    use crate::ingest::shares::split_slots;
    use crate::ingest::spec::MaxPending;
    let d = &config.dispatch;
    let default = config.ingest.default_route_max_pending;
    let split = |max, get: fn(&MaxPending) -> Option<u64>| {
        let explicit: Vec<Option<u64>> = config
            .triggers
            .iter()
            .map(|t| get(&t.max_pending))
            .collect();
        split_slots(
            max,
            &explicit,
            default.as_ref().map(get),
            d.reserved_fraction,
        )
        .ok()
    };
    let (Some(events), Some(bytes)) = (
        split(d.max_pending_events, |m| m.events),
        split(d.max_pending_bytes, |m| m.bytes),
    ) else {
        return vec!["routes: the shares do not fit the backlog bound".into()];
    };
    let mut lines: Vec<String> = config
        .triggers
        .iter()
        .enumerate()
        .map(|(i, t)| {
            format!(
                "routes: POST {} -> trigger {:?} (source {:?}): share {} events, {} bytes",
                t.path, t.id, t.provider, events.shares[i], bytes.shares[i]
            )
        })
        .collect();
    let n = config.triggers.len();
    lines.push(match (config.ingest.default_route, default) {
        (false, _) if n > 0 => "routes: POST /webhooks/{source} -> off (triggers are configured; \
                                ingest.default_route = true serves it too)"
            .into(),
        (false, _) => {
            "routes: POST /webhooks/{source} -> off (ingest.default_route = false)".into()
        }
        (true, None) => "routes: POST /webhooks/{source} -> default route: no share (borrows \
                         from the pool only)"
            .into(),
        (true, Some(_)) => format!(
            "routes: POST /webhooks/{{source}} -> default route: share {} events, {} bytes",
            events.shares[n], bytes.shares[n]
        ),
    });
    lines.push(format!(
        "routes: common pool: {} events, {} bytes (of dispatch.max_pending_events = {}, \
         max_pending_bytes = {})",
        events.pool, bytes.pool, d.max_pending_events, d.max_pending_bytes
    ));
    lines
}

#[cfg(test)]
mod tests;
