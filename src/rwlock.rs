//! [`InterProcessReadWriteLock`]: many readers or one writer, writer-preferring, as Curator's.

use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use zookeeper_client::Client;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lock_core::{LockCore, LockSpec, Wait};
use crate::naming::{NameScheme, QueueNode};
use crate::options::LockOptions;
use crate::participants::Participant;
use crate::path::LockPath;
use crate::queue::{Admission, Decision, FirstN, Queue, QueueStats};

/// Curator's read/write markers: `_c_<uuid>-__READ__<seq>` and `_c_<uuid>-__WRIT__<seq>`.
const READ_MARKER: &str = "__READ__";
const WRITE_MARKER: &str = "__WRIT__";
const RW_SCHEME: NameScheme = NameScheme::curator(&[READ_MARKER, WRITE_MARKER]);
/// Index of [`WRITE_MARKER`] in the scheme's markers.
const WRITER: usize = 1;

/// Who may proceed in a read/write queue. A writer proceeds when it is first (and waits on its
/// predecessor). A reader proceeds when no writer is ahead of it, not counting this handle's own
/// write hold (a downgrade), and otherwise waits on the nearest such writer. So a reader queued
/// behind a waiting writer waits (writer preference), and a writer's release wakes exactly the
/// readers between it and the next writer.
struct RwRule {
    /// The write side of the same handle, for downgrades.
    own_writer: OnceLock<Weak<LockCore>>,
}

impl RwRule {
    fn own_write_node(&self) -> Option<String> {
        let writer = self.own_writer.get()?.upgrade()?;
        let hold = writer.held()?;
        hold.path().rsplit('/').next().map(str::to_string)
    }
}

impl Admission for RwRule {
    fn decide(&self, queue: &[QueueNode], me: usize) -> Decision {
        if queue[me].marker == WRITER {
            return FirstN(1).decide(queue, me);
        }
        let own = self.own_write_node();
        let mut writers =
            (0..me).filter(|&i| queue[i].marker == WRITER && Some(&queue[i].name) != own.as_ref());
        let nearest = writers.next_back();
        match nearest {
            None => Decision::Proceed,
            // Its deletion admits us when it is the only writer ahead.
            Some(on) => Decision::Wait { on, then_proceed: writers.next().is_none() },
        }
    }
}

/// A distributed read/write lock, wire-compatible with Curator's `InterProcessReadWriteLock`
/// (and, with [`crate::NodeFormat::Kazoo`], sharing a queue with kazoo's `ReadLock` and
/// `WriteLock`).
///
/// * Many readers hold at once; a writer excludes everyone.
/// * Writer-preferring: a reader queued behind a waiting writer waits.
/// * Both sides are reentrant per handle. A handle holding the write lock may take the read lock
///   (downgrade); a handle holding only the read lock asking for the write lock gets
///   [`Error::UpgradeRefused`] instead of a deadlock.
/// * Herd-free: a reader waits on the nearest writer ahead of it, a writer on its predecessor.
#[derive(Clone)]
pub struct InterProcessReadWriteLock {
    read: Arc<LockCore>,
    write: Arc<LockCore>,
}

impl std::fmt::Debug for InterProcessReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessReadWriteLock").field("path", &self.read.queue.root).finish()
    }
}

impl InterProcessReadWriteLock {
    /// A read/write lock on `path` with default options. Nothing is sent until an acquire.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for an invalid path.
    pub fn new(client: Client, path: &str) -> Result<InterProcessReadWriteLock> {
        Self::with_options(client, path, LockOptions::default())
    }

    /// As [`InterProcessReadWriteLock::new`], with options.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for an invalid path.
    pub fn with_options(
        client: Client,
        path: &str,
        options: LockOptions,
    ) -> Result<InterProcessReadWriteLock> {
        let format = options.format;
        let queue = Queue::new(client, LockPath::new(path)?, RW_SCHEME.in_format(format))
            .with_acls(options.acls.clone());
        let rule = Arc::new(RwRule { own_writer: OnceLock::new() });
        let spec = |recipe, marker| LockSpec {
            recipe,
            marker: format.marker(marker),
            rule: rule.clone(),
            reentrant: true,
        };
        let write = Arc::new(LockCore::new(queue.clone(), spec("write-lock", WRITE_MARKER), &options));
        let read = Arc::new(LockCore::new(queue, spec("read-lock", READ_MARKER), &options));
        let _ = rule.own_writer.set(Arc::downgrade(&write));
        Ok(InterProcessReadWriteLock { read, write })
    }

