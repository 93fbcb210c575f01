//! Taking a place in the queue (`Queue::join`) and deciding on a listing (`Queue::decide`).

use std::future::Future;
use std::sync::Arc;

use futures_util::future::Either;
use zookeeper_client::Error as ZkError;

use super::entry::{self, Entry, PendingCreate};
use super::plan::{JoinInputs, JoinPlan, Listing, ParentCreate};
use super::rule::{Admission, Decision};
use super::sender::{Created, Listed, NotCreated, Sender, ZkResult};
use super::stats::Count;
use super::{decide_on, Joined, Queue};
use crate::error::{Error, Result};
use crate::naming::QueueNode;
use crate::session::{Behind, Conn};

/// How many times a create is retried when its parent vanishes under it (an empty CONTAINER
/// parent is reaped by the server) before we report the error.
const PARENT_RACE_ATTEMPTS: usize = 8;

impl Queue {
    /// Takes a place in the queue: creates our protected EPHEMERAL_SEQUENTIAL node with `marker`
    /// and `data`, creating CONTAINER parents when missing. Returns our entry and a listing of
    /// the root made after our create.
    ///
    /// Each round is planned first ([`JoinPlan`]: which requests, from the options and the
    /// session's guesses), then sent (`Sender::join_round`) and its answers read; a missing
    /// parent or a lost create plans the next round.
    ///
    /// On a connection loss during the create, recovers the node by its protection prefix and
    /// adopts it only if its owner is this session (protected mode).
    ///
    /// # Cancel safety
    /// Cancel-safe: a drop at any await leaves no node behind (see [`PendingCreate`]).
    pub async fn join(&self, conn: &Conn, marker: &str, data: &Arc<[u8]>) -> Result<Joined> {
        self.janitor.remember_runtime();
        let protection = self.scheme.new_protection();
        // Room for the sequence suffix (at most eleven characters) that names the node.
        let mut node_prefix = String::with_capacity(protection.len() + marker.len() + 11);
        node_prefix.push_str(&protection);
        node_prefix.push_str(marker);
        let create_path = self.root.child(&node_prefix);
        let pending = PendingCreate::new(conn, &self.root, &protection, &self.janitor);
        let mut plan = JoinPlan::first(self.join_inputs(conn));
        let mut parent_races = 0;
        loop {
            if plan.make_parents {
                self.sender(conn).make_parents(&self.acls, self.root_data.as_deref()).await?;
            }
            self.counters.bump(Count::Create);
            let sent = self.sender(conn).join_round(&plan, &create_path, data, &self.acls);
            let grandparent_missing = self.parent_answer(sent.parent, &plan).await?;
            let created = sent.create.await;
            self.teach_parent_guess(&plan, &created);
            match created {
                Ok((stat, seq, behind)) => {
                    pending.disarm();
                    let entry = self.entry_created(conn, node_prefix, (stat.czxid, seq), data);
                    // The listing that came with our create's batch; or ours, pipelined behind
                    // our create; or, when ours was not sent or went out before our create did
                    // (sent again after another create failed its batch), one sent now.
                    let listing = match (behind, sent.listing_after) {
                        (Behind::Listing(shared), _) => Some(Either::Left(Sender::shared_listing(shared))),
                        (Behind::Resent, _) | (Behind::Caller, true) => {
                            self.sender(conn).listing(&plan).map(|l| Either::Right(Either::Left(l)))
                        }
                        (Behind::Caller, false) => sent.listing.map(|l| Either::Right(Either::Right(l))),
                    };
                    return self.listed(conn, entry, &plan, listing).await;
                }
                Err(NotCreated::Parent(e)) if parent_races < PARENT_RACE_ATTEMPTS => {
                    // Nothing of the `multi` landed; its listing may have set a child watch on
                    // a parent that was there, which our next create fires.
                    self.keep_listings_watch(conn, sent.listing).await;
                    parent_races += 1;
                    plan = plan.after_parent_failed(matches!(e, ZkError::NoNode));
                }
                Err(NotCreated::Ours(ZkError::NoNode)) if parent_races < PARENT_RACE_ATTEMPTS => {
                    parent_races += 1;
                    plan = plan.after_missing_parent(grandparent_missing);
                }
                Err(NotCreated::Ours(e)) if crate::error::is_connection_loss(&e) => {
                    drop(sent.listing);
                    if let Some(joined) = self.recover(conn, &protection, &plan, data).await? {
                        pending.disarm();
                        return Ok(joined);
                    }
                    tracing::debug!(root = %self.root, "create lost with the connection; creating again");
                    plan = plan.after_lost_create();
                }
                Err(NotCreated::Ours(e) | NotCreated::Parent(e)) => {
                    // The create failed for sure: nothing to clean up.
                    pending.disarm();
                    return Err(Error::from_zk("create", &create_path, e));
                }
            }
        }
    }

