//! Manifest keys of the ingest edge checks: per-trigger signature verification and dedupe, and
//! the admin token. Parsed by [`super::Config::build`] into [`TriggerAuth`] (on each
//! [`super::TriggerConfig`]) and [`super::Config::admin_token`].
//!
//! ```toml
//! [[triggers]]
//! id = "gh"
//! provider = "github"
//! path = "/hooks/github"
//! verify = "github"            # github | stripe | slack | standard-webhooks | hmac
//! secrets = [ { env = "GITHUB_SECRET" }, { file = "/run/secrets/gh_next" } ]   # 1..=8, any may sign
//!                              # standard-webhooks: each secret is `whsec_<base64>` (the key is
//!                              # the decoded base64), or marked raw, used as the key as read:
//!                              # { env = "NAME", encoding = "raw" }. Nothing else is accepted.
//! tolerance = "300s"           # stripe, slack, standard-webhooks only. Default 300s. Range 1s..=24h
//! hmac = { header = "x-signature", prefix = "sha256=", algorithm = "sha256", encoding = "hex" }
//!                              # verify = "hmac" only (required there). Defaults: prefix "",
//!                              # algorithm sha256 (sha1, sha512), encoding hex (base64)
//! dedupe = true                # or { window = "24h" }. Default window 24h. Range 1s..=365d
//! ```
//!
//! Secrets are read at startup (see `crate::ingest::secrets`); a missing one fails startup naming
//! the variable or file. `SLUICE_ADMIN_TOKEN` (environment only), when set, turns on the
//! `/admin/` routes behind `Authorization: Bearer <token>`; set but empty is an error.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{parse_duration, ConfigError};
use crate::ingest::dedupe::{DedupeRule, KeySource, DEFAULT_WINDOW};
use crate::ingest::secrets::{Secret, SecretSource};
use crate::ingest::verify::{HmacScheme, Scheme, Verifier, DEFAULT_TOLERANCE};

/// Environment variable holding the admin bearer token.
pub const ENV_ADMIN_TOKEN: &str = "SLUICE_ADMIN_TOKEN";
/// Most secrets per trigger (each costs one HMAC per failed request).
pub const MAX_SECRETS: usize = 8;

/// `secrets = [ { env = "…" } | { file = "…" } ]`: exactly one of the two keys, and for a
/// Standard Webhooks key (`verify = "standard-webhooks"`, a destination's `signing_secret`)
/// optionally `encoding`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSecretRef {
    pub env: Option<String>,
    pub file: Option<PathBuf>,
    /// Standard Webhooks keys only: `"whsec"` (the value must be `whsec_<base64>`; the key is
    /// the decoded base64) or `"raw"` (the value as read is the key). Default: `"whsec"`; an
    /// unprefixed value is an error, never silently base64-decoded.
    pub encoding: Option<String>,
}

/// How a Standard Webhooks key is written in its secret (`encoding` of a secret reference).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyEncoding {
    /// `whsec_<base64>`: the key is the decoded base64.
    Whsec,
    /// The secret's bytes are the key.
    Raw,
}

/// A validated secret reference: where the secret is read from, and `encoding` as written
/// (`None`: not given). What `sluice check` prints instead of the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    pub source: SecretSource,
    pub encoding: Option<KeyEncoding>,
}

impl SecretRef {
    /// The Standard Webhooks MAC key of `secret` (read from this reference). `what` names the
    /// secret in the error, which says how to mark a key raw and never shows the value.
    pub fn signing_key(&self, secret: &Secret, what: &str) -> Result<Secret, String> {
        match self.encoding {
            Some(KeyEncoding::Raw) => Ok(secret.clone()),
            Some(KeyEncoding::Whsec) | None => {
                crate::sign::standard_webhooks::decode_secret(secret.expose())
                    .map(Secret::new)
                    .ok_or_else(|| {
                        format!(
                            "{what} ({}) must be whsec_<base64> of a non-empty key; a key used as \
                             read is marked raw: {}",
                            self.source,
                            self.with_encoding(KeyEncoding::Raw).toml()
                        )
                    })
            }
        }
    }

    fn with_encoding(&self, encoding: KeyEncoding) -> SecretRef {
        SecretRef {
            source: self.source.clone(),
            encoding: Some(encoding),
        }
    }

