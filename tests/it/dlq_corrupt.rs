//! A damaged dead-letter entry among good ones (issue 11, item 9): `sluice dlq list` lists the
//! good entries and the damaged one as unreadable (exit 3), `sluice dlq show ID` names the
//! problem (exit 3), and discarding the damaged entry makes the listing clean again. And the
//! upgrade (issue 12 item 3): a DLQ in the one-file-per-entry layout is listed, shown, replayed
//! and discarded by the batch-file server and tools, torn files reported, never dropped.

use std::time::Duration;

use crate::downstream::{Behavior, Downstream};
use crate::support::*;

fn list(data_dir: &std::path::Path, json: bool) -> CliOutput {
    let mut args = vec!["dlq", "list", "--data-dir", path_str(data_dir)];
    if json {
        args.push("--json");
    }
    run_cli(&args)
}

fn json_lines(out: &CliOutput) -> Vec<serde_json::Value> {
    out.stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// The batch file holding entry `id`, and the record's offset and length in it.
pub(crate) fn find_record(dlq: &std::path::Path, id: &str) -> (std::path::PathBuf, usize, usize) {
    for e in std::fs::read_dir(dlq).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if !(name.starts_with("B-") && name.ends_with(".dlq")) {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let scanned =
            sluice::dispatch::dlq::batch::scan(&bytes, sluice::dispatch::dlq::check_record);
        if let Some(f) = scanned.records.iter().find(|f| f.id == id) {
            return (path, f.offset as usize, f.len as usize);
        }
    }
    panic!("no batch file in {} holds {id}", dlq.display());
}

#[test]
fn a_corrupt_dlq_entry_is_listed_as_unreadable_and_the_others_still_shown() {
    // Every delivery is a permanent failure: each event goes straight to the DLQ.
    let ds = Downstream::start(Behavior {
        status: 422,
        ..Behavior::default()
    });
    let uri = ds.uri("/sink");
    let manifest = crate::dispatch::manifest(&uri, "", "");
    let mut server = Server::start(Opts::config(&manifest));
    let ids: Vec<String> = (0..3)
        .map(|i| server.ingest("/hooks/t", format!("{{\"n\":{i}}}").as_bytes()))
        .collect();
    let dir = server.data_dir();
    assert!(
        wait_until(Duration::from_secs(20), || json_lines(&list(&dir, true))
            .len()
            == 3),
        "three entries were not dead-lettered: {}",
        list(&dir, true).all()
    );
    server.stop();

    // Flip one byte in the middle of the second entry's record (its CRC no longer matches).
    let bad = &ids[1];
    let (path, offset, len) = find_record(&dir.join("dlq"), bad);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[offset + len / 2] ^= 0x20;
    std::fs::write(&path, bytes).unwrap();

    let out = list(&dir, true);
    assert_eq!(out.status.code(), Some(3), "{}", out.all());
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 3, "{}", out.all());
    let good: Vec<&str> = lines
        .iter()
        .filter(|l| l.get("unreadable").is_none())
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    assert_eq!(good.len(), 2, "{}", out.all());
    assert!(good.contains(&ids[0].as_str()) && good.contains(&ids[2].as_str()));
    let unreadable: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["unreadable"] == true).collect();
    assert_eq!(unreadable.len(), 1, "{}", out.all());
    assert_eq!(unreadable[0]["id"], bad.as_str());
    let problem = unreadable[0]["problem"].as_str().unwrap();
    assert!(problem.contains("corrupt"), "{problem}");
    assert!(out.stderr.contains("1 unreadable"), "{}", out.stderr);

    let text = list(&dir, false);
    assert_eq!(text.status.code(), Some(3), "{}", text.all());
    assert!(
        text.stdout
            .lines()
            .any(|l| l.starts_with(&format!("{bad} unreadable problem="))),
        "{}",
        text.all()
    );
    assert_eq!(text.stdout.lines().count(), 3, "{}", text.all());

    let show = run_cli(&["dlq", "show", bad, "--data-dir", path_str(&dir)]);
    assert_eq!(show.status.code(), Some(3), "{}", show.all());
    assert!(
        show.stderr.contains(bad.as_str()) && show.stderr.contains("corrupt"),
        "{}",
        show.all()
    );
    // A good entry still shows.
    let show = run_cli(&["dlq", "show", &ids[0], "--data-dir", path_str(&dir)]);
    assert!(show.status.success(), "{}", show.all());

    // Discarding the damaged entry by id clears the problem.
    let out = run_cli(&["dlq", "discard", bad, "--data-dir", path_str(&dir)]);
    assert!(out.status.success(), "{}", out.all());
    let out = list(&dir, true);
    assert!(out.status.success(), "{}", out.all());
    assert_eq!(json_lines(&out).len(), 2);
}

