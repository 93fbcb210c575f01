//! [`Session`]: the one object a user connects, and that outlives session expiry.
//!
//! A ZooKeeper session ends when the server has heard nothing from us for the negotiated
//! timeout. The raw client is bound to one session for life; a [`Session`] owns the current
//! raw client, starts a new session after an expiry (with capped exponential backoff and jitter),
//! and reports every change on a state channel. Recipes are built from a [`Session`] and carry on
//! across new sessions by themselves.

mod conn;
mod connect;
mod driver;
mod listeners;
mod nodelay;
mod parent_hint;
mod supervisor;
#[cfg(feature = "tls")]
mod tls;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, watch};
use zookeeper_client::Client;

pub(crate) use self::conn::Conn;
pub use self::connect::ConnectOptions;
use self::connect::{open_client, server_addresses};
pub(crate) use self::driver::Job;
pub(crate) use self::listeners::{Listener, Registration};
pub(crate) use self::parent_hint::ParentHint;
#[cfg(feature = "tls")]
pub use self::tls::TlsConfig;
use crate::error::{Error, Result};
pub(crate) use crate::status::{ConnectionState, SessionStatus};
use crate::util::lock;
#[cfg(doc)]
use crate::ConnectFailure;

/// A self-healing ZooKeeper session: connect one, build every recipe from it, share it (it is
/// cheap to clone).
///
/// * **It outlives expiry.** When the server expires the session (a long network partition, a
///   long pause of this process), the state goes to [`ConnectionState::Lost`], a new session is
///   started with capped exponential backoff and jitter, and the state goes to
///   [`ConnectionState::Connected`] with the next [`Session::generation`]. Credentials, ACLs of
///   the recipes, the chroot and TLS carry over.
/// * **Holds belong to the session that took them.** A lock or leadership held when its session
///   expires is lost for good ([`crate::LockStatus::Lost`]); acquires and elections in progress
///   queue again on the new session by themselves.
/// * **Every change is reported**: [`Session::states`] (the latest) and [`Session::events`]
///   (each one). See [`ConnectionState`] for the diagram and Curator's equivalents.
/// * **The safe window**: [`Session::safe_until`] is the instant before which the server cannot
///   have expired this session (the send time of our latest answered request plus the negotiated
///   timeout): work that must stop before anyone else may take our locks must stop before it.
///
/// Dropping every clone closes the session in the background; [`Session::close`] closes it and
/// waits.
///
/// ```no_run
/// # async fn demo() -> zk_recipes::Result<()> {
/// use std::time::Duration;
/// use zk_recipes::{InterProcessMutex, Session};
/// let session = Session::connect("127.0.0.1:2181", Duration::from_secs(10)).await?;
/// let mutex = InterProcessMutex::new(&session, "/locks/orders")?;
/// let guard = mutex.acquire().await?;
/// guard.release().await?;
/// session.close().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Session {
    handle: Arc<Handle>,
}

/// The user-facing owner: when the last [`Session`] clone goes, the session closes.
struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.begin_close();
    }
}

/// What the supervisor, the recipes' connections and the handles share.
pub(crate) struct Shared {
    connect: String,
    options: ConnectOptions,
    /// The current raw client and its generation; `None` while a new session is being started
    /// and after close.
    current: Mutex<Option<Conn>>,
    status: watch::Sender<SessionStatus>,
    events: broadcast::Sender<SessionStatus>,
    closing: watch::Sender<bool>,
    closed: AtomicBool,
    /// Whether a scan for our connections found none (said once; see `Shared::nodelay`).
    nodelay_missed: AtomicBool,
    /// The generation and send time of our latest answered request.
    contact: Mutex<(u64, Option<Instant>)>,
    /// The same send time, as a channel (`None` between sessions).
    contacts: watch::Sender<Option<Instant>>,
    /// The negotiated timeout of the current generation, in milliseconds.
    timeout_ms: AtomicU64,
    /// Our live ephemeral nodes (paths), deleted at once on close.
    nodes: Mutex<std::collections::HashSet<String>>,
    /// Holds told of every state change (see [`Listener`]).
    listeners: listeners::ListenerList,
    /// Whether recent joins found their lock's parent missing.
    pub(crate) parent_hint: ParentHint,
    /// Drives what holds leave running (the watches on their nodes) on one task.
    driver: driver::Driver,
    supervisor: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = *self.handle.shared.status.borrow();
        f.debug_struct("Session")
            .field("connect", &self.handle.shared.connect)
            .field("state", &status.state)
            .field("generation", &status.generation)
            .finish()
    }
}

