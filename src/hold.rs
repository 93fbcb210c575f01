//! A held node: its reentrant count, its status monitor, and its release.
//!
//! Every lock recipe ends in a [`Hold`] once its queue entry is admitted. Session states reach
//! its [`LockStatus`] from the session's own task (a hold is a [`Listener`]: no task per hold);
//! the data watch on its own node (every recipe's, unless turned off) is followed by a small
//! future that the session drives on one task for all its holds, and turns that watch's events
//! into status changes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch, OwnedMutexGuard};
use zookeeper_client::{Client, Error as ZkError};

use crate::error::{Error, Result};
use crate::path::LockPath;
use crate::queue::{delete_quietly, Entry, EntryParts, OwnEvent, PendingEvent};
use crate::session::{Conn, ConnectionState, Listener, Registration, Session, SessionStatus};
use crate::status::{LockStatus, LossPolicy};
use crate::util::{on_connection_loss, Janitor};

/// How long release keeps retrying a delete across connection losses before it hands the delete
/// to the background and reports the connection loss.
fn release_patience(client: &Client) -> Duration {
    client.session_timeout().max(Duration::from_secs(1))
}

/// One admitted node and everything a holder needs.
pub(crate) struct Hold {
    /// Keeps the session open while we hold: a guard outlives every `Session` handle the user
    /// dropped, and the session closes (deleting our node) only once the guard is gone too.
    _session: Session,
    conn: Conn,
    root: LockPath,
    path: String,
    czxid: i64,
    policy: LossPolicy,
    janitor: Janitor,
    /// Holds on this node (the first, and each [`crate::LockGuard::reenter`]); 0 once released.
    count: Mutex<usize>,
    /// Whether [`crate::LockGuard::reenter`] may take more holds.
    reentrant: bool,
    /// Whether a revocation request (`__REVOKE__` in our node's data) is reported.
    revocable: bool,
    /// The handle's local turn (see `LockCore`), given back when the last hold goes.
    turn: Mutex<Option<OwnedMutexGuard<()>>>,
    labels: crate::metrics::Labels,
    acquired: Instant,
    /// Other holds that must last as long as this one (a downgrade's write hold).
    companions: Mutex<Vec<crate::guard::LockGuard>>,
    status: watch::Sender<LockStatus>,
    /// A revocation was requested: the status to come back to after a suspension.
    revoked: AtomicBool,
    /// The release began: a loss from now on is not counted as one.
    releasing: AtomicBool,
    /// Our place among the session's listeners, left once released.
    registration: Mutex<Option<Registration>>,
    /// Stops the own-node watch task, when there is one.
    stop: Mutex<Option<oneshot::Sender<()>>>,
    /// The watch a waiter set on its own node, when the hold does not follow it.
    parked_watch: Mutex<Option<PendingEvent>>,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("path", &self.path)
            .field("czxid", &self.czxid)
            .field("status", &*self.status.borrow())
            .finish()
    }
}

impl Hold {
    /// Takes over an admitted entry: joins the session's listeners and, when the entry has a
    /// data watch on its node, has the session follow it. `turn`, if any, is given back when the
    /// last hold is released. A revocation request is reported only when `revocable`.
    #[allow(clippy::too_many_arguments)] // split up by the layering of the engine (issue 25)
    pub fn start(
        session: Session,
        entry: Entry,
        policy: LossPolicy,
        janitor: &Janitor,
        reentrant: bool,
        revocable: bool,
        turn: Option<OwnedMutexGuard<()>>,
        labels: crate::metrics::Labels,
    ) -> Arc<Hold> {
        let root = entry.root.clone();
        let EntryParts { conn, path, czxid, own, follow_own, revoked } = entry.into_parts();
        let revoked = revoked && revocable;
        let first = if revoked { LockStatus::RevocationRequested } else { LockStatus::Held };
        let (status, _) = watch::channel(first);
        let shared = session.shared().clone();
        let hold = Arc::new(Hold {
            _session: session,
            conn,
            root,
            path,
            czxid,
            policy,
            janitor: janitor.clone(),
            count: Mutex::new(1),
            reentrant,
            revocable,
            turn: Mutex::new(turn),
            companions: Mutex::new(Vec::new()),
            labels,
            acquired: Instant::now(),
            status,
            revoked: AtomicBool::new(revoked),
            releasing: AtomicBool::new(false),
            registration: Mutex::new(None),
            stop: Mutex::new(None),
            parked_watch: Mutex::new(None),
        });
        let listener: std::sync::Weak<dyn Listener> = Arc::downgrade(&hold) as _;
        *lock(&hold.registration) = Some(shared.listen(listener));
        match own {
            Some(own) if follow_own => {
                let (stop_tx, stop_rx) = oneshot::channel();
                *lock(&hold.stop) = Some(stop_tx);
                shared.drive(Box::pin(watch_own(Arc::downgrade(&hold), own, stop_rx)));
            }
            // Kept, not followed, until our delete fires it: dropped before, it would be removed
            // with a request of its own.
            own => *lock(&hold.parked_watch) = own,
        }
        hold
    }

