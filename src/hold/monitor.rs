//! A hold's status monitor: its [`LockStatus`] channel and what feeds it.
//!
//! Session states reach the status from the session's own task (a hold is a [`Listener`]: no
//! task per hold); the data watch on our own node (every recipe's, unless turned off) is
//! followed by a small future that the session drives on one task for all its holds
//! ([`watch_own`]), and turns that watch's events into status changes. A watch that is not
//! followed is parked until our own delete fires it.
//!
//! Invariants:
//! * The status never moves away from [`LockStatus::Lost`].
//! * A loss is counted (metrics) at most once, and never once the release began: `releasing` is
//!   set before the release reads the status, so a loss that the release causes is not counted.
//! * A revocation request is reported only for a revocable hold, and is remembered: the status
//!   comes back to [`LockStatus::RevocationRequested`] after a suspension.
//! * The own-node watch (followed or parked) and the listener registration are let go only
//!   after our node's delete ([`Monitor::detach`]): dropped before, the watch would be removed
//!   with a request of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};
use zookeeper_client::Error as ZkError;

use super::{lock, Hold, Node, REVOKE};
use crate::metrics::Labels;
use crate::queue::{retry, OwnEvent, PendingEvent};
use crate::session::{ConnectionState, Listener, Registration, SessionStatus, Shared};
use crate::status::{LockStatus, LossPolicy};

/// The status of one hold and what keeps it current.
pub(super) struct Monitor {
    status: watch::Sender<LockStatus>,
    policy: LossPolicy,
    /// Whether a revocation request (`__REVOKE__` in our node's data) is reported.
    revocable: bool,
    /// A revocation was requested: the status to come back to after a suspension.
    revoked: AtomicBool,
    /// The release began: a loss from now on is not counted as one.
    releasing: AtomicBool,
    labels: Labels,
    acquired: Instant,
    /// What ties the hold to its session and node until the node is deleted.
    attached: Mutex<Attached>,
}

/// What [`Monitor::detach`] lets go after our node's delete.
#[derive(Default)]
struct Attached {
    /// Our place among the session's listeners.
    registration: Option<Registration>,
    own: OwnWatch,
}

/// The data watch on our own node.
#[derive(Default)]
enum OwnWatch {
    /// No watch (turned off, or let go).
    #[default]
    None,
    /// Followed by [`watch_own`]; sending stops it.
    Followed(oneshot::Sender<()>),
    /// Not followed: kept until our delete fires it.
    Parked(PendingEvent),
}

/// Joins `hold` to the session's listeners and, when it has a data watch on its node, has the
/// session follow it (`follow_own`) or parks it.
pub(super) fn attach(hold: &Arc<Hold>, shared: &Arc<Shared>, own: Option<PendingEvent>, follow_own: bool) {
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
    *lock(&hold.monitor.attached) = Attached { registration, own };
}

impl Monitor {
    /// A monitor starting at `Held`, or at `RevocationRequested` when the entry saw a
    /// revocation request while it waited (`revoked`) and the hold is `revocable`.
    pub fn new(policy: LossPolicy, revocable: bool, revoked: bool, labels: Labels) -> Monitor {
        let revoked = revoked && revocable;
        let first = if revoked { LockStatus::RevocationRequested } else { LockStatus::Held };
        let (status, _) = watch::channel(first);
        Monitor {
            status,
            policy,
            revocable,
            revoked: AtomicBool::new(revoked),
            releasing: AtomicBool::new(false),
            labels,
            acquired: Instant::now(),
            attached: Mutex::new(Attached::default()),
        }
    }

    pub fn subscribe(&self) -> watch::Receiver<LockStatus> {
        self.status.subscribe()
    }

    pub fn current(&self) -> LockStatus {
        *self.status.borrow()
    }

    /// Resolves when the status counts as lost under the policy.
    pub async fn lost(&self) {
        let mut status = self.status.subscribe();
        // The sender lives in `self`, so `wait_for` ends only with a matching status.
        let _ = status.wait_for(|s| self.policy.is_lost(*s)).await;
    }

    /// The release begins: from now on a loss is not counted. The first call counts the time
    /// held.
    pub fn begin_release(&self) {
        if !self.releasing.swap(true, Ordering::SeqCst) {
            self.labels.held(self.acquired.elapsed());
        }
    }

    fn releasing(&self) -> bool {
        self.releasing.load(Ordering::SeqCst)
    }

    /// Our node turned out gone at release: the hold is `Lost` (every subscriber is told,
    /// whatever the status was). Not counted as a loss: the release began.
    pub fn release_found_lost(&self) {
        self.status.send_replace(LockStatus::Lost);
    }

    /// After our node's delete: stops following it, and leaves the session's listeners.
    pub fn detach(&self) {
        let Attached { registration, own } = std::mem::take(&mut *lock(&self.attached));
        match own {
            OwnWatch::Followed(stop) => {
                let _ = stop.send(());
            }
            OwnWatch::Parked(own) => drop(own),
            OwnWatch::None => {}
        }
        drop(registration);
    }

    /// Moves the status to `to` (never away from `Lost`).
    fn set(&self, node: &Node, to: LockStatus) {
        self.status.send_if_modified(|cur| {
            let changed = *cur != to && *cur != LockStatus::Lost;
            if changed {
                tracing::info!(node = %node.path, from = ?*cur, to = ?to, "lock status");
                *cur = to;
            }
            changed
        });
    }

    /// The hold is lost for good; counted once, unless it was being released.
    fn lose(&self, node: &Node, cause: &'static str) {
        if !self.releasing() && self.current() != LockStatus::Lost {
            self.labels.lost(cause);
        }
        self.set(node, LockStatus::Lost);
    }

    /// The status while connected: `Held`, or `RevocationRequested` once someone asked.
    fn connected_status(&self) -> LockStatus {
        if self.revoked.load(Ordering::SeqCst) {
            LockStatus::RevocationRequested
        } else {
            LockStatus::Held
        }
    }

    /// Our node's data now reads `data`: a revocation request, if it is `__REVOKE__` and the
    /// hold is revocable (reported once).
    fn data_changed(&self, node: &Node, data: &[u8]) {
        if data == REVOKE && self.revocable && !self.revoked.swap(true, Ordering::SeqCst) {
            tracing::info!(node = %node.path, "revocation requested");
            if self.current() == LockStatus::Held {
                self.set(node, LockStatus::RevocationRequested);
            }
        }
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
            // The data changed: a revocation request, or something else. Re-arm and look.
            OwnEvent::Changed => {
                let client = node.conn.client.clone();
                match retry::on_connection_loss(|| client.get_and_watch_data(&node.path)).await {
                    Ok((data, _, watcher)) => {
                        own = Box::pin(async move { watcher.changed().await.into() });
                        monitor.data_changed(node, &data);
                    }
                    Err(_) if monitor.releasing() => return,
                    // The session's task reports a session that ended.
                    Err(ZkError::SessionExpired | ZkError::ClientClosed | ZkError::SessionMoved) => return,
                    Err(_) => return monitor.lose(node, "node_deleted"),
                }
            }
        }
    }
    // Released: let our own delete consume the watch rather than removing it with a request.
    let _ = tokio::time::timeout(Duration::from_secs(2), own).await;
}
