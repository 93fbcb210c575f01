//! A held node: what every lock recipe ends in once its queue entry is admitted.
//!
//! A [`Hold`] does three jobs, one per file:
//! * `held.rs` and `node.rs`: the node (`Node`: its connection, lock path, node path and `czxid`, fixed for
//!   the hold's life) and its local state (`Local`: the reentrant count, the handle's local
//!   turn and the companions, behind one lock);
//! * `monitor.rs`: the hold's [`LockStatus`], fed by the session's states and by the data watch on
//!   our own node;
//! * `release.rs`: the delete of our node once the last hold goes, cancel-safe.
//!
//! Invariants of the local state:
//! * The count starts at 1, goes up with [`Hold::retain`] and down with [`Hold::release_one`].
//!   Once 0 it stays 0 (`retain` refuses a released or lost hold), and whoever took it to 0
//!   deletes the node (`release.rs`).
//! * At 0, the turn and then the companions are given back, outside the lock: the turn first,
//!   so that the handle's next local task may queue behind our node at once.
//! * The hold never names a guard: companions are type-erased values, kept only to be dropped
//!   (a dropped guard releases itself).

mod held;
mod monitor;
mod node;
mod release;

pub(crate) use self::held::{Hold, Limit};
pub(crate) use self::release::PendingRelease;
