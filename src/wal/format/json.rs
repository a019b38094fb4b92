//! Whether a body is one JSON text a batch can carry verbatim: the rule behind
//! [`BodyJson`](super::BodyJson), decided once per event at ingest (issue 43) and, for an event
//! nobody decided for, when its batch is built.
//!
//! The rule: RFC 8259's grammar (one value, whitespace `[ \t\n\r]` around it, nothing else),
//! the whole body valid UTF-8, and containers nested at most [`MAX_DEPTH`] deep. The last two
//! are what a batch needs beyond the grammar: a batch body is one JSON text, so a member copied
//! verbatim must not make it invalid UTF-8 (RFC 8259 §8.1: a receiver may refuse it, and one bad
//! member would fail the whole batch on every retry), and it wraps each member in up to three
//! containers (`{"events":[{"body":…}]}`), so a body nested deeper than [`MAX_DEPTH`] would take
//! the batch past the nesting limit of common strict parsers (`serde_json`'s default refuses 128
//! levels). A body outside the rule is not lost: it travels as `body_base64`.
//!
//! Escapes are checked for their form only (`\u` and four hex digits, or one of `"\/bfnrt`); a
//! lone surrogate such as `"\ud800"` is grammatical JSON and passes, as in `serde_json`,
//! JavaScript's `JSON.parse` and Python's `json`. Numbers are checked for their grammar, not
//! their range.
//!
//! Cost: one pass, no allocation (the open containers are a 100-byte array on the stack).
//! The inside of a string, where a webhook body spends most of its bytes, is scanned 16 bytes
//! at a time in a form the compiler turns into SIMD compares (`plain_prefix`: ~1.2
//! instructions a byte; a short string a word at a time), and UTF-8 is checked per non-ASCII
//! character, by the standard library, where a string holds one. Counted by callgrind: a 1 KiB
//! body ~1.65 k instructions where `serde_json` took ~2.9 k (and checked no UTF-8), a push-shaped
//! body of 1.2 KiB ~12.3 k where it took ~16.2 k (`cargo bench --bench wal_append --
//! body_json_decide` times the same two). The rule is pinned by a differential test against
//! `serde_json` (`body_json_tests.rs`) and by the fuzz target `body_json`.
#![forbid(unsafe_code)]

/// How deep a body's containers may nest and still be carried as `body` (see the module
/// header): 100 levels, leaving a batch's own three and a margin under 128.
pub const MAX_DEPTH: usize = 100;

/// Whether `body` is one JSON text under the module's rule.
pub fn is_one_json_text(body: &[u8]) -> bool {
    Scan { b: body, i: 0 }.text()
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn text(&mut self) -> bool {
        // Whether each open container (outermost first) is an object.
        let mut open = [false; MAX_DEPTH];
        let mut depth = 0usize;
        self.ws();
        'value: loop {
            // A value starts here.
            match self.peek() {
                Some(b'{') | Some(b'[') => {
                    let object = self.peek() == Some(b'{');
                    self.i += 1;
                    if depth == MAX_DEPTH {
                        return false;
                    }
                    open[depth] = object;
                    depth += 1;
                    self.ws();
                    let close = if object { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.i += 1;
                        depth -= 1;
                    } else {
                        if object && !self.key() {
                            return false;
                        }
                        continue 'value;
                    }
                }
                Some(b'"') => {
                    if !self.string() {
                        return false;
                    }
                }
                Some(b't') => {
                    if !self.literal(b"true") {
                        return false;
                    }
                }
                Some(b'f') => {
                    if !self.literal(b"false") {
                        return false;
                    }
                }
                Some(b'n') => {
                    if !self.literal(b"null") {
                        return false;
                    }
                }
                Some(b'-' | b'0'..=b'9') => {
                    if !self.number() {
                        return false;
                    }
                }
                _ => return false,
            }
            // A value ended: close containers until one takes another member.
            loop {
                self.ws();
                if depth == 0 {
                    return self.i == self.b.len();
                }
                let object = open[depth - 1];
                match self.peek() {
                    Some(b',') => {
                        self.i += 1;
                        self.ws();
                        if object && !self.key() {
                            return false;
                        }
                        continue 'value;
                    }
                    Some(b'}') if object => {}
                    Some(b']') if !object => {}
                    _ => return false,
                }
                self.i += 1;
                depth -= 1;
            }
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// An object's key and its colon, with the whitespace after it.
    fn key(&mut self) -> bool {
        if self.peek() != Some(b'"') || !self.string() {
            return false;
        }
        self.ws();
        if self.peek() != Some(b':') {
            return false;
        }
        self.i += 1;
        self.ws();
        true
    }

    fn literal(&mut self, word: &[u8]) -> bool {
        let ok = self.b[self.i..].starts_with(word);
        self.i += word.len();
        ok
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number(&mut self) -> bool {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return false,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if !self.some_digits() {
                return false;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !self.some_digits() {
                return false;
            }
        }
        true
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
    }

    fn some_digits(&mut self) -> bool {
        let start = self.i;
        self.digits();
        self.i > start
    }

    /// A string from its opening quote. A byte of 0x80 or more must start a valid UTF-8
    /// character here (outside strings the grammar refuses it anyway, so the body is valid
    /// UTF-8 when this passes, with no separate pass over it).
    fn string(&mut self) -> bool {
        self.i += 1;
        loop {
            self.i += plain_prefix(&self.b[self.i..]);
            match self.peek() {
                Some(b'"') => {
                    self.i += 1;
                    return true;
                }
                Some(b'\\') => {
                    self.i += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 1,
                        Some(b'u') => {
                            let hex = self.b.get(self.i + 1..self.i + 5);
                            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                                return false;
                            }
                            self.i += 5;
                        }
                        _ => return false,
                    }
                }
                Some(lead @ 0x80..=0xff) => {
                    let len = match lead {
                        0xc2..=0xdf => 2,
                        0xe0..=0xef => 3,
                        0xf0..=0xf4 => 4,
                        _ => return false,
                    };
                    let char = self.b.get(self.i..self.i + len);
                    if !char.is_some_and(|c| std::str::from_utf8(c).is_ok()) {
                        return false;
                    }
                    self.i += len;
                }
                // A control character, or the end inside a string.
                _ => return false,
            }
        }
    }
}

