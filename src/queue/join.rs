//! Taking a place in the queue (`Queue::join`) and deciding on a listing (`Queue::decide`).

use futures_util::future::Either;
use zookeeper_client::{Acls, CreateMode, Error as ZkError};

use super::entry::{self, Entry, PendingCreate};
use super::rule::{Admission, Decision};
use super::stats::Count;
use super::{decide_on, Joined, Queue};
use crate::error::{Error, Result};
use crate::naming::QueueNode;
use crate::session::Conn;

/// How many times a create is retried when its parent vanishes under it (an empty CONTAINER
/// parent is reaped by the server) before we report the error.
const PARENT_RACE_ATTEMPTS: usize = 8;

impl Queue {
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
                    entry.mark = entry::CleanMark::new(self.lock_delay.is_some(), self.tombstones());
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
                                let (event, check, alone) = entry::own_watch_from_listing(watcher, state);
                                (entry.own.event, entry.own.check) = (Some(event), Some(check));
                                entry.own.alone = Some(alone);
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
                    entry.mark = entry::CleanMark::new(self.lock_delay.is_some(), self.tombstones());
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

    /// Decides on a listing for our entry (see [`decide_on`]).
    pub fn decide(
        &self,
        entry: &Entry,
        rule: &dyn Admission,
        children: &[String],
    ) -> Result<(Vec<QueueNode>, usize, Decision)> {
        decide_on(&self.scheme, &self.root, rule, &entry.name, children)
    }
}

/// ZooKeeper's sequence is an `i32` (the client widens it to `i64`).
fn seq_i32(seq: i64) -> i32 {
    seq as i32
}
