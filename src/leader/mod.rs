//! Leader election on the queue engine: [`LeaderLatch`] and [`LeaderSelector`].

mod latch;
mod lifecycle;
mod selector;

pub use latch::{LatchOptions, LeaderLatch};
pub use selector::{LeaderSelector, LeadershipContext, SelectorOptions, TermEnded, TermOutcome, TermResult};

/// Whether we lead, and with which fencing token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Leadership {
    /// We lead. The token is the `czxid` of our node: strictly greater than any earlier leader's.
    Leader {
        /// The fencing token of this term.
        fencing_token: u64,
    },
    /// We don't lead (yet, or any more).
    NotLeader,
}

impl Leadership {
    /// Whether this is [`Leadership::Leader`].
    pub fn is_leader(&self) -> bool {
        matches!(self, Leadership::Leader { .. })
    }

    /// The fencing token while leading.
    pub fn fencing_token(&self) -> Option<u64> {
        match self {
            Leadership::Leader { fencing_token } => Some(*fencing_token),
            Leadership::NotLeader => None,
        }
    }
}
