//! [`Hold`]: an admitted node and its local state, wired to its status monitor: the session's
//! states reach it as a [`Listener`], and the data watch on our own node is followed by a small
//! future the session drives ([`watch_own`]). See the module's docs (`hold/mod.rs`).

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{oneshot, watch, OwnedMutexGuard};
use zookeeper_client::{Client, Error as ZkError};

use super::monitor::{Attached, Monitor, OwnWatch};
use super::node::Node;
use crate::error::{Error, Result};
use crate::path::LockPath;
use crate::queue::{Entry, EntryParts, OwnEvent, PendingEvent};
use crate::session::{Asking, Listener, Session, Shared};
use crate::status::{ConnectionState, LockStatus, LossPolicy, SessionStatus};
use crate::util::{lock, on_connection_loss, Janitor};

/// Something that must last as long as a hold (a downgrade's write guard): kept only to be
/// dropped when the last hold goes.
pub(crate) type Companion = Box<dyn Send>;

/// One admitted node and everything a holder needs.
pub(crate) struct Hold {
    /// Keeps the session open while we hold: a guard outlives every `Session` handle the user
    /// dropped, and the session closes (deleting our node) only once the guard is gone too.
    _session: Session,
    pub(super) node: Node,
    /// Whether [`Hold::retain`] may take more holds.
    reentrant: bool,
    local: Mutex<Local>,
    pub(super) monitor: Monitor,
    /// Finishes releases whose caller went away.
    pub(super) janitor: Janitor,
    /// The hold asks for its session's safe window while it lives (the session beats).
    _asking: Asking,
}

/// The hold's local state, under one lock.
struct Local {
    /// Holds on this node (the first, and each [`Hold::retain`]); 0 once released.
    count: usize,
    /// The handle's local turn (see `LockCore`), given back when the last hold goes.
    turn: Option<OwnedMutexGuard<()>>,
    /// Other holds that must last as long as this one (a downgrade's write hold).
    companions: Vec<Companion>,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("path", &self.node.path)
            .field("czxid", &self.node.czxid)
            .field("status", &self.monitor.current())
            .finish()
    }
}

impl Hold {
    /// Takes over an admitted entry: joins the session's listeners and, when the entry has a
    /// data watch on its node, has the session follow it. `turn`, if any, is given back when the
    /// last hold is released. A revocation request is reported only when `revocable`. With a
    /// `max_hold`, the session also drives a timer that ends the hold when it passes (see
    /// [`Limit`]).
    #[allow(clippy::too_many_arguments)] // split up by the layering of the engine
    pub fn start(
        session: Session,
        entry: Entry,
        policy: LossPolicy,
        janitor: &Janitor,
        reentrant: bool,
        revocable: bool,
        turn: Option<OwnedMutexGuard<()>>,
        labels: crate::metrics::Labels,
        max_hold: Option<Limit>,
    ) -> Arc<Hold> {
        let root = entry.root().clone();
        let EntryParts { conn, path, czxid, own, follow_own, revoked, clean_releases, tomb } =
            entry.into_parts();
        let shared = session.shared().clone();
        let hold = Arc::new(Hold {
            _session: session,
            node: Node { conn, root, path, czxid, clean_releases, tomb },
            reentrant,
            local: Mutex::new(Local { count: 1, turn, companions: Vec::new() }),
            monitor: Monitor::new(policy, revocable, revoked, labels),
            janitor: janitor.clone(),
            _asking: shared.asking(),
        });
        attach(&hold, &shared, own, follow_own, max_hold);
        hold
    }

    /// Whether `other` lives in the same session as this hold.
    pub fn same_session(&self, other: &Hold) -> bool {
        self.client().session_id() == other.client().session_id()
    }

    /// The session generation this hold was taken in.
    pub fn generation(&self) -> u64 {
        self.node.conn.generation
    }

    /// The instant before which the server cannot have expired the session this hold lives in;
    /// `None` once the hold is lost or released, or its session is no longer the current one.
    pub fn safe_until(&self) -> Option<std::time::Instant> {
        if lock(&self.local).count == 0 || self.current_status() == LockStatus::Lost {
            return None;
        }
        self.node.conn.safe_until()
    }

    /// The client of the session this hold was taken in (for fenced writes).
    pub fn client(&self) -> &Client {
        &self.node.conn.client
    }

    /// Our node's full path.
    pub fn path(&self) -> &str {
        &self.node.path
    }

    pub fn root(&self) -> &LockPath {
        &self.node.root
    }

    pub fn fencing_token(&self) -> u64 {
        self.node.czxid as u64
    }

    /// The token as ZooKeeper gives it: the czxid, a positive `i64`.
    pub fn fencing_token_i64(&self) -> i64 {
        self.node.czxid
    }

