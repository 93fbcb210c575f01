//! Our place in a queue, as values that clean up after themselves when dropped.
//!
//! Requests are sent when a client method is *called*, not when its future is polled, so a create
//! whose future was dropped may still land. Two guards cover every await point:
//! * [`PendingCreate`] lives while a create is in flight: dropped armed, it finds the node by its
//!   protection prefix (checking the owner session) and deletes it in the background;
//! * [`Entry`] lives while we have a node: dropped armed, it deletes that node in the background.

use std::sync::Arc;

use zookeeper_client::Error as ZkError;

use super::own_watch::{OwnEvent, OwnNodeWatch, PendingEvent};
use super::sender::Sender;
use crate::error::{Error, Result};
use crate::path::LockPath;
use crate::session::{Conn, Departure};
use crate::util::Janitor;

/// A create in flight, identified by its protection prefix.
pub(crate) struct PendingCreate {
    conn: Conn,
    root: LockPath,
    protection: String,
    janitor: Janitor,
    armed: bool,
}

impl PendingCreate {
    pub fn new(conn: &Conn, root: &LockPath, protection: &str, janitor: &Janitor) -> PendingCreate {
        PendingCreate {
            conn: conn.clone(),
            root: root.clone(),
            protection: protection.to_string(),
            janitor: janitor.clone(),
            armed: true,
        }
    }

    /// The create's outcome is known and owned by an [`Entry`] (or it failed for sure).
    pub fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for PendingCreate {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (conn, root, protection) =
            (self.conn.clone(), self.root.clone(), std::mem::take(&mut self.protection));
        self.janitor.spawn("cancelled create", async move {
            // Sent after the create, so ZooKeeper's per-session FIFO order makes the create visible.
            let sender = Sender::new(&conn, &root);
            match sender.find_ours(&protection).await {
                Ok(found) => {
                    for (name, _) in found {
                        sender.delete_quietly(&root.child(&name)).await;
                    }
                }
                Err(e) => tracing::debug!(error = %e, %root, "cleanup after a cancelled create"),
            }
        });
    }
}

/// Our node in a queue.
pub(crate) struct Entry {
    conn: Conn,
    root: LockPath,
    /// Full path, its child name (e.g. `_c_<uuid>-lock-0000000042`) after the root's. One
    /// string, shared with the session's record of our live nodes: a waiter keeps it for as long
    /// as it waits (memory per queued waiter, `tests/memory.rs`).
    path: Arc<str>,
    seq: i32,
    /// The creating transaction's zxid: the fencing token.
    czxid: i64,
    /// The watch on our own node, and what it says.
    own: OwnNodeWatch,
    /// Someone asked us to release (our node's data was set to `__REVOKE__`) while we waited;
    /// the hold starts as `RevocationRequested`.
    revoke_requested: bool,
    /// Our node's data (the participant id), for rewriting it unchanged: the handle's.
    data: Arc<[u8]>,
    /// What our delete says (see [`Leaving`]).
    leaving: Leaving,
    janitor: Janitor,
    armed: bool,
}

impl Entry {
    /// Our node `name` under `root`, created with `data`; its delete says what `leaving` says.
    pub fn new(
        conn: &Conn,
        root: &LockPath,
        (name, seq, czxid): (&str, i32, i64),
        data: &Arc<[u8]>,
        leaving: Leaving,
        janitor: &Janitor,
    ) -> Entry {
        let path: Arc<str> = Arc::from(root.child(name));
        conn.track(&path);
        Entry {
            conn: conn.clone(),
            path,
            root: root.clone(),
            seq,
            czxid,
            own: OwnNodeWatch::default(),
            revoke_requested: false,
            data: data.clone(),
            leaving,
            janitor: janitor.clone(),
            armed: true,
        }
    }

    /// Our node's name in the queue.
    pub fn name(&self) -> &str {
        // The root is never `/` (a `LockPath` is a directory under it): the name starts after
        // the root's length and a slash.
        &self.path[self.root.as_str().len() + 1..]
    }

    /// Our node's sequence number.
    pub fn seq(&self) -> i32 {
        self.seq
    }

    /// The creating transaction's zxid: the fencing token.
    pub fn czxid(&self) -> i64 {
        self.czxid
    }

    /// The queue's root.
    pub fn root(&self) -> &LockPath {
        &self.root
    }

    /// The connection our node was created on.
    pub fn conn(&self) -> &Conn {
        &self.conn
    }

