//! One session generation's creates of our queue nodes, batched while others are in flight,
//! where the server answers a create inside a `multi` with its `Stat` (ZOOKEEPER-4026).
//!
//! As with deletes (`deletes.rs`), the server's work is per request, not per operation: when
//! many tasks of one session join queues at once (many locks, per-order locks), their creates
//! go out together. A create is sent at once while fewer than [`WINDOW`] creates of the
//! generation are in flight, and otherwise waits for one of them to be answered, then goes out
//! with every other that waited (up to [`MOST`]) in one `multi`. A lone join (nothing in
//! flight) sends its create at once, as a plain create, exactly as without batching.
//!
//! A node's `czxid` is its holder's fencing token, so creates are batched only where the
//! connection's server answers each create of a `multi` with its `Stat` and applies the `multi`
//! at all ([`super::ServerFeatures`]: not ZooKeeper 3.8.0, nor a 3.8.0 follower of a 3.9
//! leader, which skips such a transaction; see docs/compatibility.md). That is learned by the
//! session's probe: run once per connection, on the session's task, the first time a create
//! that found another in flight, or went out right behind its parent's create (a fresh lock
//! path, whose parent's create and ours then go together: `queue/plan.rs`), is answered (under
//! that create's parent, which exists then); until it is known, every create is sent at once,
//! as on 3.8.0. Should a `multi` still answer a create without its `Stat` (the
//! connection moved to an older server since), that node's `Stat` is read back.
//!
//! A queued create whose caller asked for a plain listing (`send`'s `list`) gets one made right
//! after its `multi`: one listing of each parent, sent right behind the `multi` (ZooKeeper
//! answers a session's requests in order, so it shows every node the `multi` made) and shared
//! by the creates of that `multi` under that parent ([`SharedListing`]). Concurrent joins of one
//! queue (thousands of waiters in a few processes) then cost the server one listing per
//! `multi`, not one each, and their process one copy of it in flight; and a batched join waits
//! for no listing of its own after its create's answer.
//!
//! Invariants:
//! * Every create handed in is sent once per attempt, and its answer is its own: a `multi` is
//!   atomic, so when one of its creates fails (a missing parent, `NoAuth`), the others did not
//!   happen; the failed one gets its error, and the others wait again, first in line. A
//!   connection loss (or a `multi` answered with no results) answers every create of the batch
//!   with `ConnectionLoss`: each caller's recovery then finds its node by its protection prefix,
//!   as after a plain create's loss (the `multi` landed whole or not at all).
//! * A create whose caller's future is dropped while it still waits is taken out of the queue,
//!   never sent; once sent, it was sent before the drop returned (batches are sent under the
//!   queue's lock), so the caller's cleanup (`PendingCreate`: its listing) comes after it.
//! * A shared listing is handed only to the creates of the `multi` it went out behind, and
//!   only when that `multi` made them: a create sent again after another failed the `multi`
//!   gets the listing of the `multi` it goes out in next, if any.
//! * The queue always drains: a create stays queued only while [`WINDOW`] are in flight, and
//!   every queued one and every `multi` is answered on the session's task, whose answer sends
//!   what waits.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures_util::future::{FutureExt, Shared};
use tokio::sync::oneshot;
use zookeeper_client::{
    Acl, Acls, Client, CreateMode, Error as ZkError, MultiWriteError, MultiWriteResult, Stat,
};

use super::deletes::Drive;
use super::driver::Job;
use super::features::FeatureCache;
use crate::util::lock;

/// A create's answer: the node's `Stat`, its sequence number, and what went out behind it for
/// its caller's listing.
pub(crate) type CreateFuture = Pin<Box<dyn Future<Output = Result<(Stat, i64, Behind), ZkError>> + Send>>;

/// What went out right behind a create, for its caller's listing (see [`Creates::send`]).
pub(crate) enum Behind {
    /// What its caller sent right after `send` returned `true` (a listing it pipelined), if
    /// anything.
    Caller,
    /// It went out again, after another create failed the `multi` it first went out in: what
    /// its caller sent behind the first sending may have been answered before the node existed.
    Resent,
    /// The listing of its parent sent right behind the `multi` it went out in, shared with that
    /// `multi`'s other creates under that parent (see the module's docs).
    Listing(SharedListing),
}

/// A listing of a parent's children, sent right behind a `multi` of creates and shared by the
/// creates of that `multi` under that parent (each caller reads the one copy of its names).
pub(crate) type SharedListing =
    Shared<Pin<Box<dyn Future<Output = Result<Arc<Vec<String>>, ZkError>> + Send>>>;

/// How many creates (plain, or `multi`s of them) one generation keeps in flight before the
/// next ones wait to go out together.
const WINDOW: usize = 2;

