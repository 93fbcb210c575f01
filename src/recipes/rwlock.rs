//! [`InterProcessReadWriteLock`]: many readers or one writer, writer-preferring, as Curator's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lock_core::{
    Acquire, Admission, Decision, FirstN, LockCore, LockSpec, NameScheme, Participant, QueueNode, QueueStats,
    Wait,
};
use crate::markers::{READ, WRITE, WRITER};
use crate::options::LockOptions;
use crate::path::LockPath;
use crate::session::Session;

/// Who may proceed in a read/write queue. A writer proceeds when it is first (and waits on its
/// predecessor). A reader proceeds when no writer is ahead of it, and otherwise waits on the
/// nearest writer ahead. So a reader queued behind a waiting writer waits (writer preference),
/// and a writer's release wakes exactly the readers between it and the next writer.
pub(crate) struct RwRule;

impl Admission for RwRule {
    fn decide(&self, queue: &[QueueNode], me: usize) -> Decision {
        if queue[me].marker == WRITER {
            return FirstN(1).decide(queue, me);
        }
        let mut writers = (0..me).filter(|&i| queue[i].marker == WRITER);
        match writers.next_back() {
            None => Decision::Proceed,
            // Its deletion admits us when it is the only writer ahead.
            Some(on) => Decision::Wait { on, then_proceed: writers.next().is_none() },
        }
    }

    /// A writer waits as a mutex's waiter does; a reader on the nearest writer only.
    fn lookahead(&self, queue: &[QueueNode], me: usize, on: usize) -> Option<usize> {
        (queue[me].marker == WRITER).then(|| FirstN(1).lookahead(queue, me, on)).flatten()
    }

    /// A writer is admitted only at the head; a reader may be admitted behind other readers.
    fn leaves_tombstone(&self, queue: &[QueueNode], at: usize) -> bool {
        queue[at].marker == WRITER
    }
}

/// A read taken under a held write lock: admitted at once (the write lock excludes everyone
/// else), noting whether another writer is queued between our writer and our reader. If one is,
/// releasing the write node would let that writer in beside our reader, so the downgrade keeps
/// the write node until the read is released.
struct Downgrade {
    writer: String,
    writer_between: AtomicBool,
    /// Our write node was not ahead of the read node: the write hold is gone (its session
    /// expired while the read node was being created, in a new session, or the node was
    /// deleted). The read was not granted by the downgrade, and must not be kept.
    writer_missing: AtomicBool,
}

impl Admission for Downgrade {
    fn decide(&self, queue: &[QueueNode], me: usize) -> Decision {
        let ours = queue[..me].iter().position(|n| n.name == self.writer);
        let between = ours.is_some_and(|w| queue[w + 1..me].iter().any(|n| n.marker == WRITER));
        self.writer_between.store(between, Ordering::SeqCst);
        self.writer_missing.store(ours.is_none(), Ordering::SeqCst);
        // Without our writer ahead this is no downgrade: the caller gives the node back at
        // once (admitted here only so that nothing waits).
        Decision::Proceed
    }
}

/// A distributed read/write lock, wire-compatible with Curator's `InterProcessReadWriteLock`
/// (and, with [`crate::NodeFormat::Kazoo`], sharing a queue with kazoo's `ReadLock` and
/// `WriteLock`).
///
/// * Many readers hold at once; a writer excludes everyone, also other tasks writing or reading
///   through the same handle.
/// * Writer-preferring: a reader queued behind a waiting writer waits.
/// * Downgrade through the proof of ownership: [`InterProcessReadWriteLock::downgrade`] takes
///   the read lock with the write guard in hand; then release the write guard. Nobody can write
///   in between. (An upgrade, read to write, is not offered: it would deadlock, as in Curator.)
/// * Herd-free: a reader waits on the nearest writer ahead of it, a writer on its predecessor.
#[derive(Clone)]
pub struct InterProcessReadWriteLock {
    read: Arc<LockCore>,
    write: Arc<LockCore>,
}

impl std::fmt::Debug for InterProcessReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterProcessReadWriteLock").field("path", self.read.path()).finish()
    }
}

impl InterProcessReadWriteLock {
    /// A read/write lock on `path` with default options. Nothing is sent until an acquire.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for an invalid path.
    pub fn new(session: &Session, path: &str) -> Result<InterProcessReadWriteLock> {
        Self::with_options(session, path, LockOptions::default())
    }