    /// The reference as the manifest writes it: `{ env = "NAME" }`, `{ file = "/path" }`, with
    /// `encoding = "…"` when it was given.
    pub fn toml(&self) -> String {
        let q = |s: &str| toml::Value::String(s.to_string()).to_string();
        let mut text = match &self.source {
            SecretSource::Env(name) => format!("{{ env = {}", q(name)),
            SecretSource::File(path) => format!("{{ file = {}", q(&path.to_string_lossy())),
        };
        match self.encoding {
            None => {}
            Some(KeyEncoding::Whsec) => text.push_str(", encoding = \"whsec\""),
            Some(KeyEncoding::Raw) => text.push_str(", encoding = \"raw\""),
        }
        text.push_str(" }");
        text
    }
}

/// `hmac = { header, prefix, algorithm, encoding }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHmac {
    /// Header carrying the signature. Required.
    pub header: String,
    /// Text before the encoded MAC, e.g. `sha256=`. Default: empty.
    pub prefix: Option<String>,
    /// `sha256` (default), `sha1` or `sha512`.
    pub algorithm: Option<String>,
    /// `hex` (default) or `base64`.
    pub encoding: Option<String>,
}

/// `dedupe = true | false | { window = "24h" }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawDedupe {
    Flag(bool),
    Options(RawDedupeOptions),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDedupeOptions {
    /// Default: `24h`. Range: 1s..=365d.
    pub window: Option<String>,
}

/// A trigger's validated edge checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TriggerAuth {
    pub verify: Option<Verifier>,
    pub dedupe: Option<DedupeRule>,
    /// Where `verify`'s secrets came from, in order (empty without `verify`).
    pub secrets: Vec<SecretRef>,
}

/// A trigger's auth keys as written (borrowed from its `[[triggers]]` entry).
#[derive(Debug, Clone, Copy)]
pub(super) struct RawAuth<'a> {
    pub verify: Option<&'a str>,
    pub secrets: Option<&'a [RawSecretRef]>,
    pub tolerance: Option<&'a str>,
    pub hmac: Option<&'a RawHmac>,
    pub dedupe: Option<&'a RawDedupe>,
}