/// How many bytes at the start of `s` need no look inside a string: printable ASCII other than
/// `"` and `\`. The first 16 bytes a word (8 bytes) at a time, where most of a webhook body's
/// strings (keys, ids, names) end; past them 16 at a time, each block reduced without a branch
/// per byte (the compiler makes it a few SIMD compares and one mask test), and the block that
/// stops a word at a time again.
fn plain_prefix(s: &[u8]) -> usize {
    let mut n = 0;
    let mut blocks = s.chunks_exact(16);
    for (k, block) in blocks.by_ref().enumerate() {
        if k > 0 && !block.iter().fold(false, |stop, &c| stop | !plain(c)) {
            n += 16;
            continue;
        }
        for word in block.chunks_exact(8) {
            let stops = stops(u64::from_le_bytes(word.try_into().expect("8 bytes")));
            if stops != 0 {
                return n + stops.trailing_zeros() as usize / 8;
            }
            n += 8;
        }
    }
    n + blocks.remainder().iter().take_while(|&&c| plain(c)).count()
}

/// The high bit of each byte of `word` (little-endian) that is not [`plain`], exact up to the
/// lowest one (a borrow runs only upward, from a byte that stops).
fn stops(word: u64) -> u64 {
    const ONES: u64 = u64::MAX / 255;
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = word ^ (ONES * u64::from(b'"'));
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    (control | quote | backslash | word) & (ONES << 7)
}

fn plain(c: u8) -> bool {
    (0x20..0x80).contains(&c) && c != b'"' && c != b'\\'
}

/// Appends `s` to `out` as a JSON string (the batch writers' member fields).
pub fn push_string(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    escape_pieces(s, |piece| out.extend_from_slice(piece.as_bytes()));
    out.push(b'"');
}

/// `s` escaped as the inside of a JSON string, handed to `piece` in order: runs that need no
/// escape whole (ids, trigger names and header fields are plain ASCII: one copy each, where a
/// `char` or a byte at a time cost 5 % of ingest's user CPU and ~12 instructions a byte in
/// `serde_json`'s writer), `"` and `\` as `\"` and `\\`, other controls as `\u00XX`. The
/// one escaper of the 202 bodies (`ingest::respond::json_str`) and the batch bodies.
pub fn escape_pieces(s: &str, mut piece: impl FnMut(&str)) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut run = 0;
    for (i, c) in s.bytes().enumerate() {
        if c >= 0x20 && c != b'"' && c != b'\\' {
            continue;
        }
        piece(&s[run..i]);
        let unicode = [
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(c >> 4)],
            HEX[usize::from(c & 15)],
        ];
        piece(match c {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            _ => std::str::from_utf8(&unicode).expect("ASCII"),
        });
        run = i + 1;
    }
    piece(&s[run..]);
}

#[cfg(test)]
mod tests {
    use super::super::record::BodyJson;
    use super::*;