    /// The status channel; a safe window that has passed is published (`Suspended`) first.
    pub fn status(&self) -> watch::Receiver<LockStatus> {
        self.node.conn.check_window();
        self.monitor.subscribe()
    }

    /// The status now: the monitor's, except that a hold whose safe window has passed is
    /// `Suspended` whatever the session's task has seen yet (a pause of this process).
    pub fn current_status(&self) -> LockStatus {
        match self.monitor.current() {
            LockStatus::Held | LockStatus::RevocationRequested if self.window_passed() => {
                LockStatus::Suspended
            }
            status => status,
        }
    }

    /// Whether the safe window of this hold's session has passed (or it is not the current one).
    fn window_passed(&self) -> bool {
        self.node.conn.safe_until().is_none_or(|until| until <= std::time::Instant::now())
    }

    /// Resolves when the status counts as lost under the policy (a safe window that has passed
    /// is published first).
    pub async fn lost(&self) {
        self.node.conn.check_window();
        self.monitor.lost().await
    }

    /// What is left of the safe window, when the hold is not lost (under its policy) and at
    /// least `margin` is left. See [`crate::LockGuard::ensure_safe`].
    pub fn ensure_safe(&self, margin: Duration) -> Result<Duration> {
        self.node.conn.check_window();
        let path = || self.node.root.to_string();
        let status = self.current_status();
        if lock(&self.local).count == 0 || self.monitor.policy().is_lost(status) {
            return Err(Error::LockLost { path: path() });
        }
        let now = std::time::Instant::now();
        let left =
            self.node.conn.safe_until().map_or(Duration::ZERO, |until| until.saturating_duration_since(now));
        if left.is_zero() || left < margin {
            return Err(Error::UnsafeWindow { path: path(), left, margin });
        }
        Ok(left)
    }

    /// Takes one more hold on the node (reentrancy through a guard).
    ///
    /// # Errors
    /// [`Error::NotReentrant`] for a non-reentrant recipe; [`Error::LockLost`] when the hold is
    /// lost or already released.
    pub fn retain(&self) -> Result<()> {
        if !self.reentrant {
            return Err(Error::NotReentrant { path: self.node.root.to_string() });
        }
        let mut local = lock(&self.local);
        if local.count == 0 || self.current_status() == LockStatus::Lost {
            return Err(Error::LockLost { path: self.node.root.to_string() });
        }
        local.count += 1;
        Ok(())
    }

    /// Whether the hold is still taken and not lost.
    pub fn is_live(&self) -> bool {
        lock(&self.local).count > 0 && self.current_status() != LockStatus::Lost
    }

    /// Gives back one hold; `true` when it was the last, and the node must go (the handle's
    /// local turn is given back at once: the next local task may queue behind our node).
    pub fn release_one(&self) -> bool {
        let (turn, companions) = {
            let mut local = lock(&self.local);
            local.count = local.count.saturating_sub(1);
            if local.count > 0 {
                return false;
            }
            (local.turn.take(), std::mem::take(&mut local.companions))
        };
        drop(turn);
        // Dropped guards release in the background.
        drop(companions);
        true
    }

    /// Keeps `other` until this hold is released.
    pub fn keep(&self, other: Companion) {
        lock(&self.local).companions.push(other);
    }
}

/// Registers `hold` with its session's listeners and has the session follow its own-node
/// watch (or keeps the watch parked until our delete fires it), and the maximum hold's timer.
fn attach(
    hold: &Arc<Hold>,
    shared: &Arc<Shared>,
    own: Option<PendingEvent>,
    follow_own: bool,
    max_hold: Option<Limit>,
) {
    let listener: Weak<dyn Listener> = Arc::downgrade(hold) as _;
    let registration = Some(shared.listen(listener));
    let own = match own {
        Some(own) if follow_own => {
            let (stop_tx, stop_rx) = oneshot::channel();
            shared.drive(Box::pin(watch_own(Arc::downgrade(hold), own, stop_rx)));
            OwnWatch::Followed(stop_tx)
        }
        // Kept, not followed, until our delete fires it: dropped before, it would be removed
        // with a request of its own.
        Some(own) => OwnWatch::Parked(own),
        None => OwnWatch::None,
    };
    let limit = max_hold.map(|max_hold| {
        let (stop_tx, stop_rx) = oneshot::channel();
        let acquired = hold.monitor.acquired;
        let (near, at) = (acquired + max_hold.after.mul_f64(NEAR_LIMIT), acquired + max_hold.after);
        shared.drive(Box::pin(limit_hold(Arc::downgrade(hold), near, at, max_hold.owner_deletes, stop_rx)));
        stop_tx
    });
    hold.monitor.attach(Attached { registration, own, limit });
}

