//! The `sluice` binary: parse the command line, load config, run, map errors to exit codes.
//!
//! Exit codes: 0 success; 1 runtime failure (WAL, I/O, a thread died); 2 invalid configuration
//! or usage; 3 `wal verify` found corruption or lost records, `dlq list` found unreadable entries
//! (the readable ones are still listed), `dlq show` found the entry damaged; 4 `dlq` entry not
//! found. `wal`, `dlq` and `events` exit 2 when `--data-dir` does not exist or holds neither
//! `wal/` nor `dlq/`. `events`: 2 for a malformed id or filter, 1 for an event not found (the message says
//! whether retention may have retired it) or a failed read. `replication restore`: 2 a bad
//! manifest, no `[replication]` section or a bad `--node`; 3 the stream's records are not
//! continuous (a gap, a conflicting repeat, a message that does not decode, a log short of its
//! durable LSN, a restored log that does not verify); 4 the stream holds no message of the node;
//! 5 no NATS server answered; 6 the stream does not exist; 7 the data dir already holds logs
//! (or dead letters); 1 any other failure (a stalled read, a write).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use sluice::config::{Config, Overrides};

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Webhook ingest with end-to-end backpressure"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (embedded defaults unless --config is given).
    Serve {
        /// TOML manifest.
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        flags: RunFlags,
        /// Start although the WAL checkpoint says records are missing (deleted or truncated
        /// segment files): the missing LSN ranges are logged and counted
        /// (sluice_wal_loss_accepted_total) and cannot be recovered. Without it, such a start
        /// exits 1 naming the missing ranges.
        #[arg(long)]
        accept_wal_loss: bool,
    },
    /// Open-loop HTTP/1.1 load generator (fixed rate or schedule; per-second timeline).
    Loadgen(sluice::tools::loadgen::LoadgenArgs),
    /// HTTP server modelling a third party with a capacity (service time, concurrency, rate).
    MockDownstream(sluice::tools::mock_downstream::MockArgs),
    /// Offline write-ahead-log tools.
    Wal {
        #[command(subcommand)]
        command: WalCommand,
    },
    /// Validate a manifest with the environment and the serve flags given, and print the
    /// effective configuration as a manifest (every default filled in, secrets as their
    /// references); exit 0 when valid, 2 naming the failing key.
    Check(CheckArgs),
    /// Dead-letter queue tools (exit 4 when the entry does not exist).
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Where is my event: one event's status and attempts, recent events, the per-trigger
    /// ledger, read from the data dir's logs (read-only: safe while the server runs).
    Events {
        #[command(subcommand)]
        command: EventsCommand,
    },
    /// The JetStream mirror of the logs (`[replication]`).
    Replication {
        #[command(subcommand)]
        command: ReplicationCommand,
    },
}

#[derive(Subcommand)]
enum ReplicationCommand {
    /// Restore a node's logs and dead letters from the stream into an empty data dir (exit 0;
    /// 3 not continuous, 4 nothing of the node, 5 unreachable, 6 no stream, 7 not empty).
    Restore {
        /// TOML manifest with a [replication] section (its WAL settings are used too).
        #[arg(long)]
        config: PathBuf,
        /// The node whose logs to restore (replaces replication.node).
        #[arg(long)]
        node: String,
        /// The data dir to restore into: absent, or without logs and dead letters.
        #[arg(long)]
        data_dir: PathBuf,
    },
}

/// `sluice check`: the manifest and the `serve` flags that change the configuration.
#[derive(clap::Args)]
struct CheckArgs {
    /// TOML manifest.
    #[arg(long)]
    config: PathBuf,
    #[command(flatten)]
    flags: RunFlags,
}

/// The flags `serve` and `check` share: each wins over the manifest and the environment. `check`
/// opens nothing (`--data-dir` is only checked and printed).
#[derive(clap::Args)]
struct RunFlags {
    /// Listen address (default 127.0.0.1:8080).
    #[arg(long)]
    listen: Option<String>,
    /// Data directory (default ./sluice-data).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Worker threads (default: available cores).
    #[arg(long)]
    workers: Option<usize>,
    /// fsync (202 after fdatasync, default) or os (202 after the page cache has it).
    #[arg(long)]
    durability: Option<String>,
    /// Most dispatch jobs out at once (default 64; env HARN_ORCHESTRATOR_PUMP_MAX_OUTSTANDING).
    #[arg(long)]
    pump_max_outstanding: Option<usize>,
    /// Serve on for this long after SIGTERM/SIGINT while /readyz says draining (default 2s).
    #[arg(long)]
    drain_grace: Option<String>,
    /// I/O backend: auto (io_uring where the kernel allows, else mio), mio or uring.
    #[arg(long)]
    io: Option<String>,
}