    #[test]
    fn the_grammar_s_edges() {
        let yes: &[&[u8]] = &[
            b"1",
            b"-0",
            b"0.1e-0",
            b"1E+2",
            b" [1, 2.5, \"x\"]\n\r\t ",
            b"{\"a\":1,\"a\":2}",
            b"{ \"a\" : { \"b\" : [ ] , \"c\" : { } } }",
            b"\"\\u00E9\\uD83D\\uDE00\\ud800\"",
            b"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
            "\"h\u{e9}llo \u{1F600}\"".as_bytes(),
            b"true",
            b"[false,null]",
            b"\"0123456789abcdef0123456789abcdef\\n0123456789abcdef\"",
        ];
        for b in yes {
            assert!(is_one_json_text(b), "{:?}", String::from_utf8_lossy(b));
        }
        let no: &[&[u8]] = &[
            b"",
            b" ",
            b"01",
            b"-01",
            b"1.",
            b"-",
            b"1e",
            b".5",
            b"+1",
            b"[1,]",
            b"{\"a\":1,}",
            b"[]]",
            b"[1 2]",
            b"{\"a\" 1}",
            b"{1:2}",
            b"{\"a\"}",
            b"\"\\x\"",
            b"\"\\u00zz\"",
            b"\"\\u00\"",
            b"\"\t\"",
            b"\"abc",
            b"\"0123456789abcdef0123456789abcdef",
            b"tru",
            b"nul",
            b"truex",
            b"1 x",
            b"\x0c1",
            b"\xef\xbb\xbf1",
            b"\"\xff\"",
            b"\"\xc3\"",
            b"[1}",
            b"{\"a\":1]",
            b"1 2",
            b"\"\xed\xa0\x80\"",
        ];
        for b in no {
            assert!(!is_one_json_text(b), "{:?}", String::from_utf8_lossy(b));
        }
    }

    #[test]
    fn nesting_is_bounded_at_max_depth() {
        for (n, want) in [
            (MAX_DEPTH - 1, true),
            (MAX_DEPTH, true),
            (MAX_DEPTH + 1, false),
        ] {
            let arrays = format!("{}{}", "[".repeat(n), "]".repeat(n));
            assert_eq!(is_one_json_text(arrays.as_bytes()), want, "{n} arrays");
            let objects = format!("{}1{}", "{\"k\":".repeat(n), "}".repeat(n));
            assert_eq!(is_one_json_text(objects.as_bytes()), want, "{n} objects");
            let mixed = format!("{}{}", "[{\"k\":".repeat(n / 2), "}]".repeat(n / 2));
            let mixed = mixed.replace(":}", ":0}");
            assert_eq!(is_one_json_text(mixed.as_bytes()), n / 2 * 2 <= MAX_DEPTH);
        }
        // A deep body is refused by depth, not by running out of stack.
        let deep = "[".repeat(1 << 20);
        assert!(!is_one_json_text(deep.as_bytes()));
    }

    #[test]
    fn the_plain_scan_stops_at_every_kind_of_byte_in_every_position() {
        for at in 0..40 {
            for stop in [b'"', b'\\', 0x00, 0x1f, 0x80, 0xff] {
                let mut s = vec![b'x'; 40];
                s[at] = stop;
                assert_eq!(plain_prefix(&s), at, "stop {stop:#x} at {at}");
            }
            assert_eq!(plain_prefix(&vec![b'~'; at]), at);
        }
    }

    #[test]
    fn push_string_writes_what_serde_json_reads_back() {
        let mut all: String = (0u8..0x80).map(char::from).collect();
        all.push_str("h\u{e9}llo \u{1F600} \"q\" \\ end");
        for s in [
            "",
            "plain-ascii_01",
            "\"",
            "\\",
            "\n\r\t\u{8}\u{c}\u{0}\u{1f}",
            all.as_str(),
        ] {
            let mut out = b"x".to_vec();
            push_string(&mut out, s);
            assert_eq!(out[0], b'x');
            assert!(
                is_one_json_text(&out[1..]),
                "{:?}",
                String::from_utf8_lossy(&out)
            );
            let back: String = serde_json::from_slice(&out[1..]).unwrap();
            assert_eq!(back, s);
        }
        let mut out = Vec::new();
        push_string(&mut out, "evt_01J");
        assert_eq!(out, b"\"evt_01J\"");
    }

    #[test]
    fn body_json_decides_by_this_rule() {
        assert_eq!(BodyJson::decide(b"{\"a\":[1]}"), BodyJson::Json);
        assert_eq!(BodyJson::decide(b"\"\xff\""), BodyJson::NotJson);
    }
}
