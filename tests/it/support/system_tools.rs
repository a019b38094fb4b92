//! System tools some tests need (a real `redis-server`, Chromium, `systemd-analyze`, Python with
//! `prometheus_client` or the official `standardwebhooks` library), and what a test does when
//! one is missing.
//!
//! A test asks once, at its top: `let Some(redis) = require_tool(...) else { return };`.
//! - Tool present (an executable file on `PATH`, or at the absolute path given): its path.
//! - Missing, lenient (the default): one line on the terminal — `SKIPPED <test>: <tool> not
//!   found; install: apt-get install <package>` — written past libtest's output capture so it is
//!   seen, one line appended to the skip record (see [`SKIP_RECORD_ENV`]), and `None`: the test
//!   returns without asserting anything. `scripts/test.sh` prints the record as its summary.
//! - Missing, strict (`SLUICE_REQUIRE_TOOLS=1`, set by `scripts/test.sh --require-all` and so by
//!   CI): the test panics with the same message.
//!
//! A skipped test is therefore never silent: the line, the record and the script's summary name
//! it. The record is append-only, one line per skip (`test<TAB>tool<TAB>package`), bounded by the
//! number of tests.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `1` turns a missing tool into a test failure.
pub const REQUIRE_TOOLS_ENV: &str = "SLUICE_REQUIRE_TOOLS";
/// File that skips are appended to (`scripts/test.sh` sets it; unset: no record, the line only).
pub const SKIP_RECORD_ENV: &str = "SLUICE_SKIP_RECORD";

/// The path of `tool` (a name looked up on `PATH`, or an absolute path) if it is an executable
/// file; otherwise a skip or a panic as the module header says. `package` is the Debian package
/// that provides it.
pub fn require_tool(tool: &str, package: &str) -> Option<PathBuf> {
    find_tool(tool).or_else(|| missing(tool, package))
}

/// Where Python modules are installed for the tests when the system has none (`pip --target`).
pub fn pydeps() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/pydeps")
}

/// `python3` and a `PYTHONPATH` under which `import_name` imports: the system's module (from
/// the Debian `package`, which `scripts/test.sh` installs when it may), or PyPI's `pip_name`
/// installed with pip into [`pydeps`] (once, by the first test that asks). `None` (the test is
/// skipped, by name, or fails in strict mode) when neither is possible.
pub fn python_with(import_name: &str, pip_name: &str, package: &str) -> Option<(PathBuf, PathBuf)> {
    let python = require_tool("python3", "python3")?;
    let dir = pydeps();
    let importable = |dir: &Path| {
        Command::new(&python)
            .args(["-c", &format!("import {import_name}")])
            .env("PYTHONPATH", dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !importable(&dir) {
        // A fresh machine: install it (PyPI), into the target dir only.
        let installed = Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--target"])
            .arg(&dir)
            .arg(pip_name)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !installed || !importable(&dir) {
            return missing(&format!("python module {pip_name}"), package);
        }
    }
    Some((python, dir))
}

/// Several tools at once (all or nothing); the first missing one is the one reported.
pub fn require_tools(tools: &[(&str, &str)]) -> Option<Vec<PathBuf>> {
    tools
        .iter()
        .map(|(tool, package)| require_tool(tool, package))
        .collect()
}

/// Reports a missing requirement that is not a binary on `PATH` (a Python module, say): a skip
/// line and record, or a panic in strict mode. Always `None`, for `let Some(..) = .. else`.
pub fn missing<T>(tool: &str, package: &str) -> Option<T> {
    let how = format!("{tool} not found; install: apt-get install {package}");
    skip(&how, tool, package)
}

/// `Some(())` when the test runs as root; otherwise a skip (a panic in strict mode) naming
/// `why` root is needed. Recorded with the package `-`: no package provides it.
pub fn require_root(why: &str) -> Option<()> {
    // SAFETY: `geteuid` reads the calling process's effective user id; it cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return Some(());
    }
    skip(&format!("needs root ({why})"), "root", "-")
}

/// The skip line, the record and the strict-mode panic shared by every missing requirement.
fn skip<T>(how: &str, tool: &str, package: &str) -> Option<T> {
    let test = std::thread::current()
        .name()
        .unwrap_or("<unnamed test>")
        .to_string();
    if std::env::var(REQUIRE_TOOLS_ENV).is_ok_and(|v| v == "1") {
        panic!("{test}: {how} ({REQUIRE_TOOLS_ENV}=1 makes a missing tool a failure)");
    }
    // Past the capture of `eprintln!`: a passing test's captured output is never shown.
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {how}");
    if let Some(record) = std::env::var_os(SKIP_RECORD_ENV) {
        let line = format!("{test}\t{tool}\t{package}\n");
        let appended = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&record)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = appended {
            panic!("cannot append the skip of {test} to {record:?}: {e}");
        }
    }
    None
}

/// An executable regular file named `tool` on `PATH` (or at `tool` if it is a path).
pub fn find_tool(tool: &str) -> Option<PathBuf> {
    if tool.contains('/') {
        return is_executable(Path::new(tool)).then(|| PathBuf::from(tool));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    // Metadata follows symlinks (Debian's `chromedriver` and `redis-server` are links).
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
