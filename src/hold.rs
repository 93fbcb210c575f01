//! A held node: its reentrant count, its status monitor, and its release.
//!
//! Every lock recipe ends in a [`Hold`] once its queue entry is admitted. The monitor task turns
//! session states and the data watch on our own node into [`LockStatus`] changes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch, OwnedMutexGuard};
use zookeeper_client::{Client, Error as ZkError, SessionState};

use crate::error::{Error, Result};
use crate::path::LockPath;
use crate::queue::{delete_quietly, own_event, retry, Entry, Janitor, OwnEvent, PendingEvent};
use crate::session::{Conn, ConnectionState, Session, SessionStatus};
use crate::status::{LockStatus, LossPolicy};

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
    /// The handle's local turn (see `LockCore`), given back when the last hold goes.
    turn: Mutex<Option<OwnedMutexGuard<()>>>,
    labels: crate::metrics::Labels,
    acquired: Instant,
    /// Other holds that must last as long as this one (a downgrade's write hold).
    companions: Mutex<Vec<crate::guard::LockGuard>>,
    status: watch::Sender<LockStatus>,
    releasing: Arc<AtomicBool>,
    stop: Mutex<Option<oneshot::Sender<()>>>,
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
    /// Takes over an admitted entry and starts its monitor. `turn`, if any, is given back when
    /// the last hold is released.
    pub fn start(
        session: Session,
        entry: Entry,
        policy: LossPolicy,
        janitor: &Janitor,
        reentrant: bool,
        turn: Option<OwnedMutexGuard<()>>,
        labels: crate::metrics::Labels,
    ) -> Arc<Hold> {
        let root = entry.root.clone();
        let (conn, path, czxid, own, revoked) = entry.into_parts();
        let first = if revoked { LockStatus::RevocationRequested } else { LockStatus::Held };
        let (status, _) = watch::channel(first);
        let (stop_tx, stop_rx) = oneshot::channel();
        let releasing = Arc::new(AtomicBool::new(false));
        let closing = session.states();
        let hold = Arc::new(Hold {
            _session: session,
            conn: conn.clone(),
            root,
            path: path.clone(),
            czxid,
            policy,
            janitor: janitor.clone(),
            count: Mutex::new(1),
            reentrant,
            turn: Mutex::new(turn),
            companions: Mutex::new(Vec::new()),
            labels: labels.clone(),
            acquired: Instant::now(),
            status: status.clone(),
            releasing: releasing.clone(),
            stop: Mutex::new(Some(stop_tx)),
        });
        tokio::spawn(monitor(conn.client, path, own, revoked, status, releasing, stop_rx, labels, closing));
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

    pub fn janitor(&self) -> &Janitor {
        &self.janitor
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

    /// Deletes the node after the last hold is released.
    ///
    /// Local state is already consistent when this runs (the count is 0, so the handle takes no
    /// more reentrant holds on it): a failure here never blocks a later acquire. On a
    /// connection loss that outlasts [`release_patience`], the delete goes on in the background
    /// and the caller hears `ConnectionLoss`.
    ///
    /// # Errors
    /// [`Error::LockLost`] when the node was already gone (someone deleted it, or the session
    /// expired): the lock was not ours to release any more. [`Error::ConnectionLoss`] as above.
    pub async fn delete_node(self: &Arc<Self>) -> Result<()> {
        if !self.releasing.swap(true, Ordering::SeqCst) {
            self.labels.held(self.acquired.elapsed());
        }
        let was_lost = self.current_status() == LockStatus::Lost;
        // A delete retried after a connection loss may meet `NoNode` because its first attempt
        // did delete the node (the reply was lost): only a first-attempt `NoNode` means someone
        // else deleted it.
        let mut attempts = 0;
        let deleting = retry::on_connection_loss(|| {
            attempts += 1;
            self.conn.client.delete(&self.path, None)
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
                let (conn, path) = (self.conn.clone(), self.path.clone());
                self.janitor.spawn("release after connection loss", async move {
                    delete_quietly(&conn, &path).await
                });
                Err(Error::ConnectionLoss { op: "delete", path: self.path.clone() })
            }
        };
        if let Some(stop) = self.stop.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = stop.send(());
        }
        result
    }

    /// Releases one hold in the background (a guard dropped without `release()`).
    pub fn release_in_background(self: &Arc<Self>) {
        if self.release_one() {
            let hold = self.clone();
            self.janitor.spawn("dropped guard", async move {
                if let Err(e) = hold.delete_node().await {
                    tracing::debug!(node = %hold.path, error = %e, "background release");
                }
            });
        }
    }
}

/// The data a revoker writes into a holder's node (Curator's `RevocationSpec` value).
pub(crate) const REVOKE: &[u8] = b"__REVOKE__";

/// Maps session states and own-node events to status changes until released or lost.
#[allow(clippy::too_many_arguments)] // one call site, each argument a distinct piece of the hold
async fn monitor(
    client: Client,
    path: String,
    mut own: Option<PendingEvent>,
    mut revoked: bool,
    status: watch::Sender<LockStatus>,
    releasing: Arc<AtomicBool>,
    mut stop: oneshot::Receiver<()>,
    labels: crate::metrics::Labels,
    mut closing: watch::Receiver<SessionStatus>,
) {
    let mut states = client.state_watcher();
    let set = |s: LockStatus| {
        status.send_if_modified(|cur| {
            let changed = *cur != s && *cur != LockStatus::Lost;
            if changed {
                tracing::info!(node = %path, from = ?*cur, to = ?s, "lock status");
                *cur = s;
            }
            changed
        });
    };
    let lose = |cause: &'static str| {
        if !releasing.load(Ordering::SeqCst) && *status.borrow() != LockStatus::Lost {
            labels.lost(cause);
        }
        set(LockStatus::Lost);
    };
    let mut state = states.peek_state();
    loop {
        let connected = if revoked { LockStatus::RevocationRequested } else { LockStatus::Held };
        match state {
            SessionState::Disconnected => set(LockStatus::Suspended),
            SessionState::SyncConnected | SessionState::ConnectedReadOnly => set(connected),
            SessionState::Expired | SessionState::Closed | SessionState::AuthFailed => {
                lose("session_expired");
                return;
            }
        }
        tokio::select! {
            _ = &mut stop => break,
            next = states.changed() => state = next,
            // `Session::close` deleted our node (the client itself may live on in clones).
            _ = async { closing.wait_for(|s| s.state == ConnectionState::Closed).await.map(|_| ()) } => {
                lose("session_closed");
                return;
            }
            event = own_event(&mut own) => {
                let released = releasing.load(Ordering::SeqCst);
                match event {
                    OwnEvent::Deleted if released => return,
                    OwnEvent::Deleted => {
                        lose("node_deleted");
                        return;
                    }
                    OwnEvent::Session(_) => {
                        lose("session_expired");
                        return;
                    }
                    // The data changed: a revocation request, or something else. Re-arm and look.
                    OwnEvent::Changed => match retry::on_connection_loss(|| client.get_and_watch_data(&path)).await {
                        Ok((data, _, watcher)) => {
                            own = Some(Box::pin(async move { watcher.changed().await.into() }));
                            if data == REVOKE && !revoked {
                                revoked = true;
                                tracing::info!(node = %path, "revocation requested");
                            }
                        }
                        Err(_) if released => return,
                        Err(_) => {
                            lose("node_deleted");
                            return;
                        }
                    },
                }
            }
        }
    }
    // Released: let our own delete consume the watch rather than removing it with a request.
    if let Some(event) = own {
        let _ = tokio::time::timeout(Duration::from_secs(2), event).await;
    }
}
