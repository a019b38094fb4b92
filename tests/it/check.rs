//! `sluice check` as a user runs it: its output is a manifest (fed back it checks the same and
//! `serve` runs it), it takes the flags of `serve`, it never prints a secret, and its errors
//! start with the prefixes README names.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::*;

const SW_KEY: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SECRETS: [(&str, &str); 4] = [
    ("GH_SECRET", "gh-secret-value"),
    ("GH_NEXT", "gh-next-value"),
    ("RAW_KEY", "a-raw-signing-key"),
    ("SIGN", "whsec_YWJjZA=="),
];

/// `sluice check --config PATH ARGS…` with the secrets above in the environment (and the
/// variables that would change the defaults removed).
fn check_file(path: &Path, args: &[&str]) -> CliOutput {
    let mut cmd = Command::new(BIN);
    cmd.args(["check", "--config"])
        .arg(path)
        .args(args)
        .stdin(Stdio::null())
        .env_remove(ENV_GLOBAL_CAPACITY)
        .env_remove("HARN_ORCHESTRATOR_PUMP_MAX_OUTSTANDING")
        .env_remove("SLUICE_IO")
        .env_remove("SLUICE_WAL_COMMIT");
    for (k, v) in SECRETS {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run sluice check");
    CliOutput {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Checks `manifest`, feeds the output back as the manifest, and asserts exit 0 both times and
/// the same output; returns it.
fn round_trip(dir: &Path, name: &str, manifest: &str, args: &[&str]) -> String {
    let first_path = dir.join(format!("{name}.toml"));
    std::fs::write(&first_path, manifest).unwrap();
    let first = check_file(&first_path, args);
    assert_eq!(first.status.code(), Some(0), "{name}: {}", first.all());
    let second_path = dir.join(format!("{name}.checked.toml"));
    std::fs::write(&second_path, &first.stdout).unwrap();
    let second = check_file(&second_path, args);
    assert_eq!(
        second.status.code(),
        Some(0),
        "{name} fed back: {}",
        second.all()
    );
    assert_eq!(
        first.stdout, second.stdout,
        "{name}: check of check differs"
    );
    toml::from_str::<toml::Table>(&first.stdout).expect("check output is TOML");
    for (_, secret) in SECRETS {
        assert!(
            !first.all().contains(secret),
            "{name}: a secret was printed"
        );
    }
    assert!(
        !first.all().contains("MfKQ9r8"),
        "{name}: a secret was printed"
    );
    first.stdout
}

fn manifests(key_file: &Path) -> Vec<(&'static str, String)> {
    let gated = format!(
        r#"
[ingest]
stored_headers = ["x-tenant"]

[[triggers]]
id = "gh"
provider = "github"
path = "/hooks/gh"
handler = "http://127.0.0.1:9/sink"
verify = "github"
secrets = [{{ env = "GH_SECRET" }}, {{ env = "GH_NEXT" }}]
dedupe = true
concurrency = {{ key = "event.headers.x-tenant", max = 3 }}
priority = {{ key = "event.body.tier", order = ["gold", "silver"] }}
throttle = {{ key = "event.body.user.id", period = "60s", max = 30 }}
max_pending = {{ events = 100 }}

[[triggers]]
id = "sw"
provider = "svc"
path = "/hooks/sw"
handler = "http://127.0.0.1:9/other"
verify = "standard-webhooks"
secrets = [{{ file = "{}" }}, {{ env = "RAW_KEY", encoding = "raw" }}]
tolerance = "2m"
debounce = {{ key = "event.source", period = "30s" }}
singleton = {{}}
rate_limit = {{ period = "1h", max = 1000 }}

[[triggers]]
id = "hm"
provider = "acme"
path = "/hooks/hm"
handler = "http://127.0.0.1:9/sink"
verify = "hmac"
secrets = [{{ env = "GH_SECRET" }}]
hmac = {{ header = "X-Sig", prefix = "sha1=", algorithm = "sha1", encoding = "base64" }}
dedupe = {{ window = "2h" }}
batch = {{ key = "event.trigger", size = 5, timeout = "2s" }}

[[destinations]]
uri = "http://127.0.0.1:9/sink"
max_in_flight = 5
rate = {{ per_sec = 10 }}
headers = {{ "x-api-key" = "k\"1", "X-Other" = "v" }}
signing_secret = {{ env = "SIGN" }}
retry = {{ max_attempts = 3, base = "250ms", cap = "1m" }}
circuit = {{ failures = 2, open_for = "30s", on_open = "hold" }}

[[destinations]]
uri = "http://127.0.0.1:9/other"
max_in_flight = "auto"
min_in_flight = 2
max_in_flight_cap = 32
signing_secret = {{ env = "RAW_KEY", encoding = "raw" }}
"#,
        key_file.display()
    );
    let shared = r#"
[server]
drain_grace = "1500ms"
[dispatch]
max_pending_events = 4000
reserved_fraction = 1.0
[[triggers]]
id = "orders"
provider = "shop"
path = "/hooks/orders"
handler = "http://127.0.0.1:9/orders"
[[destinations]]
uri = "http://127.0.0.1:9/orders"
max_in_flight = 4
shared = { redis = "redis://127.0.0.1:6390/2", lease = "5s", on_unavailable = "local" }
"#;
    let replicated = r#"
[replication]
nats = ["nats://10.0.0.5", "nats://10.0.0.6:4223", "tls://[::1]:4222"]
stream = "hooks"
node = "node-a"
ack_timeout = "500ms"
lease = "30s"
max_inflight = 16
"#;
    vec![
        ("empty", String::new()),
        ("gated", gated),
        ("shared", shared.to_string()),
        ("replicated", replicated.to_string()),
    ]
}

#[test]
fn check_output_fed_back_checks_the_same_for_triggers_with_auth_gates_and_destinations() {
    let root = temp_root();
    let key_file = root.path().join("sw.key");
    std::fs::write(&key_file, format!("{SW_KEY}\n")).unwrap();
    let flags = [
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "3",
        "--io",
        "mio",
        "--durability",
        "os",
        "--data-dir",
        "/var/lib/sluice-check-test",
    ];
    for (name, manifest) in manifests(&key_file) {
        round_trip(root.path(), name, &manifest, &[]);
        let out = round_trip(root.path(), &format!("{name}-flags"), &manifest, &flags);
        for want in [
            "listen = \"127.0.0.1:0\"",
            "workers = 3",
            "io = \"mio\"",
            "durability = \"os\"",
            "data_dir = \"/var/lib/sluice-check-test\"",
        ] {
            assert!(out.contains(want), "{name}: {want} missing:\n{out}");
        }
    }
    let gated = round_trip(root.path(), "gated-again", &manifests(&key_file)[1].1, &[]);
    for want in [
        "secrets = [{ env = \"GH_SECRET\" }, { env = \"GH_NEXT\" }]",
        &format!("{{ file = \"{}\" }}", key_file.display()),
        "{ env = \"RAW_KEY\", encoding = \"raw\" }",
        "concurrency = { key = \"event.headers.x-tenant\", max = 3 }",
        "hmac = { header = \"x-sig\", prefix = \"sha1=\", algorithm = \"sha1\", encoding = \"base64\" }",
        "signing_secret = { env = \"SIGN\" }",
    ] {
        assert!(gated.contains(want), "{want} missing:\n{gated}");
    }
}

/// What `check` prints is what `serve` runs: the output of a check with `--io` and `--workers`
/// starts a server with the same flags, which accepts an event on the checked trigger.
#[test]
fn check_output_serves() {
    let root = temp_root();
    let path = root.path().join("m.toml");
    std::fs::write(
        &path,
        "[[triggers]]\nid = \"orders\"\nprovider = \"shop\"\npath = \"/hooks/orders\"\n\
         max_pending = { events = 10 }\n",
    )
    .unwrap();
    let io = std::env::var("SLUICE_IO").unwrap_or_else(|_| "auto".into());
    let out = check_file(&path, &["--io", &io, "--workers", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", out.all());
    let server = Server::start(Opts::config(&out.stdout).workers(2));
    server.ingest("/hooks/orders", b"{\"checked\":true}");
}

#[test]
fn check_errors_start_with_the_prefixes_readme_names() {
    let root = temp_root();
    let missing = root.path().join("missing.toml");
    let bad_toml = root.path().join("bad.toml");
    std::fs::write(&bad_toml, "[server]\nlisten = \n").unwrap();
    let unknown = root.path().join("unknown.toml");
    std::fs::write(&unknown, "[server]\nlisten_on = \"x\"\n").unwrap();
    let invalid = root.path().join("invalid.toml");
    std::fs::write(&invalid, "[server]\nworkers = 0\n").unwrap();
    let cases = [
        (
            &missing,
            &[][..],
            format!("sluice: cannot read config {}: ", missing.display()),
        ),
        (
            &bad_toml,
            &[],
            format!(
                "sluice: config {}: TOML parse error at line 2",
                bad_toml.display()
            ),
        ),
        (
            &unknown,
            &[],
            format!(
                "sluice: config {}: TOML parse error at line 2",
                unknown.display()
            ),
        ),
        (
            &invalid,
            &[],
            "sluice: invalid configuration: server.workers".to_string(),
        ),
        (
            &unknown,
            &["--io", "bogus"],
            format!("sluice: config {}: ", unknown.display()),
        ),
        (
            &invalid,
            &["--workers", "2", "--io", "bogus"],
            "sluice: invalid configuration: server.io".to_string(),
        ),
    ];
    for (path, args, prefix) in cases {
        let out = check_file(path, args);
        assert_eq!(out.status.code(), Some(2), "{}", out.all());
        assert!(out.stdout.is_empty(), "{}", out.stdout);
        assert!(
            out.stderr.starts_with(&prefix),
            "want {prefix:?}, got:\n{}",
            out.stderr
        );
    }
}

/// Issue 38 item 5: gates on a trigger without a handler never see an event; `sluice check`
/// says so on stderr, naming the trigger and the gates, and still prints the manifest.
#[test]
fn check_warns_about_gates_on_a_trigger_without_a_handler() {
    let root = temp_root();
    let path = root.path().join("m.toml");
    std::fs::write(
        &path,
        "[[triggers]]\nid = \"stored\"\nprovider = \"p\"\npath = \"/hooks/stored\"\n\
         concurrency = { key = \"event.source\", max = 1 }\n",
    )
    .unwrap();
    let out = check_file(&path, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", out.all());
    assert!(
        out.stderr.contains(
            "sluice: warning: trigger \"stored\": concurrency has no effect: the trigger has \
             no handler"
        ),
        "{}",
        out.stderr
    );
    assert!(out.stdout.contains("id = \"stored\""), "{}", out.stdout);
}

/// Issue 41: `sluice check` validates `[replication]`, says what it will run on stderr, and
/// refuses a bad URL or an unknown key by name, with exit 2 and nothing on stdout.
#[test]
fn check_validates_the_replication_section() {
    let root = temp_root();
    let good = root.path().join("good.toml");
    std::fs::write(
        &good,
        "[replication]\nnats = [\"nats://10.0.0.5\"]\nnode = \"node-a\"\n",
    )
    .unwrap();
    let out = check_file(&good, &["--workers", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", out.all());
    assert!(
        out.stderr.contains(
            "sluice: replication: servers nats://10.0.0.5:4222; stream \"sluice\", replicas 3; \
             node \"node-a\" (subjects \"sluice.node-a.core-0\"..\"sluice.node-a.core-1\""
        ),
        "{}",
        out.stderr
    );
    assert!(
        out.stdout
            .contains("[replication]\nnats = [\"nats://10.0.0.5:4222\"]"),
        "{}",
        out.stdout
    );
    let bad_url = root.path().join("bad-url.toml");
    std::fs::write(
        &bad_url,
        "[replication]\nnats = [\"http://10.0.0.5:4222\"]\nnode = \"node-a\"\n",
    )
    .unwrap();
    let unknown = root.path().join("unknown.toml");
    std::fs::write(
        &unknown,
        "[replication]\nnats = [\"nats://10.0.0.5\"]\nreplica = 3\n",
    )
    .unwrap();
    let ring = root.path().join("ring.toml");
    std::fs::write(
        &ring,
        "[wal]\ncommit = \"ring\"\n[replication]\nnats = [\"nats://a\"]\nnode = \"n\"\n",
    )
    .unwrap();
    for (path, prefix, names) in [
        (
            &bad_url,
            "sluice: invalid configuration: replication.nats[0] = \"http://10.0.0.5:4222\": ",
            "must start with nats:// or tls://",
        ),
        (
            &unknown,
            &*format!(
                "sluice: config {}: TOML parse error at line 3",
                unknown.display()
            ),
            "unknown field `replica`",
        ),
        (
            &ring,
            "sluice: invalid configuration: replication needs wal.commit = \"helper\"",
            "",
        ),
    ] {
        let out = check_file(path, &[]);
        assert_eq!(out.status.code(), Some(2), "{}", out.all());
        assert!(out.stdout.is_empty(), "{}", out.stdout);
        assert!(
            out.stderr.starts_with(prefix) && out.stderr.contains(names),
            "want {prefix:?} … {names:?}, got:\n{}",
            out.stderr
        );
    }
}
