//! The release of a hold: the delete of our node once the last hold goes.
//!
//! The delete is sent at once ([`Hold::send_delete`]: any later request of the session, the next
//! acquire's create say, is ordered after it) and awaited apart ([`Hold::finish_delete`]),
//! retried across connection losses for at most [`release_patience`]. A release whose caller
//! awaits it (`release().await`) may instead go out with the session's other plain deletes in
//! one `multi` while two are in flight (see `session/deletes.rs`): its caller's next request
//! comes after the answer anyway. A dropped guard's delete is always sent at once.
//!
//! Invariants:
//! * The monitor hears that the release began before the release reads the status: a loss it
//!   finds is reported as `LockLost`, not counted as a loss.
//! * A delete, once sent, is always seen through: awaited in place, or (when the caller is
//!   cancelled, drops a [`PendingRelease`], or runs out of patience) in the background on the
//!   janitor. Cancelled mid-wait, [`ResumeOnDrop`] sends it again, saying what the first said
//!   (a delete of a node we may have deleted already is harmless: its `NoNode` is ignored).
//! * The own-node watch and the listener registration are let go only after the delete is done
//!   (`forget_node`), so that our delete consumes the watch.

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client::{Client, Error as ZkError};

use super::held::Hold;
use crate::error::{Error, Result};
use crate::session::{DeleteFuture, Departure};
use crate::status::LockStatus;
use crate::util::on_connection_loss;

/// How long release keeps retrying a delete across connection losses before it hands the delete
/// to the background and reports the connection loss.
fn release_patience(client: &Client) -> Duration {
    client.session_timeout().max(Duration::from_secs(1))
}

/// A delete sent by [`Hold::send_delete`], to be awaited by [`Hold::finish_delete`].
pub(crate) struct SentDelete {
    was_lost: bool,
    /// What it says (see `Conn::send_delete`): resent as it was first sent.
    departure: Departure,
    first: DeleteFuture,
}

impl Hold {
    /// Sends the delete of our node now: any later request of this session (the next acquire's
    /// create, say) is ordered after it. `batched`: the caller awaits the answer before its
    /// next request, so a plain delete may wait to go out with the session's other plain
    /// deletes in one `multi` (see `session/deletes.rs`). Await the answer with
    /// [`Hold::finish_delete`]. A `release` (not the end of a hold limit) is a clean one for
    /// waiters with a lock delay, when ours is on. The delete of a lost hold is never clean:
    /// the one lost hold whose node still stands is one that passed its limit, its owner
    /// deleting the node (see `Limit::owner_deletes`). A holder admitted at the head leaves a
    /// tombstone when a waiter may watch for it (see `Node::tomb`).
    pub fn send_delete(self: &Arc<Self>, release: bool, batched: bool) -> SentDelete {
        self.monitor.begin_release();
        let was_lost = self.current_status() == LockStatus::Lost;
        let departure = if release && !was_lost && self.node.clean_releases {
            Departure::Clean
        } else if self.node.tomb {
            Departure::Tombstone
        } else {
            Departure::Plain
        };
        let conn = &self.node.conn;
        let first = if batched {
            conn.send_delete_batched(self.path(), departure)
        } else {
            conn.send_delete(self.path(), departure)
        };
        SentDelete { was_lost, departure, first }
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
        let SentDelete { was_lost, departure, first } = sent;
        let (conn, path) = (&self.node.conn, self.path());
        // A delete retried after a connection loss may meet `NoNode` because its first attempt
        // did delete the node (the reply was lost): only a first-attempt `NoNode` means someone
        // else deleted it.
        let mut first = Some(first);
        let mut attempts = 0;
        let deleting = on_connection_loss(|| {
            attempts += 1;
            let resend: DeleteFuture = match first.take() {
                Some(sent) => sent,
                None => conn.send_delete(path, departure),
            };
            resend
        });
        let outcome = tokio::time::timeout(release_patience(&conn.client), deleting).await;
        if matches!(
            outcome,
            Ok(Ok(()) | Err(ZkError::NoNode | ZkError::SessionExpired | ZkError::ClientClosed))
        ) {
            conn.untrack(path);
        }
        let retried = attempts > 1;
        let result = match outcome {
            Ok(Ok(())) if !was_lost => Ok(()),
            Ok(Err(ZkError::NoNode)) if retried && !was_lost => Ok(()),
            Ok(Ok(())) | Ok(Err(ZkError::NoNode | ZkError::SessionExpired | ZkError::ClientClosed)) => {
                self.monitor.release_found_lost();
                Err(Error::LockLost { path: self.root().to_string() })
            }
            Ok(Err(e)) => Err(Error::from_zk("delete", path, e)),
            Err(_) => {
                let (conn, path, hold) = (conn.clone(), path.to_string(), self.clone());
                self.janitor.spawn("release after connection loss", async move {
                    conn.delete_quietly_as(&path, departure).await;
                    hold.forget_node();
                });
                return Err(Error::ConnectionLoss { op: "delete", path: self.path().to_string() });
            }
        };
        self.forget_node();
        result
    }

