//! Dedupe: drop a provider's redelivery of an event already in the WAL.
//!
//! # Key
//! Per trigger with `dedupe = true` (or `dedupe = { window = "24h" }`), the key is the
//! provider's delivery id ([`KeySource`]): `X-GitHub-Delivery` (`verify = "github"`),
//! `webhook-id` or `svix-id` (`standard-webhooks`), the top-level string `id` of the JSON body (`stripe`), the
//! top-level string `event_id` of the JSON body (`slack`); when that is absent (or for other
//! triggers) it is `sha256:<hex of the body>`. A key longer than [`MAX_KEY_LEN`] bytes is replaced
//! by `key-sha256:<hex of the key>`. Keys are scoped per trigger: the index holds the first 16
//! bytes of `SHA-256(trigger_id ‖ 0 ‖ key)` ([`KeyDigest`]).
//!
//! # Claim, confirm, release
//! A key is **claimed** when its request is admitted (after the signature check and the token
//! buckets), **confirmed** when the WAL reports the event durable, and **released** when the
//! append fails (`503`), so the provider's retry is accepted rather than dropped as a duplicate
//! (the Harn orchestrator keeps the claim, reference §1.7). A second request with a claimed key:
//! - confirmed and inside the window → `200 {"status":"duplicate_dropped","trigger_id":…,
//!   "event_id":<the first event's id>}`, nothing written;
//! - still in flight → `503 {"status":"refused","reason":"duplicate_in_flight"}` with
//!   `Retry-After: 1`: the first may yet fail, so the second can be neither accepted (it would
//!   be a duplicate) nor dropped (it might be the only copy). The retry then meets a confirmed
//!   key (duplicate) or a released one (accepted).
//!
//! # Bounds and concurrency
//! At most `[ingest] dedupe_max_keys` keys (default [`DEFAULT_MAX_KEYS`]) across all triggers,
//! split evenly over up to [`SHARDS`] shards (chosen by the digest). Each shard is a
//! `parking_lot::Mutex` around a `HashMap<KeyDigest, Entry>` and a FIFO of insertions; the lock
//! is held for one hash lookup and O(1) amortised queue work (at most [`MAX_EXPIRE_PER_CLAIM`]
//! expired entries are dropped per claim), so with many shards workers rarely meet. Memory: about
//! 100 bytes per key (map entry and queue entry with allocator slack), so ~100–150 MB at the
//! default bound. Past the bound, the oldest insertion of the shard is evicted, even if inside its
//! window: **a duplicate of an evicted key is accepted again** (at least once, never a loss).
//! Expired keys are dropped lazily from the queue front, and ignored wherever they are met.
//!
//! # Restart
//! The key is stored with the event in the WAL as header [`DEDUPE_KEY_HEADER`]; at startup
//! [`DedupeIndex::rebuild`] scans the WAL with [`WalReader`] and re-inserts, as confirmed, the
//! keys of dedupe triggers whose `received_at` is inside the trigger's window. A duplicate sent
//! after a crash is still caught. The scan reads every event (cost proportional to the WAL size;
//! it is skipped when no trigger dedupes).
#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::time::Duration;

use parking_lot::Mutex;
use sha2::{Digest as _, Sha256};

use super::respond::json_str;
use super::verify::{Headers, Scheme};
use crate::sync::CachePadded;
use crate::wal::{WalError, WalReader};

/// Header under which the key is stored with the event in the WAL. Never taken from a request.
pub const DEDUPE_KEY_HEADER: &str = "x-sluice-dedupe-key";
/// Default dedupe window.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// Default bound on keys held, across triggers.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;
/// Longest key kept as is; longer keys are hashed.
pub const MAX_KEY_LEN: usize = 256;
/// Most shards of the index.
pub const SHARDS: usize = 64;
/// Most expired queue entries dropped by one claim (keeps each lock hold short).
pub const MAX_EXPIRE_PER_CLAIM: usize = 16;
/// Length of an event id ([`super::event_id`]).
const EVENT_ID_LEN: usize = 26;

/// Where a trigger's key comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySource {
    /// `X-GitHub-Delivery`.
    GithubDelivery,
    /// `webhook-id`.
    WebhookId,
    /// JSON body, top-level string `id` (Stripe).
    JsonId,
    /// JSON body, top-level string `event_id` (Slack).
    JsonEventId,
    /// `sha256:<hex of the body>` only.
    BodyDigest,
}

