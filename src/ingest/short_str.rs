//! A short string held inline: what a pending reply keeps of its trigger's name, so that an
//! admitted event's answer costs no allocation of its own (issue 28 item 3: the pending reply's
//! copies). Names up to [`INLINE`] bytes (every trigger name seen in practice) live in the
//! value; a longer one (up to the WAL's 256) is boxed, as a `String` would be.
#![forbid(unsafe_code)]

use std::fmt;
use std::ops::Deref;

/// Bytes kept inline.
pub const INLINE: usize = 46;

/// A string of up to [`INLINE`] bytes inline, longer ones on the heap.
#[derive(Clone, PartialEq, Eq)]
pub enum ShortStr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<str>),
}

impl ShortStr {
    pub fn new(s: &str) -> ShortStr {
        if s.len() > INLINE {
            return ShortStr::Heap(s.into());
        }
        let mut bytes = [0; INLINE];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        ShortStr::Inline {
            len: s.len() as u8,
            bytes,
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            // The bytes were copied whole from a `&str` in `new`.
            ShortStr::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).expect("copied from a str")
            }
            ShortStr::Heap(s) => s,
        }
    }
}

impl Deref for ShortStr {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq<str> for ShortStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_stay_inline_and_long_ones_go_to_the_heap() {
        for s in ["", "default", "é-trigger", &"x".repeat(INLINE)] {
            let v = ShortStr::new(s);
            assert!(matches!(v, ShortStr::Inline { .. }), "{s:?}");
            assert_eq!(&*v, s);
        }
        let long = "y".repeat(INLINE + 1);
        let v = ShortStr::new(&long);
        assert!(matches!(v, ShortStr::Heap(_)));
        assert_eq!(v.as_str(), long);
        assert_eq!(format!("{:?}", ShortStr::new("a\"b")), "\"a\\\"b\"");
    }

    #[test]
    fn it_is_no_bigger_than_a_string_and_its_inline_bytes() {
        assert!(std::mem::size_of::<ShortStr>() <= INLINE + 2 + 8);
    }
}
