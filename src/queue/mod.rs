//! The queue engine every recipe shares.
//!
//! Contenders take a place in a queue of EPHEMERAL_SEQUENTIAL nodes under a root, wait their turn
//! by watching a single node ahead of them, and leave cleanly. A recipe adds only its
//! [`Admission`] rule: who may proceed, and whom a waiter watches.
//!
//! Costs, per acquisition:
//! * the create and the first listing are pipelined (sent back to back; ZooKeeper answers a
//!   session's requests in order, so the listing includes our node): one round trip;
//! * the data watch on our own node (to learn of deletion by someone else, or of a revocation
//!   request) is sent as soon as the create returns, without waiting for it;
//! * a waiter watches one node with a data watch, never the parent's children (no herd);
//! * when the watched node was at the head of the queue at our last listing, its deletion makes
//!   us the head (sequence numbers only grow), so we proceed without listing again.

mod entry;
mod janitor;
pub(crate) mod retry;
mod stats;

use std::sync::Arc;

use zookeeper_client::{Acl, Acls, Client, CreateMode, Error as ZkError, EventType, SessionState};

pub(crate) use self::entry::{delete_quietly, Entry, PendingCreate, PendingEvent};
pub(crate) use self::janitor::Janitor;
pub use self::stats::QueueStats;
use self::stats::{Count, Counters};
use crate::error::{Error, Result};
use crate::naming::{sort_queue, NameScheme, QueueNode};
use crate::path::LockPath;

/// How many times a create is retried when its parent vanishes under it (an empty CONTAINER
/// parent is reaped by the server) before we report the error.
const PARENT_RACE_ATTEMPTS: usize = 8;

/// What a recipe's rule says about one contender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// It may proceed now.
    Proceed,
    /// It must wait until the node at index `on` is gone. `then_proceed` is true when that
    /// node's deletion alone admits it (so no new listing is needed).
    Wait { on: usize, then_proceed: bool },
}

/// A recipe's rule for who may proceed.
pub(crate) trait Admission: Send + Sync {
    /// `queue` is in creation order; `me` is the contender's index in it.
    fn decide(&self, queue: &[QueueNode], me: usize) -> Decision;
}

/// The first `n` in the queue proceed; the others wait on the node `n` places ahead. A mutex and a
/// leader latch are `FirstN(1)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FirstN(pub usize);

impl Admission for FirstN {
    fn decide(&self, _queue: &[QueueNode], me: usize) -> Decision {
        if me < self.0 {
            Decision::Proceed
        } else {
            Decision::Wait { on: me - self.0, then_proceed: me == self.0 }
        }
    }
}