impl KeySource {
    /// The provider-native key of a verification scheme.
    pub fn for_scheme(scheme: Option<&Scheme>) -> KeySource {
        match scheme {
            Some(Scheme::Github) => KeySource::GithubDelivery,
            Some(Scheme::StandardWebhooks) => KeySource::WebhookId,
            Some(Scheme::Stripe) => KeySource::JsonId,
            Some(Scheme::Slack) => KeySource::JsonEventId,
            Some(Scheme::Hmac(_)) | None => KeySource::BodyDigest,
        }
    }
}

/// A trigger's dedupe settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupeRule {
    pub window: Duration,
    pub source: KeySource,
}

/// The dedupe key of a request (module docs).
pub fn dedupe_key<H: Headers + ?Sized>(source: KeySource, headers: &H, body: &[u8]) -> String {
    let native = match source {
        KeySource::GithubDelivery => header_text(headers, "x-github-delivery"),
        // Svix's libraries send the same id as `svix-id` (see `crate::sign`).
        KeySource::WebhookId => {
            header_text(headers, "webhook-id").or_else(|| header_text(headers, "svix-id"))
        }
        KeySource::JsonId => json_field(body, "id"),
        KeySource::JsonEventId => json_field(body, "event_id"),
        KeySource::BodyDigest => None,
    };
    match native {
        Some(k) if k.len() > MAX_KEY_LEN => format!("key-sha256:{}", hex(&Sha256::digest(&k))),
        Some(k) => k,
        None => format!("sha256:{}", hex(&Sha256::digest(body))),
    }
}

fn header_text<H: Headers + ?Sized>(headers: &H, name: &str) -> Option<String> {
    let v = std::str::from_utf8(headers.get(name)?).ok()?.trim();
    (!v.is_empty()).then(|| v.to_string())
}

/// A top-level string field of a JSON object body (other fields are skipped unparsed).
fn json_field(body: &[u8], field: &str) -> Option<String> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    struct Find<'f>(&'f str);
    impl<'de> Visitor<'de> for Find<'_> {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found = None;
            while let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if k == self.0 && found.is_none() {
                    found = map
                        .next_value::<serde_json::Value>()?
                        .as_str()
                        .map(String::from);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let found = de.deserialize_map(Find(field)).ok()?;
    found.filter(|s| !s.is_empty())
}

fn hex(b: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(D[(x >> 4) as usize] as char);
        s.push(D[(x & 15) as usize] as char);
    }
    s
}

/// A key scoped to its trigger: the first 16 bytes of `SHA-256(trigger_id ‖ 0 ‖ key)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyDigest([u8; 16]);

impl KeyDigest {
    pub fn new(trigger_id: &str, key: &str) -> KeyDigest {
        let mut h = Sha256::new();
        h.update(trigger_id.as_bytes());
        h.update([0u8]);
        h.update(key.as_bytes());
        let full = h.finalize();
        let mut d = [0u8; 16];
        d.copy_from_slice(&full[..16]);
        KeyDigest(d)
    }

    fn shard(&self, n: usize) -> usize {
        (u64::from_le_bytes([
            self.0[0], self.0[1], self.0[2], self.0[3], self.0[4], self.0[5], self.0[6], self.0[7],
        ]) % n as u64) as usize
    }
}

/// The result of [`DedupeIndex::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key was free: this request owns it until [`DedupeIndex::confirm`] or
    /// [`DedupeIndex::release`].
    New(ClaimToken),
    /// A durable event inside the window has the key; its event id.
    Duplicate(String),
    /// Another request holding the key has not been reported durable (or failed) yet.
    InFlight,
}

/// Proof of a claim: which entry (`gen` tells a re-inserted key apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimToken {
    digest: KeyDigest,
    gen: u32,
}

#[derive(Debug)]
struct Entry {
    gen: u32,
    /// Unix seconds; the key is ignored from then on.
    expires_at: u64,
    durable: bool,
    event_id: [u8; EVENT_ID_LEN],
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<KeyDigest, Entry>,
    /// Insertion order: `(digest, gen)`; an entry whose gen no longer matches the map is stale.
    order: VecDeque<(KeyDigest, u32)>,
    cap: usize,
    next_gen: u32,
}

