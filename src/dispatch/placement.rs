//! Which core owns a destination: a stable hash of `kind:uri` modulo the worker count, so a
//! destination's permits, circuit, rate budget and retry timers live on exactly one core and
//! need no synchronisation.

/// FNV-1a over `http:` + `uri`, modulo `cores` (≥ 1).
pub fn owner_core(uri: &str, cores: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in b"http:".iter().chain(uri.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % cores.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_and_in_range() {
        let a = owner_core("http://127.0.0.1:9000/hook", 2);
        assert_eq!(a, owner_core("http://127.0.0.1:9000/hook", 2));
        assert!(a < 2);
        assert_eq!(owner_core("x", 1), 0);
        assert_eq!(owner_core("x", 0), 0);
        let spread: std::collections::HashSet<usize> = (0..64)
            .map(|i| owner_core(&format!("http://h{i}/"), 4))
            .collect();
        assert_eq!(spread.len(), 4);
    }
}