    /// Whether `other` lives in the same session as this hold.
    pub fn same_session(&self, other: &Hold) -> bool {
        self.conn.client.session_id() == other.conn.client.session_id()
    }

    /// The session generation this hold was taken in.
    pub fn generation(&self) -> u64 {
        self.conn.generation
    }

    /// The instant before which the server cannot have expired the session this hold lives in;
    /// `None` once the hold is lost or released, or its session is no longer the current one.
    pub fn safe_until(&self) -> Option<Instant> {
        if *self.counter() == 0 || self.current_status() == LockStatus::Lost {
            return None;
        }
        self.conn.safe_until()
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn root(&self) -> &LockPath {
        &self.root
    }

    /// See [`crate::LockGuard::fenced_writer`].
    pub fn fenced_writer(&self) -> Result<crate::guard::FencedWriter<'_>> {
        let writer = self
            .conn
            .client
            .new_check_writer(&self.path, None)
            .map_err(Error::zk("fenced write", &self.path))?;
        Ok(crate::guard::FencedWriter::new(writer, self.root.as_str()))
    }

    pub fn fencing_token(&self) -> u64 {
        self.czxid as u64
    }

    pub fn status(&self) -> watch::Receiver<LockStatus> {
        self.status.subscribe()
    }

    pub fn current_status(&self) -> LockStatus {
        *self.status.borrow()
    }

    fn counter(&self) -> std::sync::MutexGuard<'_, usize> {
        self.count.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes one more hold on the node (reentrancy through a guard).
    ///
    /// # Errors
    /// [`Error::NotReentrant`] for a non-reentrant recipe; [`Error::LockLost`] when the hold is
    /// lost or already released.
    pub fn retain(&self) -> Result<()> {
        if !self.reentrant {
            return Err(Error::NotReentrant { path: self.root.to_string() });
        }
        let mut count = self.counter();
        if *count == 0 || self.current_status() == LockStatus::Lost {
            return Err(Error::LockLost { path: self.root.to_string() });
        }
        *count += 1;
        Ok(())
    }

    /// Whether the hold is still taken and not lost.
    pub fn is_live(&self) -> bool {
        *self.counter() > 0 && self.current_status() != LockStatus::Lost
    }

    /// Gives back one hold; `true` when it was the last, and the node must go (the handle's
    /// local turn is given back at once: the next local task may queue behind our node).
    pub fn release_one(&self) -> bool {
        let mut count = self.counter();
        *count = count.saturating_sub(1);
        let last = *count == 0;
        drop(count);
        if last {
            drop(self.turn.lock().unwrap_or_else(|e| e.into_inner()).take());
            // Dropped guards release in the background.
            drop(std::mem::take(&mut *self.companions.lock().unwrap_or_else(|e| e.into_inner())));
        }
        last
    }

    /// Keeps `other` held until this hold is released.
    pub fn keep(&self, other: crate::guard::LockGuard) {
        self.companions.lock().unwrap_or_else(|e| e.into_inner()).push(other);
    }

    /// Resolves when the status counts as lost under the policy.
    pub async fn lost(&self) {
        let mut status = self.status.subscribe();
        // The sender lives in `self`, so `wait_for` ends only with a matching status.
        let _ = status.wait_for(|s| self.policy.is_lost(*s)).await;
    }

    /// Deletes the node after the last hold is released: [`Hold::send_delete`], then
    /// [`Hold::finish_delete`].
    ///
    /// # Errors
    /// As [`Hold::finish_delete`].
    pub async fn delete_node(self: &Arc<Self>) -> Result<()> {
        let sent = self.send_delete();
        self.finish_delete(sent).await
    }

    /// Sends the delete of our node now: any later request of this session (the next acquire's
    /// create, say) is ordered after it. Await the answer with [`Hold::finish_delete`].
    pub fn send_delete(self: &Arc<Self>) -> SentDelete {
        if !self.releasing.swap(true, Ordering::SeqCst) {
            self.labels.held(self.acquired.elapsed());
        }
        SentDelete {
            was_lost: self.current_status() == LockStatus::Lost,
            first: Box::pin(self.conn.client.delete(&self.path, None)),
        }
    }

