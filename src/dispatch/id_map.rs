//! Maps keyed by a destination id: an index into the configuration's destinations, never
//! outside input, so the map needs no keyed (HashDoS-resistant) hash. One multiply by an odd
//! constant spreads the ids (Fibonacci hashing): the high bits, which `hashbrown` uses for its
//! control bytes, mix every bit of the id, and the low bits, which pick the bucket, stay distinct
//! for distinct ids (multiplying by an odd number is a bijection modulo any power of two).
//! A dispatcher looks its destination up several times per event; SipHash cost ~140
//! instructions a lookup there (issue 43's callgrind runs, benches/LOG.md).
//!
//! [`NumMap`] is the same map for the pump's other internal numbers, looked up once per event:
//! its tickets (handed out in sequence) and the LSNs of the events in progress. The log and
//! the pump assign them; nothing outside picks them.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map from destination id to `V`.
pub type IdMap<V> = HashMap<usize, V, BuildHasherDefault<IdHash>>;

/// A map keyed by a number sluice assigns itself (a ticket, an LSN): never outside input.
pub type NumMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHash>>;

/// The hasher of [`IdMap`] and [`NumMap`]: the number times 2^64 / φ.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHash(u64);

const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for IdHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `usize` and `u64` keys are hashed (`write_usize`, `write_u64`); any other input
        // is still well defined.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(SPREAD);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (self.0 ^ n as u64).wrapping_mul(SPREAD);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(SPREAD);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn ids_keep_distinct_buckets_and_spread_their_high_bits() {
        let b = BuildHasherDefault::<IdHash>::default();
        let hashes: Vec<u64> = (0..1024usize).map(|d| b.hash_one(d)).collect();
        // Low 10 bits (a table of 1024 buckets): a bijection.
        let mut low: Vec<u64> = hashes.iter().map(|h| h & 1023).collect();
        low.sort_unstable();
        low.dedup();
        assert_eq!(low.len(), 1024);
        // Top 7 bits (hashbrown's control byte): every value used by the first 1024 ids.
        let mut top: Vec<u64> = hashes.iter().map(|h| h >> 57).collect();
        top.sort_unstable();
        top.dedup();
        assert_eq!(top.len(), 128);
        let mut m: IdMap<&str> = IdMap::default();
        m.insert(3, "c");
        m.insert(0, "a");
        assert_eq!(
            (m.get(&3), m.get(&0), m.get(&1)),
            (Some(&"c"), Some(&"a"), None)
        );
    }

    #[test]
    fn sequential_numbers_keep_distinct_buckets_in_a_num_map() {
        let b = BuildHasherDefault::<IdHash>::default();
        let base = 1u64 << 40; // LSNs and tickets far from zero hash as well as small ones
        let mut low: Vec<u64> = (0..4096u64).map(|n| b.hash_one(base + n) & 4095).collect();
        low.sort_unstable();
        low.dedup();
        assert_eq!(low.len(), 4096);
        let mut m: NumMap<u64, u32> = NumMap::default();
        for n in 0..10_000u64 {
            m.insert(base + n, n as u32);
        }
        assert_eq!(m.remove(&(base + 1234)), Some(1234));
        assert_eq!(m.len(), 9_999);
    }
}
