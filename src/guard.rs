//! [`LockGuard`]: proof of a hold, with its fencing token, status and fenced writes.

use std::sync::Arc;

use tokio::sync::watch;
use zookeeper_client::{CheckWriteError, CheckWriter, CreateOptions, MultiWriteResult};

use crate::error::{Error, Result};
use crate::hold::Hold;
use crate::status::LockStatus;

/// A held lock: the proof of ownership. Dropping it releases in the background;
/// [`LockGuard::release`] releases and reports errors. It is `Send + Sync` and may be released
/// from any task or thread.
///
/// Reentrancy goes through the guard, never through the lock handle: [`LockGuard::reenter`]
/// takes a nested hold on the same node (for code that is handed the guard), and the node is
/// deleted when the last of them is released. Two `acquire` calls on one handle, from any two
/// tasks, exclude each other.
///
/// A hold belongs to the session it was taken in: if that session expires, the hold is
/// [`LockStatus::Lost`] for good, and releasing it never touches a later session's nodes.
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    hold: Arc<Hold>,
    released: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("node", &self.hold.path())
            .field("fencing_token", &self.fencing_token())
            .field("status", &self.current_status())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(hold: Arc<Hold>) -> LockGuard {
        LockGuard { hold, released: false }
    }

    /// The fencing token of this hold: the lock node's `czxid`, the id of the transaction that
    /// created it. It is global to the ensemble and strictly increasing across successive holders
    /// of the same lock (also across deletion of the parent and wrap of the sequence counter).
    /// Hand it to the resource you protect, and have the resource refuse tokens older than the
    /// newest it has seen.
    pub fn fencing_token(&self) -> u64 {
        self.hold.fencing_token()
    }

    /// The full path of our lock node.
    pub fn node_path(&self) -> &str {
        self.hold.path()
    }

    /// Takes a nested hold on the same node: a second guard that proves the same ownership. The
    /// node is deleted when the last guard is released. This is the only way to re-enter a
    /// lock; acquiring again through the handle waits like any other contender.
    ///
    /// # Errors
    /// [`Error::LockLost`] when the hold is lost (or released); [`Error::NotReentrant`] for a
    /// semaphore lease or an `InterProcessSemaphoreMutex`.
    pub fn reenter(&self) -> Result<LockGuard> {
        self.hold.retain()?;
        Ok(LockGuard::new(self.hold.clone()))
    }

    /// Keeps `other` held until this hold is released (a downgrade keeps its write hold).
    pub(crate) fn keep_until_released(&self, other: LockGuard) {
        self.hold.keep(other);
    }

    /// The session generation this hold was taken in (see [`crate::Session::generation`]).
    pub fn session_generation(&self) -> u64 {
        self.hold.generation()
    }

    /// The instant before which ZooKeeper cannot have expired the session of this hold, and so
    /// cannot have given the lock to anyone else: the send time of the session's latest
    /// answered request plus the negotiated timeout. Work that must not overlap another holder
    /// must stop before it, less your own margin (scheduling, the time it takes to stop).
    /// `None` once the hold is lost or released. While connected it keeps moving forward.
    pub fn safe_until(&self) -> Option<std::time::Instant> {
        self.hold.safe_until()
    }

    /// A channel of [`LockStatus`] changes, starting with the current one.
    pub fn status(&self) -> watch::Receiver<LockStatus> {
        self.hold.status()
    }

    /// The status now.
    pub fn current_status(&self) -> LockStatus {
        self.hold.current_status()
    }

    /// Resolves when the hold counts as lost under the lock's [`crate::LossPolicy`]: at
    /// [`LockStatus::Lost`], and also at [`LockStatus::Suspended`] under the default policy.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only observes the status channel.
    pub async fn lost(&self) {
        self.hold.lost().await
    }

    /// [`LockGuard::lost`] as an owned future, for waiting on several guards at once.
    pub(crate) fn lost_owned(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let hold = self.hold.clone();
        async move { hold.lost().await }
    }

    /// A multi-op that commits only while our lock node exists, so a holder that lost the lock
    /// cannot write. Add operations, then [`FencedWriter::commit`].
    ///
    /// # Errors
    /// [`Error::ZooKeeper`] if the client refuses the node path (it never does for a valid lock).
    pub fn fenced_writer(&self) -> Result<FencedWriter<'_>> {
        self.hold.fenced_writer()
    }

    pub(crate) fn hold(&self) -> &Arc<Hold> {
        &self.hold
    }

    /// Releases this hold; the node is deleted when it is the handle's last.
    ///
    /// # Errors
    /// * [`Error::LockLost`]: the lock had been lost before release (session expired or node
    ///   deleted); the critical section may have overlapped another holder's.
    /// * [`Error::ConnectionLoss`]: the delete could not be confirmed within the session timeout;
    ///   it goes on in the background, and later acquires work.
    ///
    /// # Cancel safety
    /// If the future is dropped, the release still completes in the background.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        if !self.hold.release_one() {
            return Ok(());
        }
        let span = tracing::info_span!("release", path = %self.hold.root(), node = %self.hold.path());
        let (done, outcome) = tokio::sync::oneshot::channel();
        let hold = self.hold.clone();
        // Run to completion even if our caller is cancelled, tracked by the janitor.
        self.hold.janitor().spawn(
            "release",
            tracing::Instrument::instrument(
                async move {
                    let _ = done.send(hold.delete_node().await);
                },
                span,
            ),
        );
        outcome.await.unwrap_or_else(|_| {
            Err(Error::ConnectionLoss { op: "delete", path: self.hold.path().to_string() })
        })
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.released {
            self.hold.release_in_background();
        }
    }
}