impl RunFlags {
    /// The configuration overrides these flags make.
    fn overrides(self, accept_wal_loss: bool) -> Overrides {
        Overrides {
            listen: self.listen,
            data_dir: self.data_dir,
            workers: self.workers,
            durability: self.durability,
            pump_max_outstanding: self.pump_max_outstanding,
            drain_grace: self.drain_grace,
            accept_wal_loss,
            io: self.io,
        }
    }
}

#[derive(Subcommand)]
enum DlqCommand {
    /// One line per entry, oldest first (JSON objects with --json); then one line per unreadable
    /// entry file (exit 3 if there is any).
    List {
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// The entry as JSON, with its headers and body (UTF-8 text if valid, else base64).
    Show {
        id: String,
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Delete the entry.
    Discard {
        id: String,
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Append the entry's event to the WAL as a new event (server stopped), then delete the
    /// entry; prints the new event id. With --all (no ID): every entry matching the filters,
    /// oldest first; prints `replayed N remaining M` (exit 3 if some entry was unreadable).
    Replay {
        #[arg(required_unless_present = "all")]
        id: Option<String>,
        #[arg(long)]
        data_dir: PathBuf,
        /// Replay every matching entry instead of one ID.
        #[arg(long, conflicts_with = "id")]
        all: bool,
        /// Only entries with this reason (retry_exhausted, circuit_open, permanent_failure).
        #[arg(long, conflicts_with = "id")]
        reason: Option<String>,
        /// Only entries of this trigger id.
        #[arg(long, conflicts_with = "id")]
        trigger: Option<String>,
        /// Only entries dead-lettered at or after this time (Unix ms or RFC 3339).
        #[arg(long, conflicts_with = "id")]
        since: Option<String>,
        /// Replay at most N entries (the restarted server's backlog bound counts them).
        #[arg(long, conflicts_with = "id")]
        limit: Option<usize>,
    },
}

#[derive(Subcommand)]
enum EventsCommand {
    /// One event: status, attempts in order (exit 1 when not found, 2 for a malformed id).
    Show {
        id: String,
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// The newest events first.
    List {
        #[arg(long)]
        data_dir: PathBuf,
        /// Only events of this trigger id.
        #[arg(long)]
        trigger: Option<String>,
        /// Only events with this status (pending, retrying, delivered, dead_lettered,
        /// skipped, no_handler).
        #[arg(long)]
        status: Option<String>,
        /// Only events received at or after this time (Unix ms or RFC 3339).
        #[arg(long)]
        since: Option<String>,
        /// Only events received at or before this time (Unix ms or RFC 3339).
        #[arg(long)]
        until: Option<String>,
        /// At most N events (default 100, at most 1000).
        #[arg(long)]
        limit: Option<usize>,
        /// Only events older than this id (the last id of the page before).
        #[arg(long)]
        cursor: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Per trigger: accepted = delivered + dead_lettered + skipped + no_handler + pending.
    Ledger {
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum WalCommand {
    /// Check every record's CRC and the LSN sequence; exit 0 when clean, 3 otherwise.
    Verify {
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Print one JSON object per event.
    Inspect {
        #[arg(long)]
        data_dir: PathBuf,
        /// JSON lines output (the only format).
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let outcome = match Cli::parse().command {
        Command::Serve {
            config,
            flags,
            accept_wal_loss,
        } => serve(config, flags.overrides(accept_wal_loss)),
        Command::Loadgen(args) => loadgen(&args),
        Command::MockDownstream(args) => mock_downstream(&args),
        Command::Wal { command } => wal(command),
        Command::Dlq { command } => dlq(command),
        Command::Events { command } => events(command),
        Command::Check(args) => check(args),
        Command::Replication { command } => replication(command),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("sluice: {}", f.msg);
            ExitCode::from(f.code)
        }
    }
}

/// A command's failure: the exit code (module header) and the line printed as `sluice: {msg}`.
#[derive(Debug, PartialEq, Eq)]
struct Failure {
    code: u8,
    msg: String,
}

/// What a command ends with: `Ok` exits 0.
type Outcome = Result<(), Failure>;

fn fail(code: u8, msg: impl Into<String>) -> Outcome {
    Err(Failure {
        code,
        msg: msg.into(),
    })
}

/// `sluice serve`: exit 2 for an invalid configuration, 1 when the server fails.
fn serve(config: Option<PathBuf>, overrides: Overrides) -> Outcome {
    let source = sluice::ops::reload::ReloadSource {
        path: config.clone(),
        overrides: overrides.clone(),
    };
    let cfg = match Config::load(config.as_deref(), &overrides) {
        Ok(c) => c,
        Err(e) => return fail(2, e.to_string()),
    };
    for w in cfg.warnings() {
        eprintln!("sluice: warning: {w}");
    }
    let result = sluice::sched::runtime::serve_reloadable(cfg, Some(source), &mut |addr| {
        print_line(&format!("sluice: listening on http://{addr}"));
    });
    result.or_else(|e| fail(1, e.to_string()))
}

/// `sluice loadgen`: the summary on stdout; exit 1 when any request failed on I/O.
fn loadgen(args: &sluice::tools::loadgen::LoadgenArgs) -> Outcome {
    match sluice::tools::loadgen::run(args) {
        Ok(summary) => {
            print_line(&sluice::tools::loadgen::summary_json(&summary));
            loadgen_errors(summary.totals.errors)
        }
        Err(e) => fail(e.exit_code(), format!("loadgen: {e}")),
    }
}

/// A load run with `errors` requests failed on I/O exits 1 (the summary is printed either way).
fn loadgen_errors(errors: u64) -> Outcome {
    match errors {
        0 => Ok(()),
        n => fail(
            1,
            format!(
                "loadgen: {n} requests failed on I/O (a connection \
                 refused or reset, or a malformed response; the summary's errors)"
            ),
        ),
    }
}

/// `sluice mock-downstream`: its stats on stdout when it stops.
fn mock_downstream(args: &sluice::tools::mock_downstream::MockArgs) -> Outcome {
    let result = sluice::tools::mock_downstream::run(args, &mut |addr| {
        print_line(&format!("mock-downstream: listening on http://{addr}"));
    });
    match result {
        Ok(stats) => {
            print_line(&sluice::tools::mock_downstream::stats_json(&stats));
            Ok(())
        }
        Err(e) => fail(e.exit_code(), format!("mock-downstream: {e}")),
    }
}

/// An offline tool's `--data-dir` must exist and hold sluice data (a `wal` or `dlq` directory):
/// a mistyped path exits 2 naming it instead of reading as an empty, healthy data dir.
fn data_dir_check(data_dir: &std::path::Path) -> Outcome {
    if !data_dir.is_dir() {
        return fail(
            2,
            format!(
                "data dir {} does not exist or is not a directory",
                data_dir.display()
            ),
        );
    }
    if !data_dir.join("wal").is_dir() && !data_dir.join("dlq").is_dir() {
        return fail(
            2,
            format!(
                "data dir {} holds no sluice data (no wal/ or dlq/ directory)",
                data_dir.display()
            ),
        );
    }
    Ok(())
}

/// `sluice wal verify|inspect`.
fn wal(command: WalCommand) -> Outcome {
    data_dir_check(match &command {
        WalCommand::Verify { data_dir } | WalCommand::Inspect { data_dir, .. } => data_dir,
    })?;
    match command {
        WalCommand::Verify { data_dir } => {
            match sluice::wal::manifest::check(&data_dir.join("wal")) {
                Err(e) => fail(3, e.to_string()),
                Ok(m) => {
                    println!("{m}");
                    verify_logs(&data_dir)
                }
            }
        }
        WalCommand::Inspect { data_dir, json: _ } => inspect(&data_dir),
    }
}

/// `sluice wal inspect`: one JSON object per event on stdout.
fn inspect(data_dir: &std::path::Path) -> Outcome {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    // Dead letters' reasons from the DLQ (empty when it cannot be read: the outcome is still
    // shown).
    let reasons = sluice::dispatch::dlq::tools::reasons(data_dir);
    let reason = |id: &str| reasons.get(id).copied();
    let mut progress = sluice::tools::progress::on_stderr("events");
    let inspect = sluice::wal::tools::inspect_json_with;
    match inspect(data_dir, &mut out, &reason, &mut *progress) {
        Ok(()) => {
            let _ = out.flush();
            Ok(())
        }
        Err(e) => fail(1, e.to_string()),
    }
}

/// `sluice check`: the configuration `serve` with the same flags would run, as a manifest.
fn check(args: CheckArgs) -> Outcome {
    let overrides = args.flags.overrides(false);
    match Config::load(Some(&args.config), &overrides) {
        Ok(cfg) => {
            for w in cfg.warnings() {
                eprintln!("sluice: warning: {w}");
            }
            for line in sluice::config::render::routes_summary(&cfg) {
                eprintln!("sluice: {line}");
            }
            if let Some(line) = sluice::config::render::replication_summary(&cfg) {
                eprintln!("sluice: {line}");
            }
            print_line(sluice::config::render::render(&cfg).trim_end());
            Ok(())
        }
        Err(e) => fail(2, e.to_string()),
    }
}

/// `wal verify`'s check of every log (after the manifest's).
fn verify_logs(data_dir: &std::path::Path) -> Outcome {
    match sluice::wal::tools::verify_all_with(
        data_dir,
        &mut *sluice::tools::progress::on_stderr("records"),
    ) {
        Ok(reports) => {
            for r in reports.iter().filter(|r| r.is_clean()) {
                println!("{r}");
            }
            match reports.iter().find(|r| !r.is_clean()) {
                None => Ok(()),
                Some(bad) => fail(3, bad.to_string()),
            }
        }
        Err(e) => fail(3, e.to_string()),
    }
}

fn dlq(command: DlqCommand) -> Outcome {
    use sluice::dispatch::dlq::tools as dlq_tools;
    data_dir_check(match &command {
        DlqCommand::List { data_dir, .. }
        | DlqCommand::Show { data_dir, .. }
        | DlqCommand::Discard { data_dir, .. }
        | DlqCommand::Replay { data_dir, .. } => data_dir,
    })?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = match command {
        DlqCommand::List { data_dir, json } => match dlq_tools::list(&data_dir, json, &mut out) {
            Ok(listed) if listed.unreadable > 0 => {
                let _ = out.flush();
                return fail(
                    3,
                    format!(
                        "{} DLQ entries listed, {} unreadable (listed with their problem; \
                         `dlq discard ID` removes one)",
                        listed.entries, listed.unreadable
                    ),
                );
            }
            other => other.map(drop),
        },
        DlqCommand::Show { id, data_dir } => dlq_tools::show_json(&data_dir, &id, &mut out),
        DlqCommand::Discard { id, data_dir } => dlq_tools::discard(&data_dir, &id),
        DlqCommand::Replay {
            id: Some(id),
            data_dir,
            ..
        } => dlq_tools::replay(&data_dir, &id).map(|r| {
            let _ = writeln!(out, "{}", r.event_id);
        }),
        DlqCommand::Replay {
            id: None,
            data_dir,
            reason,
            trigger,
            since,
            limit,
            ..
        } => return replay_all(&data_dir, reason, trigger, since, limit),
    };
    let _ = out.flush();
    result.or_else(|e| fail(e.exit_code(), e.to_string()))
}

/// `sluice events show|list|ledger`.
fn events(command: EventsCommand) -> Outcome {
    use sluice::dispatch::event_tools;
    data_dir_check(match &command {
        EventsCommand::Show { data_dir, .. }
        | EventsCommand::List { data_dir, .. }
        | EventsCommand::Ledger { data_dir, .. } => data_dir,
    })?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = match command {
        EventsCommand::Show { id, data_dir, json } => {
            event_tools::show(&data_dir, &id, json, &mut out)
        }
        EventsCommand::List {
            data_dir,
            trigger,
            status,
            since,
            until,
            limit,
            cursor,
            json,
        } => event_tools::list_filter(event_tools::ListArgs {
            trigger,
            status,
            since: since.as_deref(),
            until: until.as_deref(),
            limit,
            cursor: cursor.as_deref(),
        })
        .and_then(|f| event_tools::list(&data_dir, &f, json, &mut out)),
        EventsCommand::Ledger { data_dir, json } => event_tools::ledger(&data_dir, json, &mut out),
    };
    let _ = out.flush();
    result.or_else(|e| fail(e.code, e.msg))
}

/// `sluice replication restore` (exit codes: module header).
fn replication(command: ReplicationCommand) -> Outcome {
    let ReplicationCommand::Restore {
        config,
        node,
        data_dir,
    } = command;
    let overrides = Overrides {
        data_dir: Some(data_dir.clone()),
        ..Overrides::default()
    };
    let cfg = match Config::load(Some(&config), &overrides) {
        Ok(c) => c,
        Err(e) => return fail(2, e.to_string()),
    };
    let Some(spec) = cfg.replication.clone() else {
        return fail(
            2,
            format!("{} has no [replication] section", config.display()),
        );
    };
    if !sluice::replication::restore::valid_node(&node) {
        return fail(
            2,
            sluice::replication::restore::RestoreError::BadNode(node).to_string(),
        );
    }
    let spec = sluice::replication::ReplicationSpec { node, ..spec };
    let wal = sluice::sched::runtime::wal_config(&cfg, data_dir.join("wal"));
    let max_dlq = cfg.dispatch.max_dlq_entries as usize;
    match sluice::ops::restore::restore(&spec, &spec.node, &data_dir, &wal, max_dlq) {
        Ok(Some(r)) => {
            for line in sluice::ops::restore::report(&spec.node, &r) {
                print_line(&line);
            }
            Ok(())
        }
        Ok(None) => fail(
            4,
            format!(
                "the stream {} holds no message of node {} ({}): nothing restored",
                spec.stream,
                spec.node,
                spec.node_filter(&spec.node)
            ),
        ),
        Err(e) => fail(e.exit_code(), e.to_string()),
    }
}

/// `sluice dlq replay --all`: exit 0, 2 for a bad filter, 3 when some entry was unreadable
/// (the readable ones are replayed), 1 for a WAL or DLQ failure.
fn replay_all(
    data_dir: &std::path::Path,
    reason: Option<String>,
    trigger: Option<String>,
    since: Option<String>,
    limit: Option<usize>,
) -> Outcome {
    use sluice::dispatch::dlq::{bulk as bulk_replay, tools as dlq_tools};
    let filter = (|| {
        Ok::<_, String>(bulk_replay::ReplayFilter {
            reason: reason
                .as_deref()
                .map(bulk_replay::parse_reason)
                .transpose()?,
            trigger,
            since_ms: since.as_deref().map(bulk_replay::parse_since).transpose()?,
        })
    })();
    let filter = match filter {
        Ok(f) => f,
        Err(e) => return fail(2, e),
    };
    let mut progress = sluice::tools::progress::on_stderr("entries");
    match dlq_tools::replay_all_with(data_dir, &filter, limit, &mut *progress) {
        Ok(r) => {
            print_line(&format!(
                "replayed {} remaining {}",
                r.replayed, r.remaining
            ));
            if r.unreadable > 0 {
                return fail(
                    3,
                    format!(
                        "{} DLQ entry files unreadable and left in place (`dlq list` names them)",
                        r.unreadable
                    ),
                );
            }
            Ok(())
        }
        Err(e) => fail(e.exit_code(), e.to_string()),
    }
}

/// Prints a line on stdout, ignoring a closed pipe (`sluice loadgen ... | head`).
fn print_line(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("sluice").chain(args.iter().copied()))
    }

    fn code(outcome: Outcome) -> u8 {
        outcome.err().map_or(0, |f| f.code)
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn dlq_replay_takes_an_id_or_all_but_not_both() {
        assert!(
            parse(&["dlq", "replay", "--data-dir", "d"]).is_err(),
            "no id, no --all"
        );
        assert!(parse(&["dlq", "replay", "ID", "--all", "--data-dir", "d"]).is_err());
        let all = parse(&["dlq", "replay", "--all", "--limit", "5", "--data-dir", "d"]).unwrap();
        assert!(matches!(
            all.command,
            Command::Dlq {
                command: DlqCommand::Replay {
                    id: None,
                    all: true,
                    limit: Some(5),
                    ..
                }
            }
        ));
    }

    #[test]
    fn serve_flags_become_overrides_and_check_needs_a_manifest() {
        let cli = parse(&[
            "serve",
            "--workers",
            "3",
            "--io",
            "mio",
            "--accept-wal-loss",
        ])
        .unwrap();
        let Command::Serve {
            flags,
            accept_wal_loss,
            config,
        } = cli.command
        else {
            panic!("not serve");
        };
        let o = flags.overrides(accept_wal_loss);
        assert_eq!(
            (o.workers, o.io.as_deref(), o.accept_wal_loss),
            (Some(3), Some("mio"), true)
        );
        assert_eq!(config, None);
        assert!(parse(&["check"]).is_err(), "check reads a manifest");
    }

    #[test]
    fn a_load_run_exits_1_only_when_requests_failed_on_io() {
        assert_eq!(loadgen_errors(0), Ok(()));
        let f = loadgen_errors(3).unwrap_err();
        assert_eq!(f.code, 1);
        assert!(
            f.msg.starts_with("loadgen: 3 requests failed on I/O"),
            "{}",
            f.msg
        );
    }

    #[test]
    fn an_invalid_manifest_exits_2() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "this is = = not toml\n").unwrap();
        let cli = parse(&["check", "--config", path.to_str().unwrap()]).unwrap();
        let Command::Check(args) = cli.command else {
            panic!("not check");
        };
        assert_eq!(code(check(args)), 2);
    }

    #[test]
    fn dlq_tools_map_a_bad_id_to_2_a_missing_entry_to_4_and_a_bad_filter_to_2() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("dlq")).unwrap();
        let data_dir = dir.path().to_path_buf();
        let show = |id: &str| {
            dlq(DlqCommand::Show {
                id: id.to_string(),
                data_dir: data_dir.clone(),
            })
        };
        assert_eq!(code(show("not-an-id")), 2);
        assert_eq!(code(show("01ARZ3NDEKTSV4RRFFQ69G5FAV")), 4);
        let bad_reason = replay_all(&data_dir, Some("bored".into()), None, None, None);
        assert_eq!(code(bad_reason), 2);
        let bad_since = replay_all(&data_dir, None, None, Some("yesterday".into()), None);
        assert_eq!(code(bad_since), 2);
    }

    #[test]
    fn replication_restore_needs_a_replication_section_and_a_node_name_with_2() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain.toml");
        std::fs::write(&plain, "").unwrap();
        let with = dir.path().join("with.toml");
        std::fs::write(
            &with,
            "[replication]\nnats = [\"nats://127.0.0.1:1\"]\nnode = \"a\"\n",
        )
        .unwrap();
        let data = dir.path().join("data");
        let run = |config: &std::path::Path, node: &str| {
            let argv = [
                "replication",
                "restore",
                "--config",
                config.to_str().unwrap(),
                "--node",
                node,
                "--data-dir",
                data.to_str().unwrap(),
            ];
            match parse(&argv).unwrap().command {
                Command::Replication { command } => replication(command),
                _ => panic!("not replication"),
            }
        };
        let f = run(&plain, "a").unwrap_err();
        assert_eq!(f.code, 2);
        assert!(f.msg.contains("no [replication] section"), "{}", f.msg);
        let f = run(&with, "a.b").unwrap_err();
        assert_eq!(f.code, 2);
        assert!(f.msg.contains("\"a.b\" is not a node name"), "{}", f.msg);
        assert!(parse(&["replication", "restore", "--config", "c"]).is_err());
        assert!(!data.exists(), "nothing created");
    }

    #[test]
    fn offline_tools_refuse_a_missing_or_foreign_data_dir_with_2_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("no-such-dir");
        let empty = tmp.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let id = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
        let commands: [&[&str]; 10] = [
            &["events", "ledger"],
            &["events", "list"],
            &["events", "show", id],
            &["dlq", "list"],
            &["dlq", "show", id],
            &["dlq", "discard", id],
            &["dlq", "replay", id],
            &["dlq", "replay", "--all"],
            &["wal", "verify"],
            &["wal", "inspect"],
        ];
        for dir in [&missing, &empty] {
            let d = dir.to_str().unwrap();
            for args in commands {
                let mut argv = args.to_vec();
                argv.extend(["--data-dir", d]);
                let outcome = match parse(&argv).unwrap().command {
                    Command::Events { command } => events(command),
                    Command::Dlq { command } => dlq(command),
                    Command::Wal { command } => wal(command),
                    _ => panic!("{argv:?} is not an offline tool"),
                };
                let f = outcome.unwrap_err();
                assert_eq!(f.code, 2, "{argv:?}: {}", f.msg);
                assert!(f.msg.contains(d), "{argv:?}: {}", f.msg);
            }
        }
    }
}