/// The most creates in one `multi` (far below the server's `jute.maxbuffer`).
const MOST: usize = 256;

/// How many probes one generation sends before it keeps to plain creates. A probe asked by a
/// create that then fails (a fresh lock path's parent was missing) is not sent, and not counted:
/// a per-order session's first creates all fail so.
const PROBES: u8 = 3;

/// A plain create's answer: the node's `Stat` and its sequence number.
type PlainCreate = Pin<Box<dyn Future<Output = Result<(Stat, i64), ZkError>> + Send>>;

type Answer = oneshot::Sender<Result<(Stat, i64, Behind), ZkError>>;

/// A create waiting to go out.
struct Queued {
    id: u64,
    path: String,
    data: Vec<u8>,
    acls: Vec<Acl>,
    tx: Answer,
    /// Sent again after another create failed its first `multi`.
    resent: bool,
    /// Its caller asked for a listing of the parent made after it.
    list: bool,
    /// The listing sent right behind the `multi` (or plain create) it went out in, if it asked.
    listing: Option<SharedListing>,
}

/// The batching of one generation's creates of EPHEMERAL_SEQUENTIAL queue nodes.
pub(crate) struct Creates {
    client: Arc<Client>,
    features: Arc<FeatureCache>,
    drive: Drive,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    in_flight: usize,
    queued: VecDeque<Queued>,
    next_id: u64,
    probing: bool,
    probes: u8,
}

impl Creates {
    pub fn new(client: Arc<Client>, features: Arc<FeatureCache>, drive: Drive) -> Creates {
        Creates { client, features, drive, state: Mutex::default() }
    }

    /// Whether creates may go out together on the current connection (this generation's
    /// creates, and a fresh path's parent's create with ours).
    pub fn batching(&self) -> bool {
        self.features.get().is_some_and(|f| f.multi_create_stat && f.multi_create_applied)
    }