    /// What a round's create teaches the session's guess that parents are missing: ours, when
    /// no guess sent the parent's; the `multi` that sent the parent's with ours, when it made
    /// the parent or found it there.
    fn teach_parent_guess(&self, plan: &JoinPlan, created: &Created) {
        let guess = &self.session.shared().guesses.parent_missing;
        if plan.teaches_parent_guess {
            guess.note(matches!(created, Err(NotCreated::Ours(ZkError::NoNode))));
        } else if plan.parent == ParentCreate::WithOurs {
            match created {
                Ok(_) => guess.note(true),
                Err(NotCreated::Parent(ZkError::NodeExists)) => guess.note(false),
                Err(_) => {}
            }
        }
    }

    /// Hands a listing's child watch, if it set one, to the session to keep until it fires
    /// (dropped unfired, the client would remove it with a request of its own).
    async fn keep_listings_watch(
        &self,
        conn: &Conn,
        listing: Option<impl Future<Output = ZkResult<Listed>>>,
    ) {
        let Some(listing) = listing else { return };
        if let Ok(Listed { watch: Some((watcher, _)), .. }) = listing.await {
            conn.keep_until_fired(vec![(self.root.as_str().to_string(), watcher.changed())]);
        }
    }

    /// What decides a join's first plan: this queue's options, and the session's guesses.
    fn join_inputs(&self, conn: &Conn) -> JoinInputs {
        let guesses = &self.session.shared().guesses;
        // See `session/guess.rs`: never when a data watch is needed from the start (revocable
        // locks, the lock delay's release marks) or when the listing must read the root's
        // version (a root that carries data).
        let stand_in =
            self.watch_own && !self.data_watch_only && self.lock_delay.is_none() && self.root_data.is_none();
        JoinInputs {
            watch_own: self.watch_own,
            stand_in,
            root_data: self.root_data.is_some(),
            parent_missing: guesses.parent_missing.expect(),
            together: conn.creates_together(),
            idle: stand_in && guesses.idle.expect(),
        }
    }

    /// Reads the answer to the parent's create, if the plan sent one: whether the parent's own
    /// parent is missing. A guessed create's answer teaches the guess.
    ///
    /// # Errors
    /// The parent create's error when it was not a guess and ours cannot decide.
    async fn parent_answer<T>(
        &self,
        parent: Option<impl Future<Output = ZkResult<T>>>,
        plan: &JoinPlan,
    ) -> Result<bool> {
        let Some(parent) = parent else { return Ok(false) };
        let made = parent.await;
        let guessed = plan.parent == ParentCreate::Guessed;
        if guessed {
            match &made {
                Ok(_) => self.session.shared().guesses.parent_missing.note(true),
                Err(ZkError::NodeExists) => self.session.shared().guesses.parent_missing.note(false),
                Err(_) => {}
            }
        }
        match made {
            Ok(_) | Err(ZkError::NodeExists) => Ok(false),
            Err(ZkError::NoNode) => Ok(true),
            // Ours fails with it; its own error (or a retry) follows.
            Err(e) if crate::error::is_connection_loss(&e) => Ok(false),
            // A guess may be wrong in any way (the parent exists, but we may not create beside
            // it: NoAuth): ours, sent anyway, decides.
            Err(_) if guessed => Ok(false),
            Err(e) => Err(Error::from_zk("create parents", self.root.as_str(), e)),
        }
    }

