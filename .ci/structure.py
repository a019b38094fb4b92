#!/usr/bin/env python3
"""The structure rules of the tree, measured from the source: module dependencies and sizes.

What it reads. The module tree is followed from `src/lib.rs` (and `src/main.rs`, the `bin` node)
through every `mod` declaration, `#[path = …]` included. Test code is left out: a module declared
under `#[cfg(test)]` (an inline `mod tests { … }` or a file such as `recovery_tests.rs`) is not
read at all. Comments, strings and character literals are blanked before anything is matched.

Nodes are files. A file depends on another when its code names a path into it:
`crate::a::b`, `super::…`, `self::…`, or a child module by its bare name (`dlq_store::Entry`
inside `dispatch`), including every leaf of a `use` tree (`use crate::{a::X, b::{Y, Z}}`). A
path resolves to the deepest module that exists, through `pub use` re-exports (so
`super::Entry`, re-exported by `mod.rs` from `dlq.rs`, is an edge to `dlq.rs`, not to `mod.rs`).
A top-level folder is the first segment of a module path (`src/sign.rs` is `sign`; the binary
is `bin`).

The rules (each is a class of violation, reported with a stable key):
- `file-cycle`:   a strongly connected set of two or more files;
- `folder-cycle`: a strongly connected set of two or more top-level folders;
- `forbidden`:    an edge between top-level folders that `FORBIDDEN` lists, or between modules
                  that `FORBIDDEN_MODULES` lists, or from a folder into another outside the
                  modules `ONLY_THROUGH` lets it name;
- `long-fn`:      a function (test code left out) over `MAX_FN_LINES` lines, signature to `}`;
- `long-file`:    a file over `MAX_FILE_CODE` lines of code (non-blank lines once comments and
                  test modules are removed);
- `untested`:     a file over `MIN_TESTED_LINES` lines (test modules left out) with no
                  `#[cfg(test)]` module of its own;
- `path-attr`:    a non-test module loaded with `#[path = …]` (a child is a file in its parent's
                  folder, never a sibling); such a child's lines also count toward its parent's
                  `long-file` size, so moving code into one cannot meet the size rule;
- `wide-folder`:  a folder with more than `MAX_FOLDER_FILES` `.rs` files directly in it (a family
                  of files with a common prefix is a folder);
- `long-impl`:    a type whose inherent `impl` blocks (trait impls left out) hold more than
                  `MAX_IMPL_CODE` lines of code across all its files: a type is split by
                  responsibility, not by moving `impl` blocks into other files;
- `names`:        non-test code of a module that names what `FORBIDDEN_NAMES` keeps out of it
                  (e.g. the I/O backend or a clock read in dispatch).

The ratchet. `.ci/structure-baseline.txt` lists the violations the tree had when these rules were
set; they are being removed one room at a time. The check fails on any violation that is not in
the baseline (nothing new may appear) and on any baseline line that no longer occurs (a fixed
violation must leave the list, so it cannot come back). When the baseline is empty the rules
hold outright.

Usage: .ci/structure.py [--src DIR] [--baseline FILE] [--write-baseline] [--report]
  exit 0 when the tree matches its baseline, 1 otherwise (the differences are listed).
"""

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

MAX_FN_LINES = 80
MAX_FILE_CODE = 800
MIN_TESTED_LINES = 300
MAX_FOLDER_FILES = 15
MAX_IMPL_CODE = 800

DOMAIN = ["ingest", "wal", "dispatch", "config", "sched", "ops", "cluster", "tools", "replication",
          "bin"]
# (from folder, to folders it must never name). "Anything" is spelled out as every other folder.
ALL = ["cluster", "config", "dispatch", "ingest", "metrics", "net", "ops", "replication", "ring",
       "sched", "sign", "storage", "sync", "tools", "wal", "bin"]
