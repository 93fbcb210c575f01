//! [`LockGuard`]: proof of a hold, with its fencing token, status and fenced writes.

use std::sync::Arc;

use tokio::sync::watch;
use zookeeper_client::{Acls, CheckWriteError, CheckWriter, CreateMode, CreateOptions, MultiWriteResult};

use crate::error::{Error, Result};
use crate::hold::{Hold, PendingRelease};
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
///
/// A multi-lock's guard holds every member: its status is the worst member's, its fencing
/// token the largest member's ([`LockGuard::fencing_tokens`] gives each), and its fenced writes
/// check every member node.
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    held: Held,
    released: bool,
}

enum Held {
    One(Arc<Hold>),
    /// A multi-lock's members, in acquisition order.
    All(Vec<LockGuard>),
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.held {
            Held::One(hold) => f
                .debug_struct("LockGuard")
                .field("node", &hold.path())
                .field("fencing_token", &hold.fencing_token())
                .field("status", &hold.current_status())
                .finish(),
            Held::All(members) => f.debug_struct("LockGuard").field("members", members).finish(),
        }
    }
}

/// How bad a status is, for a multi-lock's worst-of.
fn rank(s: LockStatus) -> u8 {
    match s {
        LockStatus::Lost => 3,
        LockStatus::Suspended => 2,
        LockStatus::RevocationRequested => 1,
        _ => 0,
    }
}

impl LockGuard {
    pub(crate) fn new(hold: Arc<Hold>) -> LockGuard {
        LockGuard { held: Held::One(hold), released: false }
    }

    /// A guard over every member of a multi-lock (acquisition order).
    pub(crate) fn all(members: Vec<LockGuard>) -> LockGuard {
        LockGuard { held: Held::All(members), released: false }
    }

    /// The single holds under this guard, in acquisition order.
    fn holds(&self) -> Vec<&Arc<Hold>> {
        match &self.held {
            Held::One(hold) => vec![hold],
            Held::All(members) => members.iter().flat_map(LockGuard::holds).collect(),
        }
    }

    /// The fencing token of this hold: the lock node's `czxid`, the id of the transaction that
    /// created it. It is global to the ensemble and strictly increasing across successive holders
    /// of the same lock (also across deletion of the parent and wrap of the sequence counter).
    /// Hand it to the resource you protect, and have the resource refuse tokens older than the
    /// newest it has seen. For a multi-lock, the largest member token.
    pub fn fencing_token(&self) -> u64 {
        self.holds().iter().map(|h| h.fencing_token()).max().unwrap_or_default()
    }

    /// [`LockGuard::fencing_token`] as an `i64`, for a signed 64-bit column (PostgreSQL's
    /// `bigint`, a Lua or Java `long`). It is the same number: the token is ZooKeeper's `czxid`,
    /// a positive signed 64-bit transaction id, so it always fits (no wrap, no sign change) and
    /// compares the same way in either type. See `docs/fencing.md` for the patterns that check
    /// it at PostgreSQL and Redis.
    pub fn fencing_token_i64(&self) -> i64 {
        self.holds().iter().map(|h| h.fencing_token_i64()).max().unwrap_or_default()
    }

    /// Each lock path with its fencing token, in acquisition order (one entry unless this is a
    /// multi-lock's guard).
    pub fn fencing_tokens(&self) -> Vec<(String, u64)> {
        self.holds().iter().map(|h| (h.root().to_string(), h.fencing_token())).collect()
    }

    /// The full path of our lock node (a multi-lock: its first member's).
    pub fn node_path(&self) -> &str {
        self.holds().first().map_or("", |h| h.path())
    }

    /// A multi-lock's member guards, in acquisition order (empty for a single lock).
    pub fn members(&self) -> &[LockGuard] {
        match &self.held {
            Held::One(_) => &[],
            Held::All(members) => members,
        }
    }

