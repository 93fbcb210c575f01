//! [`Node`]: which node a hold holds, fixed for the hold's life.

use crate::path::LockPath;
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
    /// waiters watch for them, and a waiter may watch for ours: `Leaving::tomb`,
    /// `Conn::send_delete`).
    pub(super) tomb: bool,
}
