//! A hold's status monitor: its [`LockStatus`] channel and what feeds it.
//!
//! Session states reach the status from the session's own task (a hold is a [`Listener`]: no
//! task per hold); the data watch on our own node (every recipe's, unless turned off) is
//! followed by a small future that the session drives on one task for all its holds
//! ([`watch_own`]), and turns that watch's events into status changes. A watch that is not
//! followed is parked until our own delete fires it.
//! A hold with a maximum hold (`LockOptions::max_hold`) has a timer future driven the same way
//! (`limit_hold`): when it fires, the status turns `Lost` (cause `max_hold`) and our node is
//! deleted (or, for a hold whose owner deletes it once its work has stopped, `Limit`, left to
//! that owner); it stops when our node's delete lets it go ([`Monitor::detach`]).
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
use std::sync::Mutex;
use std::time::Instant;

use tokio::sync::{oneshot, watch};

use super::node::Node;
use crate::markers::REVOKE;
use crate::metrics::Labels;
use crate::queue::PendingEvent;
use crate::session::Registration;
use crate::status::{LockStatus, LossPolicy};
use crate::util::lock;

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
    /// When the hold began (the maximum hold counts from here).
    pub(super) acquired: Instant,
    /// What ties the hold to its session and node until the node is deleted.
    attached: Mutex<Attached>,
}

/// What [`Monitor::detach`] lets go after our node's delete.
#[derive(Default)]
pub(super) struct Attached {
    /// Our place among the session's listeners.
    pub(super) registration: Option<Registration>,
    pub(super) own: OwnWatch,
    /// Stops the maximum hold's timer when dropped (see `LockOptions::max_hold`).
    pub(super) limit: Option<oneshot::Sender<()>>,
}

/// The data watch on our own node.
#[derive(Default)]
pub(super) enum OwnWatch {
    /// No watch (turned off, or let go).
    #[default]
    None,
    /// Followed by [`watch_own`]; sending stops it.
    Followed(oneshot::Sender<()>),
    /// Not followed: kept until our delete fires it.
    Parked(PendingEvent),
}

impl Monitor {
    /// Keeps what attaching the hold made: its listener registration and its own-node watch.
    pub(super) fn attach(&self, attached: Attached) {
        *lock(&self.attached) = attached;
    }

    /// A monitor starting at `Held`, or at `RevocationRequested` when the entry saw a
    /// revocation request while it waited (`revoked`) and the hold is `revocable`.
    pub fn new(policy: LossPolicy, revocable: bool, revoked: bool, labels: Labels) -> Monitor {
        let revoked = revoked && revocable;
        if revoked {
            labels.revocation("requested");
        }
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

    /// The hold has passed most of its maximum hold (counted once, in metrics).
    pub fn near_limit(&self) {
        self.labels.near_limit();
    }

    /// The hold's loss policy.
    pub fn policy(&self) -> LossPolicy {
        self.policy
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
            if self.revoked.load(Ordering::SeqCst) && self.current() != LockStatus::Lost {
                self.labels.revocation("honoured");
            }
        }
    }

    pub(super) fn releasing(&self) -> bool {
        self.releasing.load(Ordering::SeqCst)
    }

    /// Our node turned out gone at release: the hold is `Lost` (every subscriber is told,
    /// whatever the status was). Not counted as a loss: the release began.
    pub fn release_found_lost(&self) {
        self.status.send_replace(LockStatus::Lost);
    }

    /// After our node's delete: stops following it, and leaves the session's listeners.
    pub fn detach(&self) {
        let Attached { registration, own, limit } = std::mem::take(&mut *lock(&self.attached));
        drop(limit);
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
    pub(super) fn set(&self, node: &Node, to: LockStatus) {
        self.moved(node, to, || {});
    }

    /// Moves the status to `to` (never away from `Lost`), calling `first` when it moves, before
    /// any subscriber can see the new status.
    fn moved(&self, node: &Node, to: LockStatus, first: impl FnOnce()) {
        self.status.send_if_modified(|cur| {
            let changed = *cur != to && *cur != LockStatus::Lost;
            if changed {
                tracing::info!(node = %node.path, from = ?*cur, to = ?to, "lock status");
                first();
                *cur = to;
            }
            changed
        });
    }

    /// The hold is lost for good; counted once, unless it was being released: by the call
    /// that moves the status to `Lost` (the own-node job and the session's listener may both
    /// see the loss at once), before anyone sees `Lost`.
    pub(super) fn lose(&self, node: &Node, cause: &'static str) {
        let releasing = self.releasing();
        self.moved(node, LockStatus::Lost, || {
            if !releasing {
                self.labels.lost(cause);
            }
        });
    }

    /// The status while connected: `Held`, or `RevocationRequested` once someone asked.
    pub(super) fn connected_status(&self) -> LockStatus {
        if self.revoked.load(Ordering::SeqCst) {
            LockStatus::RevocationRequested
        } else {
            LockStatus::Held
        }
    }

    /// Our node's data now reads `data`: a revocation request, if it is `__REVOKE__` and the
    /// hold is revocable (reported once).
    pub(super) fn data_changed(&self, node: &Node, data: &[u8]) {
        if data == REVOKE && self.revocable && !self.revoked.swap(true, Ordering::SeqCst) {
            tracing::info!(node = %node.path, "revocation requested");
            self.labels.revocation("requested");
            if self.current() == LockStatus::Held {
                self.set(node, LockStatus::RevocationRequested);
            }
        }
    }
}
