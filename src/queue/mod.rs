//! The queue engine every recipe shares.
//!
//! Contenders take a place in a queue of EPHEMERAL_SEQUENTIAL nodes under a root, wait their turn
//! by watching a single node ahead of them, and leave cleanly. A recipe adds only its
//! [`Admission`] rule: who may proceed, and whom a waiter watches.
//!
//! Costs, per acquisition:
//! * the create and the first listing are pipelined (sent back to back; ZooKeeper answers a
//!   session's requests in order, so the listing includes our node): one round trip;
//! * when the session's recent joins found their parent missing (see `session/guess.rs`), and
//!   after a missing parent, the parent's create, ours and the listing go back to back: a fresh
//!   lock path (one per order id) costs one round trip and no failed create;
//! * every node of ours carries a data watch (unless a lock turns it off), sent as soon as the
//!   create returns, without waiting: the holder learns of its deletion by someone else, or of a
//!   revocation request. On a guessed fresh path (above), and in a session whose recent joins
//!   found their node alone (an idle lock), the listing's child watch on the parent stands in
//!   for it while we hold and nobody else joins (see `own_watch::own_watch_from_listing`); a
//!   waiter there (a wrong guess) sets the data watch as anywhere, and the child watch's one
//!   event, if it comes, costs no request;
//! * a waiter watches one node with a data watch (no herd). With tombstones
//!   ([`Admission::leaves_tombstone`]: a mutex's, a latch's, a read/write lock's writers'), the waiter right
//!   behind a node also watches that node's tombstone's name (an exists watch): a holder
//!   admitted at the head creates and deletes it in the transaction that deletes its node, so
//!   the waiter enters on that deletion with no listing, and a queue of clean handoffs lists
//!   nothing after the joins. A holder whose latest listing showed it at the head or right
//!   behind it, with nobody after it, deletes plainly: no waiter watches its tombstone (see
//!   `entry::Leaving::watched_behind`), and a waiter that listed it right behind the head reads
//!   once, on its deletion, whether that head is gone. Without them (a lock delay), a rule may
//!   name a second node to watch, further ahead ([`Admission::lookahead`]: a mutex's waiter
//!   watches the node two ahead too), so that a deletion notifies at most two waiters.
//!   Watches that have not fired are kept from one round to the next, not set again, and once
//!   admitted until they fire (a tombstone's watch that has not fired by its node's deletion
//!   never will: it is dropped).
//!   The one waiter that watches the parent's children is a semaphore's first waiter, which any
//!   of several holders may admit ([`Queue::watch_children`]): every change of the children wakes it, a join
//!   behind it included;
//! * when the watched node was at the head of the queue at our last listing, its deletion makes
//!   us the head (sequence numbers only grow), so we proceed on that notification alone, with no
//!   request after it: such a waiter also watches its own node, set just before the watch on the
//!   node ahead, and ZooKeeper's in-order events say whether our node was deleted first.

mod entry;
mod events;
mod join;
mod own_watch;
mod plan;
mod rule;
mod sender;
mod stats;
mod wait;
mod watches;

use std::sync::Arc;

use zookeeper_client::{Acl, Acls, Error as ZkError, MultiReadResult, SessionState};

pub(crate) use self::entry::{Entry, EntryParts};
pub use self::events::{GiveUpReason, QueueEvent};
pub(crate) use self::events::{Progress, Sink};
pub(crate) use self::own_watch::{OwnEvent, PendingEvent};
pub(crate) use self::rule::{Admission, Decision, FirstN};
pub(crate) use self::sender::Children;
use self::sender::Sender;
pub use self::stats::QueueStats;
use self::stats::{Count, Counters};
use crate::error::{Error, Result};
use crate::naming::{sort_queue, NameScheme, QueueNode};
use crate::path::LockPath;
use crate::session::{Conn, Session};
use crate::util::Janitor;