impl Shard {
    fn insert(&mut self, digest: KeyDigest, e: Entry) {
        self.order.push_back((digest, e.gen));
        self.map.insert(digest, e);
        while self.order.len() > self.cap {
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some((d, gen)) = self.order.pop_front() {
            if self.map.get(&d).is_some_and(|e| e.gen == gen) {
                self.map.remove(&d);
            }
        }
    }

    /// Drops up to [`MAX_EXPIRE_PER_CLAIM`] stale or expired entries from the front.
    fn expire(&mut self, now: u64) {
        for _ in 0..MAX_EXPIRE_PER_CLAIM {
            let Some((d, gen)) = self.order.front() else {
                return;
            };
            let live = self
                .map
                .get(d)
                .is_some_and(|e| e.gen == *gen && e.expires_at > now);
            if live {
                return;
            }
            self.pop_front();
        }
    }

    fn gen(&mut self) -> u32 {
        self.next_gen = self.next_gen.wrapping_add(1);
        self.next_gen
    }
}

/// The shared dedupe index (module docs).
#[derive(Debug)]
pub struct DedupeIndex {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    max_keys: usize,
}

impl DedupeIndex {
    /// An index of at most `max_keys` (≥ 1) keys.
    pub fn new(max_keys: usize) -> DedupeIndex {
        let max_keys = max_keys.max(1);
        let n = SHARDS.min(max_keys);
        let shards = (0..n)
            .map(|i| {
                let cap = max_keys / n + usize::from(i < max_keys % n);
                CachePadded::new(Mutex::new(Shard {
                    cap,
                    ..Shard::default()
                }))
            })
            .collect();
        DedupeIndex { shards, max_keys }
    }

    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Keys held (live, expired not yet dropped, and in flight).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, d: &KeyDigest) -> &Mutex<Shard> {
        &self.shards[d.shard(self.shards.len())]
    }

    /// Claims `digest` for `event_id` at `now` (Unix seconds) for `window`.
    pub fn claim(&self, digest: KeyDigest, event_id: &str, now: u64, window: Duration) -> Claim {
        let Ok(id) = <[u8; EVENT_ID_LEN]>::try_from(event_id.as_bytes()) else {
            // Not an id of ours (cannot happen): not indexed, never a duplicate.
            return Claim::New(ClaimToken { digest, gen: 0 });
        };
        let mut s = self.shard(&digest).lock();
        s.expire(now);
        if let Some(e) = s.map.get(&digest).filter(|e| e.expires_at > now) {
            return if e.durable {
                Claim::Duplicate(String::from_utf8_lossy(&e.event_id).into_owned())
            } else {
                Claim::InFlight
            };
        }
        let gen = s.gen();
        let entry = Entry {
            gen,
            expires_at: now.saturating_add(window.as_secs()),
            durable: false,
            event_id: id,
        };
        s.insert(digest, entry);
        Claim::New(ClaimToken { digest, gen })
    }

    /// The claimed event is durable: later requests with the key are duplicates.
    pub fn confirm(&self, t: ClaimToken) {
        let mut s = self.shard(&t.digest).lock();
        if let Some(e) = s.map.get_mut(&t.digest).filter(|e| e.gen == t.gen) {
            e.durable = true;
        }
    }

    /// The claimed event was not written: the key is free again.
    pub fn release(&self, t: ClaimToken) {
        let mut s = self.shard(&t.digest).lock();
        if s.map
            .get(&t.digest)
            .is_some_and(|e| e.gen == t.gen && !e.durable)
        {
            s.map.remove(&t.digest);
        }
    }

    /// Inserts a durable key (rebuild); a later insert of the same key wins.
    fn insert_durable(&self, digest: KeyDigest, event_id: [u8; EVENT_ID_LEN], expires_at: u64) {
        let mut s = self.shard(&digest).lock();
        let gen = s.gen();
        let entry = Entry {
            gen,
            expires_at,
            durable: true,
            event_id,
        };
        s.insert(digest, entry);
    }

    /// Re-inserts the keys of the WAL's events of dedupe triggers (`rules`: trigger id → rule)
    /// still inside their window at `now` (Unix seconds). Returns the number of keys inserted.
    pub fn rebuild(
        &self,
        wal_dir: &Path,
        rules: &HashMap<String, DedupeRule>,
        now: u64,
    ) -> Result<u64, WalError> {
        if rules.is_empty() {
            return Ok(0);
        }
        let mut reader = WalReader::open(wal_dir)?;
        let mut inserted = 0;
        while let Some(next) = reader.next_event() {
            let (_, ev) = next?;
            let Some(rule) = rules.get(&ev.trigger_id) else {
                continue;
            };
            let Some((_, key)) = ev.headers.iter().find(|(n, _)| n == DEDUPE_KEY_HEADER) else {
                continue;
            };
            let (Ok(key), Ok(id)) = (
                std::str::from_utf8(key),
                <[u8; EVENT_ID_LEN]>::try_from(ev.event_id.as_bytes()),
            ) else {
                continue;
            };
            let expires_at = (ev.received_at_ms / 1000).saturating_add(rule.window.as_secs());
            if expires_at > now {
                self.insert_durable(KeyDigest::new(&ev.trigger_id, key), id, expires_at);
                inserted += 1;
            }
        }
        Ok(inserted)
    }
}

