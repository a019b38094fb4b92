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

// ---------------------------------------------------------------------------------------------
// packaging/sluice.service
// ---------------------------------------------------------------------------------------------

const UNIT: &str = include_str!("../../packaging/sluice.service");

/// `systemd-analyze verify` on the unit with `ExecStart` pointing at the binary under test (verify
/// checks that the command exists). Any output fails: an unknown or misspelled directive is only a
/// warning for systemd (exit 0), and a hardening line that is ignored is no hardening.
#[test]
fn systemd_unit_verifies_cleanly() {
    let root = temp_root();
    let unit = UNIT.replace("/usr/local/bin/sluice", BIN);
    let path = root.path().join("sluice.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian package systemd; .ci/run installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.trim().is_empty() && stdout.trim().is_empty(),
        "systemd-analyze verify warned:\n{stdout}\n{stderr}"
    );
    // A misspelled directive is caught by the same check (the check can fail).
    let bad = root.path().join("bad.service");
    std::fs::write(
        &bad,
        UNIT.replace("/usr/local/bin/sluice", BIN)
            .replace("LimitNOFILE", "LimitNOFILES"),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("LimitNOFILES"));
}

/// What the issue requires of the unit, line by line: the drain on SIGTERM with a stop timeout
/// longer than the default drain (drain_grace 2s + shutdown_timeout 30s), the data dir writable (and nothing else), the descriptor limit,
/// reload by SIGHUP, no privileges.
#[test]
fn systemd_unit_has_the_drain_the_paths_and_the_limits() {
    let lines: Vec<&str> = UNIT.lines().map(str::trim).collect();
    for want in [
        "KillSignal=SIGTERM",
        "TimeoutStopSec=45s",
        "ReadWritePaths=/var/lib/sluice",
        "ProtectSystem=strict",
        "LimitNOFILE=1048576",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "RestartPreventExitStatus=2",
    ] {
        assert!(lines.contains(&want), "unit lacks {want:?}");
    }
    let exec = lines
        .iter()
        .find(|l| l.starts_with("ExecStart="))
        .expect("ExecStart");
    assert!(exec.contains("--data-dir /var/lib/sluice"), "{exec}");
}
