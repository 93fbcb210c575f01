//! Whether this session's recent joins found their lock's parent missing.
//!
//! A join sends its create and the listing back to back (one round trip). When the parent is
//! missing (a fresh lock path per order id, or a CONTAINER parent reaped while unused), both
//! fail, and the listing was wasted work for the server. A session whose recent joins mostly met
//! a missing parent sends the create alone first, and pipelines the parent's create with the
//! retry instead: the same number of round trips for a fresh path, two requests fewer. Either
//! guess is safe; a wrong one costs a round trip or a wasted listing, nothing else.

use std::sync::atomic::{AtomicU32, Ordering};

/// Recent first creates that met a missing parent, as a score in `0..=MAX`: +1 for a miss,
/// -1 for a hit.
#[derive(Debug, Default)]
pub(crate) struct ParentHint(AtomicU32);

const MAX: u32 = 8;
/// From this score on, joins expect the parent to be missing.
const EXPECT_MISSING: u32 = MAX / 2;

impl ParentHint {
    /// Whether a join should send its create alone (the parent is probably missing).
    pub fn expect_missing(&self) -> bool {
        self.0.load(Ordering::Relaxed) >= EXPECT_MISSING
    }

    /// A join's first create found the parent `missing` or not.
    pub fn note(&self, missing: bool) {
        let _ = self.0.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |score| {
            Some(if missing { (score + 1).min(MAX) } else { score.saturating_sub(1) })
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_misses_flips_the_guess_and_a_run_of_hits_flips_it_back() {
        let hint = ParentHint::default();
        assert!(!hint.expect_missing());
        for _ in 0..EXPECT_MISSING {
            hint.note(true);
        }
        assert!(hint.expect_missing());
        for _ in 0..20 {
            hint.note(true);
        }
        for _ in 0..MAX - EXPECT_MISSING + 1 {
            hint.note(false);
        }
        assert!(!hint.expect_missing());
        for _ in 0..20 {
            hint.note(false);
        }
        assert!(!hint.expect_missing());
    }
}
