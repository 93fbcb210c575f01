//! [`Sender`]: every ZooKeeper request of the queue engine goes out here, as Curator's
//! `LockInternals` and its driver send all of theirs from one class. The rest of `queue/`
//! decides what to send (a [`JoinPlan`], a waiting round) and reads the answers; no other file
//! of it calls the client.
//!
//! A request goes out when its method here is called (the client sends when its method is
//! called, not when the returned future is polled), except where a method says otherwise; so
//! calls made back to back are pipelined, and ZooKeeper answers a session's requests in order.
//! The methods that retry across a connection loss say so; the others hand back the first
//! answer, for the caller to read.

use std::future::Future;
use std::sync::Arc;

use futures_util::future::Either;
use zookeeper_client::{
    Acl, Acls, CreateMode, CreateSequence, Error as ZkError, MultiReadResult, MultiWriteError,
    MultiWriteResult, OneshotWatcher, Stat, StateWatcher,
};

use super::plan::{JoinPlan, Listing, ParentCreate};
use crate::error::{Error, Result};
use crate::path::LockPath;
use crate::session::{Behind, Conn, Departure, SharedListing};
use crate::util::on_connection_loss;

/// An answer from ZooKeeper.
pub(super) type ZkResult<T> = std::result::Result<T, ZkError>;

/// The answer to a round's create: our node's `Stat`, its sequence number, and what went out
/// behind it for our listing (see `Conn::send_create`).
pub(super) type Created = std::result::Result<(Stat, i64, Behind), NotCreated>;

/// Why a round's create did not make our node.
#[derive(Debug)]
pub(super) enum NotCreated {
    /// Our create failed (or its answer was lost with the connection).
    Ours(ZkError),
    /// The parent's create, sent with ours in one `multi` ([`ParentCreate::WithOurs`]),
    /// failed, and ours with it.
    Parent(ZkError),
}

/// The requests of one queue (under `root`) on one connection.
#[derive(Clone, Copy)]
pub(super) struct Sender<'a> {
    conn: &'a Conn,
    root: &'a LockPath,
}

/// A join's round, sent: the parent's create (if planned alone), ours (with the parent's, if
/// planned so), and the listing (if pipelined), each still to be answered.
pub(super) struct Sent<P, C, L> {
    pub parent: Option<P>,
    pub create: C,
    pub listing: Option<L>,
    /// The plan's listing waits for our create's answer (see [`Sender::join_round`]).
    pub listing_after: bool,
}

/// A listing of a queue's root: the children's names. Shared, not copied, by the joins whose
/// creates went out in one `multi` (`SharedListing`): a copy of N names per join is memory
/// that the allocator keeps once the queue is long.
pub(crate) type Children = Arc<Vec<String>>;

/// The answer to a join's listing: the children, the root's version when it was read, and the
/// child watch (with the connection's state as it was when the listing was sent) when it set
/// one.
pub(super) struct Listed {
    pub children: Children,
    /// The root's `(czxid, mzxid)`: a `RootVersion`.
    pub root: Option<(i64, i64)>,
    pub watch: Option<(OneshotWatcher, StateWatcher)>,
}