    /// Takes a nested hold on the same node: a second guard that proves the same ownership. The
    /// node is deleted when the last guard is released. This is the only way to re-enter a
    /// lock; acquiring again through the handle waits like any other contender.
    ///
    /// # Errors
    /// [`Error::LockLost`] when the hold is lost (or released); [`Error::NotReentrant`] for a
    /// semaphore lease or an `InterProcessSemaphoreMutex`.
    pub fn reenter(&self) -> Result<LockGuard> {
        match &self.held {
            Held::One(hold) => {
                hold.retain()?;
                Ok(LockGuard::new(hold.clone()))
            }
            Held::All(members) => {
                Ok(LockGuard::all(members.iter().map(LockGuard::reenter).collect::<Result<_>>()?))
            }
        }
    }

    /// Keeps `other` held until this hold is released (a downgrade keeps its write hold).
    pub(crate) fn keep_until_released(&self, other: LockGuard) {
        if let Some(hold) = self.holds().first() {
            hold.keep(Box::new(other));
        }
    }

    /// The session generation this hold was taken in (see [`crate::Session::generation`]).
    pub fn session_generation(&self) -> u64 {
        self.holds().iter().map(|h| h.generation()).min().unwrap_or_default()
    }

    /// The instant before which ZooKeeper cannot have expired the session of this hold, and so
    /// cannot have given the lock to anyone else: the send time of the session's latest
    /// answered request plus the negotiated timeout. Work that must not overlap another holder
    /// must stop before it, less your own margin (scheduling, the time it takes to stop).
    /// `None` once the hold is lost or released. While connected it keeps moving forward.
    pub fn safe_until(&self) -> Option<std::time::Instant> {
        self.holds().iter().map(|h| h.safe_until()).collect::<Option<Vec<_>>>()?.into_iter().min()
    }

    /// Checks, right before acting on the resource, that the hold is not lost and that at least
    /// `margin` of its safe window is left; returns what is left. The idiom for a write made
    /// under the lock:
    ///
    /// ```no_run
    /// # async fn demo(guard: zk_recipes::LockGuard) -> zk_recipes::Result<()> {
    /// use std::time::Duration;
    /// // The margin covers the write itself: how long it may take to reach the resource.
    /// guard.ensure_safe(Duration::from_millis(500))?;
    /// // write now, with guard.fencing_token() for the resource to check
    /// # Ok(()) }
    /// ```
    ///
    /// It reads the clock, not only the events seen so far: right after this process was paused
    /// (SIGSTOP, a stall) past the window, it fails at once, even before the session's task has
    /// run. It is necessary but not sufficient: a pause may come after the check, before the
    /// write lands, so the resource must also check the fencing token ([`LockGuard::fencing_token`],
    /// `docs/fencing.md`).
    ///
    /// # Errors
    /// * [`Error::LockLost`]: released, or lost under the lock's [`crate::LossPolicy`] (`Lost`,
    ///   and also `Suspended` under the default policy): what [`LockGuard::lost`] waits for.
    /// * [`Error::UnsafeWindow`]: less than `margin` is left of the safe window (nothing, once
    ///   it has passed). For a multi-lock, the first member that fails.
    pub fn ensure_safe(&self, margin: std::time::Duration) -> Result<std::time::Duration> {
        let mut least = None;
        for hold in self.holds() {
            let left = hold.ensure_safe(margin)?;
            least = Some(least.map_or(left, |l: std::time::Duration| l.min(left)));
        }
        least.ok_or(Error::LockLost { path: String::new() })
    }

    /// A channel of [`LockStatus`] changes, starting with the current one (a multi-lock: the
    /// worst member's). It never starts at `Held` once the safe window has passed: that is
    /// published as `Suspended` first (see [`LockGuard::current_status`]).
    pub fn status(&self) -> watch::Receiver<LockStatus> {
        let holds = self.holds();
        if let [one] = holds.as_slice() {
            return one.status();
        }
        let mut members: Vec<_> = holds.iter().map(|h| h.status()).collect();
        let worst = |members: &mut Vec<watch::Receiver<LockStatus>>| {
            members
                .iter_mut()
                .map(|m| *m.borrow_and_update())
                .max_by_key(|s| rank(*s))
                .unwrap_or(LockStatus::Held)
        };
        let (tx, rx) = watch::channel(worst(&mut members));
        tokio::spawn(async move {
            loop {
                let mut changes = tokio::task::JoinSet::new();
                for member in &members {
                    let mut member = member.clone();
                    changes.spawn(async move { member.changed().await.is_ok() });
                }
                tokio::select! {
                    _ = tx.closed() => return,
                    changed = changes.join_next() => if !matches!(changed, Some(Ok(true))) { return },
                }
                tx.send_replace(worst(&mut members));
            }
        });
        rx
    }

