//! Event ids: ULID-shaped, sortable by time, unique across workers and restarts.
//!
//! 128 bits written as 26 characters of Crockford base32: 48 bits of Unix milliseconds, then
//! 10 bits of the microsecond within that millisecond (0..=999), then 8 bits of worker index,
//! then 62 bits that start at a per-process random value and increment by one per event. So ids
//! from one worker are strictly increasing, even within a microsecond; ids of events accepted
//! one after the other on different cores (a client that waits for one `202` before it sends
//! the next) are in that order, since a round trip takes more than a microsecond; and two
//! processes collide only if their 62-bit random starts land within each other's run. The first
//! 48 bits are a ULID's time, so any ULID library reads the millisecond back.
//! The id is stable for the life of the event: it is stored in the WAL and will be sent to
//! destinations as `webhook-id`.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Per-worker generator (not shared between threads).
#[derive(Debug)]
pub struct EventIdGen {
    worker: u8,
    counter: u128, // low 62 bits used
}

const LOW62: u128 = (1u128 << 62) - 1;

impl EventIdGen {
    pub fn new(worker: usize) -> EventIdGen {
        // RandomState is seeded from the OS's randomness once per process (then per-thread
        // increments); hashing the worker index through two fresh states gives 128 random bits.
        let mut a = RandomState::new().build_hasher();
        a.write_usize(worker);
        let mut b = RandomState::new().build_hasher();
        b.write_u64(a.finish());
        let seed = ((a.finish() as u128) << 64) | b.finish() as u128;
        // Start in the lower half so a worker never wraps in practice (2^71 events).
        EventIdGen {
            worker: worker as u8,
            counter: seed & (LOW62 >> 1),
        }
    }

    /// The next id for an event received at `unix_ms` (microsecond 0 of that millisecond).
    pub fn next(&mut self, unix_ms: u64) -> String {
        self.next_us(unix_ms.saturating_mul(1000))
    }

    /// The next id for an event received at `unix_us` (Unix microseconds).
    pub fn next_us(&mut self, unix_us: u64) -> String {
        self.next_id_us(unix_us).as_str().to_owned()
    }

    /// [`EventIdGen::next_us`] without an allocation: the id's 26 characters inline (the
    /// event's record and its pending `202` each take what they need of it).
    pub fn next_id_us(&mut self, unix_us: u64) -> EventId {
        self.counter = (self.counter + 1) & LOW62;
        let (ms, us) = (unix_us / 1000, unix_us % 1000);
        let value = ((ms as u128 & ((1 << 48) - 1)) << 80)
            | ((us as u128) << 70)
            | ((self.worker as u128) << 62)
            | self.counter;
        EventId::encode(value)
    }
}

/// An event id's 26 characters, inline (`Copy`, no allocation). Every byte is one of
/// Crockford's base32 digits, so the id is ASCII and needs no JSON escaping.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventId([u8; 26]);

impl EventId {
    /// 128-bit value → 26 Crockford base32 characters (the first carries 3 bits).
    fn encode(value: u128) -> EventId {
        let mut out = [0u8; 26];
        for (i, slot) in out.iter_mut().enumerate() {
            let shift = 125 - 5 * i as i32;
            let digit = if shift >= 0 {
                (value >> shift) & 31
            } else {
                (value << -shift) & 31
            };
            *slot = CROCKFORD[digit as usize];
        }
        EventId(out)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        // Every byte comes from CROCKFORD, which is ASCII.
        std::str::from_utf8(&self.0).expect("ascii")
    }
}

impl std::fmt::Debug for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::ops::Deref for EventId {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

/// 128-bit value → 26 Crockford base32 characters (the first carries 3 bits).
pub fn encode(value: u128) -> String {
    EventId::encode(value).as_str().to_owned()
}

/// What an event id says: its Unix millisecond and the index of the worker that made it (the
/// core whose log holds it, `wal/core-K`, unless that log was adopted). `None` unless `id` is
/// 26 characters of this module's alphabet (upper case) whose value fits in 128 bits.
pub fn parse(id: &str) -> Option<(u64, u8)> {
    let b = id.as_bytes();
    if b.len() != 26 || b[0] > b'7' {
        return None;
    }
    let mut value = 0u128;
    for &c in b {
        let digit = CROCKFORD.iter().position(|&x| x == c)? as u128;
        value = (value << 5) | digit;
    }
    Some(((value >> 80) as u64, (value >> 62) as u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_back_to_their_millisecond_and_worker() {
        let mut g = EventIdGen::new(7);
        let id = g.next_us(1_700_000_000_123 * 1000 + 999);
        assert_eq!(parse(&id), Some((1_700_000_000_123, 7)));
        assert_eq!(
            parse("7ZZZZZZZZZZZZZZZZZZZZZZZZZ"),
            Some(((1 << 48) - 1, 255))
        );
        for bad in [
            "",
            "01HZX",
            "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",
            "0000000000000000000000000U",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert_eq!(parse(&id.to_lowercase()), None, "ids are upper case");
    }

    #[test]
    fn ids_are_26_chars_and_increase() {
        let mut g = EventIdGen::new(3);
        let a = g.next(1_700_000_000_000);
        let b = g.next(1_700_000_000_000);
        let c = g.next(1_700_000_000_001);
        assert_eq!(a.len(), 26);
        assert!(a < b && b < c, "{a} {b} {c}");
        assert!(a.bytes().all(|x| CROCKFORD.contains(&x)));
    }

    #[test]
    fn workers_do_not_collide() {
        let mut g0 = EventIdGen::new(0);
        let mut g1 = EventIdGen::new(1);
        let ids: std::collections::HashSet<String> =
            (0..1000).flat_map(|_| [g0.next(5), g1.next(5)]).collect();
        assert_eq!(ids.len(), 2000);
    }

    #[test]
    fn within_a_millisecond_the_microsecond_orders_ids_of_different_workers() {
        let (mut high, mut low) = (EventIdGen::new(200), EventIdGen::new(0));
        let ms = 1_750_000_000_123u64;
        let first = high.next_us(ms * 1000 + 5);
        let second = low.next_us(ms * 1000 + 6);
        assert!(first < second, "{first} {second}");
        // The first 10 characters are the ULID time: the millisecond, whatever the microsecond.
        assert_eq!(first[..10], encode((ms as u128) << 80)[..10]);
        assert_eq!(second[..10], low.next(ms)[..10]);
        assert!(low.next(ms + 1) > high.next_us(ms * 1000 + 999));
    }

    #[test]
    fn encode_known_values() {
        assert_eq!(encode(0), "00000000000000000000000000");
        assert_eq!(encode(u128::MAX), "7ZZZZZZZZZZZZZZZZZZZZZZZZZ");
        assert_eq!(encode(31), "0000000000000000000000000Z");
    }

    #[test]
    fn an_inline_id_is_the_string_id() {
        let (mut a, mut b) = (EventIdGen::new(3), EventIdGen::new(3));
        b.counter = a.counter;
        let t = 1_700_000_000_123_456;
        let id = a.next_id_us(t);
        assert_eq!(id.as_str(), b.next_us(t));
        assert_eq!(&*id, id.as_str());
        assert_eq!(format!("{id:?}"), format!("{:?}", id.as_str()));
    }
}