impl Session {
    /// Connects to `connect` (`host:port,host:port[/chroot]`) with the given session timeout.
    ///
    /// The first connection is made before this returns, so bad input is reported at once; after
    /// that, new sessions are started on their own.
    ///
    /// **The session timeout** must be 1 ms to `i32::MAX` ms. The server bounds it to its
    /// `[minSessionTimeout, maxSessionTimeout]` (by default 2 to 20 times its `tickTime`):
    /// [`Session::session_timeout`] is the one it granted, [`Session::requested_session_timeout`]
    /// the one asked for, and a warning is logged when they differ.
    ///
    /// **How long it takes.** Connecting goes on for the *connect wait*: the session timeout, at
    /// least 2 s. While the servers refuse connections, drop them or do not answer, it tries
    /// again (the client crate's backoff), as Curator does until its connection timeout: a server
    /// being restarted refuses connections for a moment, and giving up at the first refusal would
    /// fail a start during a rolling restart. The last fifth of the wait (at most 2 s) is kept to
    /// probe each address with a plain TCP connection and tell why there is no session (see
    /// [`ConnectFailure`]). Everything (resolving the hosts, the chroot check) fits in the wait:
    /// this returns within it, whatever the servers do.
    ///
    /// # Errors
    /// [`Error::InvalidSessionTimeout`] at once, nothing sent; [`Error::Resolve`] at once when no
    /// host resolves; [`Error::Connect`] when no session was started within the wait, with its
    /// [`ConnectFailure`]: [`ConnectFailure::Refused`] (nothing listens on any address),
    /// [`ConnectFailure::NoSession`] (an address accepts connections but is not a ZooKeeper
    /// client port that serves us), [`ConnectFailure::NoAnswer`] (nothing answered), or
    /// [`ConnectFailure::BadConnectString`] (at once); [`Error::ChrootMissing`]; see
    /// [`Session::connect_with`].
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future abandons the attempt.
    pub async fn connect(connect: &str, session_timeout: Duration) -> Result<Session> {
        Session::connect_with(connect, &ConnectOptions::new(session_timeout)).await
    }

