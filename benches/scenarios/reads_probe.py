#!/usr/bin/env python3
"""Operator reads beside ingest (benches/scenarios/reads.sh): probes `/healthz` and, with
`--reads`, runs a closed loop of event lists and lookups, for a fixed time; prints a JSON summary
of their latencies (ms). Bounded: every request has a 10 s timeout; the run ends after
`--seconds`. Standard library only."""
import argparse
import http.client
import json
import random
import threading
import time


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int((len(xs) - 1) * p))] * 1000, 3)


def summary(xs):
    return {"n": len(xs), "p50_ms": pct(xs, 0.5), "p99_ms": pct(xs, 0.99),
            "max_ms": round(max(xs) * 1000, 3) if xs else None}


def get(conn, path):
    t = time.monotonic()
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    return r.status, body, time.monotonic() - t


def sample_ids(host, port, first_ms, last_ms, n):
    """`n` event ids spread over the log: the newest event at or before random instants."""
    conn = http.client.HTTPConnection(host, port, timeout=10)
    ids = []
    for _ in range(n * 3):
        if len(ids) >= n:
            break
        until = random.randint(first_ms, last_ms)
        status, body, _ = get(conn, f"/api/v1/events?trigger=t&limit=1&until={until}")
        if status == 200:
            ids += [e["id"] for e in json.loads(body)["events"]]
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--reads", action="store_true")
    ap.add_argument("--first-ms", type=int, default=0)
    ap.add_argument("--last-ms", type=int, default=0)
    a = ap.parse_args()
    host, port = a.addr.split(":")
    port = int(port)
    ids = sample_ids(host, port, a.first_ms, a.last_ms, 200) if a.reads else []
    stop = time.monotonic() + a.seconds
    probes, lists, lookups, errors = [], [], [], []

    def probe():
        conn = http.client.HTTPConnection(host, port, timeout=10)
        while time.monotonic() < stop:
            status, _, took = get(conn, "/healthz")
            if status != 200:
                errors.append(f"healthz {status}")
            probes.append(took)
            time.sleep(0.01)

    def read():
        conn = http.client.HTTPConnection(host, port, timeout=10)
        while time.monotonic() < stop:
            status, _, took = get(conn, "/api/v1/events?trigger=t&limit=5")
            (lists if status == 200 else errors).append(took if status == 200 else f"list {status}")
            status, body, took = get(conn, f"/api/v1/events/{random.choice(ids)}")
            (lookups if status == 200 else errors).append(took if status == 200 else f"lookup {status}")

    threads = [threading.Thread(target=probe) for _ in range(4)]
    if a.reads:
        threads.append(threading.Thread(target=read))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"healthz": summary(probes), "lists": summary(lists),
                      "lookups": summary(lookups), "ids": len(ids), "errors": errors[:10]}))


if __name__ == "__main__":
    main()