/// Writes `entry` the way the one-file-per-entry DLQ did: `DATA_DIR/dlq/<ID>`, one record.
fn write_legacy(dlq: &std::path::Path, n: u64, trigger: &str) -> String {
    use sluice::dispatch::dlq::{encode_entry, DlqEntry, DlqReason};
    let id = format!("01JLEGACY000000000000000{n:02}");
    let entry = DlqEntry {
        id: id.clone(),
        event: sluice::wal::EventRecord {
            event_id: id.clone(),
            trigger_id: trigger.to_owned(),
            source: "p".to_owned(),
            received_at_ms: 1_700_000_000_000 + n,
            headers: vec![("content-type".to_owned(), b"application/json".to_vec())],
            body: format!("{{\"legacy\":{n}}}").into_bytes(),
            replay_of: None,
            body_json: Default::default(),
        },
        event_lsn: 5 + n,
        destination: "http:http://127.0.0.1:9/old".to_owned(),
        reason: DlqReason::RetryExhausted,
        attempts: 5,
        last_error: "HTTP 500".to_owned(),
        dead_lettered_at_ms: 1_700_000_100_000 + n,
    };
    std::fs::create_dir_all(dlq).unwrap();
    std::fs::write(dlq.join(&id), encode_entry(&entry).unwrap()).unwrap();
    id
}

#[test]
fn a_dlq_in_the_one_file_per_entry_layout_works_after_the_upgrade() {
    let ds = Downstream::start(Behavior::default());
    let uri = ds.uri("/sink");
    let root = temp_root();
    let dlq = root.path().join("data").join("dlq");
    let ids: Vec<String> = (0..4).map(|n| write_legacy(&dlq, n, "t")).collect();
    // A torn legacy file (a crash of the old binary mid-write would leave a `.tmp`; this one
    // lost its tail afterwards): reported, not dropped, and the server starts.
    let torn = ids[3].clone();
    let bytes = std::fs::read(dlq.join(&torn)).unwrap();
    std::fs::write(dlq.join(&torn), &bytes[..bytes.len() - 7]).unwrap();
    let opts = crate::dispatch::big_buckets(Opts::config(&crate::dispatch::manifest(&uri, "", "")))
        .env("SLUICE_ADMIN_TOKEN", "tok");
    let server = Server::start_in(root, opts).expect("starts on the old layout");
    let dir = server.data_dir();
    let gauge = |name: &str| {
        let (_, samples) = scrape(&server);
        samples.iter().find(|s| s.name == name).map(|s| s.value)
    };
    // The old files count against the bound (the torn one too, until discarded).
    assert_eq!(gauge("sluice_dlq_entries"), Some(4.0));
    assert!(gauge("sluice_dlq_bytes").unwrap() > 0.0);

    // Listed (three readable, the torn one unreadable) and shown, with the server running.
    let out = list(&dir, true);
    assert_eq!(out.status.code(), Some(3), "{}", out.all());
    let lines = json_lines(&out);
    let readable: Vec<&str> = lines
        .iter()
        .filter(|l| l.get("unreadable").is_none())
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    assert_eq!(readable, [&ids[0], &ids[1], &ids[2]], "{}", out.all());
    let bad: Vec<&serde_json::Value> = lines.iter().filter(|l| l["unreadable"] == true).collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0]["id"], torn.as_str());
    let show = run_cli(&["dlq", "show", &ids[1], "--data-dir", path_str(&dir)]);
    assert!(show.status.success(), "{}", show.all());
    assert!(
        show.stdout.contains(&ids[1]) && show.stdout.contains("legacy"),
        "{}",
        show.stdout
    );

    // Replayed one at a time through the server: delivered, and its file is gone.
    let auth = [("Authorization", "Bearer tok")];
    let r = server
        .client()
        .post(&format!("/admin/dlq/{}/replay", ids[0]), b"", &auth);
    assert_eq!(r.status, 202, "{}", r.text());
    assert!(
        wait_until(Duration::from_secs(5), || !dlq.join(&ids[0]).exists()),
        "the legacy file is removed with the commit after the replay's"
    );
    // Discarded offline while the server runs.
    let out = run_cli(&["dlq", "discard", &ids[1], "--data-dir", path_str(&dir)]);
    assert!(out.status.success(), "{}", out.all());
    // Bulk replay takes the rest (the discarded one is not replayed).
    let r = server.client().post("/admin/dlq/replay", b"", &auth);
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(r.json()["replayed"], 1, "{}", r.text());
    let delivered = || -> Vec<String> {
        let mut v: Vec<String> = ds
            .seen()
            .iter()
            .filter(|s| s.status == 200)
            .filter_map(|s| s.replay_of.clone())
            .collect();
        v.sort();
        v
    };
    assert!(
        wait_until(Duration::from_secs(20), || delivered().len() >= 2),
        "replays delivered: {:?}",
        delivered()
    );
    assert_eq!(delivered(), [ids[0].clone(), ids[2].clone()]);
    // The torn entry is still reported until discarded; then the DLQ is empty.
    assert!(
        wait_until(Duration::from_secs(10), || json_lines(&list(&dir, true))
            .len()
            == 1),
        "{}",
        list(&dir, true).all()
    );
    let out = run_cli(&["dlq", "show", &torn, "--data-dir", path_str(&dir)]);
    assert_eq!(out.status.code(), Some(3), "{}", out.all());
    let out = run_cli(&["dlq", "discard", &torn, "--data-dir", path_str(&dir)]);
    assert!(out.status.success(), "{}", out.all());
    let out = list(&dir, true);
    assert!(
        out.status.success() && json_lines(&out).is_empty(),
        "{}",
        out.all()
    );
    // The server picks the offline discard up when it next lists (here: a bulk replay that
    // finds nothing): the gauges drop to zero.
    let r = server.client().post("/admin/dlq/replay", b"", &auth);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(gauge("sluice_dlq_entries"), Some(0.0));
    assert_eq!(gauge("sluice_dlq_bytes"), Some(0.0));
}