    /// The maximum hold passed (see `LockOptions::max_hold`): the hold ends as if lost. The
    /// status turns `Lost` (counted with cause `max_hold`), then our node is deleted, which
    /// admits the next waiter. The guard stays with its holder: its release then finds the hold
    /// lost (`LockLost`). Nothing to do for a hold already lost or being released.
    ///
    /// With `owner_deletes` (see `Limit`), the node is left standing: the owner, told by the
    /// status, stops the work the hold guards and then releases, a delete that is not clean
    /// either (see [`Hold::send_delete`]).
    pub(super) async fn end_at_limit(self: &Arc<Self>, owner_deletes: bool) {
        // `is_live` is false once the last hold was given back (a release about to begin) or
        // the hold is lost.
        if self.monitor.releasing() || !self.is_live() {
            return;
        }
        tracing::info!(node = %self.path(), owner_deletes, "maximum hold passed; ending the hold");
        self.monitor.lose(&self.node, "max_hold");
        if owner_deletes {
            return;
        }
        // Not clean: the holder may still be at work (it is told, but may not have stopped).
        let sent = self.send_delete(false, false);
        // The status was `Lost` when the delete was sent, so the answer is always `LockLost`
        // (or a connection loss, the delete going on in the background): nothing to report.
        if let Err(e) = self.finish_delete(sent).await {
            tracing::debug!(node = %self.path(), error = %e, "delete at the maximum hold");
        }
    }

    /// After our node's delete: stops following it, and leaves the session's listeners.
    fn forget_node(&self) {
        self.monitor.detach();
    }

    /// Releases one hold in the background (a guard dropped without `release()`). The delete
    /// is sent before this returns, so the session's next request is ordered after it.
    pub fn release_in_background(self: &Arc<Self>) {
        if self.release_one() {
            PendingRelease::new(self.clone(), false).detach("dropped guard");
        }
    }
}

/// A release under way: the delete is sent at creation; if this is dropped before
/// [`PendingRelease::finish`] completes, the rest goes on in the background (tracked by the
/// janitor). No task is spawned when it completes in place.
pub(crate) struct PendingRelease {
    hold: Arc<Hold>,
    sent: Option<SentDelete>,
}

impl PendingRelease {
    /// Sends the delete of `hold`'s node (`awaited`: by [`PendingRelease::finish`], before the
    /// caller's next request; see [`Hold::send_delete`]).
    pub fn new(hold: Arc<Hold>, awaited: bool) -> PendingRelease {
        let sent = hold.send_delete(true, awaited);
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
        let mut resume = ResumeOnDrop { hold: Some(hold.clone()), departure: sent.departure };
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
    /// What the delete first sent says ([`Hold::send_delete`] decided it): the resent one says
    /// the same, so the delete of a lost hold stays unclean.
    departure: Departure,
}

impl Drop for ResumeOnDrop {
    fn drop(&mut self) {
        if let Some(hold) = self.hold.take() {
            let departure = self.departure;
            let (conn, path) = (hold.node.conn.clone(), hold.path().to_string());
            hold.janitor.clone().spawn("cancelled release", async move {
                conn.delete_quietly_as(&path, departure).await;
                hold.forget_node();
            });
        }
    }
}

fn spawn_finish(hold: Arc<Hold>, sent: SentDelete, what: &'static str) {
    hold.janitor.clone().spawn(what, async move {
        if let Err(e) = hold.finish_delete(sent).await {
            tracing::debug!(node = %hold.path(), error = %e, "background release");
        }
    });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use zk_testcluster::ZkCluster;
    use zookeeper_client::EventType;

    use crate::lock_core::{Acquire, LockCore, LockSpec};
    use crate::LockOptions;

    /// A lost hold's delete is never clean, also when its release is cancelled and
    /// [`super::ResumeOnDrop`] sends it again: a clean mark would let a waiter with a lock delay
    /// enter at once, beside work of the lost hold that may still be running. The hold is lost
    /// at its limit with its node standing (as a leader selector's: the owner deletes it); its
    /// release's first delete never reaches the server (held by the proxy, then the connection
    /// is cut), so what the server sees is the resent one. A watcher's data watch on the node
    /// tells which: a clean release fires it as a data change, a plain delete as a deletion.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_release_of_a_lost_hold_is_resent_unclean() {
        let zk = ZkCluster::standalone().await.expect("zookeeper");
        let proxy = zk.proxy().expect("proxy");
        let session =
            crate::Session::connect(&proxy.connect_string(), Duration::from_secs(20)).await.expect("session");
        let options =
            LockOptions::new().lock_delay(Duration::from_secs(3)).max_hold(Duration::from_millis(300));
        let spec = LockSpec::exclusive("mutex", false);
        let core = LockCore::build(&session, "/release/lost", spec, &options).unwrap().owner_ends_at_limit();
        let guard = core.acquire(Acquire::forever()).await.unwrap().expect("acquired");
        tokio::time::timeout(Duration::from_secs(30), guard.lost()).await.expect("the limit passes");

        let watcher = zookeeper_client::Client::connect(&zk.connect_string()).await.expect("watcher");
        let (_, _, watch) = watcher.get_and_watch_data(guard.node_path()).await.expect("the node stands");
        proxy.hold_requests();
        let release = tokio::time::timeout(Duration::from_millis(200), guard.release()).await;
        assert!(release.is_err(), "the release was answered through held requests: {release:?}");
        proxy.cut();
        proxy.heal();
        let event = tokio::time::timeout(Duration::from_secs(30), watch.changed()).await.expect("the delete");
        assert_eq!(event.event_type, EventType::NodeDeleted, "the lost hold's delete was resent as clean");
        session.close().await;
    }
}