impl<'a> Sender<'a> {
    pub fn new(conn: &'a Conn, root: &'a LockPath) -> Sender<'a> {
        Sender { conn, root }
    }

    /// Sends a join's round as `plan` says, back to back: the parent's create (with `acls`),
    /// ours (our node at `path` with `data`: sent now, or with the session's other creates in
    /// one `multi`, `Conn::send_create`), and the listing; for [`ParentCreate::WithOurs`], the
    /// parent's create and ours in one `multi` ([`Sender::create_with_parent`]), then the
    /// listing. When our create waits for a batch of creates, the listing is not sent
    /// (`listing_after`): a plain one comes with our create's answer, made right behind its
    /// batch and shared with the batch's other creates under our root (`SharedListing`);
    /// any other, [`Sender::listing`] sends once our create is answered, so that it shows our
    /// node.
    pub fn join_round(
        self,
        plan: &JoinPlan,
        path: &'a str,
        data: &[u8],
        acls: &'a [Acl],
    ) -> Sent<
        impl Future<Output = ZkResult<(Stat, CreateSequence)>> + 'a,
        impl Future<Output = Created> + 'a,
        impl Future<Output = ZkResult<Listed>> + 'a,
    > {
        let (client, root) = (&self.conn.client, self.root.as_str());
        let (parent, create, sent) = if plan.parent == ParentCreate::WithOurs {
            (None, Either::Left(self.create_with_parent(path, data, acls)), true)
        } else {
            let parent =
                (plan.parent != ParentCreate::Skip).then(|| client.create(root, &[], &parent_options(acls)));
            // Behind the parent's create, ours goes at once: waiting for a batch would cost the
            // round a round trip (per-order locks: measured slower batched, docs/performance.md).
            // Queued, ours comes with the batch's listing of the root if the plan's is plain.
            let list = plan.listing == Listing::Plain;
            let (create, sent) = self.conn.send_create(path, data, acls, parent.is_some(), list);
            (parent, Either::Right(async move { create.await.map_err(NotCreated::Ours) }), sent)
        };
        let listing = if sent { self.listing(plan) } else { None };
        Sent { parent, create, listing, listing_after: !sent && plan.listing != Listing::After }
    }

    /// Sends the parent's create (a CONTAINER node, with `acls`) and ours (as
    /// [`Sender::join_round`]) in one `multi`, now. Our node's `Stat` is in the answer where
    /// the server gives it (`ServerFeatures`); where it does not (the connection moved to an
    /// older server since it was learned), the answer is a connection loss, for the join to
    /// recover our node by its protection prefix: the `multi` landed whole or not at all.
    fn create_with_parent(
        self,
        path: &'a str,
        data: &[u8],
        acls: &'a [Acl],
    ) -> impl Future<Output = Created> + 'a {
        let (client, root) = (&self.conn.client, self.root.as_str());
        let mut writer = client.new_multi_writer();
        let ours = CreateMode::EphemeralSequential.with_acls(Acls::new(acls));
        let built = writer
            .add_create(root, &[], &parent_options(acls))
            .and_then(|()| writer.add_create(path, data, &ours));
        // Sent here, by `commit`.
        let committed = built.map(|()| writer.commit());
        async move {
            let answer = match committed {
                Ok(committed) => committed.await,
                Err(e) => return Err(NotCreated::Ours(e)),
            };
            match answer {
                Ok(results) => match results.get(1) {
                    Some(MultiWriteResult::Create { path: made, stat }) if !stat.is_invalid() => {
                        let seq = crate::session::sequence_of(path, made).map_err(NotCreated::Ours)?;
                        Ok((*stat, seq, Behind::Caller))
                    }
                    _ => Err(NotCreated::Ours(ZkError::ConnectionLoss)),
                },
                Err(MultiWriteError::OperationFailed { index: 0, source }) => Err(NotCreated::Parent(source)),
                Err(
                    MultiWriteError::OperationFailed { source, .. }
                    | MultiWriteError::RequestFailed { source },
                ) => Err(NotCreated::Ours(source)),
            }
        }
    }

    /// The listing shared by the creates of our create's batch (see `Conn::send_create`).
    pub async fn shared_listing(shared: SharedListing) -> ZkResult<Listed> {
        Ok(Listed { children: shared.await?, root: None, watch: None })
    }

    /// Sends the listing `plan` says (none for [`Listing::After`]).
    pub fn listing(self, plan: &JoinPlan) -> Option<impl Future<Output = ZkResult<Listed>> + 'a> {
        let (client, root) = (&self.conn.client, self.root.as_str());
        // Taken before the listing is sent (see `OwnCheck`).
        let state = (plan.listing == Listing::ChildWatch).then(|| client.state_watcher());
        match plan.listing {
            Listing::After => None,
            Listing::Plain => {
                let sent = client.list_children(root);
                Some(Either::Left(Either::Left(async move {
                    Ok(Listed { children: Arc::new(sent.await?), root: None, watch: None })
                })))
            }
            Listing::ChildWatch => {
                let sent = client.list_and_watch_children(root);
                Some(Either::Left(Either::Right(async move {
                    let (children, watcher) = sent.await?;
                    Ok(Listed {
                        children: Arc::new(children),
                        root: None,
                        watch: state.map(|state| (watcher, state)),
                    })
                })))
            }
            Listing::RootVersion => {
                let sent = client.get_children(root);
                Some(Either::Right(async move {
                    let (children, stat) = sent.await?;
                    Ok(Listed {
                        children: Arc::new(children),
                        root: Some((stat.czxid, stat.mzxid)),
                        watch: None,
                    })
                }))
            }
        }
    }

    /// Makes the root's missing parents one by one (CONTAINER nodes with `acls`), and the root
    /// with `root_data` when it must carry some; retried across connection losses.
    ///
    /// # Errors
    /// The creates' errors, a root that exists already excepted.
    pub async fn make_parents(self, acls: &[Acl], root_data: Option<&[u8]>) -> Result<()> {
        let (client, options, root) = (&self.conn.client, parent_options(acls), self.root.as_str());
        let Some(data) = root_data else {
            return on_connection_loss(|| client.mkdir(root, &options))
                .await
                .map_err(Error::zk("create parents", root));
        };
        if let Some(parent) = root.rsplit_once('/').map(|(p, _)| p).filter(|p| !p.is_empty()) {
            on_connection_loss(|| client.mkdir(parent, &options))
                .await
                .map_err(Error::zk("create parents", root))?;
        }
        match on_connection_loss(|| client.create(root, data, &options)).await {
            Ok(_) | Err(ZkError::NodeExists) => Ok(()),
            Err(e) => Err(Error::from_zk("create", root, e)),
        }
    }

    /// Children of the root that carry `protection` and belong to *this* session, with their
    /// czxid. A node with our prefix but another owner is from an older session (CURATOR-604):
    /// never ours.
    ///
    /// The listing follows a `sync`, so that it shows every create of ours that will ever take
    /// effect, even one whose answer a lost connection took with it while the leader still had
    /// it in flight (its commit held up by a slow disk, say) and the listing is served by
    /// another server. The leader answers a `sync` only after every write it took in before
    /// it, and a create still on its way to the leader once we reconnected elsewhere fails
    /// there (the session moved). Without it, the create lands after an empty listing: we
    /// create again, and the first node stays in our live session, ahead of everyone, until
    /// the session ends (`tests/late_create.rs`).
    ///
    /// # Errors
    /// The listing's and the reads' errors (retried across connection losses).
    pub async fn find_ours(self, protection: &str) -> Result<Vec<(String, i64)>> {
        let (client, root) = (&self.conn.client, self.root);
        let listed = on_connection_loss(|| {
            // Pipelined: the server answers the listing after the sync.
            let synced = client.sync(root.as_str());
            let listed = client.list_children(root.as_str());
            async move {
                synced.await?;
                listed.await
            }
        })
        .await;
        let children = match listed {
            Ok(children) => children,
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(Error::from_zk("list", root.as_str(), e)),
        };
        let session = client.session_id().0;
        let mut ours = Vec::new();
        for name in children.into_iter().filter(|c| c.starts_with(protection)) {
            let path = root.child(&name);
            match on_connection_loss(|| client.get_data(&path)).await {
                Ok((_, stat)) if stat.ephemeral_owner == session => ours.push((name, stat.czxid)),
                Ok((_, stat)) => {
                    tracing::warn!(node = %path, owner = format_args!("{:#x}", stat.ephemeral_owner),
                        "node has our protection prefix but another session's owner; not ours")
                }
                Err(ZkError::NoNode) => {}
                Err(e) => return Err(Error::from_zk("get", &path, e)),
            }
        }
        Ok(ours)
    }

    /// The root's children; retried across connection losses.
    pub async fn list(self) -> ZkResult<Vec<String>> {
        on_connection_loss(|| self.conn.client.list_children(self.root.as_str())).await
    }

    /// The root's children, with a child watch on the root; retried across connection losses.
    pub async fn list_watching(self) -> ZkResult<(Vec<String>, OneshotWatcher)> {
        on_connection_loss(|| self.conn.client.list_and_watch_children(self.root.as_str())).await
    }

    /// The root's data and stat; retried across connection losses.
    pub async fn read_root(self) -> ZkResult<(Vec<u8>, Stat)> {
        on_connection_loss(|| self.conn.client.get_data(self.root.as_str())).await
    }

    /// Stores `data` in the root if its data version is still `version`; retried across
    /// connection losses.
    pub async fn store_root(self, data: &[u8], version: i32) -> ZkResult<Stat> {
        on_connection_loss(|| self.conn.client.set_data(self.root.as_str(), data, Some(version))).await
    }

    /// The connection's state as it is now: taken before a request goes out, it shows any change
    /// of the connection after it (see `OwnCheck`). Sends nothing.
    pub fn state(self) -> StateWatcher {
        self.conn.client.state_watcher()
    }

    /// The data watch on our node at `path`, whose answer the caller follows for as long as
    /// the node lives: unlike the other requests here, it goes out at the returned future's
    /// first poll (it owns its client, so that it outlives this borrow); poll it at once.
    pub fn own_data_watch(
        self,
        path: &str,
    ) -> impl Future<Output = ZkResult<(Vec<u8>, Stat, OneshotWatcher)>> + Send + 'static {
        let (client, path) = (self.conn.client.clone(), path.to_string());
        async move { client.get_and_watch_data(&path).await }
    }

    /// The data watch on the node at `path`, and its data; retried across connection losses.
    pub async fn watch_data(self, path: &str) -> ZkResult<(Vec<u8>, Stat, OneshotWatcher)> {
        on_connection_loss(|| self.conn.client.get_and_watch_data(path)).await
    }

    /// Writes `data` to the node at `path`, whatever its version: sent now (any later request
    /// of the session is ordered after it), the answer to come, the write sent again after a
    /// connection loss (the same data again: a second landing is one more data change).
    pub fn rewrite(self, path: &str, data: &[u8]) -> impl Future<Output = ZkResult<Stat>> + Send + 'static {
        let client = self.conn.client.clone();
        let mut first = Some(client.set_data(path, data, None));
        let (path, data) = (path.to_string(), data.to_vec());
        async move {
            on_connection_loss(|| first.take().unwrap_or_else(|| client.set_data(&path, &data, None))).await
        }
    }

    /// Deletes our node at `path`, saying what `departure` says (see `Conn::send_delete`);
    /// retried across connection losses.
    pub async fn delete(self, path: &str, departure: Departure) -> ZkResult<()> {
        on_connection_loss(|| self.conn.send_delete(path, departure)).await
    }

    /// Deletes our node at `path` plainly, retrying connection losses and logging what it
    /// cannot (the node goes with the session then); see `Conn::delete_quietly`.
    pub async fn delete_quietly(self, path: &str) {
        self.conn.delete_quietly(path).await
    }

    /// As [`Sender::delete_quietly`], saying what `departure` says (see `Conn::send_delete`).
    pub async fn leave_quietly(self, path: &str, departure: Departure) {
        self.conn.delete_quietly_as(path, departure).await
    }

    /// The data watch on a node ahead, at `path`, and its data: the answer still to come.
    pub fn watch_ahead(
        self,
        path: &str,
    ) -> impl Future<Output = ZkResult<(Vec<u8>, Stat, OneshotWatcher)>> + 'a {
        self.conn.client.get_and_watch_data(path)
    }

    /// The exists watch on a tombstone's name, at `path` (see `Queue::tombstones`): the answer
    /// still to come.
    pub fn watch_tomb(
        self,
        path: &str,
    ) -> impl Future<Output = ZkResult<(Option<Stat>, OneshotWatcher)>> + 'a {
        self.conn.client.check_and_watch_stat(path)
    }

    /// Whether the node at `path` exists (no watch): the answer still to come.
    pub fn exists(self, path: &str) -> impl Future<Output = ZkResult<Option<Stat>>> + 'a {
        self.conn.client.check_stat(path)
    }

    /// The data of the node at `path` (the head's participant id, for a report): the answer
    /// still to come.
    pub fn read(self, path: &str) -> impl Future<Output = ZkResult<(Vec<u8>, Stat)>> + 'a {
        self.conn.client.get_data(path)
    }

    /// The data of every node named in `names`, in one multi-read.
    ///
    /// # Errors
    /// The multi-read's errors.
    pub async fn read_all(self, names: impl Iterator<Item = &str>) -> Result<Vec<MultiReadResult>> {
        let root = self.root.as_str();
        let mut reader = self.conn.client.new_multi_reader();
        for name in names {
            reader.add_get_data(&self.root.child(name)).map_err(Error::zk("get", root))?;
        }
        reader.commit().await.map_err(Error::zk("multi-read", root))
    }

    /// Asks the holder of our queue's node `name` to release (see
    /// [`crate::request_revocation`]); `false` if the node is gone.
    ///
    /// # Errors
    /// As [`crate::request_revocation`].
    pub async fn revoke(self, name: &str) -> Result<bool> {
        crate::revocation::revoke_node(&self.conn.client, &self.root.child(name)).await
    }
}

/// How lock parents are created: CONTAINER nodes (reaped by the server once empty) with `acls`.
fn parent_options(acls: &[Acl]) -> zookeeper_client::CreateOptions<'_> {
    CreateMode::Container.with_acls(Acls::new(acls))
}