/// A queue under a root path.
#[derive(Clone)]
pub(crate) struct Queue {
    session: Session,
    root: LockPath,
    scheme: NameScheme,
    acls: Arc<[Acl]>,
    janitor: Janitor,
    counters: Arc<Counters>,
    /// The data the root must carry (a semaphore's maximum): the root is created with it, and
    /// every acquire checks it once its node is in ([`Queue::verify_root`]).
    root_data: Option<Arc<[u8]>>,
    /// Whether our nodes carry a data watch (every recipe's by default; see
    /// `LockOptions::watch_own_node`): it reports their deletion by someone else and revocation
    /// requests, and lets a waiter whose predecessor
    /// was the head proceed without listing again. Without it, a waiter lists again after every
    /// wake-up, and an uncontended acquire costs only the create and the listing.
    watch_own: bool,
    /// The lock delay (`LockOptions::lock_delay`): a waiter that saw a node ahead vanish
    /// without a clean release waits this long before it enters, and our own deletes say they
    /// are clean (see `Conn::send_delete`).
    lock_delay: Option<std::time::Duration>,
    /// Whether our own-node watch must be a data watch from the start (revocable locks: a
    /// revocation request changes only the node's data). See [`Queue::join`] for when it
    /// need not be.
    data_watch_only: bool,
    /// The root as it was when it was last found to carry [`Queue::root_data`]: its `czxid` and
    /// `mzxid`. A listing that shows the same two needs no read: the root is the same node, and
    /// its data has not changed since.
    verified: Arc<std::sync::Mutex<Option<RootVersion>>>,
}

/// What [`Queue::join`] gives: our entry, a listing made after our create, and the root's
/// version at that listing when it was read with it.
pub(crate) struct Joined {
    pub entry: Entry,
    pub children: Children,
    pub root: Option<RootVersion>,
}

/// A root node's identity and data version: `(czxid, mzxid)`.
pub(crate) type RootVersion = (i64, i64);

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("root", &self.root).field("scheme", &self.scheme).finish()
    }
}

/// Maps a watch's session event to the error it means.
fn session_error(state: SessionState) -> Error {
    match state {
        SessionState::AuthFailed => Error::NoAuth { op: "session", path: String::new() },
        _ => Error::SessionExpired,
    }
}

impl Queue {
    pub fn new(session: &Session, root: LockPath, scheme: NameScheme) -> Queue {
        Queue {
            session: session.clone(),
            root,
            scheme,
            acls: anyone_all(),
            janitor: Janitor::default(),
            counters: Arc::default(),
            root_data: None,
            watch_own: true,
            lock_delay: None,
            data_watch_only: false,
            verified: Arc::default(),
        }
    }

    /// Sets the lock delay (see the field's docs); `None` or zero turns it off.
    pub fn with_lock_delay(mut self, delay: Option<std::time::Duration>) -> Queue {
        self.lock_delay = delay.filter(|d| !d.is_zero());
        self
    }

    /// Whether tombstones are on (see [`Admission::leaves_tombstone`]): a holder the rule says
    /// is admitted at the head leaves one in the transaction that deletes its node
    /// (`Conn::send_delete`), when a waiter may watch for it (`entry::Leaving::watched_behind`),
    /// and the waiter right behind it watches its name instead of the node two ahead: seeing
    /// the tombstone's creation and then the node's deletion, it is the head, and enters with
    /// no listing. Any other deletion (a waiter giving up, an expiry, a peer's release) makes
    /// it list as before (right behind the head at its listing, it first reads whether that
    /// head is gone). Off with a lock delay, whose waiters read how each node ahead left in
    /// their own way.
    fn tombstones(&self) -> bool {
        self.lock_delay.is_none()
    }

    /// Uses `acls` (when given) for every node the queue creates, parents included.
    pub fn with_acls(mut self, acls: Option<Arc<[Acl]>>) -> Queue {
        if let Some(acls) = acls {
            self.acls = acls;
        }
        self
    }

    /// Requires the root to carry `data` (a semaphore's maximum; see [`Queue::verify_root`]).
    pub fn with_root_data(mut self, data: Option<Arc<[u8]>>) -> Queue {
        self.root_data = data;
        self
    }

    /// Whether our nodes carry a data watch (see the field's docs).
    pub fn watching_own_nodes(mut self, watch: bool) -> Queue {
        self.watch_own = watch;
        self
    }

    /// Whether holds must hear of changes to their node's data (revocation requests): then
    /// the own-node watch is always a data watch.
    pub fn hearing_revocations(mut self, revocable: bool) -> Queue {
        self.data_watch_only = revocable;
        self
    }

