//! [`Shared`]: what a session's handles, its supervisor and the recipes' connections share (the
//! current client, the published state, the safe window's inputs, our live nodes, the
//! listeners); and [`Conn`]: one generation's raw client, with the way back to its session.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, watch};
use zookeeper_client::Client;

use super::connect::server_addresses;
use super::creates::{CreateFuture, Creates};
use super::deletes::{DeleteFuture, Deletes, Drive};
use super::demand::{Asking, Demand};
use super::driver::{Driver, Job};
use super::features::FeatureCache;
use super::guess::Guesses;
use super::listeners::{Listener, Listeners, Registration};
use super::nodelay;
use super::options::ConnectOptions;
use super::relay::{Relay, Servers};
use crate::error::{Error, Result};
use crate::status::{ConnectionState, SessionStatus};
use crate::util::lock;

/// What the supervisor, the recipes' connections and the handles share.
pub(crate) struct Shared {
    pub(super) connect: Servers,
    pub(super) options: ConnectOptions,
    /// The current raw client and its generation; `None` while a new session is being started
    /// and after close.
    pub(super) current: Mutex<Option<Conn>>,
    /// The state as published: the latest, and every change.
    pub(super) reports: Reports,
    /// `true` once closing: [`Shared::begin_close`] sets it, once.
    pub(super) closing: watch::Sender<bool>,
    /// Whether a scan for our connections found none (said once; see `Shared::nodelay`).
    nodelay_missed: AtomicBool,
    /// What the safe window is computed from.
    pub(super) contact: Contact,
    /// Our live ephemeral nodes (paths), deleted at once on close. Each path is the string its
    /// entry keeps, shared (memory per queued waiter, `tests/memory.rs`).
    pub(super) nodes: Mutex<std::collections::HashSet<Arc<str>>>,
    /// Holds told of every state change (see [`Listener`]).
    listeners: Arc<Mutex<Listeners>>,
    /// What recent joins found: missing parents, their node alone (see `guess.rs`).
    pub(crate) guesses: Guesses,
    /// Drives what holds and admitted waiters leave running (the watches on their nodes, the
    /// watches they no longer need) on one task.
    driver: Driver,
    pub(super) supervisor: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// A session's state, published: [`crate::Session::states`] and [`crate::Session::events`].
pub(super) struct Reports {
    pub(super) status: watch::Sender<SessionStatus>,
    pub(super) events: broadcast::Sender<SessionStatus>,
    /// Whether `Suspended` is the last published state of the current generation (the
    /// connection dropped, or the safe window passed: see `window.rs`).
    pub(super) suspended: Mutex<bool>,
}

/// What the safe window is computed from: the latest contact proven to have reached the leader
/// (`proof.rs`), and the negotiated timeout.
pub(super) struct Contact {
    /// The generation and the send time of our latest request proven to have reached the
    /// leader (at first, when we asked for the session).
    last: Mutex<(u64, Option<Instant>)>,
    /// The same send time, as a channel (`None` between sessions).
    pub(super) channel: watch::Sender<Option<Instant>>,
    /// The negotiated timeout of the current generation, in milliseconds.
    timeout_ms: AtomicU64,
    /// Who asks for the window: the session beats only while someone does (`demand.rs`).
    pub(super) demand: Arc<Demand>,
}

impl Shared {
    /// The shared state of a session about to connect to `connect`.
    pub(super) fn new(connect: &str, options: &ConnectOptions, relay: Option<Arc<Relay>>) -> Arc<Shared> {
        Arc::new(Shared {
            connect: Servers { shown: connect.to_string(), relay },
            options: options.clone(),
            current: Mutex::new(None),
            reports: Reports {
                status: watch::channel(SessionStatus { state: ConnectionState::Connected, generation: 1 }).0,
                events: broadcast::channel(64).0,
                suspended: Mutex::new(false),
            },
            closing: watch::channel(false).0,
            nodelay_missed: AtomicBool::new(false),
            contact: Contact {
                last: Mutex::new((1, None)),
                channel: watch::channel(None).0,
                timeout_ms: AtomicU64::new(0),
                demand: Arc::new(Demand::new(options.beat_while_idle)),
            },
            nodes: Mutex::default(),
            listeners: Arc::default(),
            guesses: Guesses::default(),
            driver: Driver::default(),
            supervisor: Mutex::new(None),
        })
    }

