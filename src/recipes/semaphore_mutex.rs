//! [`InterProcessSemaphoreMutex`]: a non-reentrant distributed mutex.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::guard::LockGuard;
use crate::lock_core::{Acquire, LockCore, LockSpec, Participant, Wait};
use crate::options::LockOptions;
use crate::session::Session;

/// A non-reentrant mutex, as Curator's `InterProcessSemaphoreMutex`: a second acquire through the
/// same handle waits like anyone else's (or times out), and [`LockGuard::reenter`] is refused. Same
/// queue and node names as [`crate::InterProcessMutex`], so the two exclude each other on one path.
///
/// A clone is another handle on the same lock, as an `Arc` would be: clones share the local
/// turn (two tasks acquiring through any two clones take turns, one node at a time) and the
/// background cleanups.
#[derive(Clone)]
pub struct InterProcessSemaphoreMutex {
    core: Arc<LockCore>,
}

impl std::fmt::Debug for InterProcessSemaphoreMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessSemaphoreMutex").field("path", self.core.path()).finish()
    }
}

impl InterProcessSemaphoreMutex {
    /// A non-reentrant mutex on `path`.
    ///
    /// # Errors
    /// [`crate::Error::InvalidPath`] for an invalid path.
    pub fn new(session: &Session, path: &str) -> Result<InterProcessSemaphoreMutex> {
        Self::with_options(session, path, LockOptions::default())
    }

    /// As [`InterProcessSemaphoreMutex::new`], with options.
    ///
    /// # Errors
    /// As [`InterProcessSemaphoreMutex::new`].
    pub fn with_options(
        session: &Session,
        path: &str,
        options: LockOptions,
    ) -> Result<InterProcessSemaphoreMutex> {
        let spec = LockSpec::exclusive("semaphore-mutex", false);
        Ok(InterProcessSemaphoreMutex { core: Arc::new(LockCore::build(session, path, spec, &options)?) })
    }

    /// Waits until the lock is held (also when this handle already holds it: that waits).
    ///
    /// # Errors
    /// As [`crate::InterProcessMutex::acquire`].
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped future leaves no node behind.
    pub async fn acquire(&self) -> Result<LockGuard> {
        self.core.acquire(Acquire::forever()).await?.ok_or_else(|| self.core.closed())
    }

    /// Takes the lock only if it is free now.
    ///
    /// # Errors
    /// As [`crate::InterProcessMutex::acquire`].
    ///
    /// # Cancel safety
    /// As [`InterProcessSemaphoreMutex::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.core.acquire(Acquire::new(Wait::Try)).await
    }

    /// Waits at most `timeout`; `Ok(None)` leaves nothing behind.
    ///
    /// # Errors
    /// As [`crate::InterProcessMutex::acquire`].
    ///
    /// # Cancel safety
    /// As [`InterProcessSemaphoreMutex::acquire`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.core.acquire(Acquire::at_most(Some(timeout))).await
    }

    /// The queue in order.
    ///
    /// # Errors
    /// As [`crate::InterProcessMutex::participants`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn participants(&self) -> Result<Vec<Participant>> {
        self.core.participants().await
    }

    /// Resolves once background cleanups of this handle have finished.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn settled(&self) {
        self.core.settled().await
    }
}

super::lock::lock_on_core!(
    InterProcessSemaphoreMutex, |l| core: l.core,
    acquire: l.acquire(), try: l.try_acquire(), timeout(t): l.acquire_timeout(t), settled: l.settled(),
);
