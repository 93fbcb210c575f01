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
//!   for it while we hold and nobody else joins (see `entry::own_watch_from_listing`); a waiter
//!   there (a wrong guess) sets the data watch as anywhere, and the child watch's one event, if
//!   it comes, costs no request;
//! * a waiter watches one node with a data watch (no herd); a rule may name a second, further
//!   ahead ([`Admission::lookahead`]: a mutex's waiter watches the node two ahead too), so that
//!   a deletion notifies at most two waiters. Watches that have not fired are kept from one
//!   round to the next, not set again, and once admitted until they fire. The one waiter that
//!   watches the parent's children is a semaphore's first waiter, which any of several holders
//!   may admit ([`Queue::watch_children`]): every change of the children wakes it, a join
//!   behind it included;
//! * when the watched node was at the head of the queue at our last listing, its deletion makes
//!   us the head (sequence numbers only grow), so we proceed on that notification alone, with no
//!   request after it: such a waiter also watches its own node, set just before the watch on the
//!   node ahead, and ZooKeeper's in-order events say whether our node was deleted first.

mod entry;
mod events;
mod rule;
mod stats;

use std::sync::Arc;

use futures_util::future::Either;

use zookeeper_client::{Acl, Acls, CreateMode, Error as ZkError, EventType, SessionState};

pub(crate) use self::entry::{Entry, EntryParts, OwnEvent, PendingCreate, PendingEvent};
pub use self::events::{GiveUpReason, QueueEvent};
pub(crate) use self::events::{Progress, Sink};
pub(crate) use self::rule::{Admission, Decision, FirstN};
pub use self::stats::QueueStats;
use self::stats::{Count, Counters};
use crate::error::{Error, Result};
use crate::naming::{sort_queue, NameScheme, QueueNode};
use crate::path::LockPath;
use crate::session::{Conn, Session};
use crate::util::{on_connection_loss, poll_now, Janitor};

