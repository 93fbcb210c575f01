//! [`Node`]: which node a hold holds, fixed for the hold's life.

use crate::path::LockPath;
use crate::queue::AloneCheck;
use crate::session::Conn;

/// Which node we hold: fixed for the hold's life.
pub(super) struct Node {
    pub(super) conn: Conn,
    pub(super) root: LockPath,
    pub(super) path: std::sync::Arc<str>,
    pub(super) czxid: i64,
    /// Whether our releases are clean ones (the lock delay is on: `Departure::Clean`).
    pub(super) clean_releases: bool,
    /// Whether our delete leaves a tombstone (we were admitted at the head of a queue whose
    /// waiters watch for them: `Conn::send_delete`), unless we know then that nobody is
    /// queued behind us (`alone`).
    pub(super) tomb: bool,
    /// Set when the join's listing showed our node alone: whether nobody has joined behind it
    /// since (see `AloneCheck`).
    pub(super) alone: Option<AloneCheck>,
}

impl Node {
    /// Whether a delete sent now leaves a tombstone: when we were admitted at the head, unless
    /// we know that nobody is queued behind us, the one waiter it would be for. Decided once
    /// per release, when its delete is first sent.
    pub(super) fn leaves_tomb(&self) -> bool {
        self.tomb && !self.alone.as_ref().is_some_and(AloneCheck::holds)
    }
}
