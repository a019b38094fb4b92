#!/usr/bin/env python3
"""Checks the module dependency rules of issue 10 ("import loops gone").

An edge A -> B exists when a non-comment line of a file of module A names a path of module B:
`crate::b::...` (also inside one level of `use crate::x::{...}` braces) or `super::...` resolved
against the file's own module. Files of B itself never count as A's.

Two kinds of rules:
- FORBIDDEN: the edge A -> B must not exist (the dependency goes the other way, or not at all);
- NO_LOOP: A -> B and B -> A must not both exist.

Usage: .ci/import_edges.py [src-dir]   (exit 1 and a list of the offending lines on failure)
"""

import re
import sys
from pathlib import Path

FORBIDDEN = [
    # The runtime starts the workers; a worker never reaches back into it.
    ("sched::worker", "sched::runtime"),
    # The pump hands events to dispatch through links, never through the worker's types.
    ("sched::pump", "sched::worker"),
    # The exposition is below both the runtime and the worker's scrape path.
    ("sched::exposition", "sched::worker"),
    ("sched::exposition", "sched::runtime"),
    # The ingest pipeline is sans-IO and below the loop: no scheduler, no connection layer.
    ("ingest", "sched"),
    ("ingest", "net::conn"),
    # The connection layer knows no scheduler and no domain type (`conn` is generic over its
    # pending slot; the I/O backends move bytes).
    ("net", "sched"),
    ("net::conn", "ingest"),
    ("net::conn", "wal"),
    ("net::io", "ingest"),
    ("net::io", "wal"),
    ("net::io", "dispatch"),
]

NO_LOOP = [
    ("sched::runtime", "sched::worker"),
    ("ingest::bucket", "ingest::sources"),
    ("sched::pump", "sched::worker"),
    ("ingest::pipeline", "ingest::backlog"),
]


def module_of(src: Path, f: Path) -> str:
    parts = list(f.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return "::".join(parts)


PATH = re.compile(r"\b(crate|super)((?:::(?:[A-Za-z_][A-Za-z0-9_]*|\{[^}]*\}))+)")


def referenced(module: str, line: str):
    """Yields the module paths `line` names, as `a::b::c` (crate-relative)."""
    for m in PATH.finditer(line):
        root, rest = m.group(1), m.group(2)
        prefix, brace, group = rest.partition("{")
        segs = [s for s in prefix.split("::") if s]
        if root == "super":
            base = module.split("::")[:-1]
            while segs and segs[0] == "super":
                base, segs = base[:-1], segs[1:]
            segs = base + segs
        if not brace:
            yield "::".join(segs)
            continue
        for item in group.rstrip("}").split(","):
            name = [s for s in item.strip().split(" as ")[0].split("::") if s]
            if name == ["self"] or not name:
                yield "::".join(segs)
            else:
                yield "::".join(segs + name)


def within(path: str, module: str) -> bool:
    return path == module or path.startswith(module + "::")


def edges(src: Path):
    """(from module, to path, file, line number, text) for every reference."""
    for f in sorted(src.rglob("*.rs")):
        module = module_of(src, f)
        for n, text in enumerate(f.read_text().splitlines(), 1):
            code = text.split("//")[0]
            if not code.strip():
                continue
            for p in referenced(module, code):
                yield module, p, f, n, text.strip()


def main() -> int:
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "src")
    all_edges = list(edges(src))

    def hits(a: str, b: str):
        return [
            e for e in all_edges if within(e[0], a) and not within(e[0], b) and within(e[1], b)
        ]

    failures = []
    for a, b in FORBIDDEN:
        for _, p, f, n, text in hits(a, b):
            failures.append(f"{f}:{n}: {a} -> {b} is forbidden: {text}")
    for a, b in NO_LOOP:
        ab, ba = hits(a, b), hits(b, a)
        if ab and ba:
            failures.append(f"import loop {a} <-> {b}:")
            shown = dict.fromkeys((f, n, text) for _, _, f, n, text in ab + ba)
            for f, n, text in list(shown)[:6]:
                failures.append(f"  {f}:{n}: {text}")
    for line in failures:
        print(line)
    if failures:
        return 1
    print(f"import edges: {len(FORBIDDEN)} forbidden edges and {len(NO_LOOP)} loops checked, none found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