    /// Sends the create of our EPHEMERAL_SEQUENTIAL node at `path` (a name prefix) with `data`
    /// and `acls`, or queues it for the next `multi` (see the module's docs). Returns its answer
    /// to come, and whether it was sent already (any request sent after this call is then
    /// ordered after it).
    ///
    /// `alone`: sent now whatever is in flight (a create pipelined behind its parent's, whose
    /// round would otherwise wait for the batch). `list`: a queued create's answer carries a
    /// listing of its parent made right after it ([`Behind::Listing`], see the module's docs),
    /// and `send` then never returns `true`: its caller sends no listing of its own.
    pub fn send(
        self: &Arc<Self>,
        path: &str,
        data: &[u8],
        acls: &[Acl],
        alone: bool,
        list: bool,
    ) -> (CreateFuture, bool) {
        let (now, probe) = {
            let mut state = lock(&self.state);
            let known = self.features.get().is_some();
            let now = alone || state.in_flight == 0 || !self.batching();
            let probe = !known && (state.in_flight > 0 || alone) && !state.probing && state.probes < PROBES;
            if probe {
                state.probing = true;
            }
            if now {
                state.in_flight += 1;
            }
            (now, probe)
        };
        if now {
            // Probed once this create is in: its parent exists then (a fresh lock path's may not
            // before).
            let probe =
                probe.then(|| ProbeAfter { creates: self.clone(), path: path.to_string(), started: false });
            return (self.send_now(path, data, acls, probe), true);
        }
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut state = lock(&self.state);
            state.next_id += 1;
            let id = state.next_id;
            let queued = Queued {
                id,
                path: path.to_string(),
                data: data.to_vec(),
                acls: acls.to_vec(),
                tx,
                resent: false,
                list,
                listing: None,
            };
            state.queued.push_back(queued);
            id
        };
        self.flush();
        // Gone out in that flush: its caller may pipeline its listing behind it, unless one
        // comes with its answer.
        let sent = !list && !lock(&self.state).queued.iter().any(|q| q.id == id);
        let waiting = Waiting { creates: self.clone(), id };
        (
            Box::pin(async move {
                let answer = rx.await.unwrap_or(Err(ZkError::ConnectionLoss));
                drop(waiting);
                answer
            }),
            sent,
        )
    }

    /// Sends the create now, holding a slot until its answer; then probes, if asked.
    fn send_now(
        self: &Arc<Self>,
        path: &str,
        data: &[u8],
        acls: &[Acl],
        probe: Option<ProbeAfter>,
    ) -> CreateFuture {
        // Sent now (its first poll), its answer awaited below.
        let sent =
            crate::util::sent_now(create(&self.client, path.to_string(), data.to_vec(), acls.to_vec()));
        let slot = Slot(self.clone());
        Box::pin(async move {
            let answer = sent.await;
            drop(slot);
            if let (Some(probe), Ok(_)) = (probe, &answer) {
                probe.start();
            }
            answer.map(|(stat, seq)| (stat, seq, Behind::Caller))
        })
    }

    /// Learns, on the session's task, whether the server answers a `multi`'s creates with
    /// their `Stat`, by the session's probe under the parent of `path`.
    fn probe(self: &Arc<Self>, path: &str) {
        let parent = parent_of(path).to_string();
        lock(&self.state).probes += 1;
        let this = self.clone();
        let job: Job = Box::pin(async move {
            if let Err(e) = this.features.learn(&this.client, &parent).await {
                tracing::debug!(error = %e, "probing the server for batched creates failed");
            }
            lock(&this.state).probing = false;
            this.flush();
        });
        if !(self.drive)(job) {
            lock(&self.state).probing = false;
        }
    }

    /// Sends what waits, if a slot is free: one create alone, or up to [`MOST`] in one `multi`,
    /// sent under the queue's lock (see the module's invariants).
    fn flush(self: &Arc<Self>) {
        let mut state = lock(&self.state);
        if state.queued.is_empty() || state.in_flight >= WINDOW {
            return;
        }
        state.in_flight += 1;
        let most = state.queued.len().min(MOST);
        let mut batch: Vec<Queued> = state.queued.drain(..most).collect();
        let slot = Slot(self.clone());
        let job: Job = if batch.len() == 1 {
            let mut one = batch.remove(0);
            let (data, acls) = (std::mem::take(&mut one.data), std::mem::take(&mut one.acls));
            // Sent now, under the lock; its listing right behind it.
            let sent = crate::util::sent_now(create(&self.client, one.path.clone(), data, acls));
            list_behind(&self.client, std::slice::from_mut(&mut one));
            let behind = one.behind();
            let tx = one.tx;
            Box::pin(async move {
                let answer = sent.await;
                let _ = tx.send(answer.map(|(stat, seq)| (stat, seq, behind)));
                drop(slot);
            })
        } else {
            let client = self.client.clone();
            // Copied: a create that waits again after another's failure is sent again.
            let ops: Vec<(String, Vec<u8>, Vec<Acl>)> =
                batch.iter().map(|q| (q.path.clone(), q.data.clone(), q.acls.clone())).collect();
            // Its first poll builds the request and sends it, now, under the lock; the listings
            // right behind it.
            let sent = crate::util::sent_now(Box::pin(async move {
                let mut writer = client.new_multi_writer();
                for (path, data, acls) in &ops {
                    let options = CreateMode::EphemeralSequential.with_acls(Acls::new(acls));
                    writer.add_create(path, data, &options)?;
                }
                writer.commit().await
            }));
            list_behind(&self.client, &mut batch);
            let client = self.client.clone();
            Box::pin(async move {
                let answer = sent.await;
                slot.0.answer(&client, batch, answer).await;
                drop(slot);
            })
        };
        drop(state);
        (self.drive)(job);
    }

    /// Hands a `multi`'s answer to its creates (see the module's invariants).
    async fn answer(
        &self,
        client: &Client,
        batch: Vec<Queued>,
        answer: Result<Vec<MultiWriteResult>, MultiWriteError>,
    ) {
        match answer {
            Ok(results) if results.len() == batch.len() => {
                let mut reads = Vec::new();
                for (mut q, result) in batch.into_iter().zip(results) {
                    match result {
                        MultiWriteResult::Create { path, stat } => {
                            let seq = sequence_of(&q.path, &path);
                            // No `Stat` (the connection moved to an older server): read it.
                            let read = stat.is_invalid().then(|| client.check_stat(&path));
                            let behind = q.behind();
                            reads.push((q.tx, stat, seq.map(|seq| (seq, behind)), read));
                        }
                        _ => drop(q.tx.send(Err(ZkError::ConnectionLoss))),
                    }
                }
                for (tx, stat, seq, read) in reads {
                    let stat = match read {
                        None => Ok(stat),
                        Some(read) => match read.await {
                            Ok(Some(stat)) => Ok(stat),
                            Ok(None) => Err(ZkError::ConnectionLoss),
                            Err(e) => Err(e),
                        },
                    };
                    let _ = tx.send(stat.and_then(|stat| seq.map(|(seq, behind)| (stat, seq, behind))));
                }
            }
            Ok(_) => {
                tracing::warn!(
                    "a multi of creates was answered without its results: an older follower of a \
                     newer leader (see docs/compatibility.md); each create recovers its node"
                );
                batch.into_iter().for_each(|q| drop(q.tx.send(Err(ZkError::ConnectionLoss))));
            }
            Err(MultiWriteError::OperationFailed { index, source }) if index < batch.len() => {
                tracing::debug!(index, error = %source, "a create failed its multi; the others go again");
                let mut state = lock(&self.state);
                for (i, q) in batch.into_iter().enumerate().rev() {
                    if i == index {
                        let _ = q.tx.send(Err(source.clone()));
                    } else if !q.tx.is_closed() {
                        // Its listing went out behind a `multi` that made nothing.
                        state.queued.push_front(Queued { resent: true, listing: None, ..q });
                    }
                }
            }
            Err(
                MultiWriteError::RequestFailed { source } | MultiWriteError::OperationFailed { source, .. },
            ) => {
                batch.into_iter().for_each(|q| drop(q.tx.send(Err(source.clone()))));
            }
        }
    }
}