/// Issue 12 item 3: dead letters are group-committed. A backlog held by an open circuit
/// (`on_open = "hold"`) is dead-lettered by the next start in `dlq` mode: every event reaches the
/// DLQ exactly once, written in far fewer batch files (commits) than entries.
#[test]
fn a_held_backlog_is_dead_lettered_in_group_commits() {
    const N: usize = 400;
    // A port nobody listens on: every connect is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let uri = format!("http://127.0.0.1:{port}/sink");
    let opts = |on_open: &str| {
        let dest = format!(
            "retry = {{ max_attempts = 1, base = \"1s\", cap = \"1s\" }}\n\
             circuit = {{ failures = 1, open_for = \"1h\", on_open = \"{on_open}\" }}"
        );
        crate::dispatch::big_buckets(Opts::config(&crate::dispatch::manifest(&uri, &dest, "")))
            .workers(1)
    };
    let mut server = Server::start(opts("hold"));
    let mut c = server.client();
    let ids: std::collections::HashSet<String> = (0..N)
        .map(|i| accepted(&c.post("/hooks/t", format!("{{\"n\":{i}}}").as_bytes(), &[])).0)
        .collect();
    drop(c);
    let before = crate::dispatch::dlq_list(&server.data_dir()).len();
    assert!(before < N / 4, "hold dead-lettered {before} of {N}");
    server.sigkill();
    let server = Server::start_in(server.root(), opts("dlq")).expect("restart in dlq mode");
    let dir = server.data_dir();
    assert!(
        wait_until(Duration::from_secs(60), || crate::dispatch::dlq_list(&dir)
            .len()
            >= N),
        "{} of {N} dead-lettered",
        crate::dispatch::dlq_list(&dir).len()
    );
    let listed: std::collections::HashSet<String> = crate::dispatch::dlq_list(&dir)
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, ids, "every accepted event, once");
    let (_, samples) = scrape(&server);
    let value = |name: &str| {
        samples
            .iter()
            .find(|s| s.name == name)
            .map_or(0.0, |s| s.value)
    };
    let entries = value("sluice_dlq_entries_written_total");
    let files = value("sluice_dlq_batch_files_written_total");
    assert!(entries >= (N - before) as f64, "{entries} entries written");
    assert!(
        files * 4.0 <= entries,
        "{files} batch files for {entries} entries: not group-committed"
    );
    let on_disk = std::fs::read_dir(dir.join("dlq"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("B-")
        })
        .count();
    assert!(
        on_disk * 4 <= N,
        "{on_disk} batch files on disk for {N} entries"
    );
}
