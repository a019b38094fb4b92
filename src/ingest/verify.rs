//! Webhook signature verification per trigger. The HMAC primitives and the Standard Webhooks
//! scheme live in the leaf module [`crate::sign`], which outbound signing uses too.
//!
//! Every scheme is an HMAC over the **raw body** (as received, after de-chunking), compared in
//! constant time ([`ct_eq`]). The schemes and their wire formats follow the providers'
//! documentation and the Harn orchestrator's `connectors/hmac.rs` (reference §1.5):
//!
//! | `verify =` | header(s) | signed bytes | MAC, encoding |
//! |---|---|---|---|
//! | `github` | `X-Hub-Signature-256: sha256=<hex>` | body | SHA-256, hex |
//! | `stripe` | `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]` | `<t>.<body>` | SHA-256, hex |
//! | `slack` | `X-Slack-Signature: v0=<hex>`, `X-Slack-Request-Timestamp: <unix>` | `v0:<ts>:<body>` | SHA-256, hex |
//! | `standard-webhooks` | `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<b64> [v1,<b64>…]` (or the Svix names `svix-id`, `svix-timestamp`, `svix-signature`) | `<id>.<ts>.<body>` | SHA-256, base64; key = base64 of the secret after `whsec_` |
//! | `hmac` | configured header, optional prefix | body | SHA-1/256/512, hex or base64 |
//!
//! Timestamps, as sent (their exact text is what is signed), are Unix seconds; the window is
//! symmetric: `|now − ts| > tolerance` (default [`DEFAULT_TOLERANCE`]) refuses a replay as well
//! as a clock far in the future. The window is checked before any MAC is computed, so a flood of
//! stale requests costs no hashing. When a header lists several signatures, any may match; when
//! several secrets are configured (rotation), any may have signed. Hex is accepted in either
//! case; base64 with or without padding.
//!
//! Outcomes ([`Failure`], the `reason` of the `401` and of
//! `sluice_signature_failures_total{trigger,reason}`): a required header absent →
//! `missing_signature`; a header present but malformed, or no signature matching →
//! `bad_signature`; a timestamp outside the window → `timestamp_out_of_window`.
//!
//! Slack's Events API set-up sends a signed `url_verification` request and expects its
//! `challenge` echoed: [`slack_challenge`] recognises it (after verification), and the worker
//! answers `200 {"challenge":"…"}` and stores nothing.
//!
//! Time is a parameter (`now_unix_secs`): the decision is a pure function, so tests pin it; the
//! worker passes the wall clock read once per request.
#![forbid(unsafe_code)]

use std::time::Duration;

use base64::Engine;

use super::secrets::Secret;
use crate::net::http::RequestHead;
pub use crate::sign::{ct_eq, Algorithm};
use crate::sign::{hmac as compute, standard_webhooks, B64, MAC_BUF};

/// Default timestamp tolerance of `stripe`, `slack` and `standard-webhooks`.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// Signatures longer than this (in characters) are refused without decoding.
const MAX_SIGNATURE_CHARS: usize = 256;
/// Signatures read from one header; more are ignored.
const MAX_CANDIDATES: usize = 8;

/// Why a request was refused (`401`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum Failure {
    MissingSignature,
    BadSignature,
    TimestampOutOfWindow,
}

impl Failure {
    /// Every reason, in rendering order (`ALL[r as usize] == r`).
    pub const ALL: [Failure; 3] = [
        Failure::MissingSignature,
        Failure::BadSignature,
        Failure::TimestampOutOfWindow,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub const fn as_str(self) -> &'static str {
        match self {
            Failure::MissingSignature => "missing_signature",
            Failure::BadSignature => "bad_signature",
            Failure::TimestampOutOfWindow => "timestamp_out_of_window",
        }
    }
}

/// `401` body: `{"status":"refused","reason":"…"}`.
pub fn unauthorized_body(reason: &str) -> String {
    format!("{{\"status\":\"refused\",\"reason\":\"{reason}\"}}")
}

/// Signature encoding of the generic `hmac` scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Hex,
    Base64,
}

impl std::str::FromStr for Encoding {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "hex" => Ok(Encoding::Hex),
            "base64" => Ok(Encoding::Base64),
            _ => Err(format!("encoding must be \"hex\" or \"base64\", got {s:?}")),
        }
    }
}

