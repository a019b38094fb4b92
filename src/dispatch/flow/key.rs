//! Gate keys: a [`KeySelector`] applied to one event gives the string that names its gate.
//!
//! Rules (Harn reference §5.1, "Result → gate string"): a string is used as is; JSON `null`,
//! a missing member, a missing header or a body that is not JSON give `"null"`; a bool or a
//! number gives its JSON text; an object or an array gives its compact JSON text. Headers are
//! the ones stored with the event (config adds every header a selector names to the stored set);
//! the first stored value of the name wins. No `key` at all gives `"_global"`: one gate for the
//! whole trigger.
//!
//! Bound: a key longer than [`MAX_KEY_BYTES`] is replaced by `sha256:<hex>` of its text, so a
//! large body value cannot make a large map key; a key starting with NUL is hashed the same way,
//! which keeps [`OVERFLOW_KEY`] distinct from every real key.
#![forbid(unsafe_code)]

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::spec::KeySelector;
use crate::wal::EventRecord;

/// Longest key kept verbatim.
pub const MAX_KEY_BYTES: usize = 256;
/// The key shared by events whose own key found no room (see the module docs of `flow`).
pub const OVERFLOW_KEY: &str = "\0_overflow";

/// Resolves selectors against one event, parsing the body at most once.
#[derive(Debug)]
pub struct Resolver<'a> {
    event: &'a EventRecord,
    body: Option<Option<Value>>,
}

impl<'a> Resolver<'a> {
    pub fn new(event: &'a EventRecord) -> Resolver<'a> {
        Resolver { event, body: None }
    }

    pub fn resolve(&mut self, sel: &KeySelector) -> String {
        let raw = match sel {
            KeySelector::Global => return "_global".to_string(),
            KeySelector::Source => self.event.source.clone(),
            KeySelector::Trigger => self.event.trigger_id.clone(),
            KeySelector::Header(name) => self
                .event
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_else(|| "null".to_string()),
            KeySelector::Body(path) => {
                let event = self.event;
                let body = self
                    .body
                    .get_or_insert_with(|| serde_json::from_slice(&event.body).ok());
                let mut v = body.as_ref();
                for seg in path {
                    v = v.and_then(|x| match x {
                        Value::Object(m) => m.get(seg),
                        Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
                        _ => None,
                    });
                }
                match v {
                    None | Some(Value::Null) => "null".to_string(),
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                }
            }
        };
        bounded(raw)
    }
}

fn bounded(key: String) -> String {
    if key.len() <= MAX_KEY_BYTES && !key.starts_with('\0') {
        return key;
    }
    let digest = Sha256::digest(key.as_bytes());
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(body: &[u8], headers: &[(&str, &str)]) -> EventRecord {
        EventRecord {
            event_id: "e".into(),
            trigger_id: "t".into(),
            source: "github".into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect(),
            body: body.to_vec(),
            ..EventRecord::default()
        }
    }

    fn sel(s: &str) -> KeySelector {
        KeySelector::parse(s).unwrap()
    }

    #[test]
    fn every_selector_kind() {
        let ev = event(
            br#"{"user":{"id":42,"name":"ann","ok":true,"tags":["a","b"],"n":null},"list":[{"x":"y"}]}"#,
            &[("x-tenant", "acme"), ("x-tenant", "second")],
        );
        let mut r = Resolver::new(&ev);
        assert_eq!(r.resolve(&KeySelector::Global), "_global");
        assert_eq!(r.resolve(&sel("event.source")), "github");
        assert_eq!(r.resolve(&sel("event.trigger")), "t");
        assert_eq!(r.resolve(&sel("event.headers.X-Tenant")), "acme");
        assert_eq!(r.resolve(&sel("event.headers.x-missing")), "null");
        assert_eq!(r.resolve(&sel("event.body.user.id")), "42");
        assert_eq!(r.resolve(&sel("event.body.user.name")), "ann");
        assert_eq!(r.resolve(&sel("event.body.user.ok")), "true");
        assert_eq!(r.resolve(&sel("event.body.user.n")), "null");
        assert_eq!(r.resolve(&sel("event.body.user.tags")), r#"["a","b"]"#);
        assert_eq!(r.resolve(&sel("event.body.list.0.x")), "y");
        assert_eq!(r.resolve(&sel("event.body.user.id.deeper")), "null");
        assert_eq!(r.resolve(&sel("event.body.nope")), "null");
    }

    #[test]
    fn non_json_body_resolves_to_null_and_long_keys_are_hashed() {
        let ev = event(b"not json", &[]);
        assert_eq!(Resolver::new(&ev).resolve(&sel("event.body.a")), "null");
        let long = format!(r#"{{"a":"{}","b":"\u0000x"}}"#, "z".repeat(1000));
        let ev = event(long.as_bytes(), &[]);
        let mut r = Resolver::new(&ev);
        let k = r.resolve(&sel("event.body.a"));
        assert!(k.starts_with("sha256:") && k.len() == 71, "{k}");
        assert_eq!(k, r.resolve(&sel("event.body.a")), "stable");
        let nul = r.resolve(&sel("event.body.b"));
        assert!(
            nul.starts_with("sha256:"),
            "a NUL-led key cannot be the overflow key"
        );
    }
}