    /// Awaits the delete sent by [`Hold::send_delete`], retrying it across connection losses.
    ///
    /// Local state is already consistent when this runs (the count is 0, so the handle takes no
    /// more reentrant holds on it): a failure here never blocks a later acquire. On a
    /// connection loss that outlasts [`release_patience`], the delete goes on in the background
    /// and the caller hears `ConnectionLoss`.
    ///
    /// # Errors
    /// [`Error::LockLost`] when the node was already gone (someone deleted it, or the session
    /// expired): the lock was not ours to release any more. [`Error::ConnectionLoss`] as above.
    pub async fn finish_delete(self: &Arc<Self>, sent: SentDelete) -> Result<()> {
        let SentDelete { was_lost, first } = sent;
        // A delete retried after a connection loss may meet `NoNode` because its first attempt
        // did delete the node (the reply was lost): only a first-attempt `NoNode` means someone
        // else deleted it.
        let mut first = Some(first);
        let mut attempts = 0;
        let deleting = on_connection_loss(|| {
            attempts += 1;
            let resend: DeleteFuture = match first.take() {
                Some(sent) => sent,
                None => Box::pin(self.conn.client.delete(&self.path, None)),
            };
            resend
        });
        let outcome = tokio::time::timeout(release_patience(&self.conn.client), deleting).await;
        if matches!(
            outcome,
            Ok(Ok(()) | Err(ZkError::NoNode | ZkError::SessionExpired | ZkError::ClientClosed))
        ) {
            self.conn.untrack(&self.path);
        }
        let retried = attempts > 1;
        let result = match outcome {
            Ok(Ok(())) if !was_lost => Ok(()),
            Ok(Err(ZkError::NoNode)) if retried && !was_lost => Ok(()),
            Ok(Ok(())) | Ok(Err(ZkError::NoNode | ZkError::SessionExpired | ZkError::ClientClosed)) => {
                self.status.send_replace(LockStatus::Lost);
                Err(Error::LockLost { path: self.root.to_string() })
            }
            Ok(Err(e)) => Err(Error::from_zk("delete", &self.path, e)),
            Err(_) => {
                let (conn, path, hold) = (self.conn.clone(), self.path.clone(), self.clone());
                self.janitor.spawn("release after connection loss", async move {
                    delete_quietly(&conn, &path).await;
                    hold.forget_node();
                });
                return Err(Error::ConnectionLoss { op: "delete", path: self.path.clone() });
            }
        };
        self.forget_node();
        result
    }

    /// After our node's delete: stops following it, and leaves the session's listeners.
    fn forget_node(&self) {
        if let Some(stop) = lock(&self.stop).take() {
            let _ = stop.send(());
        }
        drop(lock(&self.parked_watch).take());
        drop(lock(&self.registration).take());
    }

    /// Moves the status to `to` (never away from `Lost`).
    fn set_status(&self, to: LockStatus) {
        self.status.send_if_modified(|cur| {
            let changed = *cur != to && *cur != LockStatus::Lost;
            if changed {
                tracing::info!(node = %self.path, from = ?*cur, to = ?to, "lock status");
                *cur = to;
            }
            changed
        });
    }

    /// The hold is lost for good; counted once, unless it was being released.
    fn lose(&self, cause: &'static str) {
        if !self.releasing.load(Ordering::SeqCst) && self.current_status() != LockStatus::Lost {
            self.labels.lost(cause);
        }
        self.set_status(LockStatus::Lost);
    }

    /// The status while connected: `Held`, or `RevocationRequested` once someone asked.
    fn connected_status(&self) -> LockStatus {
        if self.revoked.load(Ordering::SeqCst) {
            LockStatus::RevocationRequested
        } else {
            LockStatus::Held
        }
    }

    /// Releases one hold in the background (a guard dropped without `release()`). The delete
    /// is sent before this returns, so the session's next request is ordered after it.
    pub fn release_in_background(self: &Arc<Self>) {
        if self.release_one() {
            PendingRelease::new(self.clone()).detach("dropped guard");
        }
    }
}

/// A delete of a held node as the client returns it (sent already).
type DeleteFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = std::result::Result<(), ZkError>> + Send>>;

/// A delete sent by [`Hold::send_delete`], to be awaited by [`Hold::finish_delete`].
pub(crate) struct SentDelete {
    was_lost: bool,
    first: DeleteFuture,
}

/// A release under way: the delete is sent at creation; if this is dropped before
/// [`PendingRelease::finish`] completes, the rest goes on in the background (tracked by the
/// janitor). No task is spawned when it completes in place.
pub(crate) struct PendingRelease {
    hold: Arc<Hold>,
    sent: Option<SentDelete>,
}

impl PendingRelease {
    /// Sends the delete of `hold`'s node.
    pub fn new(hold: Arc<Hold>) -> PendingRelease {
        let sent = hold.send_delete();
        PendingRelease { hold, sent: Some(sent) }
    }

