//! [`InterProcessMultiLock`]: several locks, all or nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::lock::Lock;
use super::mutex::InterProcessMutex;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lock_core::QueueEvent;
use crate::session::Session;

/// Several locks taken as one, as Curator's `InterProcessMultiLock`: any mix of
/// [`InterProcessMutex`], [`crate::InterProcessSemaphoreMutex`], [`crate::ReadLock`],
/// [`crate::WriteLock`] (any [`Lock`]).
///
/// The members are acquired in a canonical order (by path, duplicates removed), so two
/// multi-locks over overlapping sets, listed in any order, cannot deadlock. On a timeout or an
/// error every partial hold is released before the call returns. The guard
/// ([`LockGuard`]) holds every member.
#[derive(Clone, Debug)]
pub struct InterProcessMultiLock {
    members: Arc<[Box<dyn Lock>]>,
}

impl InterProcessMultiLock {
    /// A multi-lock over `paths`, one [`InterProcessMutex`] each, on `session`.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for any invalid path.
    pub fn new(session: &Session, paths: &[&str]) -> Result<InterProcessMultiLock> {
        let members = paths
            .iter()
            .map(|p| InterProcessMutex::new(session, p).map(|m| Box::new(m) as Box<dyn Lock>))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self::from_locks(members))
    }

    /// A multi-lock over any locks. Tasks sharing a handle take turns on it, so a member shared
    /// with another multi-lock, or used directly, excludes them too.
    pub fn from_locks(mut members: Vec<Box<dyn Lock>>) -> InterProcessMultiLock {
        members.sort_by(|a, b| a.lock_path().cmp(b.lock_path()));
        members.dedup_by(|a, b| a.lock_path() == b.lock_path());
        InterProcessMultiLock { members: members.into() }
    }

    /// The member paths in acquisition order.
    pub fn paths(&self) -> Vec<&str> {
        self.members.iter().map(|m| m.lock_path()).collect()
    }

    /// Takes every member in order; a member reports to `events` when given.
    async fn take(
        &self,
        deadline: Option<Instant>,
        try_only: bool,
        mut events: Option<&mut (dyn for<'e> FnMut(&'e QueueEvent) + Send)>,
    ) -> Result<Option<LockGuard>> {
        let mut held = Vec::with_capacity(self.members.len());
        for member in self.members.iter() {
            let left = deadline.map(|deadline| deadline.saturating_duration_since(Instant::now()));
            let got = match (left, try_only, events.as_deref_mut()) {
                (_, true, _) => member.try_acquire().await,
                (left, false, Some(events)) => member.acquire_with_events(left, events).await,
                (Some(left), false, None) => member.acquire_timeout(left).await,
                (None, false, None) => member.acquire().await.map(Some),
            };
            match got {
                Ok(Some(guard)) => held.push(guard),
                Ok(None) => {
                    LockGuard::all(held).release().await?;
                    return Ok(None);
                }
                Err(e) => {
                    if let Err(release) = LockGuard::all(held).release().await {
                        tracing::debug!(error = %release, "releasing partial holds after an error");
                    }
                    return Err(e);
                }
            }
        }
        Ok(Some(LockGuard::all(held)))
    }

    /// Resolves once background cleanups of every member have finished.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn settled(&self) {
        Lock::settled(self).await
    }

    /// Waits until every member is held.
    ///
    /// # Errors
    /// As [`InterProcessMutex::acquire`], after releasing every member already taken.
    ///
    /// # Cancel safety
    /// Cancel-safe: members already taken are released in the background, and no node is left.
    pub async fn acquire(&self) -> Result<LockGuard> {
        self.take(None, false, None).await?.ok_or_else(|| Error::Closed { path: self.paths().join(",") })
    }

    /// Takes every member only if all are free now.
    ///
    /// # Errors
    /// As [`InterProcessMultiLock::acquire`].
    ///
    /// # Cancel safety
    /// As [`InterProcessMultiLock::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.take(None, true, None).await
    }

    /// Waits at most `timeout` for all members; `Ok(None)` has released every partial hold.
    ///
    /// # Errors
    /// As [`InterProcessMultiLock::acquire`].
    ///
    /// # Cancel safety
    /// As [`InterProcessMultiLock::acquire`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.take(Instant::now().checked_add(timeout), false, None).await
    }
}

#[async_trait]
impl Lock for InterProcessMultiLock {
    fn lock_path(&self) -> &str {
        self.members.first().map_or("", |m| m.lock_path())
    }
    async fn acquire(&self) -> Result<LockGuard> {
        InterProcessMultiLock::acquire(self).await
    }
    async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        InterProcessMultiLock::try_acquire(self).await
    }
    async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        InterProcessMultiLock::acquire_timeout(self, timeout).await
    }
    async fn acquire_with_events(
        &self,
        timeout: Option<Duration>,
        events: &mut (dyn for<'e> FnMut(&'e QueueEvent) + Send),
    ) -> Result<Option<LockGuard>> {
        self.take(timeout.and_then(|t| Instant::now().checked_add(t)), false, Some(events)).await
    }
    async fn settled(&self) {
        for member in self.members.iter() {
            member.settled().await;
        }
    }
}