    /// Makes `client` the current one, as generation `generation`. Warns when the server granted
    /// another session timeout than the one asked for (once, and again if a later session gets
    /// yet another).
    ///
    /// `asked`: when we asked for the session. The leader created it later, so it expires no
    /// earlier than `asked` plus its timeout: the first contact.
    pub(super) fn install(
        self: &Arc<Self>,
        opened: (Client, FeatureCache),
        generation: u64,
        asked: Instant,
    ) -> Conn {
        let (client, features) = opened;
        let negotiated = client.session_timeout();
        let requested = self.options.session_timeout;
        let before = self.contact.timeout_ms.swap(negotiated.as_millis() as u64, Ordering::SeqCst);
        // ZooKeeper counts in whole milliseconds.
        let sent = Duration::from_millis(requested.as_millis() as u64);
        if negotiated != sent && negotiated.as_millis() as u64 != before {
            tracing::warn!(
                connect = %self.connect,
                ?requested,
                ?negotiated,
                "the server bounded the session timeout asked for to its [minSessionTimeout, \
                 maxSessionTimeout]: the session expires after the negotiated one \
                 (Session::session_timeout)"
            );
        }
        *lock(&self.contact.last) = (generation, Some(asked));
        self.contact.channel.send_replace(Some(asked));
        let conn = Conn::new(client, features, generation, self);
        *lock(&self.current) = Some(conn.clone());
        conn
    }