    /// Awaits the delete.
    ///
    /// # Errors
    /// As [`Hold::finish_delete`].
    ///
    /// # Cancel safety
    /// Cancel-safe: dropped before completion, the delete completes in the background.
    pub async fn finish(mut self) -> Result<()> {
        let Some(sent) = self.sent.take() else { return Ok(()) };
        let hold = self.hold.clone();
        let mut resume = ResumeOnDrop { hold: Some(hold.clone()) };
        let result = hold.finish_delete(sent).await;
        resume.hold = None;
        result
    }

    /// Leaves the delete to the background.
    pub fn detach(mut self, what: &'static str) {
        if let Some(sent) = self.sent.take() {
            spawn_finish(self.hold.clone(), sent, what);
        }
    }
}

impl Drop for PendingRelease {
    fn drop(&mut self) {
        if let Some(sent) = self.sent.take() {
            spawn_finish(self.hold.clone(), sent, "release");
        }
    }
}

/// While a release's delete is awaited in place: if dropped first (the caller was cancelled),
/// the delete is sent again in the background (a delete of a node we may have deleted already
/// is harmless: its `NoNode` is ignored).
struct ResumeOnDrop {
    hold: Option<Arc<Hold>>,
}

impl Drop for ResumeOnDrop {
    fn drop(&mut self) {
        if let Some(hold) = self.hold.take() {
            let (conn, path) = (hold.conn.clone(), hold.path.clone());
            hold.janitor.clone().spawn("cancelled release", async move {
                delete_quietly(&conn, &path).await;
                hold.forget_node();
            });
        }
    }
}

fn spawn_finish(hold: Arc<Hold>, sent: SentDelete, what: &'static str) {
    hold.janitor.clone().spawn(what, async move {
        if let Err(e) = hold.finish_delete(sent).await {
            tracing::debug!(node = %hold.path, error = %e, "background release");
        }
    });
}

/// The data a revoker writes into a holder's node (Curator's `RevocationSpec` value).
pub(crate) const REVOKE: &[u8] = b"__REVOKE__";

impl Listener for Hold {
    fn session_changed(&self, status: SessionStatus) {
        let ours = self.conn.generation;
        match status.state {
            // A status of an earlier generation is stale news (read before our session's
            // `Connected` was published); it says nothing about this hold.
            _ if status.generation < ours => {}
            ConnectionState::Closed => self.lose("session_closed"),
            // A later generation means ours expired.
            _ if status.generation > ours => self.lose("session_expired"),
            ConnectionState::Lost => self.lose("session_expired"),
            ConnectionState::Suspended => self.set_status(LockStatus::Suspended),
            ConnectionState::Connected | ConnectionState::Reconnected => {
                self.set_status(self.connected_status())
            }
        }
    }
}

/// Follows the data watch on a held node until released or lost: its deletion by someone else
/// loses the hold, `__REVOKE__` in its data is a revocation request.
async fn watch_own(hold: std::sync::Weak<Hold>, mut own: PendingEvent, mut stop: oneshot::Receiver<()>) {
    loop {
        let event = tokio::select! {
            _ = &mut stop => break,
            event = &mut own => event,
        };
        let Some(hold) = hold.upgrade() else { return };
        let released = hold.releasing.load(Ordering::SeqCst);
        match event {
            OwnEvent::Deleted if released => return,
            // A close deletes our node before it ends the session: the close is the cause.
            OwnEvent::Deleted if hold.conn.session_closed() => return hold.lose("session_closed"),
            OwnEvent::Deleted => return hold.lose("node_deleted"),
            // The session ended: the session's task tells the hold.
            OwnEvent::Session(_) => return,
            // The data changed: a revocation request, or something else. Re-arm and look.
            OwnEvent::Changed => {
                let client = hold.conn.client.clone();
                match on_connection_loss(|| client.get_and_watch_data(&hold.path)).await {
                    Ok((data, _, watcher)) => {
                        own = Box::pin(async move { watcher.changed().await.into() });
                        if data == REVOKE && hold.revocable && !hold.revoked.swap(true, Ordering::SeqCst) {
                            tracing::info!(node = %hold.path, "revocation requested");
                            if hold.current_status() == LockStatus::Held {
                                hold.set_status(LockStatus::RevocationRequested);
                            }
                        }
                    }
                    Err(_) if hold.releasing.load(Ordering::SeqCst) => return,
                    // The session's task reports a session that ended.
                    Err(ZkError::SessionExpired | ZkError::ClientClosed | ZkError::SessionMoved) => return,
                    Err(_) => return hold.lose("node_deleted"),
                }
            }
        }
    }
    // Released: let our own delete consume the watch rather than removing it with a request.
    let _ = tokio::time::timeout(Duration::from_secs(2), own).await;
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