    /// The status now (a multi-lock: the worst member's: `Lost` if any is lost, else
    /// `Suspended` if any is, else `RevocationRequested` if any is, else `Held`).
    ///
    /// It is never `Held` (nor `RevocationRequested`) once [`LockGuard::safe_until`] has passed:
    /// a hold whose window passed without an answer from the server is `Suspended`, whatever
    /// events have been seen so far. After a pause of this process it is right at once; the
    /// session's task then publishes the same on the channels, and `Held` again only once the
    /// server has answered (if the session survived). To decide whether to write, prefer
    /// [`LockGuard::ensure_safe`], which also keeps a margin.
    pub fn current_status(&self) -> LockStatus {
        self.holds().iter().map(|h| h.current_status()).max_by_key(|s| rank(*s)).unwrap_or(LockStatus::Held)
    }

    /// Resolves when the hold counts as lost under the lock's [`crate::LossPolicy`]: at
    /// [`LockStatus::Lost`], and also at [`LockStatus::Suspended`] under the default policy.
    /// For a multi-lock, when any member does.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only observes the status channels.
    pub async fn lost(&self) {
        let mut any = tokio::task::JoinSet::new();
        for hold in self.holds() {
            let hold = hold.clone();
            any.spawn(async move { hold.lost().await });
        }
        // The set aborts the other waits when dropped.
        let _ = any.join_next().await;
    }

    /// A multi-op that commits only while our lock node exists (every member node, for a
    /// multi-lock), so a holder that lost the lock cannot write. Add operations, then
    /// [`FencedWriter::commit`].
    ///
    /// # Errors
    /// [`Error::ZooKeeper`] if the client refuses a node path (it never does for a valid
    /// lock); [`Error::LockLost`] for a multi-lock whose members were taken on different
    /// sessions (no single multi-op can check them all).
    pub fn fenced_writer(&self) -> Result<FencedWriter<'_>> {
        let holds = self.holds();
        let Some((first, rest)) = holds.split_first() else {
            return Err(Error::LockLost { path: String::new() });
        };
        let mut writer = FencedWriter::of(first)?;
        for hold in rest {
            if !hold.same_session(first) {
                return Err(Error::LockLost { path: hold.root().to_string() });
            }
            writer.add_lock_check(hold.path(), hold.root().as_str())?;
        }
        Ok(writer)
    }

    /// A view of this hold that does not own it: what a leader's task may use (fenced writes,
    /// the safe window) while the selector keeps the guard.
    pub(crate) fn view(&self) -> HoldView {
        HoldView(self.holds()[0].clone())
    }

    /// Releases this hold; the node is deleted when it is the last hold on it. A multi-lock
    /// releases every member, in reverse acquisition order.
    ///
    /// # Errors
    /// * [`Error::LockLost`]: the lock had been lost before release (session expired or node
    ///   deleted); the critical section may have overlapped another holder's. Also when the
    ///   maximum hold ([`crate::LockOptions::max_hold`]) had passed: the node was deleted then.
    /// * [`Error::ConnectionLoss`]: the delete could not be confirmed within the session timeout;
    ///   it goes on in the background, and later acquires work.
    ///
    /// For a multi-lock, the first member's error (every member is released regardless).
    ///
    /// # Cancel safety
    /// If the future is dropped, the release still completes in the background.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        let held = std::mem::replace(&mut self.held, Held::All(Vec::new()));
        match held {
            Held::One(hold) => release_one(hold).await,
            Held::All(members) => {
                let mut first_error = None;
                for member in members.into_iter().rev() {
                    if let Err(e) = Box::pin(member.release()).await {
                        first_error.get_or_insert(e);
                    }
                }
                first_error.map_or(Ok(()), Err)
            }
        }
    }
}

/// A view of a hold that neither owns nor releases it (see [`LockGuard::view`]).
#[derive(Clone)]
pub(crate) struct HoldView(Arc<Hold>);