/// How many times a create is retried when its parent vanishes under it (an empty CONTAINER
/// parent is reaped by the server) before we report the error.
const PARENT_RACE_ATTEMPTS: usize = 8;

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
    pub children: Vec<String>,
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
    pub fn sorted(&self, children: &[String]) -> Result<Vec<QueueNode>> {
        let mut queue: Vec<QueueNode> = children.iter().filter_map(|c| self.scheme.parse(c)).collect();
        sort_queue(&mut queue, &self.scheme, self.root.as_str())?;
        Ok(queue)
    }

    /// As [`Queue::sorted`], and `Err(FormatConflict)` if `children` has a node of the other
    /// naming format (`Err(RecipeConflict)` for another recipe's), in one pass: a child that parses as ours is never the other format's (see
    /// [`NameScheme::conflicting`]), so only the others are looked at twice.
    pub fn sorted_without_conflicts(&self, children: &[String]) -> Result<Vec<QueueNode>> {
        let mut queue = Vec::with_capacity(children.len());
        for child in children {
            match self.scheme.parse(child) {
                Some(node) => queue.push(node),
                None => self.refuse_conflict(child)?,
            }
        }
        sort_queue(&mut queue, &self.scheme, self.root.as_str())?;
        Ok(queue)
    }

    /// `Err(FormatConflict)` if `child` is a node of the other naming format,
    /// `Err(RecipeConflict)` if it is a queue node of another kind of recipe: either would
    /// admit beside us. Other foreign children are left alone.
    fn refuse_conflict(&self, child: &str) -> Result<()> {
        match crate::naming::NodeFormat::detect(child) {
            Some(theirs) if theirs != self.scheme.format => Err(Error::FormatConflict {
                path: self.root.to_string(),
                node: child.to_string(),
                ours: self.scheme.format,
                theirs,
            }),
            _ => match self.scheme.other_recipe(child) {
                Some(theirs) => Err(Error::RecipeConflict {
                    path: self.root.to_string(),
                    node: child.to_string(),
                    ours: self.scheme.recipe(),
                    theirs,
                }),
                None => Ok(()),
            },
        }
    }

    /// The session's current connection, waiting while a new session is being started.
    ///
    /// # Errors
    /// [`Error::SessionClosed`] once the session is closed.
    pub async fn conn(&self) -> Result<Conn> {
        self.session.shared().wait_conn().await
    }

    /// Lists the root's children on `conn`'s session.
    pub async fn list_on(&self, conn: &Conn) -> Result<Vec<String>> {
        self.counters.bump(Count::Listing);
        match on_connection_loss(|| conn.client.list_children(self.root.as_str())).await {
            Ok(children) => Ok(children),
            Err(ZkError::NoNode) => Ok(Vec::new()),
            Err(e) => Err(Error::from_zk("list", self.root.as_str(), e)),
        }
    }

    /// How lock parents are created: CONTAINER nodes (reaped by the server once empty) with the
    /// queue's ACLs.
    fn parent_options(&self) -> zookeeper_client::CreateOptions<'_> {
        CreateMode::Container.with_acls(Acls::new(&self.acls))
    }

    async fn make_parents(&self, conn: &Conn) -> Result<()> {
        let options = self.parent_options();
        let root = self.root.as_str();
        let Some(data) = &self.root_data else {
            return on_connection_loss(|| conn.client.mkdir(root, &options))
                .await
                .map_err(Error::zk("create parents", root));
        };
        if let Some(parent) = root.rsplit_once('/').map(|(p, _)| p).filter(|p| !p.is_empty()) {
            on_connection_loss(|| conn.client.mkdir(parent, &options))
                .await
                .map_err(Error::zk("create parents", root))?;
        }
        match on_connection_loss(|| conn.client.create(root, data, &options)).await {
            Ok(_) | Err(ZkError::NodeExists) => Ok(()),
            Err(e) => Err(Error::from_zk("create", root, e)),
        }
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
        match self.root_data_found(conn).await? {
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
        let root = self.root.as_str();
        loop {
            let (data, stat) = match on_connection_loss(|| conn.client.get_data(root)).await {
                Ok(found) => found,
                Err(e) => return Err(Error::from_zk("get", root, e)),
            };
            if data.is_empty() {
                match on_connection_loss(|| conn.client.set_data(root, want, Some(stat.version))).await {
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

    /// Takes a place in the queue: creates our protected EPHEMERAL_SEQUENTIAL node with `marker`
    /// and `data`, creating CONTAINER parents when missing. Returns our entry and a listing of
    /// the root made after our create.
    ///
    /// On a connection loss during the create, recovers the node by its protection prefix and
    /// adopts it only if its owner is this session (protected mode).
    ///
    /// # Cancel safety
    /// Cancel-safe: a drop at any await leaves no node behind (see [`PendingCreate`]).
    pub async fn join(&self, conn: &Conn, marker: &str, data: &[u8]) -> Result<Joined> {
        self.janitor.remember_runtime();
        let client = &conn.client;
        let protection = self.scheme.new_protection();
        // Room for the sequence suffix (at most eleven characters) that names the node.
        let mut node_prefix = String::with_capacity(protection.len() + marker.len() + 11);
        node_prefix.push_str(&protection);
        node_prefix.push_str(marker);
        let create_path = self.root.child(&node_prefix);
        let options = CreateMode::EphemeralSequential.with_acls(Acls::new(&self.acls));
        let pending = PendingCreate::new(conn, &self.root, &protection, &self.janitor);
        let shared = self.session.shared();
        let hint = &shared.guesses.parent_missing;
        // See `session/guess.rs`: the listing's child watch may stand in for the data watch on
        // our node when this session's recent joins found their node alone, or (below) on a
        // guessed fresh path; never when a data watch is needed from the start (revocable
        // locks, the lock delay's release marks) or when the listing must read the root's
        // version (a root that carries data).
        let stand_in =
            self.watch_own && !self.data_watch_only && self.lock_delay.is_none() && self.root_data.is_none();
        let expect_idle = stand_in && shared.guesses.idle.expect();
        let mut parent_races = 0;
        // See `session/guess.rs`. When the parent is probably missing, its create goes out just
        // before ours (and the listing after it): a fresh path costs one round trip and no
        // failed create. A root that must carry data is made by `make_parents` instead, so there our
        // create goes alone first.
        let expect_missing = hint.expect();
        let mut alone = expect_missing && self.root_data.is_some();
        // The parent's create goes out just before ours: on the hint, or after a missing parent.
        let mut parent_first = expect_missing && self.root_data.is_none();
        // Whether this round's parent create came from the hint (its answer teaches the hint).
        let mut guessed = parent_first;
        loop {
            let parent = parent_first.then(|| client.create(self.root.as_str(), &[], &self.parent_options()));
            self.counters.bump(Count::Create);
            let sent = std::time::Instant::now();
            let create = client.create(&create_path, data, &options);
            // Pipelined: sent now, answered after the create. With the root's version too, when
            // the root must carry data (the same packets; see `verify_root`).
            // (The request goes out when the client's method is called, not when its future is
            // first polled: each is called here, outside the `async` block that maps its answer.)
            //
            // On a guessed fresh path or idle lock, the listing carries a child watch that stands
            // in for the data watch on our node (see `own_watch_from_listing`).
            let child_watch = stand_in && (guessed || expect_idle);
            let state = child_watch.then(|| client.state_watcher());
            let listing = (!alone).then(|| match (&self.root_data, child_watch) {
                (None, false) => {
                    let sent = client.list_children(self.root.as_str());
                    Either::Left(Either::Left(
                        async move { sent.await.map(|children| (children, None, None)) },
                    ))
                }
                (None, true) => {
                    let sent = client.list_and_watch_children(self.root.as_str());
                    Either::Left(Either::Right(async move {
                        sent.await.map(|(children, watcher)| (children, None, Some(watcher)))
                    }))
                }
                (Some(_), _) => {
                    let sent = client.get_children(self.root.as_str());
                    Either::Right(async move {
                        let (children, stat) = sent.await?;
                        Ok((children, Some((stat.czxid, stat.mzxid)), None))
                    })
                }
            });
            let mut grandparent_missing = false;
            if let Some(parent) = parent {
                let made = parent.await;
                let was_guessed = std::mem::take(&mut guessed);
                if was_guessed {
                    match &made {
                        Ok(_) => hint.note(true),
                        Err(ZkError::NodeExists) => hint.note(false),
                        Err(_) => {}
                    }
                }
                match made {
                    Ok(_) | Err(ZkError::NodeExists) => {}
                    Err(ZkError::NoNode) => grandparent_missing = true,
                    // Ours fails with it; its own error (or a retry) follows.
                    Err(e) if crate::error::is_connection_loss(&e) => {}
                    // A guess may be wrong in any way (the parent exists, but we may not create
                    // beside it: NoAuth): ours, sent anyway, decides.
                    Err(_) if was_guessed => {}
                    Err(e) => return Err(Error::from_zk("create parents", self.root.as_str(), e)),
                }
            }
            let created = create.await;
            if parent_races == 0 && !parent_first {
                hint.note(matches!(created, Err(ZkError::NoNode)));
            }
            match created {
                Ok((stat, seq)) => {
                    conn.note_contact(sent);
                    let mut name = node_prefix;
                    match i32::try_from(seq.into_i64()) {
                        Ok(seq) => crate::naming::push_sequence_text(&mut name, seq),
                        // Not a sequence of ZooKeeper 3.x; named as the client names it.
                        Err(_) => name.push_str(&seq.to_string()),
                    }
                    let mut entry = Entry::new(
                        conn,
                        &self.root,
                        name,
                        seq_i32(seq.into_i64()),
                        stat.czxid,
                        &self.janitor,
                    );
                    entry.data = data.to_vec();
                    entry.mark = entry::CleanMark::new(self.lock_delay.is_some());
                    pending.disarm();
                    if self.watch_own && !child_watch {
                        // Pipelined, not awaited: the holder's own-node task (or the wait) takes it over.
                        entry.send_own_watch();
                        entry.own.follow = true;
                    }
                    let listed = match listing {
                        Some(listing) => listing.await.ok(),
                        None => None,
                    };
                    let (children, root) = match listed {
                        Some((children, root, watcher)) => {
                            self.counters.bump(Count::Listing);
                            if stand_in {
                                shared.guesses.idle.note(children.len() == 1);
                            }
                            if let (Some(watcher), Some(state)) = (watcher, state) {
                                let (event, check) = entry::own_watch_from_listing(watcher, state);
                                (entry.own.event, entry.own.check) = (Some(event), Some(check));
                                entry.own.follow = true;
                                entry.own.from_listing = true;
                            }
                            (children, root)
                        }
                        None => {
                            if child_watch {
                                // The listing (and its watch) failed: the data watch, then a
                                // listing after it, as on any path.
                                entry.send_own_watch();
                                entry.own.follow = true;
                            }
                            (self.list_on(conn).await?, None)
                        }
                    };
                    return Ok(Joined { entry, children, root });
                }
                Err(ZkError::NoNode) if parent_races < PARENT_RACE_ATTEMPTS => {
                    drop(listing);
                    parent_races += 1;
                    alone = false;
                    if self.root_data.is_some() || grandparent_missing {
                        self.make_parents(conn).await?;
                        parent_first = false;
                    } else {
                        parent_first = true;
                    }
                }
                Err(e) if crate::error::is_connection_loss(&e) => {
                    drop(listing);
                    self.counters.bump(Count::Recovery);
                    let mut found = entry::find_ours(client, &self.root, &protection).await?;
                    if found.is_empty() {
                        tracing::debug!(root = %self.root, "create lost with the connection; creating again");
                        continue;
                    }
                    // More than one can only come from a create that landed late: keep the first.
                    for (extra, _) in found.drain(1..) {
                        conn.delete_quietly(&self.root.child(&extra)).await;
                    }
                    let (name, czxid) = found.remove(0);
                    let seq = self.scheme.parse(&name).map(|n| n.seq).unwrap_or_default();
                    tracing::debug!(node = %name, "recovered our node after a connection loss");
                    let mut entry = Entry::new(conn, &self.root, name, seq, czxid, &self.janitor);
                    entry.data = data.to_vec();
                    entry.mark = entry::CleanMark::new(self.lock_delay.is_some());
                    pending.disarm();
                    if self.watch_own {
                        entry.watch_self().await?;
                        entry.own.follow = true;
                    }
                    let children = self.list_on(conn).await?;
                    return Ok(Joined { entry, children, root: None });
                }
                Err(e) => {
                    // The create failed for sure: nothing to clean up.
                    pending.disarm();
                    return Err(Error::from_zk("create", &create_path, e));
                }
            }
        }
    }

    /// Decides on a listing; `Err(NodeDeleted)` when our node is not in it,
    /// `Err(FormatConflict)` when nodes of the other naming format share the path, and
    /// `Err(SequenceWrapped)` when the path's sequence counter has wrapped (see `sort_queue`).
    pub fn decide(
        &self,
        entry: &Entry,
        rule: &dyn Admission,
        children: &[String],
    ) -> Result<(Vec<QueueNode>, usize, Decision)> {
        let queue = self.sorted_without_conflicts(children)?;
        let me = queue
            .iter()
            .position(|n| n.name == entry.name)
            .ok_or_else(|| Error::NodeDeleted { path: entry.path.clone() })?;
        let decision = rule.decide(&queue, me);
        Ok((queue, me, decision))
    }

    /// Waits until `rule` admits our entry, starting from `children` (a listing made after our
    /// node was created), reporting to `progress` and keeping the lock delay's account there.
    ///
    /// # Cancel safety
    /// Cancel-safe: the entry is borrowed and stays intact; only the watches on the nodes ahead
    /// (or a first waiter's child watch) are dropped.
    pub async fn wait_turn(
        &self,
        entry: &mut Entry,
        rule: &dyn Admission,
        children: Vec<String>,
        progress: &mut Progress<'_>,
    ) -> Result<()> {
        let mut children = children;
        // Per watched node, the latest data change we have accounted for (see `until_any_gone`).
        let mut seen = std::collections::HashMap::new();
        // Watches set in an earlier round that have not fired: kept, not set again.
        let mut armed = Armed::new();
        // A first waiter's child watch on the root, set by its latest listing (see
        // `watch_children`); not fired yet.
        let mut listed: Option<ArmedWatch> = None;
        loop {
            let (watched, decision, report) = {
                let (queue, me, decision) = self.decide(entry, rule, &children)?;
                let watched: Vec<String> = match decision {
                    Decision::Proceed => {
                        tracing::debug!(position = me, "admitted");
                        self.keep_leftovers(entry, &mut armed, listed.take());
                        self.hold_back(entry, progress).await?;
                        return self.admitted(entry, rule, &queue, me).await;
                    }
                    Decision::Wait { on, .. } => {
                        let ahead = rule.lookahead(&queue, me, on).filter(|&a| a < on);
                        let mut watched: Vec<usize> = std::iter::once(on).chain(ahead).collect();
                        // With the lock delay, the first waiter (everyone ahead holds) watches
                        // every holder: any of them vanishing without a clean release must
                        // hold it back, not only the one it waits on (a writer behind several
                        // readers).
                        if self.lock_delay.is_some()
                            && (0..me).all(|i| rule.decide(&queue, i) == Decision::Proceed)
                        {
                            watched.extend((0..me).filter(|i| *i != on && Some(*i) != ahead));
                        }
                        watched.into_iter().map(|i| queue[i].name.clone()).collect()
                    }
                    Decision::WaitAny { upto } => queue[..upto].iter().map(|n| n.name.clone()).collect(),
                };
                tracing::debug!(position = me, watching = watched.len(), "waiting");
                let report = match progress.listening() {
                    true => progress.news(me).map(|first| (first, me, queue[0].name.clone())),
                    false => None,
                };
                (watched, decision, report)
            };
            // A waiter keeps only what it watches: with many waiters in one process, each
            // keeping its listing (and the queue parsed from it) would cost memory quadratic in
            // the queue's length (`tests/memory.rs`).
            drop(std::mem::take(&mut children));
            let then_proceed = matches!(decision, Decision::Wait { then_proceed: true, .. });
            if (then_proceed && entry.own.event.is_none()) || entry.own.from_listing {
                // Sent before the watch on the node ahead: see below. A waiter does not keep the
                // listing's child watch as its own-node watch (it would fire for every join
                // behind, and for the deletion we wait on, each time costing a read): the data
                // watch takes over, and the child watch is kept, unpolled, until that one fires
                // (dropped unfired, it would cost a request to remove it).
                // (Without the child watch, the slot is empty here: nothing to keep.)
                let child = entry.own.event.take();
                entry.send_own_watch();
                if let (Some(child), Some(own)) = (child, entry.own.event.take()) {
                    entry.own.event = Some(Box::pin(async move {
                        let own = own.await;
                        drop(child);
                        own
                    }));
                }
                entry.own.from_listing = false;
            }
            if self.watches_children(decision) {
                children = self.watch_children(entry, &mut listed, report, progress).await?;
                continue;
            }
            let woke = self.until_any_gone(entry, &watched, &mut seen, &mut armed, report, progress).await?;
            // The node ahead was the head at our listing and is gone: nodes created since are
            // behind us, so we are the head now, if our own node still exists (someone may have
            // deleted it in an earlier transaction; then we must not enter). The watch on our
            // own node, set before the one on the node ahead, tells us without a request while
            // it vouches (see `OwnCheck`); else we read our node again.
            // (The node waited on is the first watched; any other is looked at again.)
            if let (Decision::Wait { then_proceed: true, .. }, Woke::Deleted(at @ 0)) = (decision, woke) {
                match entry::fired(&mut entry.own.event) {
                    Some(OwnEvent::Deleted) => return Err(entry.gone()),
                    Some(OwnEvent::Session(state)) => return Err(session_error(state)),
                    None if entry.own.check.as_mut().is_some_and(|check| check.vouches()) => {
                        tracing::debug!("node ahead was the head: admitted without a request");
                    }
                    // The data changed (a revocation request?), the watch could not be set, or
                    // the connection changed since: read our node again, and watch it again.
                    Some(OwnEvent::Changed) | None => {
                        self.counters.bump(Count::OwnReread);
                        entry.watch_self().await?;
                        tracing::debug!("node ahead was the head: admitted once our node was read");
                    }
                }
                self.counters.bump(Count::RelistSaved);
                if let Some(delay) = self.lock_delay {
                    progress.vanished_unclean(delay, &watched[at]);
                    entry.mark.hold_back(delay);
                }
                self.keep_leftovers(entry, &mut armed, listed.take());
                return self.hold_back(entry, progress).await;
            }
            children = self.list_on(&entry.conn).await?;
            if let Some(delay) = self.lock_delay {
                // A watched node that is gone left cleanly if its watch saw a data change (a
                // clean release is a data change and a delete in one transaction: see
                // `Conn::send_delete`), and not if it saw a deletion. ZooKeeper delivers a
                // watch's event before the reply to a later request that shows the change, so
                // by now its watch has fired, unless it was not set in time (the node was gone
                // before it): that counts as unclean.
                for (i, name) in watched.iter().enumerate() {
                    if children.contains(name) {
                        continue;
                    }
                    let clean = match armed.remove(name).and_then(|mut watch| poll_now(watch.as_mut())) {
                        Some(event) => event.event_type == EventType::NodeDataChanged,
                        None => woke == Woke::Changed(Some(i)),
                    };
                    if !clean {
                        progress.vanished_unclean(delay, name);
                        entry.mark.hold_back(delay);
                    }
                }
            }
        }
    }

    /// Once admitted: the watches that have not fired (on nodes ahead, or a first waiter's child
    /// watch on the root, `listed`) are kept until they fire, by the session. Dropped, each
    /// would cost a request to remove it; kept, its one event.
    fn keep_leftovers(&self, entry: &Entry, armed: &mut Armed, listed: Option<ArmedWatch>) {
        let mut leftovers: Vec<_> =
            armed.drain().map(|(name, watch)| (self.root.child(&name), watch)).collect();
        leftovers.extend(listed.map(|watch| (self.root.as_str().to_string(), watch)));
        entry.conn.keep_until_fired(leftovers);
    }

    /// Whether a waiter under `decision` waits on a child watch on the root (see
    /// [`Queue::watch_children`]) rather than a data watch on each node it waits for: a first
    /// waiter that any of several holders may admit, when no lock delay needs to know how each
    /// one left (a clean release is a data change: see `wait_turn`).
    fn watches_children(&self, decision: Decision) -> bool {
        matches!(decision, Decision::WaitAny { upto } if upto >= 2) && self.lock_delay.is_none()
    }

    /// A first waiter that any of several holders may admit (a semaphore's) waits for a change
    /// of the root's children, and lists them again with a new child watch: one listing per
    /// change, where a data watch on every holder costs a request per holder and leaves the
    /// others' to remove or to fire. Any change wakes it, a join behind it or a waiter giving up
    /// included: a notification and a listing each. The first time (`listed` empty: the last listing set no
    /// watch), it lists at once. Only the first waiter watches the children: a change notifies
    /// it, and at most the waiters admitted since the last change, whose watches are kept until
    /// they fire (no herd). A listing and its watch are one step on the server: no change
    /// after it is missed. (A watch set by an earlier listing than the one decided on fires for
    /// changes that listing shows already: one listing more, nothing missed.)
    ///
    /// # Cancel safety
    /// Cancel-safe: the entry stays intact; the child watch is dropped (removed).
    async fn watch_children(
        &self,
        entry: &mut Entry,
        listed: &mut Option<ArmedWatch>,
        report: Option<(bool, usize, String)>,
        progress: &mut Progress<'_>,
    ) -> Result<Vec<String>> {
        if let Some(watch) = listed.take() {
            if let Some((first, ahead, head)) = report {
                let holder = entry.conn.client.get_data(&self.root.child(&head)).await.ok();
                let holder = holder.map(|(data, _)| crate::naming::split_data(&data).0);
                // Reported once we watch: whatever the caller does on hearing it, we will see.
                self.report_wait(&entry.name, progress, (first, ahead), holder, &head);
            }
            let event = while_ours_stands(entry, watch).await?;
            if event.event_type == EventType::Session {
                return Err(session_error(event.session_state));
            }
            self.counters.bump(Count::Wakeup);
        }
        self.list_watching(entry, listed).await
    }

    /// Lists the root's children with a child watch, kept in `listed` (see
    /// [`Queue::watch_children`]).
    async fn list_watching(&self, entry: &mut Entry, listed: &mut Option<ArmedWatch>) -> Result<Vec<String>> {
        self.counters.bump(Count::Listing);
        let client = entry.conn.client.clone();
        match on_connection_loss(|| client.list_and_watch_children(self.root.as_str())).await {
            Ok((children, watcher)) => {
                *listed = Some(Box::pin(watcher.changed()));
                Ok(children)
            }
            Err(ZkError::NoNode) => Ok(Vec::new()),
            Err(e) => Err(Error::from_zk("list", self.root.as_str(), e)),
        }
    }

    /// Reports a wait with `ahead` nodes in front of ours (`Queued` when `first`, else
    /// `MovedUp`), with the participant id of the head of the queue.
    fn report_wait(
        &self,
        node: &str,
        progress: &mut Progress<'_>,
        (first, ahead): (bool, usize),
        holder: Option<String>,
        watching: &str,
    ) {
        let watching = watching.to_string();
        progress.reported(ahead);
        progress.emit(if first {
            QueueEvent::Queued { node: node.to_string(), ahead, watching, holder }
        } else {
            QueueEvent::MovedUp { ahead, watching, holder }
        });
    }

    /// The lock delay: when a node ahead of ours vanished without a clean release, waits out
    /// the rest of the delay before entering, still watching our own node (its deletion, or
    /// the session's end, is an error as in any wait).
    async fn hold_back(&self, entry: &mut Entry, progress: &mut Progress<'_>) -> Result<()> {
        let Some((until, vanished)) = progress.delay() else { return Ok(()) };
        let wait = until.saturating_duration_since(std::time::Instant::now());
        tracing::info!(
            vanished,
            wait_ms = wait.as_millis() as u64,
            "lock delay: a node ahead vanished without a clean release"
        );
        let event = QueueEvent::LockDelay { wait, vanished: vanished.to_string() };
        progress.delayed(wait);
        progress.emit(event);
        if entry.own.event.is_none() {
            // Without it, neither our node's deletion nor the session's end (a close, an
            // expiry: both delete our node) would end the wait.
            entry.watch_self().await?;
        }
        while_ours_stands(entry, tokio::time::sleep_until(until.into())).await
    }

    /// Tells waiters behind us that we were admitted, when the rule asks for it.
    pub async fn admitted(
        &self,
        entry: &mut Entry,
        rule: &dyn Admission,
        queue: &[QueueNode],
        me: usize,
    ) -> Result<()> {
        if rule.announce_admission(queue, me) {
            let (client, path, data) = (entry.conn.client.clone(), entry.path.clone(), entry.data.clone());
            match on_connection_loss(|| client.set_data(&path, &data, None)).await {
                Ok(_) => {}
                Err(ZkError::NoNode) => return Err(Error::NodeDeleted { path }),
                Err(e) => return Err(Error::from_zk("announce", &path, e)),
            }
        }
        Ok(())
    }

    /// Waits until one of the nodes named `names` is deleted (or its data changes), while
    /// watching our own node too; reports the wait (`report`: first of its attempt, how many
    /// ahead, the head's name) once the watches are set.
    ///
    /// A change made between our listing and our watch would be missed by the watch, so a node
    /// whose data changed after our node was created (and after the last change we already
    /// looked again for, kept in `seen`) wakes us at once.
    async fn until_any_gone(
        &self,
        entry: &mut Entry,
        names: &[String],
        seen: &mut std::collections::HashMap<String, i64>,
        armed: &mut Armed,
        report: Option<(bool, usize, String)>,
        progress: &mut Progress<'_>,
    ) -> Result<Woke> {
        let client = entry.conn.client.clone();
        // A watch we no longer need is dropped (removed); one we still need is kept as it is:
        // it has seen every change since it was set.
        armed.retain(|name, _| names.contains(name));
        let paths: Vec<String> = names.iter().map(|n| self.root.child(n)).collect();
        // Sent back to back, answered in order.
        let requests: Vec<_> = names
            .iter()
            .zip(&paths)
            .map(|(name, path)| (!armed.contains_key(name)).then(|| client.get_and_watch_data(path)))
            .collect();
        // The head's participant id, for a report: read behind the watches.
        let head = report.as_ref().map(|(_, _, head)| client.get_data(&self.root.child(head)));
        let mut changed = false;
        for (at, (request, path)) in requests.into_iter().zip(&paths).enumerate() {
            let Some(request) = request else { continue };
            match request.await {
                Ok((_, stat, watcher)) => {
                    let accounted = seen.get(path).copied().unwrap_or(entry.czxid);
                    if stat.mzxid > stat.czxid && stat.mzxid > accounted {
                        seen.insert(path.clone(), stat.mzxid);
                        changed = true;
                    }
                    armed.insert(names[at].clone(), Box::pin(watcher.changed()));
                }
                Err(ZkError::NoNode) => return Ok(Woke::Deleted(at)),
                Err(e) if crate::error::is_connection_loss(&e) => {
                    // Watches are re-armed by looking again once the client is back.
                    return Ok(Woke::Changed(None));
                }
                Err(e) => return Err(Error::from_zk("watch", path, e)),
            }
        }
        if let (Some((first, ahead, _)), Some(head)) = (report, head) {
            let holder = head.await.ok().map(|(data, _)| crate::naming::split_data(&data).0);
            // Reported once we watch: whatever the caller does on hearing it, we will see.
            self.report_wait(&entry.name, progress, (first, ahead), holder, &names[0]);
        }
        if changed {
            return Ok(Woke::Changed(None));
        }
        let any = std::future::poll_fn(|cx| {
            for (at, name) in names.iter().enumerate() {
                let Some(watcher) = armed.get_mut(name) else { continue };
                if let std::task::Poll::Ready(event) = std::future::Future::poll(watcher.as_mut(), cx) {
                    // Fired: it is spent.
                    armed.remove(name);
                    return std::task::Poll::Ready((at, event));
                }
            }
            std::task::Poll::Pending
        });
        let (at, event) = while_ours_stands(entry, any).await?;
        match event.event_type {
            EventType::NodeDeleted => {
                self.counters.bump(Count::Wakeup);
                Ok(Woke::Deleted(at))
            }
            EventType::Session => Err(session_error(event.session_state)),
            // Its data changed (a waiter ahead was admitted, a revocation request, or a clean
            // release with the lock delay on): look again.
            _ => Ok(Woke::Changed(Some(at))),
        }
    }
}

/// A watch set on a node ahead, still to fire.
type ArmedWatch = std::pin::Pin<Box<dyn std::future::Future<Output = zookeeper_client::WatchedEvent> + Send>>;

/// A waiter's watches still to fire, by node name.
type Armed = std::collections::HashMap<String, ArmedWatch>;

/// Why a waiter woke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Woke {
    /// The watched node at this index was deleted (or was gone when we went to watch it).
    Deleted(usize),
    /// The data of the watched node at this index changed; `None`: a change seen otherwise,
    /// or the watch could not be set. Look again.
    Changed(Option<usize>),
}

/// Runs `fut` while our own node stands: its deletion or the session's end ends the wait with
/// an error, a change of its data re-arms the watch (noting a revocation request). Our own
/// node's event is looked at first: when both have fired, it came first (see `wait_turn`).
async fn while_ours_stands<F: std::future::Future>(entry: &mut Entry, fut: F) -> Result<F::Output> {
    tokio::pin!(fut);
    loop {
        tokio::select! {
            biased;
            event = own_event(&mut entry.own.event) => match event {
                OwnEvent::Deleted => return Err(entry.gone()),
                OwnEvent::Session(state) => return Err(session_error(state)),
                OwnEvent::Changed => entry.watch_self().await?,
            },
            out = &mut fut => return Ok(out),
        }
    }
}

/// Awaits the own-node watch event, if one is armed; clears the slot once it fires.
pub(crate) async fn own_event(slot: &mut Option<PendingEvent>) -> OwnEvent {
    match slot {
        Some(event) => {
            let fired = event.as_mut().await;
            *slot = None;
            fired
        }
        None => std::future::pending().await,
    }
}

/// The default ACLs (anyone may do anything), shared by every queue that does not set its own.
fn anyone_all() -> Arc<[Acl]> {
    static ANYONE_ALL: std::sync::OnceLock<Arc<[Acl]>> = std::sync::OnceLock::new();
    ANYONE_ALL.get_or_init(|| Arc::from(Acls::anyone_all().to_vec())).clone()
}

/// ZooKeeper's sequence is an `i32` (the client widens it to `i64`).
fn seq_i32(seq: i64) -> i32 {
    seq as i32
}