impl Queued {
    /// What went out behind it, once its create is answered.
    fn behind(&mut self) -> Behind {
        match (self.listing.take(), self.resent) {
            (Some(listing), _) => Behind::Listing(listing),
            (None, true) => Behind::Resent,
            (None, false) => Behind::Caller,
        }
    }
}

/// Sends one listing of each parent that `batch`'s creates asking for one go under, now (right
/// behind their `multi`, just sent), and hands it to each of them (see the module's docs).
fn list_behind(client: &Arc<Client>, batch: &mut [Queued]) {
    let mut sent: Vec<(String, SharedListing)> = Vec::new();
    for q in batch.iter_mut().filter(|q| q.list) {
        let parent = parent_of(&q.path);
        let listing = match sent.iter().find(|(p, _)| p == parent) {
            Some((_, listing)) => listing.clone(),
            None => {
                let (client, path) = (client.clone(), parent.to_string());
                // The first poll sends it, now.
                let listing: SharedListing = crate::util::sent_now(Box::pin(async move {
                    client.list_children(&path).await.map(Arc::new)
                }))
                .shared();
                sent.push((parent.to_string(), listing.clone()));
                listing
            }
        };
        q.listing = Some(listing);
    }
}

/// The parent of the node `path` names (the root for a top-level node).
fn parent_of(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((parent, _)) => parent,
    }
}

/// The plain create of an EPHEMERAL_SEQUENTIAL node, sent at its first poll.
fn create(client: &Arc<Client>, path: String, data: Vec<u8>, acls: Vec<Acl>) -> PlainCreate {
    let client = client.clone();
    Box::pin(async move {
        let options = CreateMode::EphemeralSequential.with_acls(Acls::new(&acls));
        let (stat, seq) = client.create(&path, &data, &options).await?;
        Ok((stat, seq.into_i64()))
    })
}

/// The sequence ZooKeeper appended to our name prefix `asked` in the created path `made`.
pub(crate) fn sequence_of(asked: &str, made: &str) -> Result<i64, ZkError> {
    let prefix = asked.rsplit('/').next().unwrap_or(asked);
    let name = made.rsplit('/').next().unwrap_or(made);
    name.strip_prefix(prefix)
        .and_then(|digits| digits.parse::<i64>().ok())
        .ok_or_else(|| ZkError::UnexpectedError(format!("created {made:?} for {asked:?}")))
}

/// A probe to start once a create is in (under its parent); dropped unstarted (the create
/// failed, or its caller was dropped), it lets a later create ask for one.
struct ProbeAfter {
    creates: Arc<Creates>,
    path: String,
    started: bool,
}

impl ProbeAfter {
    fn start(mut self) {
        self.started = true;
        self.creates.probe(&self.path);
    }
}

impl Drop for ProbeAfter {
    fn drop(&mut self) {
        if !self.started {
            lock(&self.creates.state).probing = false;
        }
    }
}

/// A queued create's caller: dropped, it takes its create out of the queue if it still waits.
struct Waiting {
    creates: Arc<Creates>,
    id: u64,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        lock(&self.creates.state).queued.retain(|q| q.id != self.id);
    }
}

/// One in-flight create (or `multi`): dropped, it gives its slot back and sends what waits.
struct Slot(Arc<Creates>);

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.0.state).in_flight -= 1;
        self.0.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::sequence_of;

    #[test]
    fn the_sequence_is_read_after_our_prefix() {
        assert_eq!(sequence_of("/a/_c_x-lock-", "/a/_c_x-lock-0000000012").ok(), Some(12));
        assert_eq!(sequence_of("/a/_c_x-lock-", "/b/_c_x-lock-0000000012").ok(), Some(12));
        assert!(sequence_of("/a/_c_x-lock-", "/a/other-0000000012").is_err());
    }
}
