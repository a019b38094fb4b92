#!/usr/bin/env python3
"""An accepted event's way through the tree, checked against the source and measured.

What it reads. DESIGN.md's section whose heading contains "An accepted event's way": the first
Markdown table after that heading, one row per function the event passes through, in order. The
first cell of a row that holds a backticked `path::function` (`src/wal/append/writer.rs::commit_batch`)
names the step; rows without one (a header, a separator) are skipped. Other cells are prose.

What it checks. Every named file exists and defines `fn function` (comments and strings are
blanked first, as `.ci/structure.py` does, so a name in a doc comment does not count).

A row whose step cell starts with `*hand-off*` is a hand-off: a loop or thread that carries
the event to the next step without handling its data (the core's loop, the commit helper).

What it measures. The top-level folder of each row is the first segment under `src/`
(`src/sign.rs` is `sign`, `src/main.rs` is `bin`, as in `.ci/structure.py`); a crossing is two
consecutive rows in different folders. It prints two counts: over the steps alone (hand-offs
left out; the structure issue's target is at most 12) and over the whole way, hand-offs
included (its target: at most 16); with `--report`, every crossing of the whole way.

Usage: .ci/walk.py [--design FILE] [--root DIR] [--report] [--max N] [--max-all N]
  exit 0 when the table is found and every function exists (and the steps' crossings are at
  most --max, the whole way's at most --max-all); 1 otherwise.
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
    """(line number, path, function, hand-off) of each row of the table after the heading."""
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
            for k, cell in enumerate(cells[:2]):  # a step number may come first
                m = STEP.search(cell)
                if m:
                    rest = cells[k + 1] if k + 1 < len(cells) else ""
                    handoff = rest.strip().startswith("*hand-off*")
                    rows.append((i + 1, m.group(1), m.group(2), handoff))
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
    """(rows, problems): rows are (line, path, function, folder, hand-off)."""
    if not design_path.exists():
        return [], [f"{design_path} does not exist"]
    rows = table_rows(design_path.read_text())
    if rows is None:
        return [], [f"{design_path}: no heading containing {HEADING!r}"]
    if not rows:
        return [], [f"{design_path}: no `path::function` rows in the table after {HEADING!r}"]
    steps, problems = [], []
    for line, path, function, handoff in rows:
        file = root / path
        if not file.is_file():
            problems.append(f"{design_path.name}:{line}: {path} does not exist")
        elif not defines(file, function):
            problems.append(f"{design_path.name}:{line}: {path} defines no fn {function}")
        steps.append((line, path, function, folder(path), handoff))
    return steps, problems


def crossings(steps):
    return [(a, b) for a, b in zip(steps, steps[1:]) if a[3] != b[3]]


def steps_only(rows):
    """The rows that are steps (hand-offs left out)."""
    return [r for r in rows if not r[4]]


def folders(rows):
    out = []
    for r in rows:
        if not out or out[-1] != r[3]:
            out.append(r[3])
    return out


def main() -> int:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser()
    ap.add_argument("--design", default=str(here.parent / "DESIGN.md"))
    ap.add_argument("--root", default=str(here.parent))
    ap.add_argument("--report", action="store_true", help="list every crossing")
    ap.add_argument("--max", type=int, default=None, help="fail above this many crossings of the steps")
    ap.add_argument("--max-all", type=int, default=None,
                    help="fail above this many crossings of the whole way, hand-offs included")
    args = ap.parse_args()
    rows, problems = walk(Path(args.design), Path(args.root))
    for p in problems:
        print(f"MISSING {p}")
    steps = steps_only(rows)
    cross, cross_all = crossings(steps), crossings(rows)
    if args.report:
        for a, b in cross_all:
            print(f"  {a[3]} -> {b[3]}: {a[1]}::{a[2]} -> {b[1]}::{b[2]}")
    print(f"walk: {len(steps)} steps, {len(cross)} crossings of top-level folders "
          f"(target <= 12): {' -> '.join(folders(steps))}")
    print(f"walk: the whole way, {len(rows) - len(steps)} hand-offs included: {len(rows)} rows, "
          f"{len(cross_all)} crossings (target <= 16): {' -> '.join(folders(rows))}")
    if problems:
        print("walk: the table names functions the tree does not have (see above)")
        return 1
    if args.max is not None and len(cross) > args.max:
        print(f"walk: {len(cross)} crossings, more than --max {args.max}")
        return 1
    if args.max_all is not None and len(cross_all) > args.max_all:
        print(f"walk: {len(cross_all)} crossings of the whole way, more than --max-all {args.max_all}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
