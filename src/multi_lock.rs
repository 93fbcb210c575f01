//! [`InterProcessMultiLock`]: several locks, all or nothing.

use std::time::{Duration, Instant};


use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::mutex::InterProcessMutex;
use crate::session::Session;
use crate::status::LockStatus;

/// Several [`InterProcessMutex`]es taken as one, as Curator's `InterProcessMultiLock`.
///
/// The members are acquired in a canonical order (by path, duplicates removed), so two
/// multi-locks over overlapping sets, listed in any order, cannot deadlock. On a timeout or an
/// error every partial hold is released before the call returns.
#[derive(Clone, Debug)]
pub struct InterProcessMultiLock {
    members: Vec<InterProcessMutex>,
}

/// All members of a multi-lock, held.
#[must_use = "dropping the guard releases every lock"]
#[derive(Debug)]
pub struct MultiLockGuard {
    guards: Vec<LockGuard>,
}

impl InterProcessMultiLock {
    /// A multi-lock over `paths`, one mutex each, on `session`.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for any invalid path.
    pub fn new(session: &Session, paths: &[&str]) -> Result<InterProcessMultiLock> {
        let members =
            paths.iter().map(|p| InterProcessMutex::new(session, p)).collect::<Result<Vec<_>>>()?;
        Ok(Self::from_mutexes(members))
    }

    /// A multi-lock over existing mutex handles. Tasks sharing a handle take turns on it, so a
    /// member shared with another multi-lock or used directly excludes them too.
    pub fn from_mutexes(mut members: Vec<InterProcessMutex>) -> InterProcessMultiLock {
        members.sort_by(|a, b| a.path().cmp(b.path()));
        members.dedup_by(|a, b| a.path() == b.path());
        InterProcessMultiLock { members }
    }

    /// The member paths in acquisition order.
    pub fn paths(&self) -> Vec<&str> {
        self.members.iter().map(|m| m.path().as_str()).collect()
    }

    async fn take(&self, deadline: Option<Instant>, try_only: bool) -> Result<Option<MultiLockGuard>> {
        let mut held = Vec::with_capacity(self.members.len());
        for member in &self.members {
            let got = match (deadline, try_only) {
                (_, true) => member.try_acquire().await,
                (Some(deadline), false) => {
                    member.acquire_timeout(deadline.saturating_duration_since(Instant::now())).await
                }
                (None, false) => member.acquire().await.map(Some),
            };
            match got {
                Ok(Some(guard)) => held.push(guard),
                Ok(None) => {
                    release_all(held).await?;
                    return Ok(None);
                }
                Err(e) => {
                    if let Err(release) = release_all(held).await {
                        tracing::debug!(error = %release, "releasing partial holds after an error");
                    }
                    return Err(e);
                }
            }
        }
        Ok(Some(MultiLockGuard { guards: held }))
    }

    /// Waits until every member is held.
    ///
    /// # Errors
    /// As [`InterProcessMutex::acquire`], after releasing every member already taken.
    ///
    /// # Cancel safety
    /// Cancel-safe: members already taken are released in the background, and no node is left.
    pub async fn acquire(&self) -> Result<MultiLockGuard> {
        self.take(None, false).await?.ok_or_else(|| Error::Closed { path: self.paths().join(",") })
    }

    /// Takes every member only if all are free now.
    ///
    /// # Errors
    /// As [`InterProcessMultiLock::acquire`].
    ///
    /// # Cancel safety
    /// As [`InterProcessMultiLock::acquire`].
    pub async fn try_acquire(&self) -> Result<Option<MultiLockGuard>> {
        self.take(None, true).await
    }

    /// Waits at most `timeout` for all members; `Ok(None)` has released every partial hold.
    ///
    /// # Errors
    /// As [`InterProcessMultiLock::acquire`].
    ///
    /// # Cancel safety
    /// As [`InterProcessMultiLock::acquire`].
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<MultiLockGuard>> {
        self.take(Some(Instant::now() + timeout), false).await
    }

    /// Resolves once background cleanups of every member have finished.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn settled(&self) {
        for m in &self.members {
            m.settled().await;
        }
    }
}

async fn release_all(guards: Vec<LockGuard>) -> Result<()> {
    let mut first_error = None;
    for guard in guards.into_iter().rev() {
        if let Err(e) = guard.release().await {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

impl MultiLockGuard {
    /// Every member's fencing token, with its path, in acquisition order.
    pub fn fencing_tokens(&self) -> Vec<(String, u64)> {
        self.guards
            .iter()
            .map(|g| {
                (g.node_path().rsplit_once('/').map_or("", |(dir, _)| dir).to_string(), g.fencing_token())
            })
            .collect()
    }

    /// The members' guards.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The worst member status: `Lost` if any is lost, else `Suspended` if any is, else
    /// `RevocationRequested` if any is, else `Held`.
    pub fn current_status(&self) -> LockStatus {
        let rank = |s: LockStatus| match s {
            LockStatus::Lost => 3,
            LockStatus::Suspended => 2,
            LockStatus::RevocationRequested => 1,
            _ => 0,
        };
        self.guards.iter().map(LockGuard::current_status).max_by_key(|s| rank(*s)).unwrap_or(LockStatus::Held)
    }

    /// Resolves when any member counts as lost under its policy.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn lost(&self) {
        let mut any = tokio::task::JoinSet::new();
        for guard in &self.guards {
            any.spawn(guard.lost_owned());
        }
        // The set aborts the other waits when dropped.
        let _ = any.join_next().await;
    }

    /// Releases every member, in reverse acquisition order.
    ///
    /// # Errors
    /// The first member's release error (every member is released regardless).
    ///
    /// # Cancel safety
    /// If dropped, the remaining members are released in the background.
    pub async fn release(self) -> Result<()> {
        release_all(self.guards).await
    }
}