/// The generic `hmac` scheme: `<header>: <prefix><encoded MAC of the body>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HmacScheme {
    /// Lower-cased header name.
    pub header: String,
    pub prefix: String,
    pub algorithm: Algorithm,
    pub encoding: Encoding,
}

/// A verification scheme (manifest `verify = "…"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scheme {
    Github,
    Stripe,
    Slack,
    StandardWebhooks,
    Hmac(HmacScheme),
}

impl Scheme {
    /// Does the scheme carry a timestamp (and so take a `tolerance`)?
    pub fn has_timestamp(&self) -> bool {
        matches!(
            self,
            Scheme::Stripe | Scheme::Slack | Scheme::StandardWebhooks
        )
    }

    pub fn name(&self) -> &'static str {
        match self {
            Scheme::Github => "github",
            Scheme::Stripe => "stripe",
            Scheme::Slack => "slack",
            Scheme::StandardWebhooks => "standard-webhooks",
            Scheme::Hmac(_) => "hmac",
        }
    }
}

/// Request headers as the verifier reads them: the first value of a (lower-case) name.
pub trait Headers {
    fn get(&self, name: &str) -> Option<&[u8]>;
}

impl Headers for RequestHead {
    fn get(&self, name: &str) -> Option<&[u8]> {
        self.header(name)
    }
}

impl Headers for [(&str, &[u8])] {
    fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
}

/// One trigger's verifier: scheme, keys (several during rotation) and tolerance. Immutable.
/// (`PartialEq` compares configs; it is not used on the request path.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    scheme: Scheme,
    /// MAC keys: the secrets as read, or for `standard-webhooks` their decoded `whsec_` part
    /// (or the secret as read when the manifest marks it `encoding = "raw"`).
    keys: Vec<Secret>,
    tolerance_secs: u64,
}

