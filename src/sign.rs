//! HMAC signing primitives and the Standard Webhooks scheme, in one leaf module.
//!
//! Both directions use this module and nothing else for their cryptography: inbound
//! verification (`ingest::verify`) and outbound signing of deliveries
//! (`dispatch::deliver::request`), so the two cannot drift apart (a signature sluice sends
//! verifies with sluice's own verifier, and both match the official `standardwebhooks` and `svix`
//! libraries). It depends on no other module of the crate.
//!
//! [Standard Webhooks](https://www.standardwebhooks.com/) (`standard_webhooks`): the secret is
//! `whsec_<base64>`; the MAC key is the decoded base64 (a value without the prefix is not
//! decoded: `config::auth` takes such a key only when the manifest marks it raw). The signed
//! bytes are `<msg-id>.<timestamp>.<body>`; the signature header lists space-separated
//! `v1,<base64 HMAC-SHA256>` values, any of which may match. Svix's libraries send the same
//! scheme under the header names `svix-id`, `svix-timestamp`, `svix-signature`.
#![forbid(unsafe_code)]

use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use hmac::{Hmac, Mac};

/// Secret bytes: a verification secret or a signing key. `Debug` is redacted
/// (`Secret(<redacted, N bytes>)`, so a config dump or a panic message cannot leak it); there is
/// no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Secret {
        Secret(bytes.into())
    }

    /// The key material (for MAC computation and constant-time comparison only).
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(<redacted, {} bytes>)", self.0.len())
    }
}

/// Standard base64 alphabet, padding optional on input; padded on output.
pub const B64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Room for a MAC (SHA-512 is 64 bytes; base64 decoding into it wants slack).
pub const MAC_BUF: usize = 96;

/// MAC algorithm (of the generic `hmac` verification scheme; Standard Webhooks is SHA-256).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Sha1,
    Sha256,
    Sha512,
}

impl std::str::FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sha1" => Ok(Algorithm::Sha1),
            "sha256" => Ok(Algorithm::Sha256),
            "sha512" => Ok(Algorithm::Sha512),
            _ => Err(format!(
                "algorithm must be \"sha256\", \"sha1\" or \"sha512\", got {s:?}"
            )),
        }
    }
}

/// HMAC of the concatenation of `parts` into `out`; returns the MAC length.
pub fn hmac(alg: Algorithm, key: &[u8], parts: &[&[u8]], out: &mut [u8; MAC_BUF]) -> usize {
    fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]], out: &mut [u8]) -> usize {
        // HMAC accepts keys of any length, so this cannot fail.
        let mut m = <M as hmac::digest::KeyInit>::new_from_slice(key)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        for p in parts {
            m.update(p);
        }
        let tag = m.finalize().into_bytes();
        out[..tag.len()].copy_from_slice(&tag);
        tag.len()
    }
    match alg {
        Algorithm::Sha1 => run::<Hmac<sha1::Sha1>>(key, parts, out),
        Algorithm::Sha256 => run::<Hmac<sha2::Sha256>>(key, parts, out),
        Algorithm::Sha512 => run::<Hmac<sha2::Sha512>>(key, parts, out),
    }
}

/// Constant-time equality: the time depends on the lengths only (MAC lengths are public), not
/// on where the contents differ.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    // Keep the optimiser from turning the fold into an early-exit comparison.
    std::hint::black_box(diff) == 0
}

/// The Standard Webhooks scheme (module docs).
pub mod standard_webhooks {
    use super::{ct_eq, hmac, Algorithm, Engine, B64, MAC_BUF};

    /// Header names of the scheme: the standard's, then Svix's (same scheme, other names).
    /// Each entry is `(id, timestamp, signature)`.
    pub const HEADER_SETS: [(&str, &str, &str); 2] = [
        ("webhook-id", "webhook-timestamp", "webhook-signature"),
        ("svix-id", "svix-timestamp", "svix-signature"),
    ];

    /// Signatures read from one header; more are ignored.
    pub const MAX_CANDIDATES: usize = 8;
    /// Candidates longer than this (characters) are skipped without decoding.
    const MAX_SIGNATURE_CHARS: usize = 256;

    /// The MAC key of a secret: the base64 after the `whsec_` prefix; `None` without the
    /// prefix (never a silent decode of a value that may be a raw key), if it is not base64, or
    /// if it decodes to nothing.
    pub fn decode_secret(secret: &[u8]) -> Option<Vec<u8>> {
        let b64 = secret.strip_prefix(b"whsec_")?;
        let key = B64.decode(b64).ok()?;
        (!key.is_empty()).then_some(key)
    }

