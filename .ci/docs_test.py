#!/usr/bin/env python3
"""Self-test of .ci/docs.py on small trees written to a temp dir (run by .ci/run)."""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import docs  # noqa: E402

LAYOUT = "## Layout\n\n| path | what |\n|---|---|\n| `src/wal` | logs |\n\n## Next\n"


def tree(files: dict) -> Path:
    root = Path(tempfile.mkdtemp())
    (root / "src/wal").mkdir(parents=True)
    (root / "src/wal/mod.rs").write_text("//! The log.\n")
    (root / "benches/e2e").mkdir(parents=True)
    (root / "benches/e2e/ab.sh").write_text("#!/bin/sh\n")
    (root / "README.md").write_text(LAYOUT)
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def check(name, files, want):
    """`want`: the substrings the misses must hold, one per miss, in order."""
    root = tree(files)
    misses = docs.check_layout(root) + docs.check_links(root)
    ok = len(misses) == len(want) and all(w in m for w, m in zip(want, misses))
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f": {misses}, want {want}"))
    return ok


CASES = [
    ("clean", {"BENCHMARKS.md": "`benches/e2e/ab.sh 5`, `src/wal/mod.rs::open`, `src/wal/{mod.rs}`\n"}, []),
    ("missing file", {"DESIGN.md": "see `src/wal/gone.rs`\n"}, ["DESIGN.md:1: src/wal/gone.rs"]),
    ("brace alternatives", {"DESIGN.md": "`src/wal/{mod,nope}.rs`\n"}, ["src/wal/nope.rs"]),
    ("a /tmp script", {"benches/LOG.md": "ran `/tmp/ab/ab.sh`\n"}, ["names /tmp/ab/ab.sh"]),
    ("a file beside the repository", {"RELIABILITY.md": "see DIRECTION.md\n"}, ["names DIRECTION.md"]),
    ("module doc", {"src/wal/x.rs": "//! see `src/wal/none.rs`\n"}, ["src/wal/x.rs:1: src/wal/none.rs"]),
    ("a plain comment is not a module doc", {"src/wal/x.rs": "// see `src/wal/none.rs`\n"}, []),
    ("link up a folder", {"benches/LOG.md": "[plot](../docs/a.svg)\n"}, ["link ../docs/a.svg"]),
    ("a folder without a Layout row", {"src/ops/mod.rs": "//! ops\n"}, ["no row for src/ops"]),
]

if __name__ == "__main__":
    results = [check(*c) for c in CASES]
    sys.exit(0 if all(results) else 1)