/// Operations that commit only while the lock node exists. See [`LockGuard::fenced_writer`].
#[must_use = "a fenced write does nothing until committed"]
pub struct FencedWriter<'a> {
    writer: CheckWriter<'a>,
    lock: &'a str,
}

impl<'a> FencedWriter<'a> {
    pub(crate) fn new(writer: CheckWriter<'a>, lock: &'a str) -> FencedWriter<'a> {
        FencedWriter { writer, lock }
    }

    /// Adds a create.
    ///
    /// # Errors
    /// [`Error::ZooKeeper`] for an argument the client refuses (a bad path, say).
    pub fn add_create(&mut self, path: &str, data: &[u8], options: &CreateOptions<'_>) -> Result<()> {
        self.writer.add_create(path, data, options).map_err(Error::zk("fenced create", path))
    }

    /// Adds a set-data, optionally conditional on `expected_version`.
    ///
    /// # Errors
    /// As [`FencedWriter::add_create`].
    pub fn add_set_data(&mut self, path: &str, data: &[u8], expected_version: Option<i32>) -> Result<()> {
        self.writer.add_set_data(path, data, expected_version).map_err(Error::zk("fenced set", path))
    }

    /// Adds a delete.
    ///
    /// # Errors
    /// As [`FencedWriter::add_create`].
    pub fn add_delete(&mut self, path: &str, expected_version: Option<i32>) -> Result<()> {
        self.writer.add_delete(path, expected_version).map_err(Error::zk("fenced delete", path))
    }

    /// Adds a version check on another node.
    ///
    /// # Errors
    /// As [`FencedWriter::add_create`].
    pub fn add_check_version(&mut self, path: &str, version: i32) -> Result<()> {
        self.writer.add_check_version(path, version).map_err(Error::zk("fenced check", path))
    }

    /// Commits all operations atomically, on condition that our lock node still exists.
    ///
    /// # Errors
    /// * [`Error::LockLost`]: our node is gone; nothing was written.
    /// * [`Error::ZooKeeper`] for an operation that failed (nothing was written), or any other
    ///   request error; [`Error::ConnectionLoss`] when the outcome is unknown.
    ///
    /// # Cancel safety
    /// The request is sent when this is called; dropping the future does not withdraw it.
    pub async fn commit(self) -> Result<Vec<MultiWriteResult>> {
        let lock = self.lock;
        self.writer.commit().await.map_err(|e| match e {
            CheckWriteError::CheckFailed { .. } => Error::LockLost { path: lock.to_string() },
            CheckWriteError::RequestFailed { source } => Error::from_zk("fenced multi", lock, source),
            CheckWriteError::OperationFailed { index, source } => {
                Error::ZooKeeper { op: "fenced multi", path: format!("{lock} (operation {index})"), source }
            }
        })
    }
}