    /// The raw HMAC-SHA256 over `<id>.<ts>.<body>` (`ts` as sent: its text is what is signed).
    fn mac(key: &[u8], id: &[u8], ts: &[u8], body: &[u8], out: &mut [u8; MAC_BUF]) -> usize {
        let parts: [&[u8]; 5] = [id, b".", ts, b".", body];
        hmac(Algorithm::Sha256, key, &parts, out)
    }

    /// The signature header value (`v1,<base64>`) of an outbound message.
    pub fn sign(key: &[u8], id: &str, ts: u64, body: &[u8]) -> String {
        let ts = ts.to_string();
        let mut out = [0u8; MAC_BUF];
        let n = mac(key, id.as_bytes(), ts.as_bytes(), body, &mut out);
        format!("v1,{}", B64.encode(&out[..n]))
    }

    /// Why a signature header did not verify.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Mismatch {
        /// No `v1,<base64>` candidate could be decoded.
        Malformed,
        /// Candidates decoded, none matches under any key.
        NoMatch,
    }

    /// Checks the signature header `sig` (space-separated `v1,<base64>`, at most
    /// [`MAX_CANDIDATES`] read) against every key. Every decoded candidate is compared in
    /// constant time (no early exit inside one key's comparisons).
    pub fn verify<K: AsRef<[u8]>>(
        keys: &[K],
        id: &[u8],
        ts: &[u8],
        body: &[u8],
        sig: &[u8],
    ) -> Result<(), Mismatch> {
        let mut decoded: Vec<([u8; MAC_BUF], usize)> = Vec::with_capacity(2);
        for c in sig
            .split(|&b| b == b' ')
            .filter_map(|s| s.strip_prefix(b"v1,"))
            .take(MAX_CANDIDATES)
        {
            let c = c.trim_ascii();
            if c.is_empty() || c.len() > MAX_SIGNATURE_CHARS {
                continue;
            }
            let mut buf = [0u8; MAC_BUF];
            if let Ok(n) = B64.decode_slice(c, &mut buf[..]) {
                decoded.push((buf, n));
            }
        }
        if decoded.is_empty() {
            return Err(Mismatch::Malformed);
        }
        for key in keys {
            let mut expected = [0u8; MAC_BUF];
            let n = mac(key.as_ref(), id, ts, body, &mut expected);
            let mut ok = false;
            for (cand, len) in &decoded {
                ok |= ct_eq(&expected[..n], &cand[..*len]);
            }
            if ok {
                return Ok(());
            }
        }
        Err(Mismatch::NoMatch)
    }
}

#[cfg(test)]
mod tests {
    use super::standard_webhooks::{decode_secret, sign, verify, Mismatch};
    use super::*;
    use base64::engine::general_purpose::STANDARD;

    /// Independent HMAC through the `hmac` crate directly.
    fn mac256(key: &[u8], msg: &[u8]) -> Vec<u8> {
        let mut m = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
        m.update(msg);
        m.finalize().into_bytes().to_vec()
    }

    #[test]
    fn sign_matches_an_independent_hmac_and_verifies() {
        let key = b"0123456789abcdef0123456789abcdef";
        let body = br#"{"a":1}"#;
        let sig = sign(key, "msg_1", 1_700_000_000, body);
        let expected = format!(
            "v1,{}",
            STANDARD.encode(mac256(key, b"msg_1.1700000000.{\"a\":1}"))
        );
        assert_eq!(sig, expected);
        let keys = [key.to_vec()];
        assert_eq!(
            verify(&keys, b"msg_1", b"1700000000", body, sig.as_bytes()),
            Ok(())
        );
        assert_eq!(
            verify(&keys, b"msg_2", b"1700000000", body, sig.as_bytes()),
            Err(Mismatch::NoMatch)
        );
        assert_eq!(
            verify(&keys, b"msg_1", b"1700000000", body, b"v2,abc"),
            Err(Mismatch::Malformed)
        );
        // Any candidate may match; a second key (rotation) may have signed.
        let two = format!("v1,AAAA {sig}");
        let keys = [b"other".to_vec(), key.to_vec()];
        assert_eq!(
            verify(&keys, b"msg_1", b"1700000000", body, two.as_bytes()),
            Ok(())
        );
    }

    #[test]
    fn secrets_decode_with_the_prefix_with_or_without_padding() {
        let key = b"abcd";
        assert_eq!(decode_secret(b"whsec_YWJjZA==").as_deref(), Some(&key[..]));
        assert_eq!(decode_secret(b"whsec_YWJjZA").as_deref(), Some(&key[..]));
        assert_eq!(decode_secret(b"whsec_!!!"), None);
        // Valid base64 without the prefix is not decoded.
        assert_eq!(decode_secret(b"YWJjZA=="), None);
        assert_eq!(decode_secret(b"whsec_"), None);
    }

    #[test]
    fn ct_eq_compares_contents_and_lengths() {
        assert!(ct_eq(b"", b""));
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"abcd"));
    }
}
