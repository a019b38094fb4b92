//! `tls = { … }` through the whole manifest build, with real PEM files written per test.
use super::super::{Config, Overrides};
use super::*;

use rcgen::{CertificateParams, KeyPair};

fn build(text: &str) -> Result<Config, ConfigError> {
    Config::build(
        Config::parse_manifest(text)?,
        &|_| None,
        &Overrides::default(),
    )
}

fn manifest(tls: &str) -> String {
    format!(
        "[[triggers]]\nid = \"t\"\nprovider = \"p\"\npath = \"/t\"\nhandler = \"https://h:8443/x\"\n\
         [[destinations]]\nuri = \"https://h:8443/x\"\ntls = {{ {tls} }}\n"
    )
}

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["h".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("empty.pem"), "").unwrap();
        std::fs::write(
            dir.path().join("garbage.pem"),
            "-----BEGIN CERTIFICATE-----\n!!\n",
        )
        .unwrap();
        let big = vec![b'a'; MAX_TLS_FILE_BYTES as usize + 1];
        std::fs::write(dir.path().join("big.pem"), big).unwrap();
        Files { dir }
    }
    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

#[test]
fn every_key_is_accepted_and_kept() {
    let f = Files::new();
    let c = build(&manifest(&format!(
        "ca_file = \"{}\", client_cert = \"{}\", client_key = \"{}\", server_name = \"api.example.com\"",
        f.path("cert.pem"),
        f.path("cert.pem"),
        f.path("key.pem")
    )))
    .unwrap();
    let tls = c.destinations[0].tls.as_ref().unwrap();
    assert_eq!(tls.source.server_name, "api.example.com");
    assert_eq!(
        tls.source.ca_file.as_deref(),
        Some(std::path::Path::new(&f.path("cert.pem")))
    );
    assert!(tls.client.config.client_auth_cert_resolver.has_certs());
}

#[test]
fn bad_settings_fail_naming_the_key() {
    let f = Files::new();
    let cases = [
        (
            format!("ca_file = \"{}\"", f.path("missing.pem")),
            "tls.ca_file",
        ),
        (
            format!("ca_file = \"{}\"", f.path("empty.pem")),
            "holds no PEM certificate",
        ),
        (
            format!("ca_file = \"{}\"", f.path("garbage.pem")),
            "tls.ca_file",
        ),
        (
            format!("ca_file = \"{}\"", f.path("big.pem")),
            "larger than 1048576 bytes",
        ),
        (
            format!("client_cert = \"{}\"", f.path("cert.pem")),
            "tls.client_cert needs tls.client_key",
        ),
        (
            format!("client_key = \"{}\"", f.path("key.pem")),
            "tls.client_key needs tls.client_cert",
        ),
        (
            format!(
                "client_cert = \"{}\", client_key = \"{}\"",
                f.path("cert.pem"),
                f.path("cert.pem")
            ),
            "tls.client_key",
        ),
        (
            format!(
                "client_cert = \"{}\", client_key = \"{}\"",
                f.path("empty.pem"),
                f.path("key.pem")
            ),
            "tls.client_cert",
        ),
        (
            "server_name = \"not a name!\"".to_string(),
            "tls.server_name",
        ),
        ("bogus = 1".to_string(), "bogus"),
    ];
    for (tls, needle) in cases {
        let e = build(&manifest(&tls)).unwrap_err();
        assert!(e.0.contains(needle), "{tls}: {e}");
        if needle != "bogus" {
            assert!(
                e.0.contains("destination \"https://h:8443/x\""),
                "{tls}: {e}"
            );
        }
    }
}
