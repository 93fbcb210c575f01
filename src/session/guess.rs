//! A session's guesses about the locks it joins, learned from its recent joins. Either guess is
//! safe when wrong; it only makes a join cheaper when right.
//!
//! * **The parent is missing** (`Guesses::parent_missing`). A join sends its create
//!   and the listing back to back (one round trip). When the parent is missing (a fresh lock
//!   path per order id, or a CONTAINER parent reaped while unused), both fail, and a second
//!   round trip follows. A session whose recent joins mostly met a missing parent sends the
//!   parent's create first, then ours and the listing, back to back (the two creates in one
//!   `multi` where the server answers their `Stat`: `queue/plan.rs`): one round trip for a fresh
//!   path, and no failed create. A wrong guess costs a failed create of the parent (the parent
//!   existed; with the `multi`, a round trip more to send ours alone) or a round trip (it was
//!   missing), nothing else.
//! * **The lock is idle** (`Guesses::idle`). A session whose recent joins
//!   each found their node alone in the listing lets the listing's child watch stand in for the
//!   data watch on its node (one request and reply fewer; see `queue::entry::
//!   own_watch_from_listing`). A wrong guess leaves a waiter with a child watch it does not
//!   need: its one event, if it comes, is not acted on. The first join that finds company ends
//!   the guess, so a session mis-guesses once when a lock it used alone becomes contended.

use std::sync::atomic::{AtomicU32, Ordering};

/// A session's two guesses.
#[derive(Debug)]
pub(crate) struct Guesses {
    /// Whether recent joins found their lock's parent missing.
    pub parent_missing: Guess,
    /// Whether recent joins found their node alone in the listing.
    pub idle: Guess,
}

impl Default for Guesses {
    fn default() -> Guesses {
        Guesses { parent_missing: Guess::patient(), idle: Guess::wary() }
    }
}

/// Recent answers to one question, as a score in `0..=MAX`: +1 for a yes; a no takes 1 off
/// (patient) or forgets every yes (wary). The guess is "yes" from `EXPECT` on.
#[derive(Debug)]
pub(crate) struct Guess {
    score: AtomicU32,
    wary: bool,
}

const MAX: u32 = 8;
/// From this score on, joins expect a yes.
const EXPECT: u32 = MAX / 2;

impl Guess {
    /// A guess that a run of noes turns around as a run of yeses made it (a missing parent).
    pub const fn patient() -> Guess {
        Guess { score: AtomicU32::new(0), wary: false }
    }

    /// A guess that one no ends (an idle lock).
    pub const fn wary() -> Guess {
        Guess { score: AtomicU32::new(0), wary: true }
    }

    /// Whether the next join should expect a yes.
    pub fn expect(&self) -> bool {
        self.score.load(Ordering::Relaxed) >= EXPECT
    }

    /// A join found the answer `yes` (or not).
    pub fn note(&self, yes: bool) {
        let _ = self.score.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |score| {
            Some(match (yes, self.wary) {
                (true, _) => (score + 1).min(MAX),
                (false, false) => score.saturating_sub(1),
                (false, true) => 0,
            })
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_noes_flips_a_patient_guess_back() {
        let hint = Guess::patient();
        assert!(!hint.expect());
        for _ in 0..EXPECT {
            hint.note(true);
        }
        assert!(hint.expect());
        for _ in 0..20 {
            hint.note(true);
        }
        hint.note(false);
        assert!(hint.expect(), "one no does not end a patient guess");
        for _ in 0..MAX - EXPECT {
            hint.note(false);
        }
        assert!(!hint.expect());
        for _ in 0..20 {
            hint.note(false);
        }
        assert!(!hint.expect());
    }

    #[test]
    fn one_no_ends_a_wary_guess() {
        let hint = Guess::wary();
        for _ in 0..EXPECT - 1 {
            hint.note(true);
        }
        assert!(!hint.expect());
        hint.note(true);
        assert!(hint.expect());
        for _ in 0..20 {
            hint.note(true);
        }
        hint.note(false);
        assert!(!hint.expect());
        for _ in 0..EXPECT - 1 {
            hint.note(true);
        }
        assert!(!hint.expect(), "a wary guess starts over");
    }
}