    /// Our entry, once our create returned `(czxid, sequence)`: named by the sequence.
    fn entry_created(
        &self,
        conn: &Conn,
        prefix: String,
        (czxid, seq): (i64, i64),
        data: &Arc<[u8]>,
    ) -> Entry {
        let mut name = prefix;
        match i32::try_from(seq) {
            Ok(seq) => crate::naming::push_sequence_text(&mut name, seq),
            // Not a sequence of ZooKeeper 3.x; named as the client names it.
            Err(_) => name.push_str(&seq.to_string()),
        }
        self.entry(conn, &name, seq_i32(seq), czxid, data)
    }

    /// An entry for our node `name`, carrying `data` and the queue's release marks.
    fn entry(&self, conn: &Conn, name: &str, seq: i32, czxid: i64, data: &Arc<[u8]>) -> Entry {
        let leaving = entry::Leaving::new(self.lock_delay.is_some(), self.tombstones());
        Entry::new(conn, &self.root, (name, seq, czxid), data, leaving, &self.janitor)
    }

    /// Reads the round's listing into the outcome, once our node is in. The data watch on our
    /// node goes first when the plan sends it (pipelined, not awaited: the holder's own-node
    /// task, or the wait, takes it over); else the listing's child watch stands in for it.
    /// Without the pipelined listing (none planned, or it failed), lists again.
    async fn listed(
        &self,
        conn: &Conn,
        mut entry: Entry,
        plan: &JoinPlan,
        listing: Option<impl Future<Output = ZkResult<Listed>>>,
    ) -> Result<Joined> {
        if plan.sends_data_watch() {
            entry.send_own_watch();
            entry.follow_own_watch();
        }
        let listed = match listing {
            Some(listing) => listing.await.ok(),
            None => None,
        };
        let Some(Listed { children, root, watch }) = listed else {
            if plan.listing == Listing::ChildWatch {
                // The listing (and its watch) failed: the data watch, then a listing after it,
                // as on any path.
                entry.send_own_watch();
                entry.follow_own_watch();
            }
            return Ok(Joined { children: self.list_on(conn).await?, entry, root: None });
        };
        self.counters.bump(Count::Listing);
        if plan.teaches_idle_guess() {
            self.session.shared().guesses.idle.note(children.len() == 1);
        }
        if let Some((watcher, state)) = watch {
            entry.watch_own_from_listing(watcher, state);
            entry.follow_own_watch();
        }
        Ok(Joined { entry, children, root })
    }

    /// After our create was lost with the connection: our node if it landed (found by its
    /// protection prefix, this session's), watched and with a listing; `None` if it did not.
    async fn recover(
        &self,
        conn: &Conn,
        protection: &str,
        plan: &JoinPlan,
        data: &Arc<[u8]>,
    ) -> Result<Option<Joined>> {
        self.counters.bump(Count::Recovery);
        let sender = self.sender(conn);
        let mut found = sender.find_ours(protection).await?;
        if found.is_empty() {
            return Ok(None);
        }
        // More than one can only come from a create that landed late: keep the first.
        for (extra, _) in found.drain(1..) {
            sender.delete_quietly(&self.root.child(&extra)).await;
        }
        let (name, czxid) = found.remove(0);
        let seq = self.scheme.parse(&name).map(|n| n.seq).unwrap_or_default();
        tracing::debug!(node = %name, "recovered our node after a connection loss");
        let mut entry = self.entry(conn, &name, seq, czxid, data);
        if plan.watches_own() {
            entry.watch_self().await?;
            entry.follow_own_watch();
        }
        let children = self.list_on(conn).await?;
        Ok(Some(Joined { entry, children, root: None }))
    }

    /// Decides on a listing for our entry (see [`decide_on`]).
    pub fn decide<'a>(
        &self,
        entry: &Entry,
        rule: &dyn Admission,
        children: &'a [String],
    ) -> Result<(Vec<QueueNode<'a>>, usize, Decision)> {
        decide_on(&self.scheme, &self.root, rule, entry.name(), children)
    }
}

/// ZooKeeper's sequence is an `i32` (the client widens it to `i64`).
fn seq_i32(seq: i64) -> i32 {
    seq as i32
}