/// Validates the auth keys `t` of trigger `id`, reading its secrets through `env` and the file
/// system.
pub(super) fn build_trigger_auth(
    id: &str,
    t: RawAuth<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TriggerAuth, ConfigError> {
    let fail = |msg: String| ConfigError(format!("trigger {id:?}: {msg}"));
    let scheme = verify_scheme(t).map_err(fail)?;
    let (verify, secrets) = match &scheme {
        None if t.secrets.is_some() || t.tolerance.is_some() => {
            return Err(fail("secrets and tolerance need verify = \"…\"".into()));
        }
        None => (None, Vec::new()),
        Some(scheme) => {
            let (verifier, refs) = build_verifier(t, scheme, env).map_err(fail)?;
            (Some(verifier), refs)
        }
    };
    let window = dedupe_window(t.dedupe).map_err(fail)?;
    Ok(TriggerAuth {
        dedupe: window.map(|window| DedupeRule {
            window,
            source: KeySource::for_scheme(scheme.as_ref()),
        }),
        verify,
        secrets,
    })
}

/// `verify` (with `hmac`, required by `verify = "hmac"` and refused by every other scheme).
fn verify_scheme(t: RawAuth<'_>) -> Result<Option<Scheme>, String> {
    let scheme = match t.verify {
        None => None,
        Some("github") => Some(Scheme::Github),
        Some("stripe") => Some(Scheme::Stripe),
        Some("slack") => Some(Scheme::Slack),
        Some("standard-webhooks") => Some(Scheme::StandardWebhooks),
        Some("hmac") => {
            let h = t
                .hmac
                .ok_or("verify = \"hmac\" needs hmac = { header = \"…\" }")?;
            Some(Scheme::Hmac(
                hmac_scheme(h).map_err(|e| format!("hmac: {e}"))?,
            ))
        }
        Some(other) => {
            return Err(format!(
                "verify must be \"github\", \"stripe\", \"slack\", \"standard-webhooks\" or \
                 \"hmac\", got {other:?}"
            ))
        }
    };
    if t.hmac.is_some() && !matches!(scheme, Some(Scheme::Hmac(_))) {
        return Err("hmac = {…} is only valid with verify = \"hmac\"".into());
    }
    Ok(scheme)
}

/// The verifier of `scheme`: `tolerance` checked against the scheme, the `secrets` read and
/// turned into keys; with the references they were read from (what `sluice check` prints).
fn build_verifier(
    t: RawAuth<'_>,
    scheme: &Scheme,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Verifier, Vec<SecretRef>), String> {
    let tolerance = match t.tolerance {
        None => DEFAULT_TOLERANCE,
        Some(_) if !scheme.has_timestamp() => {
            return Err(format!(
                "tolerance does not apply to verify = {:?} (no timestamp)",
                scheme.name()
            ))
        }
        Some(text) => {
            let d = parse_duration(text).map_err(|e| format!("tolerance: {e}"))?;
            if d < Duration::from_secs(1) || d > Duration::from_secs(86_400) {
                return Err(format!("tolerance {text:?} is out of range (1s..=24h)"));
            }
            d
        }
    };
    let loaded = load_secrets(t.secrets.unwrap_or(&[]), env)?;
    let keys = verify_keys(scheme, &loaded).map_err(|e| format!("secrets: {e}"))?;
    let refs = loaded.into_iter().map(|(r, _)| r).collect();
    let verifier = Verifier::from_keys(scheme.clone(), keys, tolerance)
        .map_err(|e| format!("secrets: {e}"))?;
    Ok((verifier, refs))
}

/// `dedupe = true | false | { window = "…" }`: the window, or `None` without dedupe.
fn dedupe_window(raw: Option<&RawDedupe>) -> Result<Option<Duration>, String> {
    Ok(match raw {
        None | Some(RawDedupe::Flag(false)) => None,
        Some(RawDedupe::Flag(true)) => Some(DEFAULT_WINDOW),
        Some(RawDedupe::Options(o)) => Some(match &o.window {
            None => DEFAULT_WINDOW,
            Some(text) => {
                let d = parse_duration(text).map_err(|e| format!("dedupe.window: {e}"))?;
                if d < Duration::from_secs(1) || d > Duration::from_secs(365 * 86_400) {
                    return Err(format!(
                        "dedupe.window {text:?} is out of range (1s..=365d)"
                    ));
                }
                d
            }
        }),
    })
}

/// The MAC keys of `scheme` from the secrets read: for `standard-webhooks` each decoded as its
/// reference's `encoding` says; for the other schemes the secrets as read (where `encoding`
/// means nothing and is refused).
fn verify_keys(scheme: &Scheme, loaded: &[(SecretRef, Secret)]) -> Result<Vec<Secret>, String> {
    loaded
        .iter()
        .enumerate()
        .map(|(i, (r, secret))| match scheme {
            Scheme::StandardWebhooks => r.signing_key(secret, &format!("secret #{}", i + 1)),
            _ if r.encoding.is_some() => Err(format!(
                "secret #{}: encoding applies to standard-webhooks secrets only (verify = {:?} \
                 uses the secret as read)",
                i + 1,
                scheme.name()
            )),
            _ => Ok(secret.clone()),
        })
        .collect()
}

fn hmac_scheme(h: &RawHmac) -> Result<HmacScheme, String> {
    let header = h.header.to_ascii_lowercase();
    if header.is_empty()
        || header.len() > 256
        || !header
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!("header {:?} is not a header name", h.header));
    }
    Ok(HmacScheme {
        header,
        prefix: h.prefix.clone().unwrap_or_default(),
        algorithm: h.algorithm.as_deref().unwrap_or("sha256").parse()?,
        encoding: h.encoding.as_deref().unwrap_or("hex").parse()?,
    })
}