impl Verifier {
    /// Builds a verifier. `standard-webhooks` secrets must be `whsec_<base64>`; the error says
    /// which secret (by position) is not, never its value.
    pub fn new(
        scheme: Scheme,
        secrets: &[Secret],
        tolerance: Duration,
    ) -> Result<Verifier, String> {
        let keys = match scheme {
            Scheme::StandardWebhooks => secrets
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    decode_standard_webhooks_secret(s.expose())
                        .ok_or_else(|| format!("secret #{} is not whsec_<base64>", i + 1))
                })
                .collect::<Result<Vec<_>, _>>()?,
            _ => secrets.to_vec(),
        };
        Verifier::from_keys(scheme, keys, tolerance)
    }

    /// Builds a verifier from MAC keys as they are (for `standard-webhooks`, already decoded or
    /// given raw: the caller decides, see `config::auth`).
    pub fn from_keys(
        scheme: Scheme,
        keys: Vec<Secret>,
        tolerance: Duration,
    ) -> Result<Verifier, String> {
        if keys.is_empty() {
            return Err("at least one secret is required".into());
        }
        Ok(Verifier {
            scheme,
            keys,
            tolerance_secs: tolerance.as_secs(),
        })
    }

    /// How far a signed timestamp may be from the clock (timestamped schemes).
    pub fn tolerance(&self) -> Duration {
        Duration::from_secs(self.tolerance_secs)
    }

    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    /// Checks a request. `body` is the raw body; `now_unix_secs` the wall clock.
    pub fn verify<H: Headers + ?Sized>(
        &self,
        headers: &H,
        body: &[u8],
        now_unix_secs: u64,
    ) -> Result<(), Failure> {
        match &self.scheme {
            Scheme::Github => {
                let v = headers
                    .get("x-hub-signature-256")
                    .ok_or(Failure::MissingSignature)?;
                let sig = v.strip_prefix(b"sha256=").ok_or(Failure::BadSignature)?;
                self.check(Algorithm::Sha256, &[body], &[sig], Encoding::Hex)
            }
            Scheme::Stripe => {
                let v = headers
                    .get("stripe-signature")
                    .ok_or(Failure::MissingSignature)?;
                let (t, sigs) = parse_stripe(v).ok_or(Failure::BadSignature)?;
                self.window(t, now_unix_secs)?;
                self.check(Algorithm::Sha256, &[t, b".", body], &sigs, Encoding::Hex)
            }
            Scheme::Slack => {
                let sig = headers
                    .get("x-slack-signature")
                    .ok_or(Failure::MissingSignature)?;
                let ts = headers
                    .get("x-slack-request-timestamp")
                    .ok_or(Failure::MissingSignature)?;
                self.window(ts, now_unix_secs)?;
                let sig = sig.strip_prefix(b"v0=").ok_or(Failure::BadSignature)?;
                let parts: [&[u8]; 4] = [b"v0:", ts, b":", body];
                self.check(Algorithm::Sha256, &parts, &[sig], Encoding::Hex)
            }
            Scheme::StandardWebhooks => {
                // The standard's header names, else Svix's (same scheme); never mixed.
                let (id, ts, sig) = standard_webhooks::HEADER_SETS
                    .iter()
                    .find(|(_, _, sig)| headers.get(sig).is_some())
                    .map(|(id, ts, sig)| (headers.get(id), headers.get(ts), headers.get(sig)))
                    .ok_or(Failure::MissingSignature)?;
                let (Some(id), Some(ts), Some(sig)) = (id, ts, sig) else {
                    return Err(Failure::MissingSignature);
                };
                self.window(ts, now_unix_secs)?;
                let keys: Vec<&[u8]> = self.keys.iter().map(Secret::expose).collect();
                standard_webhooks::verify(&keys, id, ts, body, sig)
                    .map_err(|_| Failure::BadSignature)
            }
            Scheme::Hmac(h) => {
                let v = headers.get(&h.header).ok_or(Failure::MissingSignature)?;
                let sig = v
                    .strip_prefix(h.prefix.as_bytes())
                    .ok_or(Failure::BadSignature)?;
                self.check(h.algorithm, &[body], &[sig], h.encoding)
            }
        }
    }

    /// `|now − ts| ≤ tolerance`, `ts` being decimal Unix seconds.
    fn window(&self, ts: &[u8], now: u64) -> Result<(), Failure> {
        let ts = parse_u64(ts).ok_or(Failure::BadSignature)?;
        if ts.abs_diff(now) > self.tolerance_secs {
            return Err(Failure::TimestampOutOfWindow);
        }
        Ok(())
    }

    /// Does any candidate equal the MAC of `parts` under any key?
    fn check(
        &self,
        alg: Algorithm,
        parts: &[&[u8]],
        candidates: &[&[u8]],
        encoding: Encoding,
    ) -> Result<(), Failure> {
        let mut decoded: Vec<([u8; MAC_BUF], usize)> = Vec::with_capacity(candidates.len());
        for c in candidates.iter().take(MAX_CANDIDATES) {
            let mut buf = [0u8; MAC_BUF];
            if let Some(n) = decode_signature(c, encoding, &mut buf) {
                decoded.push((buf, n));
            }
        }
        if decoded.is_empty() {
            return Err(Failure::BadSignature);
        }
        for key in &self.keys {
            let mut mac = [0u8; MAC_BUF];
            let n = compute(alg, key.expose(), parts, &mut mac);
            // Every candidate is compared (no early exit inside a key's comparisons).
            let mut ok = false;
            for (sig, len) in &decoded {
                ok |= ct_eq(&mac[..n], &sig[..*len]);
            }
            if ok {
                return Ok(());
            }
        }
        Err(Failure::BadSignature)
    }
}

/// `t=<ts>,v1=<sig>,…` → the timestamp text and up to [`MAX_CANDIDATES`] `v1` values.
fn parse_stripe(v: &[u8]) -> Option<(&[u8], Vec<&[u8]>)> {
    let mut t = None;
    let mut sigs = Vec::new();
    for item in v.split(|&b| b == b',') {
        let item = item.trim_ascii();
        let Some(eq) = item.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (k, val) = (&item[..eq], &item[eq + 1..]);
        match k {
            b"t" => t = Some(val),
            b"v1" if sigs.len() < MAX_CANDIDATES => sigs.push(val),
            _ => {}
        }
    }
    Some((t?, sigs)).filter(|(_, sigs)| !sigs.is_empty())
}

fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 19 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// Decodes a signature into `out`; `None` if malformed or too long.
fn decode_signature(sig: &[u8], encoding: Encoding, out: &mut [u8; MAC_BUF]) -> Option<usize> {
    let sig = sig.trim_ascii();
    if sig.is_empty() || sig.len() > MAX_SIGNATURE_CHARS {
        return None;
    }
    match encoding {
        Encoding::Hex => {
            if sig.len() % 2 != 0 || sig.len() / 2 > MAC_BUF {
                return None;
            }
            for (i, pair) in sig.chunks_exact(2).enumerate() {
                out[i] = (hex_digit(pair[0])? << 4) | hex_digit(pair[1])?;
            }
            Some(sig.len() / 2)
        }
        Encoding::Base64 => B64.decode_slice(sig, &mut out[..]).ok(),
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// The key of a Standard Webhooks secret: the base64 after the `whsec_` prefix.
pub fn decode_standard_webhooks_secret(secret: &[u8]) -> Option<Secret> {
    standard_webhooks::decode_secret(secret).map(Secret::new)
}

/// Longest Slack `challenge` echoed (Slack's are ~50 characters).
const MAX_CHALLENGE_CHARS: usize = 256;

/// The answer to a Slack `url_verification` request: `Some({"challenge":"…"})` when `body` is a
/// JSON object with `"type":"url_verification"` and a string `challenge` (≤ 256 characters);
/// `None` for anything else (an ordinary event). Call only after the request verified.
pub fn slack_challenge(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Handshake<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        challenge: Option<std::borrow::Cow<'a, str>>,
    }
    // Cheap pre-check: ordinary events are not parsed twice.
    if !body.windows(16).any(|w| w == b"url_verification") {
        return None;
    }
    let h: Handshake = serde_json::from_slice(body).ok()?;
    let challenge = h.challenge.filter(|c| c.len() <= MAX_CHALLENGE_CHARS)?;
    (h.kind == "url_verification")
        .then(|| serde_json::json!({ "challenge": challenge }).to_string())
}

/// `Authorization: Bearer <token>` against the expected token, in constant time.
pub fn bearer_matches(expected: &Secret, authorization: Option<&[u8]>) -> bool {
    let Some(value) = authorization else {
        return false;
    };
    let value = value.trim_ascii();
    let token = match value.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => value[7..].trim_ascii(),
        _ => return false,
    };
    ct_eq(token, expected.expose())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sign::standard_webhooks::sign as sign_standard_webhooks;
    use base64::engine::general_purpose::STANDARD;
    use hmac::{Hmac, Mac};

    const NOW: u64 = 1_700_000_000;
    const BODY: &[u8] = br#"{"id":"evt_1","action":"opened"}"#;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// Independent HMAC through the `hmac` crate directly.
    fn mac256(key: &[u8], msg: &[u8]) -> Vec<u8> {
        let mut m = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
        m.update(msg);
        m.finalize().into_bytes().to_vec()
    }

    fn verifier(scheme: Scheme, secrets: &[&[u8]]) -> Verifier {
        let s: Vec<Secret> = secrets.iter().map(|s| Secret::new(s.to_vec())).collect();
        Verifier::new(scheme, &s, DEFAULT_TOLERANCE).unwrap()
    }

    fn run(v: &Verifier, h: &[(&str, &str)], body: &[u8]) -> Result<(), Failure> {
        let hs: Vec<(&str, &[u8])> = h.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
        v.verify(hs.as_slice(), body, NOW)
    }

    #[test]
    fn ct_eq_compares_contents_and_lengths() {
        assert!(ct_eq(b"", b""));
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"xbc"));
        assert!(!ct_eq(b"abc", b"abcd"));
        assert!(!ct_eq(b"abc", b""));
    }

    #[test]
    fn github() {
        let v = verifier(Scheme::Github, &[b"old", b"new"]);
        let good = format!("sha256={}", hex(&mac256(b"new", BODY)));
        let h = "x-hub-signature-256";
        assert_eq!(run(&v, &[(h, &good)], BODY), Ok(()));
        // Upper-case hex is the same signature; the first (rotated-out) secret also works.
        let upper = format!("sha256={}", hex(&mac256(b"old", BODY)).to_uppercase());
        assert_eq!(run(&v, &[(h, &upper)], BODY), Ok(()));
        let wrong = format!("sha256={}", hex(&mac256(b"other", BODY)));
        assert_eq!(run(&v, &[(h, &wrong)], BODY), Err(Failure::BadSignature));
        assert_eq!(
            run(&v, &[(h, &good)], b"tampered"),
            Err(Failure::BadSignature)
        );
        assert_eq!(run(&v, &[], BODY), Err(Failure::MissingSignature));
        let no_prefix = hex(&mac256(b"new", BODY));
        assert_eq!(
            run(&v, &[(h, &no_prefix)], BODY),
            Err(Failure::BadSignature)
        );
        assert_eq!(
            run(&v, &[(h, "sha256=zz")], BODY),
            Err(Failure::BadSignature)
        );
    }

    fn stripe_header(secret: &[u8], t: u64, body: &[u8]) -> String {
        let msg = [t.to_string().as_bytes(), b".", body].concat();
        format!("t={t},v1={},v0=ignored", hex(&mac256(secret, &msg)))
    }

    #[test]
    fn stripe() {
        let v = verifier(Scheme::Stripe, &[b"whsk_a", b"whsk_b"]);
        let h = "stripe-signature";
        let ok = |s: &str| run(&v, &[(h, s)], BODY);
        assert_eq!(ok(&stripe_header(b"whsk_a", NOW, BODY)), Ok(()));
        assert_eq!(ok(&stripe_header(b"whsk_b", NOW - 299, BODY)), Ok(()));
        assert_eq!(
            ok(&stripe_header(b"wrong", NOW, BODY)),
            Err(Failure::BadSignature)
        );
        assert_eq!(
            run(&v, &[(h, &stripe_header(b"whsk_a", NOW, BODY))], b"x"),
            Err(Failure::BadSignature)
        );
        assert_eq!(
            ok(&stripe_header(b"whsk_a", NOW - 301, BODY)),
            Err(Failure::TimestampOutOfWindow)
        );
        assert_eq!(
            ok(&stripe_header(b"whsk_a", NOW + 301, BODY)),
            Err(Failure::TimestampOutOfWindow)
        );
        assert_eq!(run(&v, &[], BODY), Err(Failure::MissingSignature));
        // Any of several v1 values may match.
        let msg = [NOW.to_string().as_bytes(), b".", BODY].concat();
        let two = format!(
            "t={NOW}, v1={}, v1={}",
            hex(&mac256(b"nope", &msg)),
            hex(&mac256(b"whsk_b", &msg))
        );
        assert_eq!(ok(&two), Ok(()));
        assert_eq!(ok(&format!("t={NOW}")), Err(Failure::BadSignature));
        assert_eq!(ok("v1=abcd"), Err(Failure::BadSignature));
        assert_eq!(ok("t=soon,v1=abcd"), Err(Failure::BadSignature));
    }

    fn slack_headers(secret: &[u8], ts: u64, body: &[u8]) -> (String, String) {
        let msg = [format!("v0:{ts}:").as_bytes(), body].concat();
        (format!("v0={}", hex(&mac256(secret, &msg))), ts.to_string())
    }

    #[test]
    fn slack() {
        let v = verifier(Scheme::Slack, &[b"one", b"two"]);
        let call = |secret: &[u8], ts: u64, body: &[u8]| {
            let (sig, ts) = slack_headers(secret, ts, BODY);
            run(
                &v,
                &[
                    ("x-slack-signature", &sig),
                    ("x-slack-request-timestamp", &ts),
                ],
                body,
            )
        };
        assert_eq!(call(b"one", NOW, BODY), Ok(()));
        assert_eq!(call(b"two", NOW + 300, BODY), Ok(()));
        assert_eq!(call(b"three", NOW, BODY), Err(Failure::BadSignature));
        assert_eq!(call(b"one", NOW, b"tampered"), Err(Failure::BadSignature));
        assert_eq!(
            call(b"one", NOW - 3600, BODY),
            Err(Failure::TimestampOutOfWindow)
        );
        assert_eq!(
            call(b"one", NOW + 3600, BODY),
            Err(Failure::TimestampOutOfWindow)
        );
        let (sig, _) = slack_headers(b"one", NOW, BODY);
        assert_eq!(
            run(&v, &[("x-slack-signature", &sig)], BODY),
            Err(Failure::MissingSignature)
        );
        assert_eq!(run(&v, &[], BODY), Err(Failure::MissingSignature));
    }

    fn sw_headers(key: &[u8], id: &str, ts: u64, body: &[u8]) -> String {
        let msg = [format!("{id}.{ts}.").as_bytes(), body].concat();
        format!("v1,{}", STANDARD.encode(mac256(key, &msg)))
    }

    #[test]
    fn standard_webhooks() {
        let k1 = b"key-number-one-0123456789abcdef";
        let k2 = b"key-number-two-0123456789abcdef";
        let s1 = format!("whsec_{}", STANDARD.encode(k1));
        let s2 = format!("whsec_{}", STANDARD.encode(k2).trim_end_matches('='));
        let v = verifier(Scheme::StandardWebhooks, &[s1.as_bytes(), s2.as_bytes()]);
        let call = |sig: &str, ts: u64, body: &[u8]| {
            let ts = ts.to_string();
            run(
                &v,
                &[
                    ("webhook-id", "msg_1"),
                    ("webhook-timestamp", &ts),
                    ("webhook-signature", sig),
                ],
                body,
            )
        };
        assert_eq!(call(&sw_headers(k1, "msg_1", NOW, BODY), NOW, BODY), Ok(()));
        assert_eq!(call(&sw_headers(k2, "msg_1", NOW, BODY), NOW, BODY), Ok(()));
        let both = format!("v1,AAAA {} v2,xyz", sw_headers(k2, "msg_1", NOW, BODY));
        assert_eq!(call(&both, NOW, BODY), Ok(()));
        assert_eq!(
            call(&sw_headers(b"wrong", "msg_1", NOW, BODY), NOW, BODY),
            Err(Failure::BadSignature)
        );
        // The id is signed.
        assert_eq!(
            call(&sw_headers(k1, "msg_2", NOW, BODY), NOW, BODY),
            Err(Failure::BadSignature)
        );
        assert_eq!(
            call(&sw_headers(k1, "msg_1", NOW, BODY), NOW, b"tampered"),
            Err(Failure::BadSignature)
        );
        for ts in [NOW - 301, NOW + 301] {
            assert_eq!(
                call(&sw_headers(k1, "msg_1", ts, BODY), ts, BODY),
                Err(Failure::TimestampOutOfWindow)
            );
        }
        assert_eq!(
            run(&v, &[("webhook-id", "msg_1")], BODY),
            Err(Failure::MissingSignature)
        );
        assert!(Verifier::new(
            Scheme::StandardWebhooks,
            &[Secret::new(b"whsec_!!!".to_vec())],
            DEFAULT_TOLERANCE
        )
        .unwrap_err()
        .contains("secret #1"));
    }

    #[test]
    fn outbound_signature_verifies_independently_and_with_the_verifier() {
        let key = b"0123456789abcdef0123456789abcdef";
        let sig = sign_standard_webhooks(key, "01HZX", NOW, BODY);
        // Independent: hmac crate directly over "id.ts.body", standard base64.
        let expected = format!(
            "v1,{}",
            STANDARD.encode(mac256(
                key,
                format!("01HZX.{NOW}.")
                    .as_bytes()
                    .iter()
                    .chain(BODY)
                    .copied()
                    .collect::<Vec<_>>()
                    .as_slice()
            ))
        );
        assert_eq!(sig, expected);
        let secret = format!("whsec_{}", STANDARD.encode(key));
        let v = verifier(Scheme::StandardWebhooks, &[secret.as_bytes()]);
        let ts = NOW.to_string();
        let h: [(&str, &[u8]); 3] = [
            ("webhook-id", b"01HZX"),
            ("webhook-timestamp", ts.as_bytes()),
            ("webhook-signature", sig.as_bytes()),
        ];
        assert_eq!(v.verify(&h[..], BODY, NOW), Ok(()));
    }

    #[test]
    fn standard_webhooks_accepts_the_svix_header_names() {
        let key = b"svix-key-0123456789abcdef012345";
        let secret = format!("whsec_{}", STANDARD.encode(key));
        let v = verifier(Scheme::StandardWebhooks, &[secret.as_bytes()]);
        let ts = NOW.to_string();
        let sig = sw_headers(key, "msg_svix", NOW, BODY);
        let svix = [
            ("svix-id", "msg_svix"),
            ("svix-timestamp", ts.as_str()),
            ("svix-signature", sig.as_str()),
        ];
        assert_eq!(run(&v, &svix, BODY), Ok(()));
        assert_eq!(run(&v, &svix, b"tampered"), Err(Failure::BadSignature));
        // The families are not mixed: a webhook-signature with svix-id only is incomplete.
        let mixed = [
            ("svix-id", "msg_svix"),
            ("webhook-timestamp", ts.as_str()),
            ("webhook-signature", sig.as_str()),
        ];
        assert_eq!(run(&v, &mixed, BODY), Err(Failure::MissingSignature));
        let stale = (NOW - 301).to_string();
        let sig = sw_headers(key, "msg_svix", NOW - 301, BODY);
        let old = [
            ("svix-id", "msg_svix"),
            ("svix-timestamp", stale.as_str()),
            ("svix-signature", sig.as_str()),
        ];
        assert_eq!(run(&v, &old, BODY), Err(Failure::TimestampOutOfWindow));
    }

    #[test]
    fn slack_url_verification_is_recognised() {
        let body = br#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
        let answer = slack_challenge(body).unwrap();
        let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})
        );
        // Escapes survive the round trip.
        let tricky = br#"{"type":"url_verification","challenge":"a\"b\\c"}"#;
        let v: serde_json::Value = serde_json::from_str(&slack_challenge(tricky).unwrap()).unwrap();
        assert_eq!(v["challenge"], "a\"b\\c");
        for other in [
            &br#"{"type":"event_callback","event":{"text":"url_verification"}}"#[..],
            br#"{"type":"url_verification"}"#,
            br#"{"type":"url_verification","challenge":5}"#,
            b"url_verification",
            b"",
        ] {
            assert_eq!(
                slack_challenge(other),
                None,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
        let long = format!(
            r#"{{"type":"url_verification","challenge":"{}"}}"#,
            "x".repeat(257)
        );
        assert_eq!(slack_challenge(long.as_bytes()), None);
    }

    #[test]
    fn generic_hmac() {
        use sha2::Sha512;
        let scheme = |algorithm, encoding, prefix: &str| {
            Scheme::Hmac(HmacScheme {
                header: "x-signature".into(),
                prefix: prefix.into(),
                algorithm,
                encoding,
            })
        };
        let v = verifier(
            scheme(Algorithm::Sha256, Encoding::Hex, "sha256="),
            &[b"k1", b"k2"],
        );
        let good = format!("sha256={}", hex(&mac256(b"k2", BODY)));
        assert_eq!(run(&v, &[("x-signature", &good)], BODY), Ok(()));
        assert_eq!(
            run(&v, &[("x-signature", &good)], b"t"),
            Err(Failure::BadSignature)
        );
        assert_eq!(run(&v, &[], BODY), Err(Failure::MissingSignature));

        let mut m = Hmac::<sha1::Sha1>::new_from_slice(b"k1").unwrap();
        m.update(BODY);
        let sha1 = STANDARD.encode(m.finalize().into_bytes());
        let v = verifier(scheme(Algorithm::Sha1, Encoding::Base64, ""), &[b"k1"]);
        assert_eq!(run(&v, &[("x-signature", &sha1)], BODY), Ok(()));
        let v256 = verifier(scheme(Algorithm::Sha256, Encoding::Base64, ""), &[b"k1"]);
        assert_eq!(
            run(&v256, &[("x-signature", &sha1)], BODY),
            Err(Failure::BadSignature)
        );

        let mut m = Hmac::<Sha512>::new_from_slice(b"k1").unwrap();
        m.update(BODY);
        let tag = m.finalize().into_bytes();
        let v = verifier(scheme(Algorithm::Sha512, Encoding::Base64, "x:"), &[b"k1"]);
        let sig = format!("x:{}", STANDARD.encode(tag));
        assert_eq!(run(&v, &[("x-signature", &sig)], BODY), Ok(()));
        let v = verifier(scheme(Algorithm::Sha512, Encoding::Hex, ""), &[b"k1"]);
        assert_eq!(run(&v, &[("x-signature", &hex(&tag))], BODY), Ok(()));
    }

    #[test]
    fn bearer() {
        let t = Secret::new(b"tok".to_vec());
        assert!(bearer_matches(&t, Some(b"Bearer tok")));
        assert!(bearer_matches(&t, Some(b"bearer  tok ")));
        assert!(!bearer_matches(&t, Some(b"Bearer tok2")));
        assert!(!bearer_matches(&t, Some(b"Basic tok")));
        assert!(!bearer_matches(&t, Some(b"tok")));
        assert!(!bearer_matches(&t, None));
    }

    #[test]
    fn bodies() {
        assert_eq!(
            unauthorized_body(Failure::TimestampOutOfWindow.as_str()),
            r#"{"status":"refused","reason":"timestamp_out_of_window"}"#
        );
        for (i, r) in Failure::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
    }
}
