//! The I/O backend (`serve --io`, `SLUICE_IO`, `[server] io`): the one asked for is the one
//! that serves, the gauge says which, and a bad value is a start-up error. The whole suite runs
//! on both backends in CI (`.ci/run` runs it again with `SLUICE_IO=mio`); these tests check
//! the selection itself.

use std::time::Duration;

use crate::dispatch::{big_buckets, manifest};
use crate::downstream::{Behavior, Downstream};
use crate::support::*;

fn gauge(server: &Server) -> String {
    let text = server.get("/metrics").text();
    text.lines()
        .find(|l| l.starts_with("sluice_io_backend{"))
        .unwrap_or_else(|| panic!("no sluice_io_backend in /metrics:\n{text}"))
        .to_string()
}

#[test]
fn each_backend_ingests_delivers_and_says_so() {
    for backend in ["mio", "uring"] {
        let down = Downstream::start(Behavior::default());
        let uri = down.uri("/sink");
        let config = manifest(&uri, "max_in_flight = 4", "");
        let server = Server::start(big_buckets(Opts::config(&config)).arg("--io").arg(backend));
        assert_eq!(
            gauge(&server),
            format!("sluice_io_backend{{backend=\"{backend}\"}} 1")
        );
        assert!(
            server.stderr().contains("sluice: io backend:"),
            "{}",
            server.stderr()
        );
        // Small events on one connection, then a body larger than many receive buffers.
        let mut client = server.client();
        for i in 0..20 {
            let r = client.post("/hooks/t", format!("event {i}").as_bytes(), &[]);
            assert_eq!(r.status, 202, "{backend}: {}", r.text());
        }
        let big = vec![b'x'; 3 << 20];
        let r = client.post("/hooks/t", &big, &[]);
        assert_eq!(r.status, 202, "{backend}: {}", r.text());
        let all = down.wait(Duration::from_secs(10), |seen| seen.len() >= 21);
        assert!(all, "{backend}: {} of 21 delivered", down.count());
        let seen = down.seen();
        for i in 0..20 {
            let body = format!("event {i}");
            let n = seen.iter().filter(|s| s.body == body.as_bytes()).count();
            assert_eq!(n, 1, "{backend}: {body} delivered once");
        }
        assert!(
            seen.iter().any(|s| s.body == big),
            "{backend}: big body delivered whole"
        );
        // The io_uring bounds' families, 0 once every connection is answered and open.
        let metrics = server.get("/metrics").text();
        for family in [
            "sluice_io_retired_connections{core=\"0\"} 0",
            "sluice_io_receive_pool_empty_total 0",
        ] {
            assert!(metrics.contains(family), "{backend}: no {family}");
        }
    }
}

#[test]
fn the_flag_beats_the_environment_and_a_bad_value_is_refused() {
    let server = Server::start(Opts::default().env("SLUICE_IO", "mio"));
    assert_eq!(gauge(&server), "sluice_io_backend{backend=\"mio\"} 1");
    let server = Server::start(
        Opts::default()
            .env("SLUICE_IO", "mio")
            .arg("--io")
            .arg("uring"),
    );
    assert_eq!(gauge(&server), "sluice_io_backend{backend=\"uring\"} 1");

    let f = Server::start_in(temp_root(), Opts::default().arg("--io").arg("epoll"))
        .expect_err("started with --io epoll");
    assert_eq!(f.status.and_then(|s| s.code()), Some(2), "{}", f.stderr);
    assert!(
        f.stderr.contains("\"epoll\" is not an I/O backend"),
        "{}",
        f.stderr
    );
    let f = Server::start_in(temp_root(), Opts::default().env("SLUICE_IO", "fast"))
        .expect_err("started with SLUICE_IO=fast");
    assert_eq!(f.status.and_then(|s| s.code()), Some(2), "{}", f.stderr);
    assert!(f.stderr.contains("SLUICE_IO"), "{}", f.stderr);
}

#[test]
fn the_ring_commit_path_answers_after_the_sync_and_delivers() {
    let down = Downstream::start(Behavior::default());
    let config =
        manifest(&down.uri("/sink"), "max_in_flight = 4", "") + "\n[wal]\ncommit = \"ring\"\n";
    let server = Server::start(big_buckets(Opts::config(&config)).arg("--io").arg("uring"));
    assert!(
        server
            .stderr()
            .contains("sluice: wal commit: on each core's io_uring ring"),
        "{}",
        server.stderr()
    );
    let mut clients: Vec<_> = (0..4).map(|_| server.client()).collect();
    for i in 0..40 {
        let r = clients[i % 4].post("/hooks/t", format!("ring {i}").as_bytes(), &[]);
        assert_eq!(r.status, 202, "{}", r.text());
    }
    assert!(
        down.wait(Duration::from_secs(10), |seen| seen.len() >= 40),
        "{} of 40 delivered",
        down.count()
    );
    let seen = down.seen();
    for i in 0..40 {
        let body = format!("ring {i}");
        let n = seen.iter().filter(|s| s.body == body.as_bytes()).count();
        assert_eq!(n, 1, "{body} delivered once");
    }
    let metrics = server.get("/metrics").text();
    let syncs: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("sluice_wal_sync_seconds_count"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(syncs >= 1, "no sync counted:\n{metrics}");
    // Where a ring cannot commit, the server does not start.
    let f = Server::start_in(
        temp_root(),
        Opts::default()
            .env("SLUICE_WAL_COMMIT", "ring")
            .arg("--io")
            .arg("mio"),
    )
    .expect_err("ring commit on mio must not start");
    assert!(
        f.stderr.contains("needs the io_uring backend"),
        "{}",
        f.stderr
    );
}