/// `200` body of a dropped duplicate.
pub fn duplicate_body(trigger_id: &str, event_id: &str) -> String {
    let mut s = String::with_capacity(112);
    s.push_str("{\"status\":\"duplicate_dropped\",\"trigger_id\":");
    json_str(&mut s, trigger_id);
    s.push_str(",\"event_id\":");
    json_str(&mut s, event_id);
    s.push('}');
    s
}

/// `503` body while the first copy is in flight (sent with `Retry-After: 1`).
pub const IN_FLIGHT_BODY: &str =
    "{\"status\":\"refused\",\"reason\":\"duplicate_in_flight\",\"retry_after\":1}";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::EventRecord;

    const ID_A: &str = "01HZXA0000000000000000000A";
    const ID_B: &str = "01HZXB0000000000000000000B";
    const DAY: Duration = Duration::from_secs(86_400);

    fn d(trigger: &str, key: &str) -> KeyDigest {
        KeyDigest::new(trigger, key)
    }

    fn token(c: Claim) -> ClaimToken {
        match c {
            Claim::New(t) => t,
            other => panic!("expected a new claim, got {other:?}"),
        }
    }

    #[test]
    fn keys_per_scheme() {
        let h: [(&str, &[u8]); 2] = [("x-github-delivery", b" 72d3 "), ("webhook-id", b"msg_9")];
        let h = &h[..];
        let body = br#"{"type":"x","id":"evt_1","event_id":"Ev02","nested":{"id":"no"}}"#;
        assert_eq!(dedupe_key(KeySource::GithubDelivery, h, body), "72d3");
        assert_eq!(dedupe_key(KeySource::WebhookId, h, body), "msg_9");
        assert_eq!(dedupe_key(KeySource::JsonId, h, body), "evt_1");
        assert_eq!(dedupe_key(KeySource::JsonEventId, h, body), "Ev02");
        let digest = format!("sha256:{}", hex(&Sha256::digest(body)));
        assert_eq!(dedupe_key(KeySource::BodyDigest, h, body), digest);
        // Fallbacks: absent header, non-JSON body, non-string id.
        let none: [(&str, &[u8]); 0] = [];
        assert_eq!(
            dedupe_key(KeySource::GithubDelivery, &none[..], body),
            digest
        );
        assert!(dedupe_key(KeySource::JsonId, h, b"not json").starts_with("sha256:"));
        assert!(dedupe_key(KeySource::JsonId, h, br#"{"id":7}"#).starts_with("sha256:"));
        assert!(dedupe_key(KeySource::JsonId, h, br#"[1]"#).starts_with("sha256:"));
        let long = "k".repeat(MAX_KEY_LEN + 1);
        let svix: [(&str, &[u8]); 1] = [("svix-id", b"msg_svix")];
        assert_eq!(
            dedupe_key(KeySource::WebhookId, &svix[..], b"x"),
            "msg_svix"
        );
        let h2: [(&str, &[u8]); 1] = [("webhook-id", long.as_bytes())];
        let k = dedupe_key(KeySource::WebhookId, &h2[..], b"");
        assert!(k.starts_with("key-sha256:") && k.len() == 11 + 64, "{k}");
    }

    #[test]
    fn claim_confirm_duplicate() {
        let ix = DedupeIndex::new(100);
        let t = token(ix.claim(d("gh", "k1"), ID_A, 1000, DAY));
        // In flight: neither accepted nor dropped.
        assert_eq!(ix.claim(d("gh", "k1"), ID_B, 1001, DAY), Claim::InFlight);
        ix.confirm(t);
        assert_eq!(
            ix.claim(d("gh", "k1"), ID_B, 1002, DAY),
            Claim::Duplicate(ID_A.into())
        );
        // Scoped per trigger.
        token(ix.claim(d("other", "k1"), ID_B, 1002, DAY));
        // Outside the window the key is new again.
        token(ix.claim(d("gh", "k1"), ID_B, 1000 + 86_400, DAY));
    }

    #[test]
    fn release_frees_the_key() {
        let ix = DedupeIndex::new(100);
        let t = token(ix.claim(d("t", "k"), ID_A, 5, DAY));
        ix.release(t);
        let t2 = token(ix.claim(d("t", "k"), ID_B, 6, DAY));
        // A stale token neither confirms nor releases the new claim.
        ix.release(t);
        ix.confirm(t);
        assert_eq!(ix.claim(d("t", "k"), ID_A, 7, DAY), Claim::InFlight);
        ix.confirm(t2);
        ix.release(t2); // confirmed keys are not released
        assert_eq!(
            ix.claim(d("t", "k"), ID_A, 8, DAY),
            Claim::Duplicate(ID_B.into())
        );
    }

    #[test]
    fn bounded_with_oldest_evicted() {
        let ix = DedupeIndex::new(3);
        assert_eq!(ix.shards.len(), 3);
        let ix = DedupeIndex::new(200);
        let mut tokens = Vec::new();
        for i in 0..1000 {
            let t = token(ix.claim(d("t", &i.to_string()), ID_A, 10, DAY));
            ix.confirm(t);
            tokens.push(t);
        }
        assert!(ix.len() <= 200, "{}", ix.len());
        // The newest keys are still caught; the oldest were evicted and are accepted again.
        assert!(matches!(
            ix.claim(d("t", "999"), ID_B, 11, DAY),
            Claim::Duplicate(_)
        ));
        token(ix.claim(d("t", "0"), ID_B, 11, DAY));
    }

    #[test]
    fn expired_entries_leave_the_queue() {
        let ix = DedupeIndex::new(1000);
        for i in 0..100 {
            let t = token(ix.claim(d("t", &i.to_string()), ID_A, 10, Duration::from_secs(5)));
            ix.confirm(t);
        }
        for i in 0..10 {
            token(ix.claim(d("u", &i.to_string()), ID_A, 100, DAY));
        }
        assert!(ix.len() < 110, "{}", ix.len());
    }

    #[test]
    fn concurrent_claims_admit_exactly_one() {
        let ix = std::sync::Arc::new(DedupeIndex::new(1000));
        let wins: usize = (0..4)
            .map(|_| {
                let ix = ix.clone();
                std::thread::spawn(move || {
                    (0..200)
                        .filter(|i| {
                            matches!(
                                ix.claim(d("t", &i.to_string()), ID_A, 1, DAY),
                                Claim::New(_)
                            )
                        })
                        .count()
                })
            })
            .map(|h| h.join().unwrap())
            .sum();
        assert_eq!(wins, 200);
    }

    #[test]
    fn rebuild_from_the_wal() {
        use crate::wal::WalConfig;
        let dir = tempfile::tempdir().unwrap();
        let cfg = WalConfig {
            segment_bytes: 1 << 20,
            max_body_bytes: 4096,
            ..WalConfig::new(dir.path())
        };
        let (mut wal, _) = crate::wal::open(&cfg).unwrap();
        let now_ms = 1_700_000_000_000u64;
        let events = [
            ("gh", "k-old", ID_A, now_ms - 2 * 86_400_000),
            ("gh", "k-new", ID_B, now_ms - 1000),
            ("plain", "k-x", ID_A, now_ms),
        ];
        for (i, (trigger, key, id, at)) in events.iter().enumerate() {
            let ev = EventRecord {
                event_id: id.to_string(),
                trigger_id: trigger.to_string(),
                source: "s".into(),
                received_at_ms: *at,
                headers: vec![(DEDUPE_KEY_HEADER.into(), key.as_bytes().to_vec())],
                body: b"{}".to_vec(),
                replay_of: None,
                body_json: Default::default(),
            };
            wal.append_events(&[ev]).unwrap();
            assert_eq!(wal.last_lsn(), i as u64 + 1);
        }
        drop(wal);

        let rules: HashMap<String, DedupeRule> = [(
            "gh".to_string(),
            DedupeRule {
                window: DAY,
                source: KeySource::GithubDelivery,
            },
        )]
        .into();
        let ix = DedupeIndex::new(100);
        let n = ix.rebuild(dir.path(), &rules, now_ms / 1000).unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            ix.claim(d("gh", "k-new"), ID_A, now_ms / 1000, DAY),
            Claim::Duplicate(ID_B.into())
        );
        token(ix.claim(d("gh", "k-old"), ID_A, now_ms / 1000, DAY));
        token(ix.claim(d("plain", "k-x"), ID_B, now_ms / 1000, DAY));
    }

    #[test]
    fn bodies() {
        assert_eq!(
            duplicate_body("gh", ID_A),
            format!(r#"{{"status":"duplicate_dropped","trigger_id":"gh","event_id":"{ID_A}"}}"#)
        );
        let v: serde_json::Value = serde_json::from_str(IN_FLIGHT_BODY).unwrap();
        assert_eq!(v["reason"], "duplicate_in_flight");
    }
}