    /// Connects with [`ConnectOptions`]: credentials, TLS, chroot handling, reconnect backoff.
    /// The session timeout and the connect wait are as for [`Session::connect`].
    ///
    /// # Errors
    /// As [`Session::connect`]. [`Error::Connect`] also for a refused TLS handshake (a server
    /// that speaks the other protocol, a certificate the CA did not sign), after the wait;
    /// [`Error::Tls`] for a server name no certificate can be checked against;
    /// [`Error::ChrootMissing`] when the chroot does not exist and `create_chroot` is off;
    /// [`Error::NoAuth`] when creating the chroot is refused; [`Error::Timeout`] when the chroot
    /// check is not answered within the wait.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future abandons the attempt.
    pub async fn connect_with(connect: &str, options: &ConnectOptions) -> Result<Session> {
        let client = open_client(connect, options).await?;
        let (status, _) = watch::channel(SessionStatus { state: ConnectionState::Connected, generation: 1 });
        let (events, _) = broadcast::channel(64);
        let (closing, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            connect: connect.to_string(),
            options: options.clone(),
            current: Mutex::new(None),
            status,
            events,
            closing,
            closed: AtomicBool::new(false),
            nodelay_missed: AtomicBool::new(false),
            contact: Mutex::new((1, None)),
            contacts: watch::channel(None).0,
            timeout_ms: AtomicU64::new(0),
            nodes: Mutex::default(),
            listeners: Mutex::default(),
            parent_hint: Default::default(),
            driver: Default::default(),
            supervisor: Mutex::new(None),
        });
        let conn = shared.install(client, 1);
        tracing::info!(connect, session = format_args!("{:#x}", conn.client.session_id().0),
            timeout = ?conn.client.session_timeout(), "session connected");
        crate::metrics::session(ConnectionState::Connected, 1);
        let states = conn.client.state_watcher();
        shared.nodelay().await;
        let task = tokio::spawn(supervisor::run(shared.clone(), conn, states));
        *lock(&shared.supervisor) = Some(task);
        Ok(Session { handle: Arc::new(Handle { shared }) })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.handle.shared
    }

    /// The current raw client, for a user's own reads and writes (the one escape hatch to the
    /// `zookeeper_client` crate).
    ///
    /// It is **replaced after an expiry**: a client taken before the expiry keeps failing with
    /// `SessionExpired`; call this again (or await [`Session::connected`]) for the new one.
    /// While a new session is being started there is none.
    ///
    /// # Errors
    /// [`Error::SessionExpired`] while a new session is being started (after
    /// [`ConnectionState::Lost`], before [`ConnectionState::Connected`]);
    /// [`Error::SessionClosed`] after [`Session::close`].
    pub fn client(&self) -> Result<Client> {
        self.handle.shared.conn().map(|c| Client::clone(&c.client))
    }

    /// Which session this is: 1 for the first, one more after each expiry.
    pub fn generation(&self) -> u64 {
        self.handle.shared.status.borrow().generation
    }

    /// The connection state now.
    pub fn state(&self) -> ConnectionState {
        self.handle.shared.status.borrow().state
    }

    /// The latest [`SessionStatus`], as a channel (intermediate states may be skipped; use
    /// [`Session::events`] to see each one).
    pub fn states(&self) -> watch::Receiver<SessionStatus> {
        self.handle.shared.status.subscribe()
    }

    /// Every state change from now on, in order (a receiver that falls more than 64 changes
    /// behind gets `RecvError::Lagged`).
    pub fn events(&self) -> broadcast::Receiver<SessionStatus> {
        self.handle.shared.events.subscribe()
    }

    /// Waits until the session is connected (at once when it is); returns its generation.
    ///
    /// # Errors
    /// [`Error::SessionClosed`] once the session is closed.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only observes.
    pub async fn connected(&self) -> Result<u64> {
        let mut states = self.states();
        let status = states
            .wait_for(|s| s.state.is_connected() || s.state == ConnectionState::Closed)
            .await
            .map_err(|_| Error::SessionClosed)?;
        match status.state {
            ConnectionState::Closed => Err(Error::SessionClosed),
            _ => Ok(status.generation),
        }
    }

    /// The negotiated session timeout of the current session: the one asked for
    /// ([`Session::requested_session_timeout`]) as the server bounded it to its
    /// `[minSessionTimeout, maxSessionTimeout]`. It is the one that counts: the server expires
    /// the session after it, and [`Session::safe_until`] follows it.
    pub fn session_timeout(&self) -> Duration {
        self.handle.shared.session_timeout()
    }

    /// The session timeout asked for (given to [`Session::connect`] or [`ConnectOptions::new`]).
    /// The server may have granted another: [`Session::session_timeout`].
    pub fn requested_session_timeout(&self) -> Duration {
        self.handle.shared.options.session_timeout
    }

    /// The send time of the latest request of the current session that got an answer (the
    /// session pings on its own every fifth of the timeout, so this stays fresh while connected).
    pub fn last_contact(&self) -> Option<Instant> {
        self.handle.shared.last_contact(self.generation())
    }

    /// [`Session::last_contact`] as a channel: it changes with every answered beat (and goes to
    /// `None` when a new session starts), for a watchdog that must act when answers stop coming.
    pub fn contacts(&self) -> watch::Receiver<Option<Instant>> {
        self.handle.shared.contacts.subscribe()
    }

    /// The instant before which the server cannot expire the current session:
    /// [`Session::last_contact`] plus the negotiated timeout. It carries **no margin**: subtract
    /// your own (scheduling delays, the time it takes to stop what you run). `None` before the
    /// first answer, while a new session is being started, and after close.
    pub fn safe_until(&self) -> Option<Instant> {
        self.handle.shared.safe_until(self.generation())
    }

    /// Whether [`Session::close`] was called (or every handle dropped).
    pub fn is_closed(&self) -> bool {
        self.handle.shared.is_closed()
    }

    /// Closes the session: stops starting new ones, deletes our ephemeral nodes at once (every
    /// lock and leadership taken through it is released), ends the server session and reports
    /// [`ConnectionState::Closed`]. Recipes built from it then fail with
    /// [`Error::SessionClosed`]. Idempotent; concurrent calls all wait for the close to finish.
    ///
    /// # Cancel safety
    /// If dropped, the close still completes in the background.
    pub async fn close(&self) {
        let shared = self.handle.shared.clone();
        shared.begin_close();
        let task = lock(&shared.supervisor).take();
        match task {
            Some(task) => {
                let _ = task.await;
            }
            None => {
                let mut states = shared.status.subscribe();
                let _ = states.wait_for(|s| s.state == ConnectionState::Closed).await;
            }
        }
    }
}

