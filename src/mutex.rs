//! [`InterProcessMutex`]: a fair, herd-free, reentrant distributed mutex.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zookeeper_client::Client;

use crate::error::Result;
use crate::guard::LockGuard;
use crate::lock_core::{LockCore, LockSpec, Wait};
use crate::naming::NameScheme;
use crate::options::LockOptions;
use crate::participants::Participant;
use crate::path::LockPath;
use crate::queue::{FirstN, Queue, QueueStats};

/// Curator's lock-node marker: nodes are `_c_<uuid>-lock-<seq>`.
pub(crate) const LOCK_MARKER: &str = "lock-";
const LOCK_SCHEME: NameScheme = NameScheme::curator(&[LOCK_MARKER]);

/// A distributed mutex over ZooKeeper, wire-compatible with Curator's `InterProcessMutex`.
///
/// * **Fair and herd-free:** contenders queue as EPHEMERAL_SEQUENTIAL nodes and each watches
///   only its predecessor; the lock is granted in creation order.
/// * **Reentrant per handle:** acquiring through a handle (or a clone of it) that already holds
///   the lock returns another guard for the same hold, with no round trip. Clones share the
///   hold, so give each independent contender its own handle.
/// * **Safe:** every hold has a fencing token, a status channel that reports a possibly lost
///   lock, and fenced writes; a dropped acquire leaves no node behind.
///
/// ```no_run
/// # async fn demo(client: zookeeper_client::Client) -> zk_recipes::Result<()> {
/// use zk_recipes::InterProcessMutex;
/// let mutex = InterProcessMutex::new(client, "/locks/orders")?;
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
        f.debug_struct("InterProcessMutex").field("path", &self.core.queue.root).finish()
    }
}

impl InterProcessMutex {
    /// A mutex on `path` with default [`LockOptions`]. Nothing is sent until an acquire.
    ///
    /// # Errors
    /// [`crate::Error::InvalidPath`] for an invalid path (see [`LockPath::new`]).
    pub fn new(client: Client, path: &str) -> Result<InterProcessMutex> {
        Self::with_options(client, path, LockOptions::default())
    }

    /// A mutex on `path` with explicit options.
    ///
    /// # Errors
    /// As [`InterProcessMutex::new`].
    pub fn with_options(client: Client, path: &str, options: LockOptions) -> Result<InterProcessMutex> {
        Ok(InterProcessMutex { core: Arc::new(Self::core(client, path, &options, true)?) })
    }

    pub(crate) fn core(
        client: Client,
        path: &str,
        options: &LockOptions,
        reentrant: bool,
    ) -> Result<LockCore> {
        let queue = Queue::new(client, LockPath::new(path)?, LOCK_SCHEME.in_format(options.format))
            .with_acls(options.acls.clone());
        let recipe = if reentrant { "mutex" } else { "semaphore-mutex" };
        let marker = options.format.marker(LOCK_MARKER);
        let spec = LockSpec { recipe, marker, rule: Arc::new(FirstN(1)), reentrant };
        Ok(LockCore::new(queue, spec, options))
    }

    /// The lock path.
    pub fn path(&self) -> &LockPath {
        &self.core.queue.root
    }

    /// Waits until the lock is held.
    ///
    /// # Errors
    /// * [`crate::Error::SessionExpired`]: the session ended while waiting.
    /// * [`crate::Error::NodeDeleted`]: someone deleted our queue node while we waited.
    /// * [`crate::Error::NoAuth`]: the ACLs on the path refuse us.
    /// * [`crate::Error::ZooKeeper`]: any other server error.
    ///
    /// On every error our node is deleted before this returns.
    ///
    /// # Cancel safety
    /// Cancel-safe: if the future is dropped at any point, our node (even one whose create was
    /// still in flight) is deleted in the background; [`InterProcessMutex::settled`] awaits that.
    pub async fn acquire(&self) -> Result<LockGuard> {
        self.core.acquire_forever(self.core.marker).await
    }

    /// Takes the lock only if it is free now: `Ok(None)` when it is held by someone else, in
    /// which case no node of ours is left behind.
    ///
    /// # Errors
    /// As [`InterProcessMutex::acquire`].
    ///
    /// # Cancel safety
    /// As [`InterProcessMutex::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.core.acquire(Wait::Try).await
    }

    /// Waits at most `timeout`: `Ok(None)` if the lock was not acquired in time, in which case
    /// our node has been deleted before this returns.
    ///
    /// # Errors
    /// As [`InterProcessMutex::acquire`].
    ///
    /// # Cancel safety
    /// As [`InterProcessMutex::acquire`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.core.acquire(Wait::Until(Instant::now() + timeout)).await
    }

    /// Whether this handle (or a clone) holds the lock now, as far as it knows.
    pub fn is_held_by_this_handle(&self) -> bool {
        self.core.held().is_some()
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
        self.core.queue.counters.snapshot()
    }

    /// Resolves once every background cleanup started by this handle (dropped acquires, dropped
    /// guards) has finished.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn settled(&self) {
        self.core.queue.janitor.settled().await
    }
}