    /// (Re-)arms the data watch on our own node, noting a revocation request in its data.
    ///
    /// # Errors
    /// [`Error::NodeDeleted`] (the entry disarmed) when the node is gone.
    pub async fn watch_self(&mut self) -> Result<()> {
        let sender = Sender::new(&self.conn, &self.root);
        // Taken before the request goes out (see `OwnCheck`).
        let state = sender.state();
        match sender.watch_data(&self.path).await {
            Ok((data, _, watcher)) => {
                self.own.set_answered(watcher, state);
                if data == crate::markers::REVOKE {
                    self.revoke_requested = true;
                }
                Ok(())
            }
            Err(ZkError::NoNode) => Err(self.gone()),
            Err(e) => Err(Error::from_zk("watch", &self.path, e)),
        }
    }

    /// Sets the data watch on our node without waiting for its answer (see
    /// [`OwnNodeWatch::send`]). It takes over from the listing's child watch, if that stood in.
    pub fn send_own_watch(&mut self) {
        self.own.send(Sender::new(&self.conn, &self.root), &self.path);
    }

    /// The join's listing's child watch stands in for the data watch on our node (see
    /// [`OwnNodeWatch::set_from_listing`]); `state` was taken before the listing was sent.
    pub fn watch_own_from_listing(
        &mut self,
        watcher: zookeeper_client::OneshotWatcher,
        state: zookeeper_client::StateWatcher,
    ) {
        self.own.set_from_listing(watcher, state);
    }

    /// The holder follows the own-node watch (see [`OwnNodeWatch::follows`]).
    pub fn follow_own_watch(&mut self) {
        self.own.follow();
    }

    /// Whether a watch on our own node is set (and has not been seen to fire).
    pub fn watches_own(&self) -> bool {
        self.own.is_set()
    }

    /// Whether the own-node watch has fired by now, without waiting (see
    /// [`OwnNodeWatch::fired`]).
    pub fn own_fired(&mut self) -> Option<OwnEvent> {
        self.own.fired()
    }

    /// Whether the own-node watch, set and not fired, says our node exists (see
    /// [`OwnCheck`](super::own_watch::OwnCheck)).
    pub fn own_vouches(&mut self) -> bool {
        self.own.vouches()
    }

    /// The own-node watch's next event; pending for ever while none is set.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropped before the event, the watch stays as it was.
    pub async fn own_event(&mut self) -> OwnEvent {
        self.own.next().await
    }

    /// A listing showed our node at `me` in a queue of `len` (see [`Leaving::watched_behind`]).
    pub fn listed_at(&mut self, me: usize, len: usize) {
        self.leaving.listed_at(me, len);
    }

    /// We were admitted at the head of the queue, every node before ours gone (or not, when
    /// `at_head` is false): our release may say so (see [`Leaving::tomb`]).
    pub fn admitted_at_head(&mut self, at_head: bool) {
        self.leaving.at_head = at_head;
    }

    /// A node ahead of ours vanished without a clean release (see [`Leaving::hold_back`]).
    pub fn hold_back(&mut self, delay: std::time::Duration) {
        self.leaving.hold_back(delay);
    }

    /// Wakes the waiter that watches our node (see `Admission::announce_admission`) with a data
    /// change: our node's data, written again unchanged. Sent now, so that every later request
    /// of the session (our release's delete, say) is ordered after it; its answer is awaited in
    /// the background, on the queue's janitor, and the write sent again after a connection loss
    /// (that one may land after our release's delete: it then finds no node), until the
    /// session ends. So an admission costs the acquire no round trip for it. Its failures are
    /// logged, never the acquire's error:
    /// - our node is gone, or the session ended: the waiter wakes on our node's deletion (our
    ///   hold hears of it when it watches its node, `LockOptions::watch_own_node`);
    /// - the node's ACL denies us WRITE: the waiter wakes only on our release, so until then a
    ///   lease that another holder frees is not taken (see `Weighted`).
    pub fn announce(&self) {
        let answer = Sender::new(&self.conn, &self.root).rewrite(&self.path, &self.data);
        let path = self.path.clone();
        self.janitor.spawn("announce", async move {
            if let Err(e) = answer.await {
                tracing::debug!(node = %path, error = %e, "our admission's announcement failed");
            }
        });
    }

