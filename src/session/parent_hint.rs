//! Whether this session's recent joins found their lock's parent missing.
//!
//! A join sends its create and the listing back to back (one round trip). When the parent is
//! missing (a fresh lock path per order id, or a CONTAINER parent reaped while unused), both
//! fail, and a second round trip follows. A session whose recent joins mostly met a missing
//! parent sends the parent's create first, then ours and the listing, back to back: one round
//! trip for a fresh path, and no failed create. Either guess is safe; a wrong one costs a
//! failed create of the parent (the parent existed) or a round trip (it was missing), nothing
//! else.

use std::sync::atomic::{AtomicU32, Ordering};

/// Recent first creates that met a missing parent, as a score in `0..=MAX`: +1 for a miss,
/// -1 for a hit.
#[derive(Debug, Default)]
pub(crate) struct ParentHint(AtomicU32);

const MAX: u32 = 8;
/// From this score on, joins expect the parent to be missing.
const EXPECT_MISSING: u32 = MAX / 2;

impl ParentHint {
    /// Whether a join should create the parent first (it is probably missing).
    pub fn expect_missing(&self) -> bool {
        self.0.load(Ordering::Relaxed) >= EXPECT_MISSING
    }

    /// A join's first create (ours, or the parent's on a guess) found the parent `missing` or not.
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
