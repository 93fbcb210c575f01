//! [`Node`]: which node a hold holds, fixed for the hold's life.

use crate::path::LockPath;
use crate::session::Conn;

/// Which node we hold: fixed for the hold's life.
pub(super) struct Node {
    pub(super) conn: Conn,
    pub(super) root: LockPath,
    pub(super) path: String,
    pub(super) czxid: i64,
    /// Whether our releases say they are clean (the lock delay is on: `Conn::send_delete`).
    pub(super) marks_release: bool,
    /// Whether our delete leaves a tombstone (we were admitted at the head of a queue whose
    /// waiters watch for them: `Conn::send_delete`).
    pub(super) tomb: bool,
}