    /// The root path.
    pub fn root(&self) -> &LockPath {
        &self.root
    }

    /// The session the queue's nodes are created in.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Where the queue's background cleanups run, and are awaited.
    pub fn janitor(&self) -> &Janitor {
        &self.janitor
    }

    /// What the queue's work has cost so far.
    pub fn stats(&self) -> QueueStats {
        self.counters.snapshot()
    }

    /// Whether `name` is one of this queue's nodes, and with which marker (its index in the
    /// scheme's markers).
    pub fn marker_of(&self, name: &str) -> Option<usize> {
        self.scheme.parse(name).map(|n| n.marker)
    }

    /// Our queue, parsed and in the order Curator and kazoo compute (which is creation order, or
    /// `Err(SequenceWrapped)`); foreign children are left out.
    pub fn sorted<'a>(&self, children: &'a [String]) -> Result<Vec<QueueNode<'a>>> {
        let mut queue: Vec<QueueNode> = children.iter().filter_map(|c| self.scheme.parse(c)).collect();
        sort_queue(&mut queue, &self.scheme, self.root.as_str())?;
        Ok(queue)
    }

    /// The session's current connection, waiting while a new session is being started.
    ///
    /// # Errors
    /// [`Error::SessionClosed`] once the session is closed.
    pub async fn conn(&self) -> Result<Conn> {
        self.session.shared().wait_conn().await
    }

    /// The requests of this queue on `conn`: every request the queue sends goes out there.
    fn sender<'a>(&'a self, conn: &'a Conn) -> Sender<'a> {
        Sender::new(conn, &self.root)
    }

    /// Lists the root's children on `conn`'s session.
    pub async fn list_on(&self, conn: &Conn) -> Result<Children> {
        self.counters.bump(Count::Listing);
        match self.sender(conn).list().await {
            Ok(children) => Ok(Arc::new(children)),
            Err(ZkError::NoNode) => Ok(Children::default()),
            Err(e) => Err(Error::from_zk("list", self.root.as_str(), e)),
        }
    }

    /// The data of the queue's nodes `names`, in one multi-read on `conn`'s session.
    ///
    /// # Errors
    /// The multi-read's errors.
    pub async fn read_nodes(&self, conn: &Conn, names: &[QueueNode<'_>]) -> Result<Vec<MultiReadResult>> {
        self.sender(conn).read_all(names.iter().map(|node| &*node.name)).await
    }

    /// Asks the holder of our queue's node `name` to release (see
    /// [`crate::request_revocation`]); `false` if the node is gone.
    ///
    /// # Errors
    /// As [`crate::request_revocation`].
    pub async fn revoke(&self, conn: &Conn, name: &str) -> Result<bool> {
        self.sender(conn).revoke(name).await
    }

    /// Whether the root must carry data (see [`Queue::verify_root`]).
    pub fn root_carries_data(&self) -> bool {
        self.root_data.is_some()
    }

    /// Checks that the root carries [`Queue::root_data`], storing it when the root has none.
    /// Called with our node in the queue, so the root can't be reaped and re-created meanwhile.
    /// `listed`: the root's version as the join's listing saw it; when it is the one last
    /// verified, nothing is read.
    ///
    /// # Errors
    /// [`Error::LeaseMaxMismatch`] when the root carries other data; errors of the reads.
    pub async fn verify_root(&self, conn: &Conn, listed: Option<RootVersion>) -> Result<()> {
        if self.root_data.is_none() {
            return Ok(());
        }
        if listed.is_some() && listed == *crate::util::lock(&self.verified) {
            return Ok(());
        }
        // Boxed: the read is rare (a root whose data changed), and an acquire's future keeps
        // room for its largest state for as long as its waiter waits.
        match Box::pin(self.root_data_found(conn)).await? {
            Ok(()) => Ok(()),
            Err(stored) => Err(Error::LeaseMaxMismatch {
                path: self.root.to_string(),
                configured: self
                    .root_data
                    .as_deref()
                    .and_then(|d| std::str::from_utf8(d).ok()?.parse().ok())
                    .unwrap_or_default(),
                stored: String::from_utf8_lossy(&stored).into_owned(),
            }),
        }
    }

    /// `Ok(Err(stored))` with the data found when it differs from what the root must carry.
    async fn root_data_found(&self, conn: &Conn) -> Result<std::result::Result<(), Vec<u8>>> {
        let Some(want) = &self.root_data else { return Ok(Ok(())) };
        let (sender, root) = (self.sender(conn), self.root.as_str());
        loop {
            let (data, stat) = match sender.read_root().await {
                Ok(found) => found,
                Err(e) => return Err(Error::from_zk("get", root, e)),
            };
            if data.is_empty() {
                match sender.store_root(want, stat.version).await {
                    Ok(stored) => {
                        *crate::util::lock(&self.verified) = Some((stored.czxid, stored.mzxid));
                        return Ok(Ok(()));
                    }
                    Err(ZkError::BadVersion) => continue,
                    Err(e) => return Err(Error::from_zk("store root data", root, e)),
                }
            }
            if data == **want {
                *crate::util::lock(&self.verified) = Some((stat.czxid, stat.mzxid));
                return Ok(Ok(()));
            }
            return Ok(Err(data));
        }
    }
}