    /// The lock path.
    pub fn path(&self) -> &LockPath {
        &self.read.queue.root
    }

    async fn read_with(&self, wait: Wait) -> Result<Option<LockGuard>> {
        self.read.acquire(wait).await
    }

    fn refuse_upgrade(&self) -> Result<()> {
        if self.read.held().is_some() && self.write.held().is_none() {
            return Err(Error::UpgradeRefused { path: self.path().to_string() });
        }
        Ok(())
    }

    async fn write_with(&self, wait: Wait) -> Result<Option<LockGuard>> {
        self.refuse_upgrade()?;
        self.write.acquire(wait).await
    }

    /// Waits until the read lock is held.
    ///
    /// # Errors
    /// As [`crate::InterProcessMutex::acquire`].
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped future leaves no node behind.
    pub async fn read(&self) -> Result<LockGuard> {
        self.read.acquire_forever(self.read.marker).await
    }

    /// Takes the read lock only if it is free for readers now.
    ///
    /// # Errors
    /// As [`InterProcessReadWriteLock::read`].
    ///
    /// # Cancel safety
    /// As [`InterProcessReadWriteLock::read`].
    pub async fn try_read(&self) -> Result<Option<LockGuard>> {
        self.read_with(Wait::Try).await
    }

    /// Waits at most `timeout` for the read lock.
    ///
    /// # Errors
    /// As [`InterProcessReadWriteLock::read`].
    ///
    /// # Cancel safety
    /// As [`InterProcessReadWriteLock::read`].
    pub async fn read_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.read_with(Wait::Until(Instant::now() + timeout)).await
    }

    /// Waits until the write lock is held.
    ///
    /// # Errors
    /// [`Error::UpgradeRefused`] if this handle holds only the read lock; otherwise as
    /// [`crate::InterProcessMutex::acquire`].
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped future leaves no node behind.
    pub async fn write(&self) -> Result<LockGuard> {
        self.refuse_upgrade()?;
        self.write.acquire_forever(self.write.marker).await
    }

    /// Takes the write lock only if it is free now.
    ///
    /// # Errors
    /// As [`InterProcessReadWriteLock::write`].
    ///
    /// # Cancel safety
    /// As [`InterProcessReadWriteLock::write`].
    pub async fn try_write(&self) -> Result<Option<LockGuard>> {
        self.write_with(Wait::Try).await
    }

    /// Waits at most `timeout` for the write lock.
    ///
    /// # Errors
    /// As [`InterProcessReadWriteLock::write`].
    ///
    /// # Cancel safety
    /// As [`InterProcessReadWriteLock::write`].
    pub async fn write_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.write_with(Wait::Until(Instant::now() + timeout)).await
    }

    /// The queue in order, readers and writers; `is_holder` marks those admitted now.
    ///
    /// # Errors
    /// [`Error::SessionExpired`], [`Error::NoAuth`] or [`Error::ZooKeeper`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn participants(&self) -> Result<Vec<Participant>> {
        self.read.participants().await
    }

    /// Asks every current holder to release (revocation); returns how many were asked.
    ///
    /// # Errors
    /// As [`crate::request_revocation`].
    ///
    /// # Cancel safety
    /// Requests already sent stay sent.
    pub async fn revoke_holders(&self) -> Result<usize> {
        self.read.revoke_holders().await
    }

    /// What this handle's queue work has cost so far (both sides share one queue).
    pub fn stats(&self) -> QueueStats {
        self.read.queue.counters.snapshot()
    }

    /// Resolves once background cleanups of this handle have finished.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn settled(&self) {
        // Both sides share one queue, and so one janitor.
        self.read.queue.janitor.settled().await;
    }
}
