//! [`InterProcessMutex`]: a fair, herd-free, reentrant distributed mutex.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::guard::LockGuard;
use crate::lock_core::{Acquire, LockCore, LockSpec, Participant, QueueStats, Wait};
use crate::options::LockOptions;
use crate::path::LockPath;
use crate::session::Session;

/// A distributed mutex over ZooKeeper, wire-compatible with Curator's `InterProcessMutex`.
///
/// * **Fair and herd-free:** contenders queue as EPHEMERAL_SEQUENTIAL nodes and each watches
///   its predecessor, so that a release wakes only the waiter behind it, and the lock is
///   granted in creation order. Two or more places back, a waiter also watches for its
///   predecessor's tombstone (created and deleted with that node by a release at the head), so
///   that it enters on its predecessor's release alone, with no listing: one hop per handoff.
///   With a [lock delay](LockOptions::lock_delay) there are no tombstones: such a waiter
///   watches the node ahead of its predecessor instead, and a release wakes at most two
///   waiters.
/// * **Exclusive between tasks:** two `acquire` calls on one handle (or its clones), from any
///   two tasks, exclude each other, as a `tokio::sync::Mutex` would. They take turns in a local
///   FIFO in front of the ZooKeeper queue, so many tasks on one handle cost one node at a time.
/// * **Reentrant through the guard:** [`LockGuard::reenter`] takes a nested hold on the same
///   node, with no round trip. The guard is the proof of ownership; the handle is not.
/// * **Self-healing:** built from a [`Session`], an acquire that was waiting when the session
///   expired queues again on the new session by itself (at the back of the queue).
/// * **Safe:** every hold has a fencing token, a status channel that reports a possibly lost
///   lock, and fenced writes; a dropped acquire leaves no node behind.
///
/// ```no_run
/// # async fn demo(session: zk_recipes::Session) -> zk_recipes::Result<()> {
/// use zk_recipes::InterProcessMutex;
/// let mutex = InterProcessMutex::new(&session, "/locks/orders")?;
/// let guard = mutex.acquire().await?;
/// println!("holding with fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct InterProcessMutex {
    core: Arc<LockCore>,
}

impl std::fmt::Debug for InterProcessMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessMutex").field("path", self.core.path()).finish()
    }
}

impl InterProcessMutex {
    /// A mutex on `path` with default [`LockOptions`]. Nothing is sent until an acquire.
    ///
    /// # Errors
    /// [`crate::Error::InvalidPath`] for an invalid path (see [`LockPath::new`]).
    pub fn new(session: &Session, path: &str) -> Result<InterProcessMutex> {
        Self::with_options(session, path, LockOptions::default())
    }

    /// A mutex on `path` with explicit options.
    ///
    /// # Errors
    /// As [`InterProcessMutex::new`].
    pub fn with_options(session: &Session, path: &str, options: LockOptions) -> Result<InterProcessMutex> {
        let spec = LockSpec::exclusive("mutex", true);
        Ok(InterProcessMutex { core: Arc::new(LockCore::build(session, path, spec, &options)?) })
    }

    /// The lock path.
    pub fn path(&self) -> &LockPath {
        self.core.path()
    }

    /// Waits until the lock is held: first for this handle's local turn (another task acquiring
    /// through the same handle goes first), then in the ZooKeeper queue. If the session expires
    /// while we wait, we queue again on the new session.
    ///
    /// The local turn belongs to a guard until it is released or dropped, lost or not, as a
    /// `tokio::sync::Mutex` guard keeps its lock: while another task keeps a lost guard of this
    /// handle, this waits for it ([`InterProcessMutex::acquire_timeout`] is bounded by its
    /// timeout meanwhile, [`InterProcessMutex::try_acquire`] returns `Ok(None)`).
    ///
    /// # Errors
    /// * [`crate::Error::SessionClosed`]: the session was closed (at once, whatever guards of
    ///   this handle are alive, and also when it closes while we wait).
    /// * [`crate::Error::NodeDeleted`]: someone deleted our queue node while we waited.
    /// * [`crate::Error::RecipeConflict`] or [`crate::Error::FormatConflict`]: the path holds
    ///   another kind of recipe's nodes, or the other naming format's.
    /// * [`crate::Error::NoAuth`]: the ACLs on the path refuse us.
    /// * [`crate::Error::ZooKeeper`]: any other server error.
    ///
    /// On every error our node is deleted before this returns.
    ///
    /// # Cancel safety
    /// Cancel-safe: if the future is dropped at any point, our node (even one whose create was
    /// still in flight) is deleted in the background; [`InterProcessMutex::settled`] awaits that.
    pub async fn acquire(&self) -> Result<LockGuard> {
        self.core.acquire(Acquire::forever()).await?.ok_or_else(|| self.core.closed())
    }

    /// Takes the lock only if it is free now: `Ok(None)` when it is held by someone else (or by
    /// another task through this handle), in which case no node of ours is left behind.
    ///
    /// # Errors
    /// [`crate::Error::Timeout`] when ZooKeeper did not answer within the session timeout (the
    /// connection is down): our node, if one was created, is deleted in the background.
    /// Otherwise as [`InterProcessMutex::acquire`].
    ///
    /// # Cancel safety
    /// As [`InterProcessMutex::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.core.acquire(Acquire::new(Wait::Try)).await
    }

    /// Waits at most `timeout` (plus at most half a second to delete our node), whatever the
    /// connection does: `Ok(None)` if the lock was not acquired in time. Our node is deleted
    /// before this returns or, if the connection is down or the server slow to answer, in the
    /// background ([`InterProcessMutex::settled`] awaits that).
    ///
    /// # Errors
    /// As [`InterProcessMutex::acquire`].
    ///
    /// # Cancel safety
    /// As [`InterProcessMutex::acquire`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.core.acquire(Acquire::at_most(Some(timeout))).await
    }

    /// Whether a task holds the lock through this handle (or a clone) now, as far as it knows.
    pub fn is_held_by_this_handle(&self) -> bool {
        self.core.held_here()
    }

    /// The queue in order: node, participant id, whether it holds the lock, owner session.
    ///
    /// # Errors
    /// [`crate::Error::SessionExpired`], [`crate::Error::NoAuth`] or [`crate::Error::ZooKeeper`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn participants(&self) -> Result<Vec<Participant>> {
        self.core.participants().await
    }

    /// Asks the current holder to release, by setting its node's data to `__REVOKE__`
    /// (Curator's revocation). The holder sees [`crate::LockStatus::RevocationRequested`] and
    /// decides. Returns how many holders were asked (0 or 1).
    ///
    /// # Errors
    /// As [`crate::request_revocation`].
    ///
    /// # Cancel safety
    /// A request already sent stays sent.
    pub async fn revoke_holders(&self) -> Result<usize> {
        self.core.revoke_holders().await
    }

    /// What this handle's queue work has cost so far (creates, listings, wake-ups).
    pub fn stats(&self) -> QueueStats {
        self.core.stats()
    }

    /// Resolves once every background cleanup started by this handle (dropped acquires, dropped
    /// guards) has finished.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn settled(&self) {
        self.core.settled().await
    }
}

super::lock::lock_on_core!(
    InterProcessMutex, |l| core: l.core,
    acquire: l.acquire(), try: l.try_acquire(), timeout(t): l.acquire_timeout(t), settled: l.settled(),
);
