//! The permit set of one destination: the only place its `max_in_flight` lives.
//!
//! Core-local (a destination is owned by one core), so a plain counter: no atomics, no locks.
//! A call may start only while holding a [`Permit`], and the permit goes back through
//! [`Permits::release`] when the call's outcome is known. `Permit` is a move-only token (no
//! `Clone`, no `Copy`, `#[must_use]`), so a call cannot be counted twice or released twice
//! without the type checker noticing; forgetting to release it is the remaining misuse, which
//! shows up as `in_flight()` never returning to zero.
//!
//! Invariant: `in_flight() <= max()` after every operation. [`Permits::set_max`] (the adaptive
//! limit) moves `max` towards a target without breaking it: up at once, down no further than
//! `in_flight`, then one step per release until the target is reached.
#![forbid(unsafe_code)]

/// One unit of a destination's in-flight budget. Hand it back with [`Permits::release`].
#[must_use = "a permit must be handed back with Permits::release, or its slot leaks"]
#[derive(Debug)]
pub struct Permit {
    _private: (),
}

/// A counting permit set.
#[derive(Debug)]
pub struct Permits {
    max: usize,
    in_flight: usize,
    /// Where [`Permits::set_max`] is taking `max`: a decrease below `in_flight` waits for
    /// releases (each one lowers `max` until it reaches the target).
    target: usize,
}

impl Permits {
    /// A set of `max` permits (`max_in_flight`, validated ≥ 1 by the config). With `max == 0`
    /// nothing is ever granted.
    pub const fn new(max: usize) -> Self {
        Permits {
            max,
            in_flight: 0,
            target: max,
        }
    }

    /// Changes the bound (the adaptive limit). An increase applies at once; a decrease applies
    /// at once down to `in_flight` and then one step per release, so `in_flight <= max` holds
    /// at every moment and no call is ever cut short.
    pub fn set_max(&mut self, target: usize) {
        self.target = target;
        self.max = target.max(self.in_flight);
    }

    /// The bound [`Permits::set_max`] is taking `max` to (`max` itself once the calls above
    /// it have returned).
    pub const fn target(&self) -> usize {
        self.target
    }

    /// Whether [`Permits::try_acquire`] would succeed now.
    #[inline]
    pub const fn available(&self) -> bool {
        self.in_flight < self.max
    }

    /// Takes a permit, or `None` when all `max` are out.
    #[inline]
    pub fn try_acquire(&mut self) -> Option<Permit> {
        if self.in_flight < self.max {
            self.in_flight += 1;
            Some(Permit { _private: () })
        } else {
            None
        }
    }

    /// Returns a permit. Permits are not tied to their set, so giving one to the wrong set is
    /// a bug the types cannot catch; it is caught by a debug assertion when it would underflow.
    #[inline]
    pub fn release(&mut self, permit: Permit) {
        let Permit { _private: () } = permit;
        debug_assert!(self.in_flight > 0, "permit released to a set with none out");
        self.in_flight = self.in_flight.saturating_sub(1);
        if self.max > self.target {
            self.max = self.target.max(self.in_flight);
        }
    }

    /// Permits currently out.
    #[inline]
    pub const fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The bound.
    #[inline]
    pub const fn max(&self) -> usize {
        self.max
    }
}

impl crate::cluster::budget::PermitBound for Permits {
    fn set_max(&mut self, max: usize) {
        Permits::set_max(self, max)
    }

    fn available(&self) -> bool {
        Permits::available(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::deliver::rng::SmallRng;

    #[test]
    fn set_max_grows_at_once_and_shrinks_as_permits_return() {
        let mut p = Permits::new(2);
        let a = p.try_acquire().unwrap();
        let b = p.try_acquire().unwrap();
        p.set_max(4);
        let c = p.try_acquire().unwrap();
        let d = p.try_acquire().unwrap();
        assert!(p.try_acquire().is_none());
        p.set_max(1);
        assert_eq!(p.max(), 4, "never below in_flight");
        assert!(!p.available());
        p.release(a);
        assert_eq!(p.max(), 3);
        assert!(p.try_acquire().is_none(), "shrinking: no new permit");
        p.release(b);
        p.release(c);
        assert_eq!(p.max(), 1);
        assert!(p.try_acquire().is_none());
        p.release(d);
        assert_eq!(p.max(), 1);
        let e = p.try_acquire().unwrap();
        assert!(p.try_acquire().is_none());
        p.release(e);
    }

    #[test]
    fn in_flight_never_exceeds_a_changing_max() {
        for seed in 0..20 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut p = Permits::new(4);
            let mut held = Vec::new();
            let mut target = 4usize;
            for _ in 0..5000 {
                match rng.up_to(4) {
                    0 => {
                        target = 1 + rng.up_to(15) as usize;
                        p.set_max(target);
                    }
                    1 | 2 => {
                        if let Some(permit) = p.try_acquire() {
                            assert!(held.len() < target, "granted past the target");
                            held.push(permit);
                        }
                    }
                    _ if !held.is_empty() => {
                        let i = rng.up_to(held.len() as u64 - 1) as usize;
                        p.release(held.swap_remove(i));
                    }
                    _ => {}
                }
                assert!(p.in_flight() <= p.max());
                assert!(p.max() == target || p.max() == p.in_flight());
                assert_eq!(p.in_flight(), held.len());
            }
            for permit in held.drain(..) {
                p.release(permit);
            }
            assert_eq!(p.max(), target);
        }
    }

    #[test]
    fn grants_up_to_max() {
        let mut p = Permits::new(2);
        let a = p.try_acquire().unwrap();
        let b = p.try_acquire().unwrap();
        assert!(p.try_acquire().is_none());
        assert!(!p.available());
        assert_eq!(p.in_flight(), 2);
        p.release(a);
        assert!(p.available());
        let c = p.try_acquire().unwrap();
        p.release(b);
        p.release(c);
        assert_eq!(p.in_flight(), 0);
        assert_eq!(p.max(), 2);
        assert!(Permits::new(0).try_acquire().is_none());
    }

    #[test]
    fn never_exceeds_max_under_any_sequence() {
        for seed in 0..20 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let max = 1 + rng.up_to(7) as usize;
            let mut p = Permits::new(max);
            let mut held = Vec::new();
            for _ in 0..2000 {
                if rng.up_to(1) == 0 {
                    match p.try_acquire() {
                        Some(permit) => held.push(permit),
                        None => assert_eq!(held.len(), max),
                    }
                } else if !held.is_empty() {
                    let i = rng.up_to(held.len() as u64 - 1) as usize;
                    p.release(held.swap_remove(i));
                }
                assert!(p.in_flight() <= p.max());
                assert_eq!(p.in_flight(), held.len());
            }
            for permit in held.drain(..) {
                p.release(permit);
            }
            assert_eq!(p.in_flight(), 0);
        }
    }
}