/// A hold's maximum hold (`LockOptions::max_hold`), and who deletes its node when it passes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limit {
    /// How long after the acquire the hold ends.
    pub after: Duration,
    /// Whether the hold's owner deletes the node, once the work it guards has stopped (a
    /// leader selector: it stops its task, awaits it, then releases). Otherwise (every lock)
    /// the node is deleted at once, and the holder is told through the status.
    pub owner_deletes: bool,
}

impl Limit {
    /// A limit that deletes the node at once when it passes.
    pub fn new(after: Duration) -> Limit {
        Limit { after, owner_deletes: false }
    }

    /// The same limit, whose owner deletes the node once its work has stopped.
    pub fn owner_deletes(self) -> Limit {
        Limit { owner_deletes: true, ..self }
    }
}

/// The fraction of its maximum hold after which a hold counts as near its limit
/// (`zk_recipes_holds_near_limit_total`).
const NEAR_LIMIT: f64 = 0.8;

/// The maximum hold's timer: at `near`, counts the hold as near its limit (metrics); at `at`,
/// ends the hold as if lost (`Hold::end_at_limit`; `owner_deletes`: see [`Limit`]), unless it
/// was released first (the monitor drops `stop`'s sender after our node's delete) or the hold
/// is gone.
async fn limit_hold(
    hold: Weak<Hold>,
    near: std::time::Instant,
    at: std::time::Instant,
    owner_deletes: bool,
    mut stop: oneshot::Receiver<()>,
) {
    tokio::select! {
        // Sent or dropped: the hold was released (or dropped) before its limit.
        _ = &mut stop => return,
        () = tokio::time::sleep_until(near.into()) => {}
    }
    match hold.upgrade() {
        Some(hold) => hold.monitor.near_limit(),
        None => return,
    }
    tokio::select! {
        _ = stop => return,
        () = tokio::time::sleep_until(at.into()) => {}
    }
    if let Some(hold) = hold.upgrade() {
        hold.end_at_limit(owner_deletes).await;
    }
}

impl Listener for Hold {
    fn session_changed(&self, status: SessionStatus) {
        let (node, monitor) = (&self.node, &self.monitor);
        let ours = node.conn.generation;
        match status.state {
            // A status of an earlier generation is stale news (read before our session's
            // `Connected` was published); it says nothing about this hold.
            _ if status.generation < ours => {}
            ConnectionState::Closed => monitor.lose(node, "session_closed"),
            // A later generation means ours expired.
            _ if status.generation > ours => monitor.lose(node, "session_expired"),
            ConnectionState::Lost => monitor.lose(node, "session_expired"),
            ConnectionState::Suspended => monitor.set(node, LockStatus::Suspended),
            ConnectionState::Connected | ConnectionState::Reconnected => {
                monitor.set(node, monitor.connected_status())
            }
        }
    }
}

/// Follows the data watch on a held node until released or lost: its deletion by someone else
/// loses the hold, `__REVOKE__` in its data is a revocation request.
async fn watch_own(hold: Weak<Hold>, mut own: PendingEvent, mut stop: oneshot::Receiver<()>) {
    loop {
        let event = tokio::select! {
            _ = &mut stop => break,
            event = &mut own => event,
        };
        let Some(hold) = hold.upgrade() else { return };
        let (node, monitor) = (&hold.node, &hold.monitor);
        let released = monitor.releasing();
        match event {
            OwnEvent::Deleted if released => return,
            // A close deletes our node before it ends the session: the close is the cause.
            OwnEvent::Deleted if node.conn.session_closed() => return monitor.lose(node, "session_closed"),
            OwnEvent::Deleted => return monitor.lose(node, "node_deleted"),
            // The session ended: the session's task tells the hold.
            OwnEvent::Session(_) => return,
            // Our own delete may fire a child watch standing in for the data watch.
            OwnEvent::Changed if released => return,
            // The data changed (a revocation request, or something else), or the child watch
            // that stood in for the data watch fired: re-arm and look.
            OwnEvent::Changed => {
                let client = node.conn.client.clone();
                match on_connection_loss(|| client.get_and_watch_data(&node.path)).await {
                    Ok((data, _, watcher)) => {
                        own = Box::pin(async move { watcher.changed().await.into() });
                        monitor.data_changed(node, &data);
                    }
                    Err(_) if monitor.releasing() => return,
                    // The session's task reports a session that ended.
                    Err(ZkError::SessionExpired | ZkError::ClientClosed | ZkError::SessionMoved) => return,
                    // A close deletes our node before it ends the session (the child watch that
                    // stands in for the data watch reports that as a change): the close is the
                    // cause.
                    Err(_) if node.conn.session_closed() => return monitor.lose(node, "session_closed"),
                    Err(_) => return monitor.lose(node, "node_deleted"),
                }
            }
        }
    }
    // Released: let our own delete consume the watch rather than removing it with a request.
    let _ = tokio::time::timeout(Duration::from_secs(2), own).await;
}
