#!/usr/bin/env python3
"""Self-test of .ci/walk.py on small trees written to a temp dir (run by .ci/run)."""

import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import walk  # noqa: E402


def tree(design: str, files: dict) -> Path:
    root = Path(tempfile.mkdtemp())
    (root / "DESIGN.md").write_text(textwrap.dedent(design))
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return root


def check(name, design, files, want_steps, want_crossings, want_problems, want_all=None):
    root = tree(design, files)
    rows, problems = walk.walk(root / "DESIGN.md", root)
    steps = walk.steps_only(rows)
    got = (len(steps), len(walk.crossings(steps)), len(problems))
    want = (want_steps, want_crossings, want_problems)
    if want_all is not None:
        got += (len(walk.crossings(rows)),)
        want += (want_all,)
    if got != want:
        print(f"FAIL {name}: (steps, crossings, problems) {got}, want {want}; {problems}")
        return False
    print(f"ok   {name}")
    return True


TABLE = """\
# Design

## An accepted event's way

| # | function | what |
|---|---|---|
| 1 | `src/net/conn.rs::read_into` | bytes in |
| 2 | `src/ingest/pipeline/mod.rs::ingest` | admitted |
| 3 | `src/ingest/pipeline/mod.rs::complete` | 202 |
| 4 | `src/wal/append/writer.rs::commit_batch` | durable |
| 5 | `src/sched/commit.rs::serve` | *hand-off*: the helper thread |
| 6 | `src/sign.rs::sign` | a leaf file is its own folder |

## Next section

| `src/net/conn.rs::not_counted` | a later table is not the walk |
"""
FILES = {
    "src/net/conn.rs": "pub fn read_into() {}\n",
    "src/ingest/pipeline/mod.rs": "pub fn ingest() {}\nfn complete() {}\n",
    "src/wal/append/writer.rs": "pub fn commit_batch<'a>(x: &'a u8) {}\n",
    "src/sign.rs": "pub mod standard_webhooks {\n    pub fn sign() {}\n}\n",
    "src/sched/commit.rs": "fn serve() {}\n",
}

ok = all([
    check("every step found; folder changes counted; a hand-off counted in the whole way only",
          TABLE, FILES, 5, 3, 0, want_all=4),
    check("a function named only in a comment or string is missing", TABLE, {
        **FILES,
        "src/wal/append/writer.rs": "// fn commit_batch\nconst S: &str = \"fn commit_batch\";\n",
    }, 5, 3, 1),
    check("a file that does not exist is missing", TABLE, {
        k: v for k, v in FILES.items() if k != "src/sign.rs"
    }, 5, 3, 1),
    check("no heading is a problem", "# Design\n\n| `src/a.rs::f` |\n", {"src/a.rs": "fn f() {}\n"},
          0, 0, 1),
])
print("walk self-test:", "passed" if ok else "FAILED")
sys.exit(0 if ok else 1)
