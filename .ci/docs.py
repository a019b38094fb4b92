#!/usr/bin/env python3
"""Docs a newcomer can trust: every file a doc names exists, and README's Layout lists every folder.

Checks:
- `layout`: every folder directly under `src/` (and `src/sign.rs`-style single-file rooms) has
  its own row in README's `## Layout` table (a cell that starts with `` `src/NAME` ``).
- `link`: every repository path named in README.md, DESIGN.md, RELIABILITY.md, BENCHMARKS.md,
  benches/LOG.md and the module docs (`//!` lines) of `src/` resolves to a file or folder in the
  repository. A path is a backticked or bare word that starts with one of the repository's
  top-level folders (`src/`, `tests/`, `benches/`, …) or `.ci/`; a trailing `::function`, `:line`
  or `#anchor` is dropped before the check. Markdown links `[text](path)` to local files are
  checked too. A doc may never point outside the repository (`../`).

Usage: .ci/docs.py [--root DIR]; exit 0 when every check holds, 1 otherwise (each miss listed).
"""
import argparse
import re
import sys
from pathlib import Path

DOCS = ["README.md", "DESIGN.md", "RELIABILITY.md", "BENCHMARKS.md", "benches/LOG.md"]
PATH = re.compile(r"(?<![\w./-])((?:\.ci|src|tests|benches|loom-tests|fuzz|scripts|packaging|examples|docs)/[\w./{},*-]*)")
# Files that exist only after a run (generated), named by the docs on purpose.
GENERATED = ("fuzz/corpus", "fuzz/artifacts", "fuzz/target", "target/")
# What a doc must never cite: files beside the repository, or scripts kept in /tmp.
OUTSIDE = re.compile(r"DIRECTION\.md|\.\./shared|(?<![\w/.-])reference/|/tmp/[\w./-]+\.(?:sh|py|lua)\b")
MDLINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def candidates(raw: str):
    """The paths one match names: `a/{b,c}.rs` is two; `::fn`, `:12`, trailing punctuation dropped."""
    p = raw.split("::")[0]
    p = re.sub(r":\d+(-\d+)?$", "", p).rstrip(".,;:")
    if p.startswith(GENERATED) or "*" in p or "<" in p or "NAME" in p or p.endswith("/-"):
        return []
    m = re.search(r"\{([^}]*)\}", p)
    if m:
        return [c for part in m.group(1).split(",") for c in candidates(p[:m.start()] + part.strip() + p[m.end():])]
    return [p]


def check_links(root: Path):
    misses = []
    sources = [root / d for d in DOCS if (root / d).exists()]
    for f in sources:
        for n, line in enumerate(f.read_text().splitlines(), 1):
            for m in PATH.finditer(line):
                for p in candidates(m.group(1)):
                    if not (root / p).exists():
                        misses.append(f"{f.relative_to(root)}:{n}: {p}")
            for m in OUTSIDE.finditer(line):
                misses.append(f"{f.relative_to(root)}:{n}: names {m.group(0)}, outside the repository")
            for m in MDLINK.finditer(line):
                target = m.group(1)
                if re.match(r"[a-z]+:", target):
                    continue
                if target.startswith("../") or not (f.parent / target).exists():
                    misses.append(f"{f.relative_to(root)}:{n}: link {target}")
    for f in sorted((root / "src").rglob("*.rs")):
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if "//" in line and OUTSIDE.search(line.split("//", 1)[1]):
                misses.append(f"{f.relative_to(root)}:{n}: names a file outside the repository")
            if not line.lstrip().startswith("//!"):
                continue
            for m in PATH.finditer(line):
                for p in candidates(m.group(1)):
                    if not (root / p).exists():
                        misses.append(f"{f.relative_to(root)}:{n}: {p}")
    return misses


def check_layout(root: Path):
    text = (root / "README.md").read_text()
    m = re.search(r"^## Layout\n(.*?)(?=^## )", text, re.S | re.M)
    if not m:
        return ["README.md has no '## Layout' section"]
    rows = set(re.findall(r"^\| `(src/[\w.]+)/?` \|", m.group(1), re.M))
    rooms = {f"src/{d.name}" for d in (root / "src").iterdir() if d.is_dir()}
    return [f"README.md Layout: no row for {r}" for r in sorted(rooms - rows)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    root = Path(ap.parse_args().root)
    misses = check_layout(root) + check_links(root)
    for x in misses:
        print(f"MISS  {x}")
    print(f"docs: {len(misses)} problems")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
