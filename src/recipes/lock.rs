//! [`Lock`]: what every exclusive lock recipe offers, as Curator's `InterProcessLock`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::guard::LockGuard;
use crate::lock_core::{end_event, QueueEvent};

/// The common face of the exclusive locks: [`crate::InterProcessMutex`],
/// [`crate::InterProcessSemaphoreMutex`], both sides of [`crate::InterProcessReadWriteLock`]
/// ([`crate::ReadLock`], [`crate::WriteLock`]) and [`crate::InterProcessMultiLock`], as
/// Curator's `InterProcessLock`.
///
/// It is object-safe: `Vec<Box<dyn Lock>>` works, and [`crate::InterProcessMultiLock`] takes
/// any mix of them. Each method has the same errors and cancel safety as the recipe's own
/// method of that name.
#[async_trait]
pub trait Lock: Send + Sync + std::fmt::Debug {
    /// The lock's path (a multi-lock: its first member's, in acquisition order). Multi-locks
    /// order their members by it.
    fn lock_path(&self) -> &str;

    /// Waits until the lock is held.
    ///
    /// # Errors
    /// As the recipe's `acquire`.
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped future leaves no node behind.
    async fn acquire(&self) -> Result<LockGuard>;

    /// Takes the lock only if it is free now.
    ///
    /// # Errors
    /// As the recipe's `try_acquire`.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    async fn try_acquire(&self) -> Result<Option<LockGuard>>;

    /// Waits at most `timeout`.
    ///
    /// # Errors
    /// As the recipe's `acquire_timeout`.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>>;

    /// Waits until the lock is held, at most `timeout` when one is given (`Ok(None)` when it
    /// passes), and reports its progress to `events` as it goes: queued (how many are ahead,
    /// the node it watches, the holder's participant id), moved up, queued again after an
    /// expiry, the lock delay, then acquired (with the fencing token) or gave up (why). See
    /// [`QueueEvent`] for the order.
    ///
    /// `events` is called inline, from this future, in order: keep it short (push to a
    /// channel, update a progress line). Reporting the holder costs one read per `Queued` or
    /// `MovedUp` event; nothing else is sent for events, and the other acquires do no work for
    /// them. A multi-lock reports each member's events in turn (an `Acquired` per member, then
    /// a `GaveUp` if a later member is not taken). (For an implementation outside this crate,
    /// the default reports only the end: acquired or gave up, not a cancellation.)
    ///
    /// ```no_run
    /// # async fn demo(session: zk_recipes::Session) -> zk_recipes::Result<()> {
    /// use zk_recipes::{InterProcessMutex, Lock, QueueEvent};
    /// let mutex = InterProcessMutex::new(&session, "/locks/orders")?;
    /// let guard = mutex
    ///     .acquire_with_events(None, &mut |event: &QueueEvent| match event {
    ///         QueueEvent::Queued { ahead, holder, .. } => eprintln!("{ahead} ahead, held by {holder:?}"),
    ///         QueueEvent::MovedUp { ahead, .. } => eprintln!("{ahead} ahead"),
    ///         _ => {}
    ///     })
    ///     .await?
    ///     .expect("no timeout: only an error ends the wait");
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As the recipe's `acquire` (its `acquire_timeout` with a timeout).
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped future leaves no node behind, and reports
    /// [`crate::GiveUpReason::Cancelled`] from its drop (unless the thread is panicking).
    async fn acquire_with_events(
        &self,
        timeout: Option<Duration>,
        events: &mut (dyn for<'e> FnMut(&'e QueueEvent) + Send),
    ) -> Result<Option<LockGuard>> {
        let got = match timeout {
            Some(timeout) => self.acquire_timeout(timeout).await,
            None => self.acquire().await.map(Some),
        };
        let end = end_event(&got, false);
        events(&end);
        got
    }

    /// Resolves once every background cleanup this handle started (dropped acquires, dropped
    /// guards) has finished.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    async fn settled(&self);
}

/// A box or an `Arc` of a lock is the lock.
macro_rules! forward_lock {
    ($($pointer:ident),*) => {$(
        #[async_trait]
        impl<L: Lock + ?Sized> Lock for $pointer<L> {
            fn lock_path(&self) -> &str {
                (**self).lock_path()
            }
            async fn settled(&self) {
                (**self).settled().await
            }
            async fn acquire(&self) -> Result<LockGuard> {
                (**self).acquire().await
            }
            async fn try_acquire(&self) -> Result<Option<LockGuard>> {
                (**self).try_acquire().await
            }
            async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
                (**self).acquire_timeout(timeout).await
            }
            async fn acquire_with_events(
                &self,
                timeout: Option<Duration>,
                events: &mut (dyn for<'e> FnMut(&'e QueueEvent) + Send),
            ) -> Result<Option<LockGuard>> {
                (**self).acquire_with_events(timeout, events).await
            }
        }
    )*};
}