    /// Turns Nagle off on the connections to the session's servers (their hosts resolved
    /// again: a server may have a new address since the session started), unless the options
    /// say not to. The resolver and the scan of the process's descriptors run off the runtime.
    pub(super) async fn nodelay(&self) {
        if !self.options.tcp_nodelay {
            return;
        }
        // Through a relay, the client's connection goes to the relay (which sets the option on
        // its own sockets).
        let (connect, relay) = (self.connect.shown.clone(), self.connect.relay_address());
        let scan = tokio::task::spawn_blocking(move || match relay {
            Some(relay) => nodelay::apply(&[relay]),
            None => nodelay::apply(&server_addresses(&connect)),
        });
        let sockets = scan.await.unwrap_or(0);
        if sockets == 0 && nodelay::SUPPORTED && !self.nodelay_missed.swap(true, Ordering::SeqCst) {
            tracing::warn!(
                connect = %self.connect,
                "found no connection to the session's servers to turn Nagle's algorithm off on: \
                 requests sent back to back may go a round trip apart (said once per session)"
            );
        } else {
            tracing::debug!(sockets, "TCP_NODELAY on the connections to the session's servers");
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        *self.closing.borrow()
    }

    /// Resolves once the session is closing or closed ([`crate::Session::close`], or every handle
    /// dropped).
    pub(crate) fn closing(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut closing = self.closing.subscribe();
        async move {
            // The sender lives as long as `Shared`; should it go, the session is gone too.
            let _ = closing.wait_for(|closing| *closing).await;
        }
    }

    /// Runs `job` to its end on the session's one task for such jobs (see [`Job`]).
    pub(crate) fn drive(&self, job: Job) {
        self.driver.drive(job);
    }

    /// The current connection.
    ///
    /// # Errors
    /// [`Error::SessionClosed`] after close; [`Error::SessionExpired`] between sessions.
    pub(crate) fn conn(&self) -> Result<Conn> {
        if self.is_closed() {
            return Err(Error::SessionClosed);
        }
        lock(&self.current).clone().ok_or(Error::SessionExpired)
    }

    /// Waits for a current connection (suspended ones included: their requests wait for the
    /// reconnection, or fail with the expiry).
    ///
    /// # Errors
    /// [`Error::SessionClosed`] once closed.
    pub(crate) async fn wait_conn(&self) -> Result<Conn> {
        let mut states = self.reports.status.subscribe();
        loop {
            match self.conn() {
                // An expired client not yet replaced: wait for the supervisor to see it.
                Ok(conn) if conn.client.state().is_terminated() => {}
                Ok(conn) => return Ok(conn),
                Err(Error::SessionExpired) => {}
                Err(e) => return Err(e),
            }
            if states.changed().await.is_err() {
                return Err(Error::SessionClosed);
            }
        }
    }

    pub(crate) fn session_timeout(&self) -> Duration {
        match self.contact.timeout_ms.load(Ordering::SeqCst) {
            0 => self.options.session_timeout,
            ms => Duration::from_millis(ms),
        }
    }

    /// Records that a request of `generation` sent at `sent` is proven to have reached the
    /// leader (`proof.rs`).
    pub(crate) fn note_contact(&self, generation: u64, sent: Instant) {
        let mut contact = lock(&self.contact.last);
        if contact.0 == generation && contact.1.is_none_or(|last| last < sent) {
            contact.1 = Some(sent);
            self.contact.channel.send_replace(Some(sent));
        }
    }

    /// A hold or an acquire asks for the window for as long as the value lives (`demand.rs`).
    pub(crate) fn asking(&self) -> Asking {
        Asking::new(&self.contact.demand, self.session_timeout())
    }

    /// A caller of the session's window asks for it for one session timeout (`demand.rs`).
    pub(super) fn ask_window(&self) {
        self.contact.demand.ask_until(Instant::now() + self.session_timeout());
    }

    /// Whether anyone asks for the window at `now`: `Some(None)` while a hold, an acquire or a
    /// receiver of the contacts lives (the session's task has one of its own), `Some(until)`
    /// while callers and the linger ask, `None` when nobody does.
    pub(super) fn window_asked(&self, now: Instant) -> Option<Option<Instant>> {
        self.contact.demand.asked(now, self.contact.channel.receiver_count() > 1)
    }

    pub(crate) fn last_contact(&self, generation: u64) -> Option<Instant> {
        let contact = lock(&self.contact.last);
        (contact.0 == generation && !self.is_closed()).then_some(contact.1).flatten()
    }

    /// See [`crate::Session::safe_until`]; `None` unless `generation` is the current session.
    pub(crate) fn safe_until(&self, generation: u64) -> Option<Instant> {
        if lock(&self.current).as_ref().is_none_or(|c| c.generation != generation) {
            return None;
        }
        self.last_contact(generation).map(|t| t + self.session_timeout())
    }

    pub(crate) fn track(&self, path: &Arc<str>) {
        lock(&self.nodes).insert(path.clone());
    }

    pub(crate) fn untrack(&self, path: &str) {
        lock(&self.nodes).remove(path);
    }

    /// Publishes a state change (to the channel, the event stream and the listeners).
    pub(super) fn publish(&self, state: ConnectionState, generation: u64) {
        let status = SessionStatus { state, generation };
        tracing::info!(connect = %self.connect, ?state, generation, "session state");
        crate::metrics::session(state, generation);
        self.reports.status.send_replace(status);
        self.tell_listeners(status);
        let _ = self.reports.events.send(status);
    }

    pub(super) fn begin_close(&self) {
        self.closing.send_if_modified(|closing| !std::mem::replace(closing, true));
    }

    /// Tells `listener` of the status now and of every change until the registration is
    /// dropped.
    pub(crate) fn listen(&self, listener: Weak<dyn Listener>) -> Registration {
        let registration = Listeners::add(&self.listeners, listener.clone());
        // Read after joining the list: a change published meanwhile reaches the listener either
        // here or from the session's task (telling twice is harmless: listeners are idempotent).
        let now = *self.reports.status.borrow();
        if let Some(listener) = listener.upgrade() {
            listener.session_changed(now);
        }
        registration
    }

    /// Tells every listener of `status` (after it was published).
    fn tell_listeners(&self, status: SessionStatus) {
        let alive = lock(&self.listeners).alive();
        for listener in alive {
            listener.session_changed(status);
        }
    }
}

/// The raw client of one session generation, with a way back to its [`crate::Session`] for the
/// bookkeeping that outlives a request: live nodes (deleted on close) and the last contact (the
/// safe window). A hold keeps the `Conn` it was taken on, so that nothing it does can touch a
/// later session's nodes.
#[derive(Clone)]
pub(crate) struct Conn {
    pub client: Arc<Client>,
    pub generation: u64,
    shared: Weak<Shared>,
    /// This generation's plain deletes, batched while others are in flight.
    deletes: Arc<Deletes>,
    /// This generation's creates of queue nodes, batched where the server allows it.
    creates: Arc<Creates>,
    /// What the server of the current connection can do, once probed (see `features.rs`).
    pub features: Arc<FeatureCache>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("session", &format_args!("{:#x}", self.client.session_id().0))
            .field("generation", &self.generation)
            .finish()
    }
}

impl Conn {
    fn new(client: Client, features: FeatureCache, generation: u64, shared: &Arc<Shared>) -> Conn {
        let client = Arc::new(client);
        let weak_shared = Arc::downgrade(shared);
        let drive = || -> Drive {
            let weak = weak_shared.clone();
            Box::new(move |job: Job| match weak.upgrade() {
                // The session's task is started on the current runtime if needed.
                Some(shared) if tokio::runtime::Handle::try_current().is_ok() => {
                    shared.driver.drive(job);
                    true
                }
                _ => false,
            })
        };
        let features = Arc::new(features);
        let deletes = Arc::new(Deletes::new(client.clone(), drive()));
        let creates = Arc::new(Creates::new(client.clone(), features.clone(), drive()));
        Conn { client, generation, shared: weak_shared, deletes, creates, features }
    }

