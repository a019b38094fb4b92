//! The effective configuration as text: what `sluice check --config F` prints after the manifest
//! validated (manifest, environment and embedded defaults merged).
//!
//! The output is TOML-shaped (`[section]`, `key = value`) so that it reads like the manifest it
//! came from, with every default filled in. Secrets are never printed: a secret shows as
//! `"<redacted, N bytes>"` (the `Debug` of [`crate::ingest::secrets::Secret`]). Durations are
//! printed in the unit `Debug` picks (`"10s"`, `"50ms"`), which the manifest parser accepts.
//! Trigger verification and flow gates, whose validated forms have no TOML image, are printed as
//! their `Debug` text in a string.

#![forbid(unsafe_code)]

use std::fmt::Write;

use super::Config;

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
    o.kv("max_held_bytes", cfg.flow.max_held_bytes);
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
    fn kv(&mut self, key: &str, v: impl std::fmt::Display) {
        let _ = writeln!(self.0, "{key} = {v}");
    }
    fn s(&mut self, key: &str, v: impl std::fmt::Debug) {
        // `{:?}` of a `&str` or `String` is a quoted, escaped string: valid TOML for ASCII.
        let _ = writeln!(self.0, "{key} = {v:?}");
    }
    fn dur(&mut self, key: &str, d: std::time::Duration) {
        self.s(key, format!("{d:?}"));
    }
    fn line(&mut self, text: &str) {
        let _ = writeln!(self.0, "{text}");
    }
}

fn server(o: &mut Out, cfg: &Config) {
    let s = &cfg.server;
    o.section("server");
    o.s("listen", s.listen.to_string());
    o.s("data_dir", s.data_dir.display().to_string());
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
    o.s("io", format!("{:?}", s.io).to_lowercase());
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
    match i.default_route_max_pending {
        None => {}
        Some(m) if m.events.is_none() && m.bytes.is_none() => {
            o.kv("default_route_max_pending", "{}")
        }
        Some(m) => {
            if let Some(e) = m.events {
                o.kv("default_route_max_pending.events", e);
            }
            if let Some(b) = m.bytes {
                o.kv("default_route_max_pending.bytes", b);
            }
        }
    }
    o.s("stored_headers", &i.stored_headers);
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
    o.s(
        "commit",
        match w.commit {
            crate::wal::CommitPath::Helper => "helper",
            crate::wal::CommitPath::Ring => "ring",
        },
    );
}

fn dispatch(o: &mut Out, cfg: &Config) {
    let d = &cfg.dispatch;
    o.section("dispatch");
    o.kv("max_pending_events", d.max_pending_events);
    o.kv("max_pending_bytes", d.max_pending_bytes);
    o.kv("saturated_high", d.saturated_high);
    o.kv("saturated_low", d.saturated_low);
    o.dur("retention", d.retention);
    o.kv("max_wal_bytes", d.max_wal_bytes);
    o.kv("max_dlq_entries", d.max_dlq_entries);
    o.kv("absorb_max_bytes", d.absorb_max_bytes);
    o.kv("reserved_fraction", d.reserved_fraction);
}

fn trigger(o: &mut Out, cfg: &Config, t: &super::TriggerConfig) {
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
    if let Some(e) = t.max_pending.events {
        o.kv("max_pending.events", e);
    }
    if let Some(b) = t.max_pending.bytes {
        o.kv("max_pending.bytes", b);
    }
    if t.auth.verify.is_some() || t.auth.dedupe.is_some() {
        o.s("auth", format!("{:?}", t.auth));
    }
    if !t.flow.is_empty() {
        o.s("flow", format!("{:?}", t.flow));
    }
}

fn destination(o: &mut Out, d: &super::DestinationConfig) {
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
    o.line(&format!(
        "circuit = {{ failures = {}, open_for = \"{:?}\", on_open = \"{}\" }}",
        d.circuit.failures,
        d.circuit.open_for,
        match d.circuit.on_open {
            super::OnOpen::Dlq => "dlq",
            super::OnOpen::Hold => "hold",
        }
    ));
    o.line(&format!(
        "retry = {{ max_attempts = {}, base = \"{:?}\", cap = \"{:?}\" }}",
        d.retry.max_attempts, d.retry.base, d.retry.cap
    ));
    for (name, value) in &d.headers {
        o.s(&format!("headers.{name:?}"), value);
    }
    if let Some(k) = &d.signing_key {
        o.s("signing_secret", format!("{k:?}"));
    }
    if d.tls.is_some() {
        o.s("tls", "configured");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Overrides};

    #[test]
    fn renders_defaults_and_a_trigger_with_its_destination() {
        let raw = Config::parse_manifest(
            r#"
[[triggers]]
id = "gh"
provider = "github"
path = "/hooks/gh"
handler = "http://127.0.0.1:9/x"
[[destinations]]
uri = "http://127.0.0.1:9/x"
max_in_flight = 5
"#,
        )
        .unwrap();
        let cfg = Config::build(raw, &|_| None, &Overrides::default()).unwrap();
        let text = render(&cfg);
        assert!(
            text.contains("[server]\nlisten = \"127.0.0.1:8080\""),
            "{text}"
        );
        assert!(text.contains("max_outstanding = 64"), "{text}");
        assert!(text.contains("[[triggers]]\nid = \"gh\""), "{text}");
        assert!(
            text.contains("handler = \"http://127.0.0.1:9/x\""),
            "{text}"
        );
        assert!(
            text.contains("[[destinations]]\nuri = \"http://127.0.0.1:9/x\"\nmax_in_flight = 5"),
            "{text}"
        );
    }
}
