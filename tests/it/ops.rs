//! Operating sluice (issue 14): `sluice check`, the systemd unit, CLI progress, the dashboard
//! state, hot reload. Every test runs the real binary.

use std::process::{Command, Stdio};

use crate::support::*;

const MANIFEST: &str = r#"
[[triggers]]
id = "orders"
provider = "shop"
path = "/hooks/orders"
handler = "http://127.0.0.1:9/orders"

[[destinations]]
uri = "http://127.0.0.1:9/orders"
max_in_flight = 5
"#;

/// `sluice check --config F` with the environment `env` (the Harn variables removed first).
fn check(manifest: &str, env: &[(&str, &str)]) -> CliOutput {
    let root = temp_root();
    let path = root.path().join("m.toml");
    std::fs::write(&path, manifest).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args(["check", "--config"])
        .arg(&path)
        .stdin(Stdio::null())
        .env_remove(ENV_GLOBAL_CAPACITY)
        .env_remove("HARN_ORCHESTRATOR_PUMP_MAX_OUTSTANDING");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run sluice check");
    CliOutput {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn check_prints_the_effective_configuration_with_environment_and_defaults() {
    let out = check(MANIFEST, &[(ENV_GLOBAL_CAPACITY, "777")]);
    assert_eq!(out.status.code(), Some(0), "{}", out.all());
    // The environment wins over the default; defaults are filled in; the trigger and its
    // destination appear with the manifest's values.
    assert!(
        out.stdout.contains("global_capacity = 777\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("max_outstanding = 64\n"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("id = \"orders\"\n"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("uri = \"http://127.0.0.1:9/orders\"\nmax_in_flight = 5\n"),
        "{}",
        out.stdout
    );
    // The output is TOML.
    let parsed: toml::Value = toml::from_str(&out.stdout).expect("check output is TOML");
    assert_eq!(
        parsed["server"]["workers"].as_integer().map(|w| w >= 1),
        Some(true)
    );
}

#[test]
fn check_exits_2_naming_the_failing_key() {
    let bad = format!("{MANIFEST}\n[server]\nworkers = 0\n");
    let out = check(&bad, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", out.all());
    assert!(out.stderr.contains("server.workers"), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);

    let out = check(
        MANIFEST,
        &[("HARN_ORCHESTRATOR_PUMP_MAX_OUTSTANDING", "lots")],
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.all());
    assert!(
        out.stderr
            .contains("HARN_ORCHESTRATOR_PUMP_MAX_OUTSTANDING"),
        "{}",
        out.stderr
    );

    let out = check("[server]\nlisten_on = \"x\"\n", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", out.all());
    assert!(out.stderr.contains("listen_on"), "{}", out.stderr);

    let out = check("[[triggers]\n", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", out.all());
}