    /// Sends the create of our EPHEMERAL_SEQUENTIAL queue node at `path` (a name prefix), or
    /// queues it to go out with this generation's other creates in one `multi` where the
    /// server answers their `Stat`s (see `creates.rs`). Returns its answer to come, and whether
    /// it was sent already, with no listing to come with its answer: a request sent after it is
    /// then ordered after it. `alone`: sent now whatever is in flight. `list`: if queued, its
    /// answer carries a listing of its parent made after it (`SharedListing`).
    pub fn send_create(
        &self,
        path: &str,
        data: &[u8],
        acls: &[zookeeper_client::Acl],
        alone: bool,
        list: bool,
    ) -> (CreateFuture, bool) {
        self.creates.send(path, data, acls, alone, list)
    }

    /// Whether the server of the current connection answers a `multi`'s creates with their
    /// `Stat` and applies such a `multi`, as the session's probe learned it (`creates.rs`):
    /// `false` until it is known.
    pub fn creates_together(&self) -> bool {
        self.creates.batching()
    }

    fn shared(&self) -> Option<Arc<Shared>> {
        self.shared.upgrade()
    }

    /// Our node at `path` exists (until [`Conn::untrack`]).
    pub fn track(&self, path: &Arc<str>) {
        if let Some(shared) = self.shared() {
            shared.track(path);
        }
    }

    /// Our node at `path` is gone.
    pub fn untrack(&self, path: &str) {
        if let Some(shared) = self.shared() {
            shared.untrack(path);
        }
    }

    /// Keeps one-shot watches of this generation that are no longer needed (each with the path
    /// it watches) until they fire, on the session's task: dropped unfired, each would be
    /// removed with a request of its own. See `parked.rs`. With the session gone, they are
    /// dropped.
    pub fn keep_until_fired<W>(&self, watches: Vec<(String, W)>)
    where
        W: std::future::Future + Send + 'static,
    {
        if watches.is_empty() {
            return;
        }
        if let Some(shared) = self.shared() {
            shared.driver.keep_until_fired(self.generation, watches);
        }
    }

    /// A request of this generation sent at `sent` is proven to have reached the leader.
    pub fn note_contact(&self, sent: Instant) {
        if let Some(shared) = self.shared() {
            shared.note_contact(self.generation, sent);
        }
    }

    /// The safe window of this generation: `None` once it is not the current session.
    pub fn safe_until(&self) -> Option<Instant> {
        self.shared()?.safe_until(self.generation)
    }

    /// Publishes `Suspended` at once if this generation's safe window has passed (see
    /// `window.rs`): called before a hold's status is read or subscribed to.
    pub fn check_window(&self) {
        if let Some(shared) = self.shared() {
            shared.check_window(self.generation);
        }
    }

    /// As [`Conn::send_delete`], for a caller that awaits the answer before its next request: a
    /// [`Departure::Plain`] delete sent while two of this generation's are in flight waits for
    /// one of them to be answered, then goes out with every other that waits, in one `multi`
    /// (see `deletes.rs`). Later requests of the session may then go out before it.
    pub fn send_delete_batched(&self, path: &str, departure: Departure) -> DeleteFuture {
        match departure {
            Departure::Plain => self.deletes.send(path),
            _ => self.send_delete(path, departure),
        }
    }

