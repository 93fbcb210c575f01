//! Leader election on the queue engine: [`LeaderLatch`] and [`LeaderSelector`], and
//! [`LeaderObserver`] to follow an election without joining it.

mod context;
mod election;
mod latch;
mod lifecycle;
mod observer;
mod selector;

pub use context::LeadershipContext;
pub use latch::{LatchOptions, LeaderLatch};
pub use lifecycle::Leadership;
pub use observer::{LeaderInfo, LeaderObserver};
pub use selector::{LeaderSelector, SelectorOptions, TermEnded, TermOutcome, TermResult};