impl HoldView {
    /// As [`LockGuard::fenced_writer`].
    pub fn fenced_writer(&self) -> Result<FencedWriter<'_>> {
        FencedWriter::of(&self.0)
    }

    /// As [`LockGuard::safe_until`].
    pub fn safe_until(&self) -> Option<std::time::Instant> {
        self.0.safe_until()
    }

    /// As [`LockGuard::fencing_token_i64`].
    pub fn fencing_token_i64(&self) -> i64 {
        self.0.fencing_token_i64()
    }

    /// As [`LockGuard::ensure_safe`].
    pub fn ensure_safe(&self, margin: std::time::Duration) -> Result<std::time::Duration> {
        self.0.ensure_safe(margin)
    }

    /// Writes `<id>\n<value>` into the held node, in a fenced write: what a leader proclaims
    /// (`LeaderLatch::proclaim`, `LeadershipContext::proclaim`). Fails with
    /// [`Error::LockLost`] once the node is gone, so a term that is over cannot proclaim.
    pub async fn proclaim(&self, id: &str, value: &[u8]) -> Result<()> {
        let mut write = self.fenced_writer()?;
        write.add_set_data(self.0.path(), &crate::naming::join_data(id, value), None)?;
        write.commit().await.map(|_| ())
    }
}

async fn release_one(hold: Arc<Hold>) -> Result<()> {
    if !hold.release_one() {
        return Ok(());
    }
    let span = tracing::info_span!("release", path = %hold.root(), node = %hold.path());
    // The delete is sent now and awaited here; if our caller is cancelled, it completes in the
    // background, tracked by the janitor.
    tracing::Instrument::instrument(PendingRelease::new(hold, true).finish(), span).await
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let (false, Held::One(hold)) = (self.released, &self.held) {
            hold.release_in_background();
        }
        // A multi-lock's members drop (and release) themselves.
    }
}

/// Operations that commit only while the lock node exists. See [`LockGuard::fenced_writer`].
///
/// An error of [`FencedWriter::commit`] names the operation that failed and its path (a missing
/// parent of a create names the create's path); only a failed check of our own lock node is
/// [`Error::LockLost`].
#[must_use = "a fenced write does nothing until committed"]
pub struct FencedWriter<'a> {
    writer: CheckWriter<'a>,
    lock: &'a str,
    /// Each operation added, in order: what a failed operation's index names.
    ops: Vec<Op>,
}

/// One operation of a fenced write, for its error.
struct Op {
    what: &'static str,
    path: String,
    /// The check of one of our own lock nodes (a multi-lock member): its lock path.
    own_lock: Option<String>,
}

