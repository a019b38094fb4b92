//! `tls = { ca_file, client_cert, client_key, server_name }` of an `https://` destination.
//!
//! Same two stages as the rest of [`super`]: [`RawTls`] is the serde image (unknown keys
//! rejected), [`build_tls`] reads the files (each at most [`MAX_TLS_FILE_BYTES`]), parses the
//! PEM and builds the destination's [`TlsClient`]: one `Arc<rustls::ClientConfig>` shared by
//! every connection to that destination, so rustls's default in-memory session cache (256
//! sessions) resumes TLS sessions across connections.
//!
//! Default trust anchors are the Mozilla roots compiled in by `webpki-roots`: the binary
//! verifies public servers the same way on every host, with no dependence on the host's CA
//! directory (often missing in minimal containers). A private CA is named with `ca_file`, which
//! *replaces* the default roots for that destination (like `curl --cacert`).
#![forbid(unsafe_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use serde::Deserialize;

use crate::config::ConfigError;
use crate::dispatch::spec::{TlsSource, TlsSpec};
use crate::net::tls::TlsClient;

/// Largest certificate or key file read, in bytes.
pub const MAX_TLS_FILE_BYTES: u64 = 1024 * 1024;

/// `tls = { … }` of one destination. Only for `https://` handlers.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// PEM file with the CA certificate(s) that sign the server's certificate. When set, these
    /// are the only trusted roots for this destination. Default: the compiled-in Mozilla roots
    /// (`webpki-roots`). Range: at least one certificate, file ≤ 1 MiB.
    pub ca_file: Option<PathBuf>,
    /// PEM file with the client certificate chain (leaf first) presented to servers that ask
    /// for one (mutual TLS). Default: none. Requires `client_key`.
    pub client_cert: Option<PathBuf>,
    /// PEM file with the client certificate's private key (PKCS#8, PKCS#1 or SEC1).
    /// Default: none. Requires `client_cert`.
    pub client_key: Option<PathBuf>,
    /// The name the server certificate must be valid for, also sent as SNI. Default: the
    /// handler's host (an IP-address host is verified against the certificate's IP SANs).
    pub server_name: Option<String>,
}

/// Builds the TLS settings of destination `key` (for error messages) whose handler host is
/// `host`.
pub fn build_tls(key: &str, host: &str, raw: RawTls) -> Result<TlsSpec, ConfigError> {
    let name_text = raw.server_name.clone().unwrap_or_else(|| host.to_string());
    let server_name = ServerName::try_from(name_text.clone()).map_err(|_| {
        ConfigError(format!(
            "{key}: tls.server_name {name_text:?} is not a DNS name or IP address"
        ))
    })?;
    let mut roots = RootCertStore::empty();
    match &raw.ca_file {
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(path) => {
            let k = format!("{key}: tls.ca_file");
            let certs = read_certs(&k, path)?;
            for c in certs {
                roots.add(c).map_err(|e| {
                    ConfigError(format!(
                        "{k}: {}: not a usable CA certificate: {e}",
                        path.display()
                    ))
                })?;
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError(format!("{key}: tls: {e}")))?
        .with_root_certificates(roots);
    let config = match (&raw.client_cert, &raw.client_key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(keyf)) => {
            let chain = read_certs(&format!("{key}: tls.client_cert"), cert)?;
            let k = format!("{key}: tls.client_key");
            let bytes = read_bounded(&k, keyf)?;
            let pk = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
                ConfigError(format!("{k}: {}: no PEM private key: {e}", keyf.display()))
            })?;
            builder.with_client_auth_cert(chain, pk).map_err(|e| {
                ConfigError(format!(
                    "{key}: tls.client_cert/tls.client_key: the key does not fit the certificate: {e}"
                ))
            })?
        }
        (Some(_), None) => {
            return Err(ConfigError(format!(
                "{key}: tls.client_cert needs tls.client_key"
            )))
        }
        (None, Some(_)) => {
            return Err(ConfigError(format!(
                "{key}: tls.client_key needs tls.client_cert"
            )))
        }
    };
    Ok(TlsSpec {
        client: TlsClient {
            config: Arc::new(config),
            server_name,
        },
        source: TlsSource {
            ca_file: raw.ca_file,
            client_cert: raw.client_cert,
            client_key: raw.client_key,
            server_name: name_text,
        },
    })
}

/// Reads `path` (at most [`MAX_TLS_FILE_BYTES`]); `key` names the setting in errors.
fn read_bounded(key: &str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    let io_err = |e: std::io::Error| ConfigError(format!("{key}: {}: {e}", path.display()));
    let f = std::fs::File::open(path).map_err(io_err)?;
    let mut bytes = Vec::new();
    f.take(MAX_TLS_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err)?;
    if bytes.len() as u64 > MAX_TLS_FILE_BYTES {
        return Err(ConfigError(format!(
            "{key}: {} is larger than {MAX_TLS_FILE_BYTES} bytes",
            path.display()
        )));
    }
    Ok(bytes)
}

/// Reads the PEM certificates in `path` (at least one).
fn read_certs(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let bytes = read_bounded(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError(format!("{key}: {}: bad PEM: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(ConfigError(format!(
            "{key}: {} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests;