FORBIDDEN = {
    "net": DOMAIN,
    "wal": ["net", "ingest", "dispatch", "config", "sched"],
    "dispatch": ["ingest", "config", "sched"],
    "ingest": ["config", "sched"],
    "metrics": [f for f in ALL if f not in ("metrics", "sync")],
    "ring": [f for f in ALL if f not in ("ring", "sync")],
    "sync": [f for f in ALL if f != "sync"],
    "storage": ["wal"],
    "cluster": ["config"],
    # The JetStream mirror of the logs (issue 41) builds on the log and the primitives only; it is
    # configured through its own spec, never by reading `config`.
    "replication": [f for f in ALL if f not in ("replication", "wal", "sync", "metrics", "ring",
                                                "storage")],
}
# A folder that may name another only through the listed modules: (from folder, to folder,
# module prefixes it may name). Config validates `[replication]` into replication's spec and
# names nothing else of that room.
ONLY_THROUGH = [
    ("config", "replication", ["replication::spec"]),
]
# Finer rules inside folders: (from module, to module), by module path prefix. These held before
# the folder rules were set and must keep holding.
FORBIDDEN_MODULES = [
    # The runtime starts the workers; a worker never reaches back into it.
    ("sched::worker", "sched::runtime"),
    # The handler side is lent by the loop for one server call; it never reaches into the loop
    # or the runtime.
    ("sched::handler", "sched::worker"),
    ("sched::handler", "sched::runtime"),
    # The pump hands events to dispatch through links, never through the worker's types.
    ("sched::pump", "sched::worker"),
    # The exposition is below both the runtime and the worker's scrape path.
    ("sched::exposition", "sched::worker"),
    ("sched::exposition", "sched::runtime"),
    # The connection layer knows no scheduler and no domain type.
    ("net::conn", "ingest"),
    ("net::io", "ingest"),
    # The rooms of dispatch: delivery knows no pump and no flow state of the pump's; the pump
    # hands jobs on through `job` and never reaches into delivery or the gates; the gates know
    # neither side; the DLQ is a store below all three.
    ("dispatch::deliver", "dispatch::pump"),
    ("dispatch::pump", "dispatch::deliver"),
    ("dispatch::pump", "dispatch::flow"),
    ("dispatch::flow", "dispatch::pump"),
    ("dispatch::flow", "dispatch::deliver"),
    ("dispatch::dlq", "dispatch::pump"),
    ("dispatch::dlq", "dispatch::deliver"),
    ("dispatch::dlq", "dispatch::flow"),
    # The rooms of wal: the format is below everything; appending and reading never meet (the
    # reader follows what the writer published through `append::shared`, re-exported by wal).
    ("wal::format", "wal::append"),
    ("wal::format", "wal::recover"),
    ("wal::format", "wal::read"),
    ("wal::format", "wal::retire"),
    ("wal::append", "wal::read"),
    ("wal::read", "wal::append"),
    # The commit (its thread, rings and hand-back) runs the group commit; the log below it
    # never reaches up into it, and the readers never meet it.
    ("wal::format", "wal::commit"),
    ("wal::append", "wal::commit"),
    ("wal::read", "wal::commit"),
    ("wal::commit", "wal::read"),
    # io_uring is one backend leaf: the portable layer above it never names its parts.
    ("net::io::mio", "net::io::uring"),
]
# Names a room's non-test code never uses (comments and strings left out): (module prefix, regex,
# why).
FORBIDDEN_NAMES = [
    # Delivery decides; the backend (`net::io`) does the I/O: no dispatch type or signature names
    # mio, and every time dispatch reads comes from the injected clock (`sync::clock`).
    ("dispatch", r"\bmio\b", "the I/O backend stays in net::io"),
    ("dispatch", r"\b(?:Instant|SystemTime)\s*::\s*now\b", "time comes from the injected clock"),
]

# ---------------------------------------------------------------------------------------------
# Lexing: blank comments, strings and char literals, keep newlines (line numbers stay true).

CHAR = re.compile(r"'(?:\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'\n])'")


