#!/usr/bin/env python3
"""Self-test of .ci/structure.py on small trees written to a temp dir (run by .ci/run)."""

import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import structure  # noqa: E402


def tree(files: dict) -> Path:
    root = Path(tempfile.mkdtemp()) / "src"
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return root


def check(name, files, expect_present, expect_absent=()):
    found, _, _ = structure.violations(tree(files))
    missing = [k for k in expect_present if k not in found]
    extra = [k for k in expect_absent if k in found]
    if missing or extra:
        print(f"FAIL {name}: missing {missing}, unexpected {extra}; found {sorted(found)}")
        return False
    print(f"ok   {name}")
    return True


LONG = "fn long() {\n" + "    let _x = 1;\n" * 80 + "}\n"
ok = all([
    check("a cycle through a parent's re-export is a file cycle", {
        "lib.rs": "pub mod a;\n",
        "a/mod.rs": "mod b;\nmod c;\npub use b::Thing;\npub struct Shared;\n",
        "a/b.rs": "pub struct Thing(super::Shared);\n",
        "a/c.rs": "fn f(_: super::Thing) {}\n",
    }, ["file-cycle: src/a/mod.rs src/a/b.rs"]),
    check("test modules and strings never count", {
        "lib.rs": "pub mod wal;\npub mod net;\n",
        "wal.rs": "pub struct W;\n#[cfg(all(test, not(sluice_loom)))]\nmod tests { use crate::net::N; }\n"
                  "const S: &str = \"crate::net::N\";\n// crate::net::N\n",
        "net.rs": "pub struct N;\n",
    }, [], ["forbidden: wal -> net"]),
    check("a forbidden folder edge through a use tree", {
        "lib.rs": "pub mod wal;\npub mod config;\n",
        "wal.rs": "use crate::{config::{self, C}};\n",
        "config.rs": "pub struct C;\n",
    }, ["forbidden: wal -> config"]),
    check("a function over the limit, a test function under cfg(test) not", {
        "lib.rs": "pub mod x;\n",
        "x.rs": LONG + "#[cfg(test)]\nmod tests {\n" + LONG.replace("long", "long_test") + "}\n",
    }, ["long-fn: src/x.rs::long"], ["long-fn: src/x.rs::long_test"]),
    check("a file over the tested-lines bound without tests", {
        "lib.rs": "pub mod big;\npub mod tested;\n",
        "big.rs": "// line\n" * 301,
        "tested.rs": "// line\n" * 301 + "#[cfg(test)]\n#[path = \"tested_tests.rs\"]\nmod tests;\n",
        "tested_tests.rs": "// line\n" * 400,
    }, ["untested: src/big.rs"], ["untested: src/tested.rs", "untested: src/tested_tests.rs"]),
    check("a non-test #[path] child is reported, and its lines count toward its parent", {
        "lib.rs": "pub mod p;\n",
        "p.rs": "pub struct P;\n" + "const _A: u8 = 0;\n" * 500 + "#[path = \"p_child.rs\"]\nmod child;\n"
                "#[cfg(test)]\n#[path = \"p_tests.rs\"]\nmod tests;\n",
        "p_child.rs": "const _B: u8 = 0;\n" * 400,
        "p_tests.rs": "// tests\n",
    }, ["path-attr: src/p.rs -> src/p_child.rs", "long-file: src/p.rs"],
        ["path-attr: src/p.rs -> src/p_tests.rs"]),
    check("a folder with more than 15 files is wide", {
        "lib.rs": "pub mod w;\npub mod n;\n",
        "w/mod.rs": "".join(f"pub mod f{i};\n" for i in range(15)),
        **{f"w/f{i}.rs": "pub struct S;\n" for i in range(15)},
        "n/mod.rs": "".join(f"pub mod f{i};\n" for i in range(14)),
        **{f"n/f{i}.rs": "pub struct S;\n" for i in range(14)},
    }, ["wide-folder: src/w"], ["wide-folder: src/n"]),
    check("inherent impls of one type add up across files; trait impls do not count", {
        "lib.rs": "pub mod t;\n",
        "t/mod.rs": "mod a;\nmod b;\npub struct T;\nimpl T {\n" + "    fn f() {}\n" * 450 + "}\n"
                    "impl Clone for T {\n" + "    // x\n    fn g() {}\n" * 450 + "}\n",
        "t/a.rs": "impl super::T {\n" + "    fn h() {}\n" * 400 + "}\n",
        "t/b.rs": "pub struct U;\nimpl<X> Default for U where X: Copy {\n" + "    fn k() {}\n" * 900 + "}\n",
    }, ["long-impl: t::T"], ["long-impl: t::U", "long-impl: t::Clone"]),
    check("a visibility restriction is not an edge", {
        "lib.rs": "pub mod a;\n",
        "a/mod.rs": "pub mod b;\npub struct S(b::B);\n",
        "a/b/mod.rs": "pub(in crate::a) mod c;\npub struct B;\n",
        "a/b/c.rs": "pub(in crate::a) fn f() {}\n",
    }, [], ["file-cycle: src/a/mod.rs src/a/b/mod.rs"]),
    check("dispatch names neither mio nor a clock read outside tests, comments and strings", {
        "lib.rs": "pub mod dispatch;\npub mod net;\n",
        "dispatch/mod.rs": "pub mod a;\npub mod b;\n",
        "dispatch/a.rs": "fn f(_: &mio::Registry) {}\n",
        "dispatch/b.rs": "// mio::Token and Instant::now() in a comment\nconst S: &str = \"mio\";\n"
                         "fn g() -> u64 { 0 }\n#[cfg(test)]\nmod tests { use mio::Poll; fn t() { std::time::Instant::now(); } }\n",
        "net.rs": "fn h() { let _ = std::time::Instant::now(); }\n",
    }, ["names: src/dispatch/a.rs"], ["names: src/dispatch/b.rs", "names: src/net.rs"]),
])
print("structure self-test:", "passed" if ok else "FAILED")
sys.exit(0 if ok else 1)