    /// Sends the delete of our node at `path` now (any later request of this session is ordered
    /// after it), saying what `departure` says, and returns its answer to come.
    pub fn send_delete(&self, path: &str, departure: Departure) -> DeleteFuture {
        let (client, path) = (self.client.clone(), path.to_string());
        let sent: DeleteFuture = match departure {
            Departure::Plain => return Box::pin(self.client.delete(&path, None)),
            Departure::Clean => Box::pin(async move {
                let mut writer = client.new_multi_writer();
                writer.add_set_data(&path, crate::markers::RELEASED, None)?;
                writer.add_delete(&path, None)?;
                match writer.commit().await.map_err(zookeeper_client::Error::from) {
                    // Our node's ACL lets us delete it but not write it: a plain delete, which
                    // waiters take as unclean (they wait: the safe side).
                    Err(zookeeper_client::Error::NoAuth) => client.delete(&path, None).await,
                    other => other.map(drop),
                }
            }),
            Departure::Tombstone => Box::pin(async move {
                let tombstone = crate::markers::tombstone_of(&path);
                let mut writer = client.new_multi_writer();
                let options =
                    zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
                writer.add_create(&tombstone, &[], &options)?;
                writer.add_delete(&tombstone, None)?;
                writer.add_delete(&path, None)?;
                match writer.commit().await {
                    Ok(_) => Ok(()),
                    // The tombstone's create failed (an ACL on the parent, a node of that name):
                    // the delete goes without it.
                    Err(zookeeper_client::MultiWriteError::OperationFailed { index: 0, source })
                        if !matches!(source, zookeeper_client::Error::NoNode)
                            && !crate::error::is_connection_loss(&source) =>
                    {
                        client.delete(&path, None).await
                    }
                    Err(e) => match zookeeper_client::Error::from(e) {
                        zookeeper_client::Error::NoAuth => client.delete(&path, None).await,
                        other => Err(other),
                    },
                }
            }),
        };
        // The first poll builds the transaction and sends it.
        crate::util::sent_now(sent)
    }

    /// Deletes our node at `path`, retrying connection losses; a node already gone is fine, and
    /// one that can't be deleted goes with the session (logged). Untracked either way.
    pub async fn delete_quietly(&self, path: &str) {
        self.delete_quietly_as(path, Departure::Plain).await
    }

    /// As [`Conn::delete_quietly`], saying what `departure` says (see [`Conn::send_delete`]).
    pub async fn delete_quietly_as(&self, path: &str, departure: Departure) {
        match crate::util::on_connection_loss(|| self.send_delete(path, departure)).await {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => tracing::trace!(node = path, "deleted"),
            Err(e) => tracing::debug!(node = path, error = %e, "could not delete; it goes with the session"),
        }
        self.untrack(path);
    }

    /// Whether the session this connection belongs to was closed.
    pub fn session_closed(&self) -> bool {
        self.shared().is_none_or(|s| s.is_closed())
    }
}

/// What the delete of one of our nodes tells the waiters behind it ([`Conn::send_delete`]).
/// Waiters with a lock delay read a clean release; waiters without one, a tombstone: a queue
/// has one or the other, so a delete says at most one thing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Departure {
    /// A plain delete: what a session's expiry, or anyone else's delete, looks like.
    Plain,
    /// A clean release, for waiters with a lock delay: one transaction writes
    /// [`crate::markers::RELEASED`] to the node and deletes it, so that a waiter's data watch
    /// fires as a data change, never as a deletion. Nobody can read the marker: the node is
    /// gone in the same transaction. If our node's ACL does not let us write it, the delete
    /// goes alone.
    Clean,
    /// A release at the head of the queue (every node before it gone): the same transaction
    /// creates and deletes its tombstone (see [`crate::markers::tombstone_of`]), so that the
    /// waiter behind it, which watches that name, hears its creation just before the node's
    /// deletion and enters without listing. Still one request and one reply. If the tombstone
    /// can't be created (an ACL, a node already there), the delete goes without it: the waiter
    /// behind lists, as after any other deletion.
    Tombstone,
}
