//! The batch rule for bodies (`sluice::wal::format::json`, issue 43) against `serde_json`:
//! arbitrary bytes never panic, and a body is one JSON text exactly when `serde_json` parses
//! it, it is valid UTF-8 and its containers nest at most `MAX_DEPTH` deep.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::wal::format::json::{is_one_json_text, MAX_DEPTH};

/// The deepest nesting of a text `serde_json` accepted: brackets outside strings.
fn depth(text: &[u8]) -> usize {
    let (mut d, mut max, mut in_str, mut esc) = (0usize, 0usize, false, false);
    for &c in text {
        if in_str {
            match (esc, c) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_str = true,
            b'[' | b'{' => {
                d += 1;
                max = max.max(d);
            }
            b']' | b'}' => d -= 1,
            _ => {}
        }
    }
    max
}

fuzz_target!(|data: &[u8]| {
    let data = &data[..data.len().min(1 << 16)];
    let want = serde_json::from_slice::<serde::de::IgnoredAny>(data).is_ok()
        && std::str::from_utf8(data).is_ok()
        && depth(data) <= MAX_DEPTH;
    assert_eq!(is_one_json_text(data), want);
});
