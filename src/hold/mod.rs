//! A held node: what every lock recipe ends in once its queue entry is admitted.
//!
//! A [`Hold`] does three jobs, one per file:
//! * this file: the node ([`Node`]: its connection, lock path, node path and `czxid`, fixed for
//!   the hold's life) and its local state ([`Local`]: the reentrant count, the handle's local
//!   turn and the companions, behind one lock);
//! * [`monitor`]: the hold's [`LockStatus`], fed by the session's states and by the data watch on
//!   our own node;
//! * [`release`]: the delete of our node once the last hold goes, cancel-safe.
//!
//! Invariants of the local state:
//! * The count starts at 1, goes up with [`Hold::retain`] and down with [`Hold::release_one`].
//!   Once 0 it stays 0 (`retain` refuses a released or lost hold), and whoever took it to 0
//!   deletes the node ([`release`]).
//! * At 0, the turn and then the companions are given back, outside the lock: the turn first,
//!   so that the handle's next local task may queue behind our node at once.
//! * The hold never names a guard: companions are type-erased values, kept only to be dropped
//!   (a dropped guard releases itself).

mod monitor;
mod release;

use std::sync::{Arc, Mutex};

use tokio::sync::{watch, OwnedMutexGuard};
use zookeeper_client::Client;

use self::monitor::Monitor;
pub(crate) use self::release::PendingRelease;
use crate::error::{Error, Result};
use crate::path::LockPath;
use crate::queue::{Entry, EntryParts, Janitor};
use crate::session::{Conn, Session};
use crate::status::{LockStatus, LossPolicy};

/// The data a revoker writes into a holder's node (Curator's `RevocationSpec` value).
pub(crate) const REVOKE: &[u8] = b"__REVOKE__";

/// Something that must last as long as a hold (a downgrade's write guard): kept only to be
/// dropped when the last hold goes.
pub(crate) type Companion = Box<dyn Send>;

/// One admitted node and everything a holder needs.
pub(crate) struct Hold {
    /// Keeps the session open while we hold: a guard outlives every `Session` handle the user
    /// dropped, and the session closes (deleting our node) only once the guard is gone too.
    _session: Session,
    node: Node,
    /// Whether [`Hold::retain`] may take more holds.
    reentrant: bool,
    local: Mutex<Local>,
    monitor: Monitor,
    /// Finishes releases whose caller went away.
    janitor: Janitor,
}

/// Which node we hold: fixed for the hold's life.
struct Node {
    conn: Conn,
    root: LockPath,
    path: String,
    czxid: i64,
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
        let shared = session.shared().clone();
        let hold = Arc::new(Hold {
            _session: session,
            node: Node { conn, root, path, czxid },
            reentrant,
            local: Mutex::new(Local { count: 1, turn, companions: Vec::new() }),
            monitor: Monitor::new(policy, revocable, revoked, labels),
            janitor: janitor.clone(),
        });
        monitor::attach(&hold, &shared, own, follow_own);
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

    pub fn status(&self) -> watch::Receiver<LockStatus> {
        self.monitor.subscribe()
    }

    pub fn current_status(&self) -> LockStatus {
        self.monitor.current()
    }

    /// Resolves when the status counts as lost under the policy.
    pub async fn lost(&self) {
        self.monitor.lost().await
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

/// Locks `m`, whether or not a panic poisoned it (every lock of a hold: the state under each
/// stays consistent across a panic).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
