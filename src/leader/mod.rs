//! Leader election on the queue engine: [`LeaderLatch`] and [`LeaderSelector`].

mod latch;
mod lifecycle;
mod selector;

pub use latch::{LatchOptions, LeaderLatch};
pub use lifecycle::Leadership;
pub use selector::{LeaderSelector, LeadershipContext, SelectorOptions, TermEnded, TermOutcome, TermResult};