def blank(text: str) -> str:
    out, i, n = [], 0, len(text)

    def spaces(s: str) -> str:
        return re.sub(r"[^\n]", " ", s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(spaces(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(spaces(text[i:j]))
            i = j
        elif re.match(r'b?r#*"', text[i:i + 8]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'(b?r)(#*)"', text[i:])
            close = '"' + m.group(2)
            j = text.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            out.append(spaces(text[i:j]))
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i) and (i == 0 or not text[i - 1].isalnum())):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(spaces(text[i:j + 1]))
            i = j + 1
        elif c == "'":
            m = CHAR.match(text, i)
            if m:
                out.append(spaces(m.group(0)))
                i = m.end()
            else:  # a lifetime or a label
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def match_brace(code: str, open_at: int) -> int:
    """Index of the `}` closing the `{` at `open_at` (code is blanked)."""
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


# ---------------------------------------------------------------------------------------------
# The module tree.

# `#[cfg(test)]`, `#[cfg(all(test, not(sluice_loom)))]`: any cfg that requires `test` (not `not(test)`).
TEST_CFG = re.compile(r"#\[cfg\((?:test|all\((?:[^()]|\([^()]*\))*?(?<!not\()\btest\b(?:[^()]|\([^()]*\))*\))\)\]")
MOD = re.compile(r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*([;{])")


class File:
    def __init__(self, path: Path, module: str):
        self.path, self.module = path, module
        self.raw = path.read_text()
        code = blank(self.raw)
        self.code = self._drop_tests(code)
        self.children = {}  # name -> module path (file or inline module)
        self.inline = []  # (start, end, module path) of the inline (non-test) modules in this file
        self.path_children = []  # module paths of the non-test children loaded with #[path]

    def module_at(self, offset: int) -> str:
        """The innermost module that holds `offset`: an inline `mod x { … }` or the file's own."""
        best = (None, self.module)
        for start, end, module in self.inline:
            if start <= offset <= end and (best[0] is None or start > best[0]):
                best = (start, module)
        return best[1]

    @staticmethod
    def _drop_tests(code: str) -> str:
        """Blanks every `#[cfg(test)]` item: inline test modules and test-only functions/uses."""
        out = list(code)
        for m in TEST_CFG.finditer(code):
            j = m.end()
            # the item runs to its first `;` (declaration) or its matching `}` (body)
            k = j
            while k < len(code) and code[k] not in "{;":
                k += 1
            end = k if k < len(code) and code[k] == ";" else match_brace(code, k)
            for x in range(m.start(), end + 1):
                if out[x] != "\n":
                    out[x] = " "
        return "".join(out)

    def test_modules(self) -> bool:
        return re.search(TEST_CFG.pattern + r"\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s", blank(self.raw)) is not None


def load_tree(src: Path):
    files = {}  # module path -> File
    owner = {}  # module path (file or inline) -> module path of its file

    def visit(path: Path, module: str, dir_for_children: Path):
        f = File(path, module)
        files[module] = f
        owner[module] = module
        for m in MOD.finditer(f.code):
            attrs, name, kind = m.group(1), m.group(2), m.group(3)
            child = f"{module}::{name}" if module else name
            f.children[name] = child
            if kind == "{":
                owner[child] = module
                f.inline.append((m.start(), match_brace(f.code, m.end() - 1), child))
                continue
            pm = re.search(r'path\s*=\s*"([^"]+)"', re.sub(r"\s+", " ", path.read_text()[m.start():m.start() + len(attrs) + 200]))
            if pm:
                target = path.parent / pm.group(1)
                f.path_children.append(child)
                visit(target, child, target.parent / target.stem)
                continue
            for cand in (dir_for_children / f"{name}.rs", dir_for_children / name / "mod.rs"):
                if cand.exists():
                    visit(cand, child, cand.parent if cand.name == "mod.rs" else cand.parent / cand.stem)
                    break

    visit(src / "lib.rs", "", src)
    if (src / "main.rs").exists():
        main = File(src / "main.rs", "bin")
        files["bin"] = main
        owner["bin"] = "bin"
    return files, owner


# ---------------------------------------------------------------------------------------------
# References.

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
USE = re.compile(r"\buse\s+([^;]+);")
PATH = re.compile(rf"(?<![A-Za-z0-9_:])((?:{IDENT})(?:\s*::\s*{IDENT})+)")
REEXPORT = re.compile(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);")


def use_leaves(tree: str):
    """Every full path of a `use` tree (aliases already removed): `a::{b, c::{d, e}}` -> a::b, a::c::d, a::c::e."""
    tree = re.sub(r"\s+", "", tree)

    def expand(prefix: str, t: str):
        brace = t.find("{")
        if brace < 0:
            yield prefix + t
            return
        head, body = t[:brace], t[brace + 1:t.rfind("}")]
        for part in split_top(body):
            if part in ("self", ""):
                yield (prefix + head).rstrip(":")
            else:
                yield from expand(prefix + head, part)

    yield from expand("", tree)


def split_top(body: str):
    depth, cur = 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            yield cur
            cur = ""
        else:
            cur += ch
    yield cur


VIS_IN = re.compile(r"\bpub\(\s*in\s+[^)]*\)")


def use_paths(code: str):
    """(offset, line number, path) of every `use` leaf, aliases dropped."""
    for m in USE.finditer(code):
        line = code.count("\n", 0, m.start()) + 1
        tree = re.sub(r"\s+as\s+" + IDENT, "", m.group(1))
        for leaf in use_leaves(tree):
            yield m.start(), line, leaf


class Resolver:
    def __init__(self, files, owner, crate: str):
        self.files, self.owner, self.crate = files, owner, crate
        self.reexports = {}  # (module, name) -> absolute path
        for mod, f in files.items():
            for m in REEXPORT.finditer(f.code):
                tree = m.group(1)
                for leaf in use_leaves(re.sub(r"\s+as\s+" + IDENT, "", tree)):
                    name = leaf.split("::")[-1]
                    if name == "*":
                        continue
                    absolute = self.absolute(mod, leaf.split("::"))
                    if absolute:
                        self.reexports[(mod, name)] = absolute

    def absolute(self, module: str, segs):
        """The crate-absolute segments of a path written in `module`, or None (std, extern)."""
        if not segs:
            return None
        base = module.split("::") if module else []
        if module == "bin":
            if segs[0] == self.crate:
                return segs[1:]
            return None
        if segs[0] == "crate":
            return segs[1:]
        if segs[0] in ("super", "self"):
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    base = base[:-1]
                segs = segs[1:]
            return base + segs
        f = self.files.get(self.owner.get(module, module))
        if f and segs[0] in f.children:
            return base + segs
        return None

    def target(self, segs, depth=0):
        """The file module a crate-absolute path lands in."""
        best, i = None, 0
        cur = ""
        for i, s in enumerate(segs):
            nxt = f"{cur}::{s}" if cur else s
            if nxt in self.owner:
                cur, best = nxt, nxt
                continue
            if depth < 8 and cur and (cur, s) in self.reexports:
                return self.target(self.reexports[(cur, s)] + segs[i + 1:], depth + 1)
            break
        return self.owner.get(best) if best else None


def references(files, resolver):
    """(from file, to file, line) for every reference to another file."""
    for mod, f in files.items():
        for offset, line, leaf in use_paths(f.code):
            yield from one(resolver, f.module_at(offset), leaf.split("::"), line)
        code_no_use = USE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), f.code)
        # A visibility restriction (`pub(in crate::wal)`) names where an item may be seen, not
        # something the file uses: it is no edge.
        code_no_use = VIS_IN.sub(lambda m: " " * len(m.group(0)), code_no_use)
        for m in PATH.finditer(code_no_use):
            line = code_no_use.count("\n", 0, m.start()) + 1
            segs = [s.strip() for s in m.group(1).split("::")]
            yield from one(resolver, f.module_at(m.start()), segs, line)


def one(resolver, mod, segs, line):
    absolute = resolver.absolute(mod, segs)
    if absolute is None:
        return
    to = resolver.target(absolute)
    src_file = resolver.owner.get(mod, mod)
    if to is not None and to != src_file:
        yield src_file, to, line


def top(module: str) -> str:
    return module.split("::")[0]


def sccs(nodes, edges):
    """Tarjan's strongly connected components with two or more members."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return out


# ---------------------------------------------------------------------------------------------
# Sizes.

FN = re.compile(rf"\bfn\s+({IDENT})")


def functions(f: File):
    code = f.code
    for m in FN.finditer(code):
        depth, k = 0, m.end()
        while k < len(code):
            ch = code[k]
            if ch in "([<":
                depth += 1
            elif ch in ")]>":
                depth -= 1 if code[k - 1] != "-" else 0
            elif ch == ";" and depth <= 0:
                k = -1
                break
            elif ch == "{" and depth <= 0:
                break
            k += 1
        if k < 0 or k >= len(code):
            continue
        end = match_brace(code, k)
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, end) + 1
        yield m.group(1), first, last - first + 1


def code_lines(f: File) -> int:
    return sum(1 for line in f.code.splitlines() if line.strip())


IMPL = re.compile(r"\bimpl\b")


def inherent_impls(f: File):
    """(type name, first line, lines of code) of every inherent `impl` block (not `impl T for U`)."""
    code = f.code
    for m in IMPL.finditer(code):
        k, depth = m.end(), 0
        while k < len(code) and not (code[k] == "{" and depth <= 0):
            if code[k] in "(<[":
                depth += 1
            elif code[k] in ")>]" and code[k - 1] != "-":
                depth -= 1
            elif code[k] == ";" and depth <= 0:
                k = len(code)
            k += 1
        if k >= len(code):
            continue
        head = re.sub(r"<[^<>]*>", "", re.sub(r"<[^<>]*>", "", code[m.end():k]))
        head = re.split(r"\bwhere\b", head)[0]
        if re.search(r"\bfor\b", head):
            continue
        name = head.strip().split("::")[-1].strip()
        if not re.fullmatch(IDENT, name or "-"):
            continue
        end = match_brace(code, k)
        body = code[k:end + 1]
        yield name, code.count("\n", 0, m.start()) + 1, sum(1 for ln in body.splitlines() if ln.strip())


def non_test_lines(f: File) -> int:
    """Lines of the file once its test items are removed (comments and blanks counted)."""
    raw, code = f.raw.splitlines(), f.code.splitlines()
    blanked = 0
    for r, c in zip(raw, code):
        if r.strip() and not c.strip() and not r.strip().startswith(("//", "/*", "*")):
            blanked += 1
    return len(raw) - blanked


# ---------------------------------------------------------------------------------------------


def violations(src: Path):
    files, owner = load_tree(src)
    crate = "sluice"
    resolver = Resolver(files, owner, crate)
    edges, lines = defaultdict(set), defaultdict(list)
    for a, b, line in references(files, resolver):
        edges[a].add(b)
        lines[(a, b)].append(line)
    rel = {m: f.path.relative_to(src.parent).as_posix() for m, f in files.items()}
    out = {}

    for comp in sccs(files.keys(), edges):
        names = [rel[m] for m in comp]
        out["file-cycle: " + " ".join(names)] = describe_cycle(comp, edges, lines, rel)

    fedges = defaultdict(set)
    fwhy = defaultdict(list)
    for a, bs in edges.items():
        for b in bs:
            if top(a) != top(b):
                fedges[top(a)].add(top(b))
                fwhy[(top(a), top(b))].append(f"{rel[a]}:{lines[(a, b)][0]} -> {rel[b]}")
    for comp in sccs({top(m) for m in files}, fedges):
        detail = [w for a in comp for b in comp if (a, b) in fwhy for w in fwhy[(a, b)][:2]]
        out["folder-cycle: " + " ".join(comp)] = detail
    for a, bs in FORBIDDEN.items():
        for b in bs:
            if (a, b) in fwhy:
                out[f"forbidden: {a} -> {b}"] = fwhy[(a, b)][:6]

    def within(path: str, module: str) -> bool:
        return path == module or path.startswith(module + "::")

    for a_mod, b_mod in FORBIDDEN_MODULES:
        hits = [f"{rel[a]}:{lines[(a, b)][0]} -> {rel[b]}" for a, bs in edges.items() for b in bs
                if within(a, a_mod) and within(b, b_mod) and not within(a, b_mod)]
        if hits:
            out[f"forbidden: {a_mod} -> {b_mod}"] = hits[:6]

    for a_top, b_top, allowed in ONLY_THROUGH:
        hits = [f"{rel[a]}:{lines[(a, b)][0]} -> {rel[b]}" for a, bs in edges.items() for b in bs
                if top(a) == a_top and top(b) == b_top and not any(within(b, m) for m in allowed)]
        if hits:
            out[f"forbidden: {a_top} -> {b_top}"] = hits[:6]

    def with_path_children(f: File) -> int:
        return code_lines(f) + sum(with_path_children(files[c]) for c in f.path_children)

    impls = defaultdict(list)  # (top folder, type) -> [(file, line, lines of code)]
    for m, f in files.items():
        for c in f.path_children:
            out[f"path-attr: {rel[m]} -> {rel[c]}"] = [f"{rel[c]} is loaded with #[path] as {c}"]
        for name, first, n in inherent_impls(f):
            impls[(top(m), name)].append((rel[m], first, n))
        for prefix, pattern, why in FORBIDDEN_NAMES:
            if within(m, prefix):
                for hit in re.finditer(pattern, f.code):
                    line = f.code.count("\n", 0, hit.start()) + 1
                    out.setdefault(f"names: {rel[m]}", []).append(f"{rel[m]}:{line}: {hit.group(0)} ({why})")
        for name, first, length in functions(f):
            if length > MAX_FN_LINES:
                out[f"long-fn: {rel[m]}::{name}"] = [f"{rel[m]}:{first}: {length} lines"]
        n = with_path_children(f)
        if n > MAX_FILE_CODE:
            out[f"long-file: {rel[m]}"] = [f"{n} lines of code"]
        if non_test_lines(f) > MIN_TESTED_LINES and not f.test_modules():
            out[f"untested: {rel[m]}"] = [f"{non_test_lines(f)} lines, no #[cfg(test)] module"]
    for (room, name), blocks in impls.items():
        total = sum(n for _, _, n in blocks)
        if total > MAX_IMPL_CODE:
            out[f"long-impl: {room}::{name}"] = [f"{total} lines of code in {len(blocks)} impl blocks"] + [
                f"{p}:{line}: {n}" for p, line, n in sorted(blocks, key=lambda b: -b[2])[:6]]
    for d in sorted({f.path.parent for f in files.values()}):
        n = len(list(d.glob("*.rs")))
        if n > MAX_FOLDER_FILES:
            out[f"wide-folder: {d.relative_to(src.parent).as_posix()}"] = [f"{n} .rs files"]
    return out, files, edges


def describe_cycle(comp, edges, lines, rel):
    s = set(comp)
    return [f"{rel[a]}:{lines[(a, b)][0]} -> {rel[b]}" for a in comp for b in sorted(edges.get(a, ())) if b in s]


def main() -> int:
    ap = argparse.ArgumentParser()
    here = Path(__file__).resolve().parent
    ap.add_argument("--src", default=str(here.parent / "src"))
    ap.add_argument("--baseline", default=str(here / "structure-baseline.txt"))
    ap.add_argument("--write-baseline", action="store_true")
    ap.add_argument("--report", action="store_true", help="print every violation with its detail")
    args = ap.parse_args()
    found, files, edges = violations(Path(args.src))
    kinds = defaultdict(int)
    for k in found:
        kinds[k.split(":")[0]] += 1
    summary = ", ".join(f"{kinds[k]} {k}" for k in
                        ("file-cycle", "folder-cycle", "forbidden", "long-fn", "long-file", "untested",
                         "path-attr", "wide-folder", "long-impl", "names"))
    if args.report:
        for k in sorted(found):
            print(k)
            for d in found[k]:
                print("    " + d)
    if args.write_baseline:
        Path(args.baseline).write_text(
            "# Structure violations still in the tree (.ci/structure.py). Remove a line when you fix it;\n"
            "# never add one: the check fails on anything new.\n" + "".join(k + "\n" for k in sorted(found)))
        print(f"structure: baseline written: {summary}")
        return 0
    base = set()
    if Path(args.baseline).exists():
        base = {ln.strip() for ln in Path(args.baseline).read_text().splitlines()
                if ln.strip() and not ln.startswith("#")}
    new = sorted(set(found) - base)
    fixed = sorted(base - set(found))
    for k in new:
        print(f"NEW   {k}")
        for d in found[k][:8]:
            print(f"        {d}")
    for k in fixed:
        print(f"FIXED {k}  (remove this line from {args.baseline})")
    print(f"structure: {len(files)} files, {sum(len(v) for v in edges.values())} file edges; "
          f"violations left: {summary}")
    if new or fixed:
        print("structure: the tree does not match its baseline (see above)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