    /// Before a waiting round: the data watch on our node, when the round may enter on a
    /// deletion alone (`enters_on_deletion`: it is set before the watch on the node ahead, see
    /// [`OwnCheck`](super::own_watch::OwnCheck)) and none is set, or when the join's listing's
    /// child watch stands in. A waiter does not keep that child watch as its own-node watch (it
    /// would fire for every join behind, and for the deletion we wait on, each time costing a
    /// read): the data watch takes over, and the child watch is kept, unpolled, until that one
    /// fires (dropped unfired, it would cost a request to remove it).
    pub fn watch_own_for_wait(&mut self, enters_on_deletion: bool) {
        if !(enters_on_deletion && !self.own.is_set() || self.own.stands_in()) {
            return;
        }
        // (Without the child watch, the slot is empty here: nothing to keep.)
        let child = self.own.take_event();
        self.send_own_watch();
        if let Some(child) = child {
            self.own.keep_until_fired(child);
        }
    }

    /// Our node was deleted by someone else: disarms (nothing to delete) and says so.
    pub fn gone(&mut self) -> Error {
        self.disarm();
        self.conn.untrack(&self.path);
        Error::NodeDeleted { path: self.path.to_string() }
    }

    /// The node is gone, or someone else now answers for it: dropping must not delete it.
    pub fn disarm(&mut self) {
        self.armed = false;
    }

    /// Deletes our node (retrying connection losses) and disarms.
    ///
    /// # Cancel safety
    /// If dropped before the delete is confirmed, the entry stays armed and its drop deletes in
    /// the background.
    pub async fn leave(mut self) -> Result<()> {
        let departure = self.leaving.departure();
        let result = match Sender::new(&self.conn, &self.root).delete(&self.path, departure).await {
            Ok(()) | Err(ZkError::NoNode) => Ok(()),
            // The session is over: its ephemeral node is gone with it.
            Err(ZkError::SessionExpired | ZkError::ClientClosed) => Ok(()),
            Err(e) => Err(Error::from_zk("delete", &self.path, e)),
        };
        if result.is_ok() {
            self.disarm();
            self.conn.untrack(&self.path);
        }
        result
    }

    /// Hands the node and its own-watch over to a holder. The entry is disarmed.
    pub fn into_parts(mut self) -> EntryParts {
        self.disarm();
        EntryParts {
            conn: self.conn.clone(),
            path: self.path.clone(),
            czxid: self.czxid,
            own: self.own.take_event(),
            follow_own: self.own.follows(),
            revoked: self.revoke_requested,
            clean_releases: self.leaving.clean,
            tomb: self.leaving.tomb(),
        }
    }
}

/// How our node will leave: what its delete says (a [`Departure`]). A clean release when the
/// queue's lock delay is on and the delete is not within a delay we began; a tombstone when the
/// queue's waiters watch for them, our node was admitted at the head of the queue, and a waiter
/// may watch for ours. A queue has one or the other (`Queue::tombstones`: off with a lock
/// delay).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Leaving {
    /// Our releases are clean ones (the queue's lock delay is on; off for good after a delay
    /// past the end of time).
    clean: bool,
    /// Tombstones are on for the queue (no lock delay: `Queue::tombstones`).
    tombstones: bool,
    /// Our node was admitted at the head of the queue (every node before it was gone), and the
    /// rule says the waiter behind it watches for its tombstone
    /// (`Admission::leaves_tombstone`). Set only when that is known (a listing showed our node
    /// first, or the node ahead of ours was the head and is gone), never on a rule's admission
    /// of a node further back.
    at_head: bool,
    /// Whether a waiter may need our tombstone, as far as our latest listing tells: it showed
    /// our node two or more places back, or a node behind ours. Only a waiter whose listing
    /// showed our node two or more places back needs it: one place back (right behind the
    /// head), a waiter that hears our deletion with no tombstone reads whether that head is
    /// gone instead (`WaitRound::head`). A node behind ours at that listing may have listed
    /// before it, when ours was further back; a node created since lists after it, when ours
    /// is at most where that listing showed it (nodes only leave the queue ahead of ours). So
    /// when it showed ours at the head or right behind it, and nobody after it, no waiter ever
    /// needs our tombstone, and our delete goes plainly: on a queue of two (a contended lock's
    /// holder and its one waiter), every release.
    watched_behind: bool,
    /// Not before this instant: we saw a node ahead vanish without a clean release, and a
    /// waiter that leaves within its lock delay must not tell the one behind it that all was
    /// clean (that one would enter at once).
    after: Option<std::time::Instant>,
}

impl Leaving {
    /// Clean releases when `clean` (a lock delay), tombstones when `tombstones`.
    pub fn new(clean: bool, tombstones: bool) -> Leaving {
        Leaving { clean, tombstones, at_head: false, watched_behind: true, after: None }
    }