/// Reads each referenced secret (with the validated reference it came from).
pub(super) fn load_secrets(
    refs: &[RawSecretRef],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(SecretRef, Secret)>, String> {
    if refs.is_empty() || refs.len() > MAX_SECRETS {
        return Err(format!(
            "secrets must list 1..={MAX_SECRETS} entries like {{ env = \"NAME\" }} or {{ file = \"/path\" }}"
        ));
    }
    refs.iter()
        .map(|r| {
            let source =
                match (&r.env, &r.file) {
                    (Some(name), None) if !name.is_empty() => SecretSource::Env(name.clone()),
                    (None, Some(path)) if !path.as_os_str().is_empty() => {
                        SecretSource::File(path.clone())
                    }
                    _ => return Err(
                        "each secret is exactly one of { env = \"NAME\" } or { file = \"/path\" }"
                            .to_string(),
                    ),
                };
            let encoding = match r.encoding.as_deref() {
                None => None,
                Some("whsec") => Some(KeyEncoding::Whsec),
                Some("raw") => Some(KeyEncoding::Raw),
                Some(other) => {
                    return Err(format!(
                        "secret encoding must be \"whsec\" or \"raw\", got {other:?}"
                    ))
                }
            };
            let secret = source.load(env).map_err(|e| format!("secret {e}"))?;
            Ok((SecretRef { source, encoding }, secret))
        })
        .collect()
}

/// `SLUICE_ADMIN_TOKEN`: `None` when unset (admin routes off).
pub(super) fn admin_token(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Secret>, ConfigError> {
    match env(ENV_ADMIN_TOKEN) {
        None => Ok(None),
        Some(v) if v.trim().is_empty() => Err(ConfigError(format!(
            "environment variable {ENV_ADMIN_TOKEN} is set but empty (unset it to turn the admin routes off)"
        ))),
        Some(v) => Ok(Some(Secret::new(v.trim().as_bytes().to_vec()))),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError, Overrides};
    use crate::ingest::dedupe::KeySource;
    use crate::ingest::verify::{Algorithm, Encoding, Scheme};
    use std::time::Duration;

    fn env(k: &str) -> Option<String> {
        match k {
            "GH" => Some("gh-secret".into()),
            "GH2" => Some("gh-secret-2".into()),
            "SW" => Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
            "B64" => Some("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
            _ => None,
        }
    }

    fn build(triggers: &str) -> Result<Config, ConfigError> {
        let text = format!("[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\n{triggers}");
        Config::build(Config::parse_manifest(&text)?, &env, &Overrides::default())
    }

    #[test]
    fn parses_every_scheme() {
        let c = build(
            "verify = \"github\"\nsecrets = [{ env = \"GH\" }, { env = \"GH2\" }]\ndedupe = true\n",
        )
        .unwrap();
        let a = &c.triggers[0].auth;
        assert_eq!(a.verify.as_ref().unwrap().scheme(), &Scheme::Github);
        let d = a.dedupe.unwrap();
        assert_eq!(d.window, Duration::from_secs(86_400));
        assert_eq!(d.source, KeySource::GithubDelivery);

        let c = build(
            "verify = \"standard-webhooks\"\nsecrets = [{ env = \"SW\" }]\ntolerance = \"60s\"\ndedupe = { window = \"1h\" }\n",
        )
        .unwrap();
        assert_eq!(
            c.triggers[0].auth.dedupe.unwrap().window,
            Duration::from_secs(3600)
        );
        assert_eq!(
            c.triggers[0].auth.dedupe.unwrap().source,
            KeySource::WebhookId
        );

        let c = build(
            "verify = \"hmac\"\nsecrets = [{ env = \"GH\" }]\nhmac = { header = \"X-Sig\", prefix = \"sha1=\", algorithm = \"sha1\", encoding = \"base64\" }\n",
        )
        .unwrap();
        match c.triggers[0].auth.verify.as_ref().unwrap().scheme() {
            Scheme::Hmac(h) => {
                assert_eq!(h.header, "x-sig");
                assert_eq!(h.prefix, "sha1=");
                assert_eq!(h.algorithm, Algorithm::Sha1);
                assert_eq!(h.encoding, Encoding::Base64);
            }
            other => panic!("{other:?}"),
        }
        for s in ["stripe", "slack"] {
            build(&format!(
                "verify = \"{s}\"\nsecrets = [{{ env = \"GH\" }}]\n"
            ))
            .unwrap();
        }
        // No checks by default.
        let c = build("").unwrap();
        assert_eq!(c.triggers[0].auth, Default::default());
        assert!(c.admin_token.is_none());
    }

    #[test]
    fn secret_files_are_read_and_missing_ones_fail_startup_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s");
        std::fs::write(&p, "file-secret\n").unwrap();
        build(&format!(
            "verify = \"github\"\nsecrets = [{{ file = \"{}\" }}]\n",
            p.display()
        ))
        .unwrap();
        let missing = dir.path().join("missing");
        let e = build(&format!(
            "verify = \"github\"\nsecrets = [{{ file = \"{}\" }}]\n",
            missing.display()
        ))
        .unwrap_err();
        assert!(e.0.contains(&missing.display().to_string()), "{e}");
        let e = build("verify = \"github\"\nsecrets = [{ env = \"NOT_SET_X\" }]\n").unwrap_err();
        assert!(e.0.contains("NOT_SET_X") && e.0.contains("\"t\""), "{e}");
    }

    #[test]
    fn invalid_combinations_fail_with_the_key() {
        let cases = [
            ("verify = \"gitlab\"\nsecrets = [{ env = \"GH\" }]\n", "verify must be"),
            ("verify = \"github\"\n", "secrets must list"),
            ("verify = \"github\"\nsecrets = []\n", "secrets must list"),
            ("secrets = [{ env = \"GH\" }]\n", "need verify"),
            ("verify = \"github\"\nsecrets = [{ env = \"GH\", file = \"/x\" }]\n", "exactly one"),
            ("verify = \"github\"\nsecrets = [{ env = \"GH\" }]\ntolerance = \"5s\"\n", "tolerance does not apply"),
            ("verify = \"stripe\"\nsecrets = [{ env = \"GH\" }]\ntolerance = \"2d\"\n", "tolerance"),
            ("verify = \"hmac\"\nsecrets = [{ env = \"GH\" }]\n", "needs hmac"),
            ("verify = \"hmac\"\nsecrets = [{ env = \"GH\" }]\nhmac = { header = \"x\", algorithm = \"md5\" }\n", "algorithm"),
            ("verify = \"github\"\nsecrets = [{ env = \"GH\" }]\nhmac = { header = \"x\" }\n", "only valid"),
            ("verify = \"standard-webhooks\"\nsecrets = [{ env = \"GH2\" }]\n", "whsec_"),
            ("dedupe = { window = \"0s\" }\n", "dedupe.window"),
            ("dedupe = { windw = \"1h\" }\n", "dedupe"),
        ];
        for (text, needle) in cases {
            let e = build(text).unwrap_err();
            assert!(e.0.contains(needle), "{text:?}: {e}");
            assert!(!e.0.contains("gh-secret"), "secret leaked: {e}");
        }
    }

    #[test]
    fn a_standard_webhooks_key_is_whsec_or_marked_raw_never_guessed() {
        // Unprefixed base64 is refused (exit 2 at start), naming the secret and the raw form.
        let e =
            build("verify = \"standard-webhooks\"\nsecrets = [{ env = \"B64\" }]\n").unwrap_err();
        assert!(e.0.contains("secret #1 (environment variable B64)"), "{e}");
        assert!(e.0.contains("{ env = \"B64\", encoding = \"raw\" }"), "{e}");
        assert!(!e.0.contains("MfKQ9r8"), "secret leaked: {e}");
        // Marked raw, the same value is the key as read; whsec_ decodes.
        for (text, key) in [
            (
                "{ env = \"B64\", encoding = \"raw\" }",
                &b"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"[..],
            ),
            (
                "{ env = \"SW\", encoding = \"whsec\" }",
                &[0x31, 0xf2, 0x90][..],
            ),
        ] {
            let c = build(&format!(
                "verify = \"standard-webhooks\"\nsecrets = [{text}]\n"
            ))
            .unwrap();
            assert_eq!(c.triggers[0].auth.secrets[0].toml(), text);
            let m = format!(
                "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\nhandler = \"http://127.0.0.1:9/\"\n\
                 [[destinations]]\nuri = \"http://127.0.0.1:9/\"\nsigning_secret = {text}\n"
            );
            let c = Config::build(
                Config::parse_manifest(&m).unwrap(),
                &env,
                &Overrides::default(),
            )
            .unwrap();
            let k = c.destinations[0]
                .signing_key
                .as_ref()
                .unwrap()
                .expose()
                .to_vec();
            assert!(k.starts_with(key), "{text}");
        }
        // The same rule for a destination's signing_secret.
        let m = "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\nhandler = \"http://127.0.0.1:9/\"\n\
                 [[destinations]]\nuri = \"http://127.0.0.1:9/\"\nsigning_secret = { env = \"B64\" }\n";
        let e = Config::build(
            Config::parse_manifest(m).unwrap(),
            &env,
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(
            e.0.contains("signing_secret") && e.0.contains("encoding = \"raw\""),
            "{e}"
        );
        // `encoding` means nothing to the other schemes, and only two values exist.
        for (text, needle) in [
            ("verify = \"github\"\nsecrets = [{ env = \"GH\", encoding = \"raw\" }]\n", "standard-webhooks secrets only"),
            ("verify = \"standard-webhooks\"\nsecrets = [{ env = \"SW\", encoding = \"base64\" }]\n", "\"whsec\" or \"raw\""),
        ] {
            let e = build(text).unwrap_err();
            assert!(e.0.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn admin_token_from_env() {
        let with =
            |v: &'static str| move |k: &str| (k == super::ENV_ADMIN_TOKEN).then(|| v.to_string());
        let c = Config::build(Default::default(), &with("tok"), &Overrides::default()).unwrap();
        assert_eq!(c.admin_token.unwrap().expose(), b"tok");
        let e = Config::build(Default::default(), &with(" "), &Overrides::default()).unwrap_err();
        assert!(e.0.contains(super::ENV_ADMIN_TOKEN), "{e}");
    }
}