/// A queue under a root path.
#[derive(Clone)]
pub(crate) struct Queue {
    pub client: Client,
    pub root: LockPath,
    pub scheme: NameScheme,
    pub acls: Arc<[Acl]>,
    pub janitor: Janitor,
    pub counters: Arc<Counters>,
}

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
    pub fn new(client: Client, root: LockPath, scheme: NameScheme) -> Queue {
        Queue {
            client,
            root,
            scheme,
            acls: Arc::from(Acls::anyone_all().to_vec()),
            janitor: Janitor::default(),
            counters: Arc::default(),
        }
    }

    /// Uses `acls` (when given) for every node the queue creates, parents included.
    pub fn with_acls(mut self, acls: Option<Arc<[Acl]>>) -> Queue {
        if let Some(acls) = acls {
            self.acls = acls;
        }
        self
    }

    /// Our queue, parsed and in the order Curator and kazoo compute (which is creation order, or
    /// `Err(SequenceWrapped)`); foreign children are left out.
    pub fn sorted(&self, children: &[String]) -> Result<Vec<QueueNode>> {
        let mut queue: Vec<QueueNode> = children.iter().filter_map(|c| self.scheme.parse(c)).collect();
        sort_queue(&mut queue, &self.scheme, self.root.as_str())?;
        Ok(queue)
    }

    /// `Err(FormatConflict)` if `children` has a node of the other naming format.
    pub fn refuse_conflicts(&self, children: &[String]) -> Result<()> {
        match self.scheme.conflicting(children) {
            Some(node) => Err(Error::FormatConflict {
                path: self.root.to_string(),
                node: node.clone(),
                ours: self.scheme.format,
                theirs: crate::naming::NodeFormat::detect(node).unwrap_or_default(),
            }),
            None => Ok(()),
        }
    }

    /// Lists the root's children; a missing root is an empty queue.
    pub async fn list(&self) -> Result<Vec<String>> {
        self.counters.bump(Count::Listing);
        match retry::on_connection_loss(|| self.client.list_children(self.root.as_str())).await {
            Ok(children) => Ok(children),
            Err(ZkError::NoNode) => Ok(Vec::new()),
            Err(e) => Err(Error::from_zk("list", self.root.as_str(), e)),
        }
    }

    async fn make_parents(&self) -> Result<()> {
        let options = CreateMode::Container.with_acls(Acls::new(&self.acls));
        retry::on_connection_loss(|| self.client.mkdir(self.root.as_str(), &options))
            .await
            .map_err(Error::zk("create parents", self.root.as_str()))
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
    pub async fn join(&self, marker: &str, data: &[u8]) -> Result<(Entry, Vec<String>)> {
        self.janitor.remember_runtime();
        let protection = self.scheme.new_protection();
        let node_prefix = format!("{protection}{marker}");
        let create_path = self.root.child(&node_prefix);
        let options = CreateMode::EphemeralSequential.with_acls(Acls::new(&self.acls));
        let pending = PendingCreate::new(&self.client, &self.root, &protection, &self.janitor);
        let mut parent_races = 0;
        loop {
            self.counters.bump(Count::Create);
            self.counters.bump(Count::Listing);
            let create = self.client.create(&create_path, data, &options);
            // Pipelined: sent now, answered after the create.
            let listing = self.client.list_children(self.root.as_str());
            match create.await {
                Ok((stat, seq)) => {
                    let mut entry = Entry::new(
                        &self.client,
                        &self.root,
                        format!("{node_prefix}{seq}"),
                        seq_i32(seq.into_i64()),
                        stat.czxid,
                        &self.janitor,
                    );
                    pending.disarm();
                    let own = self.client.get_and_watch_data(&entry.path);
                    let children = match listing.await {
                        Ok(children) => children,
                        Err(_) => self.list().await?,
                    };
                    match own.await {
                        Ok((_, _, watcher)) => entry.own_event = Some(Box::pin(watcher.changed())),
                        Err(ZkError::NoNode) => return Err(entry.gone()),
                        Err(_) => entry.watch_self().await?,
                    }
                    return Ok((entry, children));
                }
                Err(ZkError::NoNode) if parent_races < PARENT_RACE_ATTEMPTS => {
                    drop(listing);
                    parent_races += 1;
                    self.make_parents().await?;
                }
                Err(e) if crate::error::is_connection_loss(&e) => {
                    drop(listing);
                    self.counters.bump(Count::Recovery);
                    let mut found = entry::find_ours(&self.client, &self.root, &protection).await?;
                    if found.is_empty() {
                        tracing::debug!(root = %self.root, "create lost with the connection; creating again");
                        continue;
                    }
                    // More than one can only come from a create that landed late: keep the first.
                    for (extra, _) in found.drain(1..) {
                        delete_quietly(&self.client, &self.root.child(&extra)).await;
                    }
                    let (name, czxid) = found.remove(0);
                    let seq = self.scheme.parse(&name).map(|n| n.seq).unwrap_or_default();
                    tracing::debug!(node = %name, "recovered our node after a connection loss");
                    let mut entry = Entry::new(&self.client, &self.root, name, seq, czxid, &self.janitor);
                    pending.disarm();
                    entry.watch_self().await?;
                    let children = self.list().await?;
                    return Ok((entry, children));
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
        self.refuse_conflicts(children)?;
        let queue = self.sorted(children)?;
        let me = queue
            .iter()
            .position(|n| n.name == entry.name)
            .ok_or_else(|| Error::NodeDeleted { path: entry.path.clone() })?;
        let decision = rule.decide(&queue, me);
        Ok((queue, me, decision))
    }

    /// Waits until `rule` admits our entry, starting from `children` (a listing made after our
    /// node was created).
    ///
    /// # Cancel safety
    /// Cancel-safe: the entry is borrowed and stays intact; only the watch on the node ahead is
    /// dropped.
    pub async fn wait_turn(
        &self,
        entry: &mut Entry,
        rule: &dyn Admission,
        children: Vec<String>,
    ) -> Result<()> {
        let mut children = children;
        loop {
            let (queue, me, decision) = self.decide(entry, rule, &children)?;
            let Decision::Wait { on, then_proceed } = decision else {
                tracing::debug!(position = me, "admitted");
                return Ok(());
            };
            let ahead = self.root.child(&queue[on].name);
            tracing::debug!(position = me, watching = %queue[on].name, "waiting");
            self.until_gone(entry, &ahead).await?;
            if then_proceed {
                self.counters.bump(Count::RelistSaved);
                tracing::debug!("node ahead was the head: admitted without listing again");
                return Ok(());
            }
            children = self.list().await?;
        }
    }

    /// Waits until the node at `path` is deleted, while watching our own node too.
    async fn until_gone(&self, entry: &mut Entry, path: &str) -> Result<()> {
        loop {
            let watcher = match retry::on_connection_loss(|| self.client.get_and_watch_data(path)).await {
                Ok((_, _, watcher)) => watcher,
                Err(ZkError::NoNode) => return Ok(()),
                Err(e) => return Err(Error::from_zk("watch", path, e)),
            };
            let ahead = watcher.changed();
            tokio::pin!(ahead);
            loop {
                tokio::select! {
                    event = &mut ahead => match event.event_type {
                        EventType::NodeDeleted => {
                            self.counters.bump(Count::Wakeup);
                            return Ok(());
                        }
                        EventType::Session => return Err(session_error(event.session_state)),
                        // Its data changed (a revocation request, say): watch it again.
                        _ => break,
                    },
                    event = own_event(&mut entry.own_event) => match event.event_type {
                        EventType::NodeDeleted => return Err(entry.gone()),
                        EventType::Session => return Err(session_error(event.session_state)),
                        _ => entry.watch_self().await?,
                    },
                }
            }
        }
    }
}

/// Awaits the own-node watch event, if one is armed; clears the slot once it fires.
pub(crate) async fn own_event(slot: &mut Option<PendingEvent>) -> zookeeper_client::WatchedEvent {
    match slot {
        Some(event) => {
            let fired = event.as_mut().await;
            *slot = None;
            fired
        }
        None => std::future::pending().await,
    }
}

/// ZooKeeper's sequence is an `i32` (the client widens it to `i64`).
fn seq_i32(seq: i64) -> i32 {
    seq as i32
}