    /// A listing showed our node at `me` in a queue of `len` (see [`Leaving::watched_behind`]).
    fn listed_at(&mut self, me: usize, len: usize) {
        self.watched_behind = me >= 2 || len > me + 1;
    }

    /// Whether our delete leaves a tombstone: only a node admitted at the head may say so, for
    /// the waiter behind it takes it for proof that every node before it is gone; and only
    /// when a waiter may watch for it.
    fn tomb(&self) -> bool {
        self.tombstones && self.at_head && self.watched_behind
    }

    /// A node ahead of ours vanished without a clean release: until `delay` from now, our own
    /// delete (if we leave) is not a clean release.
    fn hold_back(&mut self, delay: std::time::Duration) {
        match std::time::Instant::now().checked_add(delay) {
            Some(until) => self.after = Some(self.after.map_or(until, |at| at.max(until))),
            // Past the end of time: never clean.
            None => self.clean = false,
        }
    }

    /// What a delete sent now says.
    fn departure(&self) -> Departure {
        if self.clean && self.after.is_none_or(|at| std::time::Instant::now() >= at) {
            Departure::Clean
        } else if self.tomb() {
            Departure::Tombstone
        } else {
            Departure::Plain
        }
    }
}

/// What a holder takes over from an admitted [`Entry`].
pub(crate) struct EntryParts {
    pub conn: Conn,
    pub path: Arc<str>,
    pub czxid: i64,
    pub own: Option<PendingEvent>,
    pub follow_own: bool,
    pub revoked: bool,
    /// Whether its releases are clean ones (see [`Leaving`]).
    pub clean_releases: bool,
    /// Whether its delete leaves a tombstone (see [`Leaving::tomb`]).
    pub tomb: bool,
}

impl Drop for Entry {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let departure = self.leaving.departure();
        let (conn, root, path) = (self.conn.clone(), self.root.clone(), self.path.clone());
        // Keep the own-watch until the delete is done, so that it is consumed by the deletion
        // rather than removed by a separate request.
        let own = self.own.take_event();
        self.janitor.spawn("dropped entry", async move {
            Sender::new(&conn, &root).leave_quietly(&path, departure).await;
            drop(own);
        });
    }
}

#[cfg(test)]
mod tests {
    use zk_testcluster::ZkCluster;
    use zookeeper_client::{Acls, Client, CreateMode};

    use super::*;

    /// CURATOR-604: a node that carries our protection prefix but belongs to another (older)
    /// session is never taken for ours, neither to adopt after a connection loss nor to delete.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_with_our_prefix_but_another_owner_is_never_ours() {
        let zk = ZkCluster::standalone().await.expect("zookeeper");
        let old = Client::connect(&zk.connect_string()).await.expect("old session");
        // The current session is a `Session`'s, as every recipe's is: its `Conn` is what a
        // pending create carries.
        let session = crate::Session::connect(&zk.connect_string(), std::time::Duration::from_secs(20))
            .await
            .expect("current session");
        let conn = session.shared().conn().expect("a current connection");
        let current = conn.client.clone();
        assert_ne!(current.session_id(), old.session_id());
        let root = LockPath::new("/locks/stale").unwrap();
        old.mkdir(root.as_str(), &CreateMode::Persistent.with_acls(Acls::anyone_all())).await.unwrap();
        let protection = "_c_6f1d2c3b-0a9e-4c1b-8d7f-5e4a3b2c1d0e-";
        let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let (stale_stat, _) =
            old.create(&root.child(&format!("{protection}lock-")), b"old", &options).await.unwrap();

        assert!(
            Sender::new(&conn, &root).find_ours(protection).await.unwrap().is_empty(),
            "adopted another session's node"
        );

        let (mine, seq) =
            current.create(&root.child(&format!("{protection}lock-")), b"new", &options).await.unwrap();
        let found = Sender::new(&conn, &root).find_ours(protection).await.unwrap();
        assert_eq!(found, vec![(format!("{protection}lock-{seq}"), mine.czxid)]);
        assert_ne!(found[0].1, stale_stat.czxid);

        // The cleanup of a cancelled create spares the other session's node.
        let janitor = Janitor::default();
        drop(PendingCreate::new(&conn, &root, protection, &janitor));
        janitor.settled().await;
        let left = current.list_children(root.as_str()).await.unwrap();
        assert_eq!(left.len(), 1, "{left:?}");
        let (data, _) = current.get_data(&root.child(&left[0])).await.unwrap();
        assert_eq!(data, b"old");
        session.close().await;
    }
}