    /// As [`InterProcessReadWriteLock::new`], with options.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for an invalid path.
    pub fn with_options(
        session: &Session,
        path: &str,
        options: LockOptions,
    ) -> Result<InterProcessReadWriteLock> {
        let rule: Arc<dyn Admission> = Arc::new(RwRule);
        let spec = |recipe, marker, exclusive| LockSpec {
            recipe,
            scheme: NameScheme::curator(&[READ, WRITE]),
            marker,
            rule: rule.clone(),
            reentrant: true,
            exclusive,
            root_data: None,
        };
        let write = LockCore::build(session, path, spec("write-lock", WRITE, true), &options)?;
        let read = Arc::new(write.beside(spec("read-lock", READ, false), &options));
        let write = Arc::new(write);
        Ok(InterProcessReadWriteLock { read, write })
    }

    /// The lock path.
    pub fn path(&self) -> &LockPath {
        self.read.path()
    }

    /// The read side as a [`crate::Lock`] (Curator's `readLock()`), e.g. for a multi-lock.
    pub fn read_lock(&self) -> ReadLock {
        ReadLock(self.clone())
    }

    /// The write side as a [`crate::Lock`] (Curator's `writeLock()`), e.g. for a multi-lock.
    pub fn write_lock(&self) -> WriteLock {
        WriteLock(self.clone())
    }

    /// Takes the read lock while holding the write lock through `write` (the downgrade): the
    /// read is granted at once, and nobody can write between the two. Release `write` afterwards
    /// to let other readers in.
    ///
    /// If another writer was already queued when you downgraded, releasing `write` at once would
    /// let that writer in beside your reader; so in that case the write node is kept (and other
    /// readers stay out) until this read guard is released. Either way the writer gets its turn
    /// after, and nothing deadlocks.
    ///
    /// # Errors
    /// [`Error::LockLost`] when `write` is not a live write hold on this lock, or stops being
    /// one before the read node is in (its session expired meanwhile, so the read would have
    /// been taken in the next session, after others may have written: no read is kept);
    /// otherwise as [`InterProcessReadWriteLock::read`].
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped future leaves no node behind, and `write` stays held.
    pub async fn downgrade(&self, write: &LockGuard) -> Result<LockGuard> {
        let writer = write.node_path().rsplit_once('/').map(|(dir, name)| (dir, name.to_string()));
        let Some((dir, writer)) = writer
            .filter(|(dir, name)| *dir == self.path().as_str() && self.read.marker_of(name) == Some(WRITER))
        else {
            return Err(Error::LockLost { path: self.path().to_string() });
        };
        debug_assert_eq!(dir, self.path().as_str());
        let keep = write.reenter()?;
        let rule = Downgrade {
            writer,
            writer_between: AtomicBool::new(false),
            writer_missing: AtomicBool::new(false),
        };
        let read = self.read.acquire(Acquire::forever().admitted_by(&rule)).await?;
        let read = read.ok_or_else(|| self.read.closed())?;
        if rule.writer_missing.load(Ordering::SeqCst) {
            // The write hold was lost before the read node was in (its session expired and the
            // read was made in the next one, say): someone else may have written meanwhile.
            tracing::info!(path = %self.path(), "downgrade: our write node is gone; the write hold was lost");
            let _ = read.release().await;
            return Err(Error::LockLost { path: self.path().to_string() });
        }
        if rule.writer_between.load(Ordering::SeqCst) {
            tracing::debug!(
                path = %self.path(),
                "a writer is queued behind ours: the write node stays until the read is released"
            );
            read.keep_until_released(keep);
        } else {
            drop(keep);
        }
        Ok(read)
    }

    async fn read_with(&self, wait: Wait) -> Result<Option<LockGuard>> {
        self.read.acquire(Acquire::new(wait)).await
    }

    async fn write_with(&self, wait: Wait) -> Result<Option<LockGuard>> {
        self.write.acquire(Acquire::new(wait)).await
    }

    /// Waits until the read lock is held.
    ///
    /// # Errors
    /// As [`crate::InterProcessMutex::acquire`].
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped future leaves no node behind.
    pub async fn read(&self) -> Result<LockGuard> {
        self.read.acquire(Acquire::forever()).await?.ok_or_else(|| self.read.closed())
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
        self.read_with(Wait::at_most(Some(timeout))).await
    }

    /// Waits until the write lock is held. A task that holds the read lock and asks for the
    /// write lock waits for its own read lock, forever: release the read lock first.
    ///
    /// # Errors
    /// As [`crate::InterProcessMutex::acquire`].
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped future leaves no node behind.
    pub async fn write(&self) -> Result<LockGuard> {
        self.write.acquire(Acquire::forever()).await?.ok_or_else(|| self.write.closed())
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
        self.write_with(Wait::at_most(Some(timeout))).await
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
        self.read.stats()
    }