impl<'a> FencedWriter<'a> {
    /// A fenced write that checks `hold`'s node (see [`LockGuard::fenced_writer`]).
    ///
    /// # Errors
    /// [`Error::ZooKeeper`] if the client refuses the node path (it never does for a valid lock).
    pub(crate) fn of(hold: &'a Hold) -> Result<FencedWriter<'a>> {
        let writer = hold
            .client()
            .new_check_writer(hold.path(), None)
            .map_err(Error::zk("fenced write", hold.path()))?;
        Ok(FencedWriter { writer, lock: hold.root().as_str(), ops: Vec::new() })
    }

    fn added(
        &mut self,
        what: &'static str,
        path: &str,
        added: std::result::Result<(), zookeeper_client::Error>,
    ) -> Result<()> {
        added.map_err(Error::zk(what, path))?;
        self.ops.push(Op { what, path: path.to_string(), own_lock: None });
        Ok(())
    }

    /// Adds a check that another of our lock nodes (a multi-lock member's `node`, of the lock
    /// at `lock`) exists: its failure means that lock is lost.
    pub(crate) fn add_lock_check(&mut self, node: &str, lock: &str) -> Result<()> {
        // Version -1: the node must exist, whatever its version.
        self.writer.add_check_version(node, -1).map_err(Error::zk("fenced write", node))?;
        self.ops.push(Op { what: "fenced check", path: node.to_string(), own_lock: Some(lock.to_string()) });
        Ok(())
    }

    /// Adds the create of a persistent node at `path` holding `data`, open to anyone
    /// (`Acls::anyone_all()`, Curator's default ACL). Its parent must exist when the write
    /// commits. For another mode or ACL, see [`FencedWriter::add_create`].
    ///
    /// ```no_run
    /// # async fn demo(guard: zk_recipes::LockGuard) -> zk_recipes::Result<()> {
    /// let mut write = guard.fenced_writer()?;
    /// write.add_create_persistent("/jobs/42", b"queued")?;
    /// write.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::ZooKeeper`] for an argument the client refuses (a bad path, say).
    pub fn add_create_persistent(&mut self, path: &str, data: &[u8]) -> Result<()> {
        let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
        self.add_create(path, data, &options)
    }

    /// Adds a create with the client's [`CreateOptions`]: a mode (`CreateMode`), ACLs
    /// (`Acls`) and, for a persistent node, an optional TTL. For a plain persistent node,
    /// [`FencedWriter::add_create_persistent`] is shorter.
    ///
    /// ```no_run
    /// # async fn demo(guard: zk_recipes::LockGuard) -> zk_recipes::Result<()> {
    /// use zk_recipes::zookeeper_client::{Acls, CreateMode};
    /// let mut write = guard.fenced_writer()?;
    /// // A sequential node only its creator may touch (with digest credentials on the session).
    /// let only_mine = CreateMode::PersistentSequential.with_acls(Acls::creator_all());
    /// write.add_create("/jobs/job-", b"queued", &only_mine)?;
    /// write.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::ZooKeeper`] for an argument the client refuses (a bad path, say).
    pub fn add_create(&mut self, path: &str, data: &[u8], options: &CreateOptions<'_>) -> Result<()> {
        let added = self.writer.add_create(path, data, options);
        self.added("fenced create", path, added)
    }

    /// Adds a set-data, optionally conditional on `expected_version`.
    ///
    /// # Errors
    /// As [`FencedWriter::add_create`].
    pub fn add_set_data(&mut self, path: &str, data: &[u8], expected_version: Option<i32>) -> Result<()> {
        let added = self.writer.add_set_data(path, data, expected_version);
        self.added("fenced set", path, added)
    }

    /// Adds a delete.
    ///
    /// # Errors
    /// As [`FencedWriter::add_create`].
    pub fn add_delete(&mut self, path: &str, expected_version: Option<i32>) -> Result<()> {
        let added = self.writer.add_delete(path, expected_version);
        self.added("fenced delete", path, added)
    }

    /// Adds a version check on another node.
    ///
    /// # Errors
    /// As [`FencedWriter::add_create`].
    pub fn add_check_version(&mut self, path: &str, version: i32) -> Result<()> {
        let added = self.writer.add_check_version(path, version);
        self.added("fenced check", path, added)
    }

    /// Commits all operations atomically, on condition that our lock node still exists.
    ///
    /// # Errors
    /// Nothing was written on any error but [`Error::ConnectionLoss`].
    /// * [`Error::LockLost`]: our lock node is gone (for a multi-lock: the lock named is the
    ///   member whose node is gone).
    /// * An operation failed: the error names that operation and its own path, e.g.
    ///   `ZooKeeper fenced create on /jobs/42 failed: node not exists` when `/jobs` is missing;
    ///   [`Error::ZooKeeper`] (its source is the server's code: `NoNode`, `NodeExists`,
    ///   `BadVersion`, `NotEmpty`, ...) or [`Error::NoAuth`].
    /// * [`Error::ConnectionLoss`] when the outcome is unknown; [`Error::SessionExpired`] or
    ///   [`Error::ZooKeeper`] for other request errors.
    ///
    /// # Cancel safety
    /// The request is sent when this is called; dropping the future does not withdraw it.
    pub async fn commit(self) -> Result<Vec<MultiWriteResult>> {
        let FencedWriter { writer, lock, ops } = self;
        writer.commit().await.map_err(|e| match e {
            CheckWriteError::CheckFailed { .. } => Error::LockLost { path: lock.to_string() },
            CheckWriteError::RequestFailed { source } => Error::from_zk("fenced multi", lock, source),
            CheckWriteError::OperationFailed { index, source } => match ops.get(index) {
                Some(Op { own_lock: Some(member), .. }) => Error::LockLost { path: member.clone() },
                Some(op) => Error::from_zk(op.what, &op.path, source),
                // Never: the server answers one result per operation sent.
                None => Error::from_zk("fenced multi", lock, source),
            },
        })
    }
}