impl Shared {
    /// Makes `client` the current one, as generation `generation`. Warns when the server granted
    /// another session timeout than the one asked for (once, and again if a later session gets
    /// yet another).
    fn install(self: &Arc<Self>, client: Client, generation: u64) -> Conn {
        let negotiated = client.session_timeout();
        let requested = self.options.session_timeout;
        let before = self.timeout_ms.swap(negotiated.as_millis() as u64, Ordering::SeqCst);
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
        *lock(&self.contact) = (generation, None);
        self.contacts.send_replace(None);
        let conn = Conn::new(client, generation, self);
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
        let connect = self.connect.clone();
        let scan = tokio::task::spawn_blocking(move || nodelay::apply(&server_addresses(&connect)));
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
        self.closed.load(Ordering::SeqCst)
    }

    /// Resolves once the session is closing or closed ([`Session::close`], or every handle
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
        let mut states = self.status.subscribe();
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
        match self.timeout_ms.load(Ordering::SeqCst) {
            0 => self.options.session_timeout,
            ms => Duration::from_millis(ms),
        }
    }

    /// Records that a request of `generation` sent at `sent` was answered.
    pub(crate) fn note_contact(&self, generation: u64, sent: Instant) {
        let mut contact = lock(&self.contact);
        if contact.0 == generation && contact.1.is_none_or(|last| last < sent) {
            contact.1 = Some(sent);
            self.contacts.send_replace(Some(sent));
        }
    }

    pub(crate) fn last_contact(&self, generation: u64) -> Option<Instant> {
        let contact = lock(&self.contact);
        (contact.0 == generation && !self.is_closed()).then_some(contact.1).flatten()
    }

    /// See [`Session::safe_until`]; `None` unless `generation` is the current session.
    pub(crate) fn safe_until(&self, generation: u64) -> Option<Instant> {
        if lock(&self.current).as_ref().is_none_or(|c| c.generation != generation) {
            return None;
        }
        self.last_contact(generation).map(|t| t + self.session_timeout())
    }

    pub(crate) fn track(&self, path: &str) {
        lock(&self.nodes).insert(path.to_string());
    }

    pub(crate) fn untrack(&self, path: &str) {
        lock(&self.nodes).remove(path);
    }

    /// Publishes a state change (to the channel, the event stream and the listeners).
    fn publish(&self, state: ConnectionState, generation: u64) {
        let status = SessionStatus { state, generation };
        tracing::info!(connect = %self.connect, ?state, generation, "session state");
        crate::metrics::session(state, generation);
        self.status.send_replace(status);
        self.tell_listeners(status);
        let _ = self.events.send(status);
    }

    fn begin_close(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            self.closing.send_replace(true);
        }
    }
}