forward_lock!(Box, Arc);

/// The [`Lock`] of a recipe on one `LockCore`, forwarding to the recipe's own methods: written
/// once for every exclusive lock. `|$l| core: ...` reaches the core from the recipe (`$l` is
/// `&self`); `acquire`, `try`, `timeout($t)` and `settled` are the calls to forward to.
macro_rules! lock_on_core {
    (
        $ty:ty, |$l:ident| core: $core:expr,
        acquire: $acquire:expr, try: $try:expr, timeout($t:ident): $timeout:expr, settled: $settled:expr $(,)?
    ) => {
        #[async_trait::async_trait]
        impl $crate::recipes::lock::Lock for $ty {
            fn lock_path(&self) -> &str {
                let $l = self;
                $core.path().as_str()
            }
            async fn acquire(&self) -> $crate::error::Result<$crate::guard::LockGuard> {
                let $l = self;
                $acquire.await
            }
            async fn try_acquire(&self) -> $crate::error::Result<Option<$crate::guard::LockGuard>> {
                let $l = self;
                $try.await
            }
            async fn acquire_timeout(
                &self,
                $t: std::time::Duration,
            ) -> $crate::error::Result<Option<$crate::guard::LockGuard>> {
                let $l = self;
                $timeout.await
            }
            async fn acquire_with_events(
                &self,
                timeout: Option<std::time::Duration>,
                events: &mut (dyn for<'e> FnMut(&'e $crate::lock_core::QueueEvent) + Send),
            ) -> $crate::error::Result<Option<$crate::guard::LockGuard>> {
                let $l = self;
                $core.acquire($crate::lock_core::Acquire::at_most(timeout).reporting(events)).await
            }
            async fn settled(&self) {
                let $l = self;
                $settled.await
            }
        }
    };
}
pub(super) use lock_on_core;

/// [`LockExt::with_lock`] for every [`Lock`], trait objects included.
pub trait LockExt: Lock {
    /// Runs `work` under the lock: acquires, hands `work` the guard, and releases on every exit
    /// path. `work` is an async closure (`async |guard| ...`) that borrows the guard, so
    /// [`LockGuard::fencing_token`], [`LockGuard::fenced_writer`], [`LockGuard::lost`] and
    /// [`LockGuard::safe_until`] are usable inside (it cannot release the guard: `with_lock`
    /// does). When `work` returns, the lock is released and its result handed back; when
    /// `work` panics or the future is dropped, the guard's drop releases the lock in the
    /// background (the panic goes on unwinding).
    ///
    /// The future is `Send` whenever what `work` holds across its `.await`s is (the guard, a
    /// fenced write and its commit are), so it can be spawned:
    ///
    /// ```no_run
    /// # async fn demo(session: zk_recipes::Session) -> zk_recipes::Result<()> {
    /// use zk_recipes::{Error, InterProcessMutex, LockExt};
    /// let mutex = InterProcessMutex::new(&session, "/locks/report")?;
    /// let task = tokio::spawn(async move {
    ///     mutex
    ///         .with_lock(async |guard| -> zk_recipes::Result<u64> {
    ///             let token = guard.fencing_token();
    ///             let mut write = guard.fenced_writer()?;
    ///             write.add_set_data("/reports/latest", format!("by {token}").as_bytes(), None)?;
    ///             tokio::select! {
    ///                 // Stop as soon as the hold may be lost.
    ///                 _ = guard.lost() => Err(Error::LockLost { path: "/locks/report".into() }),
    ///                 done = write.commit() => done.map(|_| token),
    ///             }
    ///         })
    ///         .await
    /// });
    /// // The outer `?`: the lock's own errors; the inner one: what `work` returned.
    /// let token = task.await.expect("the task panicked")??;
    /// # let _ = token;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// The acquire's errors; [`crate::Error::LockLost`] when the lock was lost before `work`
    /// finished (its result is dropped: it may have overlapped another holder's work; use the
    /// fencing token where that matters).
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped future releases the lock (or its half-made node) in the background.
    fn with_lock<F, T>(&self, work: F) -> impl Future<Output = Result<T>>
    where
        F: AsyncFnOnce(&LockGuard) -> T,
    {
        async move {
            let guard = self.acquire().await?;
            let out = work(&guard).await;
            guard.release().await?;
            Ok(out)
        }
    }
}

impl<L: Lock + ?Sized> LockExt for L {}
