//! A damaged dead-letter entry among good ones (issue 11, item 9): `sluice dlq list` lists the
//! good entries and the damaged one as unreadable (exit 3), `sluice dlq show ID` names the
//! problem (exit 3), and discarding the damaged entry makes the listing clean again.

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

    // Flip one byte in the middle of the second entry's file (its CRC no longer matches).
    let bad = &ids[1];
    let path = dir.join("dlq").join(bad);
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
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
