#!/usr/bin/env python3
"""An accepted event's way through the tree, checked against the source and measured.

What it reads. DESIGN.md's section whose heading contains "An accepted event's way": the first
Markdown table after that heading, one row per function the event passes through, in order. The
first cell of a row that holds a backticked `path::function` (`src/wal/append/writer.rs::commit_batch`)
names the step; rows without one (a header, a separator) are skipped. Other cells are prose.

What it checks. Every named file exists and defines `fn function` (comments and strings are
blanked first, as `.ci/structure.py` does, so a name in a doc comment does not count).

What it measures. The top-level folder of each step is the first segment under `src/`
(`src/sign.rs` is `sign`, `src/main.rs` is `bin`, as in `.ci/structure.py`); a crossing is two
consecutive steps in different folders. It prints the count (the structure issue's target is at
most 12) and, with `--report`, every crossing.

Usage: .ci/walk.py [--design FILE] [--root DIR] [--report] [--max N]
  exit 0 when the table is found and every function exists (and, with --max, the crossings are
  at most N); 1 otherwise.
"""

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from structure import blank  # noqa: E402

HEADING = "An accepted event's way"
STEP = re.compile(r"`((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_.-]+\.rs)::([A-Za-z_][A-Za-z0-9_]*)`")


def table_rows(design: str):
    """(line number, path, function) of each step of the table after the heading."""
    lines = design.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("#") and HEADING in ln), None)
    if start is None:
        return None
    rows, in_table = [], False
    for i in range(start + 1, len(lines)):
        ln = lines[i].strip()
        if ln.startswith("#"):
            break
        if ln.startswith("|"):
            in_table = True
            first = ln.strip("|").split("|")
            cells = [c for c in first if c.strip()]
            for cell in cells[:2]:  # a step number may come first
                m = STEP.search(cell)
                if m:
                    rows.append((i + 1, m.group(1), m.group(2)))
                    break
        elif in_table:
            break
    return rows


def folder(path: str) -> str:
    parts = Path(path).parts
    if parts and parts[0] == "src":
        parts = parts[1:]
    if not parts:
        return "?"
    if len(parts) == 1:
        stem = Path(parts[0]).stem
        return "bin" if stem == "main" else stem
    return parts[0]


def defines(file: Path, function: str) -> bool:
    code = blank(file.read_text())
    return re.search(rf"\bfn\s+{re.escape(function)}\b", code) is not None


def walk(design_path: Path, root: Path):
    """(steps, problems): steps are (line, path, function, folder)."""
    if not design_path.exists():
        return [], [f"{design_path} does not exist"]
    rows = table_rows(design_path.read_text())
    if rows is None:
        return [], [f"{design_path}: no heading containing {HEADING!r}"]
    if not rows:
        return [], [f"{design_path}: no `path::function` rows in the table after {HEADING!r}"]
    steps, problems = [], []
    for line, path, function in rows:
        file = root / path
        if not file.is_file():
            problems.append(f"{design_path.name}:{line}: {path} does not exist")
        elif not defines(file, function):
            problems.append(f"{design_path.name}:{line}: {path} defines no fn {function}")
        steps.append((line, path, function, folder(path)))
    return steps, problems


def crossings(steps):
    return [(a, b) for a, b in zip(steps, steps[1:]) if a[3] != b[3]]


def main() -> int:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser()
    ap.add_argument("--design", default=str(here.parent / "DESIGN.md"))
    ap.add_argument("--root", default=str(here.parent))
    ap.add_argument("--report", action="store_true", help="list every crossing")
    ap.add_argument("--max", type=int, default=None, help="fail above this many crossings")
    args = ap.parse_args()
    steps, problems = walk(Path(args.design), Path(args.root))
    for p in problems:
        print(f"MISSING {p}")
    cross = crossings(steps)
    if args.report:
        for a, b in cross:
            print(f"  {a[3]} -> {b[3]}: {a[1]}::{a[2]} -> {b[1]}::{b[2]}")
    folders = []
    for s in steps:
        if not folders or folders[-1] != s[3]:
            folders.append(s[3])
    print(f"walk: {len(steps)} steps, {len(cross)} crossings of top-level folders "
          f"(target <= 12): {' -> '.join(folders)}")
    if problems:
        print("walk: the table names functions the tree does not have (see above)")
        return 1
    if args.max is not None and len(cross) > args.max:
        print(f"walk: {len(cross)} crossings, more than --max {args.max}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