/// The queue a listing of `root` shows under `scheme`, in creation order: foreign children
/// (tombstones, a name with no sequence suffix, anyone's other nodes) are left out;
/// `Err(FormatConflict)` if `children` has a node of the other naming format,
/// `Err(RecipeConflict)` if one of another kind of recipe (either would admit beside us), and
/// `Err(SequenceWrapped)` when the path's sequence counter has wrapped (see `sort_queue`). In
/// one pass: a child that parses as ours is never the other format's (see
/// [`NameScheme::conflicting`]), so only the others are looked at twice. Pure: no I/O.
pub(crate) fn listed_queue<'a>(
    scheme: &NameScheme,
    root: &LockPath,
    children: &'a [String],
) -> Result<Vec<QueueNode<'a>>> {
    let mut queue = Vec::with_capacity(children.len());
    for child in children {
        match scheme.parse(child) {
            Some(node) => queue.push(node),
            None => refuse_conflict(scheme, root, child)?,
        }
    }
    sort_queue(&mut queue, scheme, root.as_str())?;
    Ok(queue)
}

/// What `rule` says of the node `name` on a listing of `root` (see [`listed_queue`]): the
/// queue, the node's place in it, and the decision. `Err(NodeDeleted)` when the node is not in
/// it; the errors of [`listed_queue`]. Pure: no I/O.
pub(crate) fn decide_on<'a>(
    scheme: &NameScheme,
    root: &LockPath,
    rule: &dyn Admission,
    name: &str,
    children: &'a [String],
) -> Result<(Vec<QueueNode<'a>>, usize, Decision)> {
    let queue = listed_queue(scheme, root, children)?;
    let me = queue
        .iter()
        .position(|n| n.name == name)
        .ok_or_else(|| Error::NodeDeleted { path: root.child(name) })?;
    let decision = rule.decide(&queue, me);
    Ok((queue, me, decision))
}

/// `Err(FormatConflict)` if `child` is a node of the other naming format,
/// `Err(RecipeConflict)` if it is a queue node of another kind of recipe: either would
/// admit beside us. Other foreign children are left alone.
fn refuse_conflict(scheme: &NameScheme, root: &LockPath, child: &str) -> Result<()> {
    match crate::naming::NodeFormat::detect(child) {
        Some(theirs) if theirs != scheme.format => Err(Error::FormatConflict {
            path: root.to_string(),
            node: child.to_string(),
            ours: scheme.format,
            theirs,
        }),
        _ => match scheme.other_recipe(child) {
            Some(theirs) => Err(Error::RecipeConflict {
                path: root.to_string(),
                node: child.to_string(),
                ours: scheme.recipe(),
                theirs,
            }),
            None => Ok(()),
        },
    }
}

/// The default ACLs (anyone may do anything), shared by every queue that does not set its own.
fn anyone_all() -> Arc<[Acl]> {
    static ANYONE_ALL: std::sync::OnceLock<Arc<[Acl]>> = std::sync::OnceLock::new();
    ANYONE_ALL.get_or_init(|| Arc::from(Acls::anyone_all().to_vec())).clone()
}