    /// Resolves once background cleanups of this handle have finished.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn settled(&self) {
        // Both sides share one queue, and so one janitor.
        self.read.settled().await;
    }
}

/// The read side of an [`InterProcessReadWriteLock`], as a [`crate::Lock`].
#[derive(Clone, Debug)]
pub struct ReadLock(InterProcessReadWriteLock);

/// The write side of an [`InterProcessReadWriteLock`], as a [`crate::Lock`].
#[derive(Clone, Debug)]
pub struct WriteLock(InterProcessReadWriteLock);

super::lock::lock_on_core!(
    ReadLock, |l| core: l.0.read,
    acquire: l.0.read(), try: l.0.try_read(), timeout(t): l.0.read_timeout(t), settled: l.0.settled(),
);

super::lock::lock_on_core!(
    WriteLock, |l| core: l.0.write,
    acquire: l.0.write(), try: l.0.try_write(), timeout(t): l.0.write_timeout(t), settled: l.0.settled(),
);

#[cfg(test)]
mod tests {
    use super::*;

    /// What the read/write rule says of `me` on a listing of `/locks/rw`.
    fn decide(me: &str, listing: &[&str]) -> Result<Decision> {
        let scheme = NameScheme::curator(&[READ, WRITE]);
        let root = LockPath::new("/locks/rw").unwrap();
        let listing: Vec<String> = listing.iter().map(|c| c.to_string()).collect();
        crate::queue::decide_on(&scheme, &root, &RwRule, me, &listing).map(|d| d.2)
    }

    /// In creation order: reader 1, writer 2, a writer's tombstone, reader 3, reader 4, writer 5,
    /// and foreign children (a bare name, a malformed sequence).
    const LISTING: [&str; 8] = [
        "_c_e-__WRIT__0000000005",
        "_c_c-__READ__0000000003",
        "0000000001.released",
        "_c_a-__READ__0000000001",
        "notes",
        "_c_b-__WRIT__0000000002",
        "_c_x-__READ__00000000q4",
        "_c_d-__READ__0000000004",
    ];

    #[test]
    fn readers_share_and_wait_on_the_nearest_writer_ahead() {
        assert_eq!(decide("_c_a-__READ__0000000001", &LISTING).unwrap(), Decision::Proceed);
        assert_eq!(
            decide("_c_b-__WRIT__0000000002", &LISTING).unwrap(),
            Decision::Wait { on: 0, then_proceed: true }
        );
        // Behind a waiting writer a reader waits (writer preference), on that writer alone.
        assert_eq!(
            decide("_c_c-__READ__0000000003", &LISTING).unwrap(),
            Decision::Wait { on: 1, then_proceed: true }
        );
        assert_eq!(
            decide("_c_d-__READ__0000000004", &LISTING).unwrap(),
            Decision::Wait { on: 1, then_proceed: true }
        );
        assert_eq!(
            decide("_c_e-__WRIT__0000000005", &LISTING).unwrap(),
            Decision::Wait { on: 3, then_proceed: false }
        );
        assert!(matches!(decide("_c_x-__READ__00000000q4", &LISTING), Err(Error::NodeDeleted { .. })));
    }

    #[test]
    fn only_writers_look_ahead_and_leave_tombstones() {
        let node = |name: &'static str, seq, marker| QueueNode { name: name.into(), seq, marker };
        let queue = [
            node("a", 1, WRITER),
            node("b", 2, WRITER),
            node("c", 3, 0),
            node("d", 4, WRITER),
            node("e", 5, 0),
        ];
        assert_eq!(RwRule.lookahead(&queue, 3, 2), Some(1));
        assert_eq!(RwRule.lookahead(&queue, 4, 3), None, "a reader watches its writer only");
        assert!(RwRule.leaves_tombstone(&queue, 0));
        assert!(!RwRule.leaves_tombstone(&queue, 2));
        // Two writers ahead of a reader: the nearest one's deletion does not admit it alone.
        assert_eq!(RwRule.decide(&queue, 4), Decision::Wait { on: 3, then_proceed: false });
    }

    #[test]
    fn a_wrapped_or_mixed_queue_is_refused() {
        let wrapped = ["_c_a-__WRIT__2147483647", "_c_b-__READ__-2147483648"];
        assert!(matches!(decide("_c_a-__WRIT__2147483647", &wrapped), Err(Error::SequenceWrapped { .. })));
        let mixed = ["_c_a-__WRIT__0000000001", "_c_b-lock-0000000002"];
        assert!(matches!(decide("_c_a-__WRIT__0000000001", &mixed), Err(Error::RecipeConflict { .. })));
    }
}
