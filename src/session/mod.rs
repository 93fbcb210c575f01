//! [`Session`]: the one object a user connects, and that outlives session expiry.
//!
//! A ZooKeeper session ends when the server has heard nothing from us for the negotiated
//! timeout. The raw client is bound to one session for life; a [`Session`] owns the current
//! raw client, starts a new session after an expiry (with capped exponential backoff and jitter),
//! and reports every change on a state channel. Recipes are built from a [`Session`] and carry on
//! across new sessions by themselves.

mod connect;
mod creates;
mod deletes;
mod demand;
mod driver;
mod features;
mod guess;
mod listeners;
mod nodelay;
mod options;
mod parked;
mod proof;
mod relay;
#[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
mod sasl;
mod shared;
mod supervisor;
#[cfg(feature = "tls")]
mod tls;
mod window;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, watch};
use zookeeper_client::Client;

use self::connect::open_client;
pub(crate) use self::creates::{sequence_of, Behind, SharedListing};
pub(crate) use self::deletes::DeleteFuture;
pub(crate) use self::demand::Asking;
pub use self::features::ServerFeatures;
pub(crate) use self::listeners::{Listener, Registration};
pub use self::options::ConnectOptions;
#[cfg(any(feature = "sasl-digest-md5", feature = "sasl-gssapi"))]
pub use self::sasl::SaslConfig;
pub(crate) use self::shared::{Conn, Departure, Shared};
#[cfg(feature = "tls")]
pub use self::tls::TlsConfig;
#[cfg(doc)]
use crate::error::ConnectFailure;
use crate::error::{Error, Result};
pub(crate) use crate::status::{ConnectionState, SessionStatus};
use crate::util::lock;

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
///   have expired this session (the send time of our latest request proven to have reached the
///   leader, plus the negotiated timeout): work that must stop before anyone else may take our
///   locks must stop before it. The session proves it with beats (`sync`s) **only while it is
///   asked for**: by a hold, an acquire, or a caller of the window (see
///   [`ConnectOptions::beat_period`]); otherwise it sends only the client crate's pings.
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

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = *self.handle.shared.reports.status.borrow();
        f.debug_struct("Session")
            .field("connect", &self.handle.shared.connect.shown)
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
        // The session cannot have been touched by its leader before we asked for it.
        let asked = std::time::Instant::now();
        let relay = match options.follow_ensemble {
            true => Some(relay::start(connect, options)?),
            false => None,
        };
        let opened = open_client(connect, relay.as_ref().map(|r| r.address()), options).await?;
        let shared = Shared::new(connect, options, relay);
        let conn = shared.install(opened, 1, asked);
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

    /// The servers this session's connections go to (`host:port` each): the connect string's,
    /// or, with [`ConnectOptions::follow_ensemble`], those of the ensemble's latest
    /// configuration once it has been read.
    pub fn servers(&self) -> Vec<String> {
        let connect = &self.handle.shared.connect;
        match &connect.relay {
            Some(relay) => relay.servers(),
            None => self::connect::server_list(&connect.shown),
        }
    }

    /// Which session this is: 1 for the first, one more after each expiry.
    pub fn generation(&self) -> u64 {
        self.handle.shared.reports.status.borrow().generation
    }

    /// The connection state now.
    pub fn state(&self) -> ConnectionState {
        self.handle.shared.reports.status.borrow().state
    }

    /// The latest [`SessionStatus`], as a channel (intermediate states may be skipped; use
    /// [`Session::events`] to see each one).
    pub fn states(&self) -> watch::Receiver<SessionStatus> {
        self.handle.shared.reports.status.subscribe()
    }

    /// Every state change from now on, in order (a receiver that falls more than 64 changes
    /// behind gets `RecvError::Lagged`).
    pub fn events(&self) -> broadcast::Receiver<SessionStatus> {
        self.handle.shared.reports.events.subscribe()
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

    /// What the server this session is connected to can do ([`ServerFeatures`]): learned once
    /// per connection with one `multi` that creates and deletes an ephemeral child of `parent`
    /// (a path this session may create children under, such as a recipe's root, or `/`), then
    /// kept until the connection changes. A session can move to a server of another version
    /// without a new session (during a rolling upgrade): code that relies on a feature still
    /// checks each answer (a `multi`'s create `Stat` with `Stat::is_invalid`).
    ///
    /// # Errors
    /// [`Error::InvalidPath`] for a `parent` that is not a valid path (nothing sent);
    /// [`Error::ZooKeeper`] when the probe fails (`parent` missing, say); [`Error::NoAuth`]
    /// when this session may not create there; [`Error::SessionExpired`] /
    /// [`Error::SessionClosed`] between sessions and after close.
    ///
    /// # Cancel safety
    /// Cancel-safe: the probe is one atomic transaction that leaves nothing behind; an
    /// abandoned probe caches nothing.
    pub async fn server_features(&self, parent: &str) -> Result<ServerFeatures> {
        let conn = self.handle.shared.conn()?;
        conn.features.learn(&conn.client, parent).await
    }

    /// What [`Session::server_features`] learned on the current connection, without asking:
    /// `None` before the first probe, after every disconnection and in a new session.
    pub fn known_server_features(&self) -> Option<ServerFeatures> {
        self.handle.shared.conn().ok().and_then(|conn| conn.features.get())
    }

    /// The identities the server knows this session by (ZooKeeper's `whoami`, 3.7 and later):
    /// `ip:<address>`, the client's address, and `sasl:<user>` for a SASL session
    /// (`ConnectOptions::sasl`).
    ///
    /// # Errors
    /// [`Error::ServerTooOld`] (`op` `"whoami"`) from a ZooKeeper 3.6 server, which has no
    /// `whoami`. A SASL session learned that while connecting and answers at once. Otherwise
    /// the first call of each session generation asks: a 3.6 server answers `Unimplemented`
    /// and then closes the connection (not the session), so the call returns once the session
    /// has reconnected (within the connect wait), and later calls answer at once.
    /// [`Error::ConnectionLoss`] when the connection is lost meanwhile;
    /// [`Error::SessionExpired`] / [`Error::SessionClosed`] between sessions and after close.
    ///
    /// # Cancel safety
    /// Cancel-safe: a read.
    pub async fn whoami(&self) -> Result<Vec<zookeeper_client::AuthUser>> {
        let conn = self.handle.shared.conn()?;
        let wait = connect::connect_wait(self.session_timeout());
        conn.features.whoami(&conn.client, wait).await
    }

    /// The session timeout asked for (given to [`Session::connect`] or [`ConnectOptions::new`]).
    /// The server may have granted another: [`Session::session_timeout`].
    pub fn requested_session_timeout(&self) -> Duration {
        self.handle.shared.options.session_timeout
    }

    /// The send time of the latest request of the current session proven to have reached the
    /// ZooKeeper leader, which is the server that expires sessions; at first, when the session
    /// was asked for.
    ///
    /// While the window is asked for, the session beats with a `sync` a period after the
    /// previous one was answered (0.14 of the negotiated timeout unless
    /// [`ConnectOptions::beat_period`] says otherwise). A follower forwards a `sync` to the
    /// leader, but tells the leader of our requests only in its replies to the leader's pings.
    /// So an answered beat proves a beat sent at least a quarter of the timeout before the one
    /// before it, and this lags the latest answer by that quarter rounded up to whole periods,
    /// plus a period and the round trips, while connected: 0.42 to 0.44 of the timeout at the
    /// default period, 0.3 to 0.35 at the shortest. An answer from a follower that the leader
    /// no longer hears proves nothing, and this stops moving. docs/safety.md, "The safe
    /// window", gives the argument.
    ///
    /// Calling this asks for the window for one session timeout: the session beats meanwhile.
    /// On a session that nobody asked for a while, the first call returns an old contact; the
    /// next proofs, a few round trips to a quarter of the timeout later, move it.
    pub fn last_contact(&self) -> Option<Instant> {
        self.handle.shared.ask_window();
        self.handle.shared.last_contact(self.generation())
    }

    /// [`Session::last_contact`] as a channel: it changes with every proof (and is set to when
    /// the new session was asked for when one starts), for a watchdog that must act when answers stop coming.
    /// The window is asked for while the receiver lives: the session beats.
    pub fn contacts(&self) -> watch::Receiver<Option<Instant>> {
        let contacts = self.handle.shared.contact.channel.subscribe();
        self.handle.shared.ask_window();
        contacts
    }

    /// The instant before which the server cannot expire the current session:
    /// [`Session::last_contact`] plus the negotiated timeout. It carries **no margin**: subtract
    /// your own (scheduling delays, the time it takes to stop what you run). While connected
    /// and asked for, it stays 0.43 to 0.58 of the timeout ahead at the default beat period
    /// (the timeout, less [`Session::last_contact`]'s lag, less the time since the latest
    /// answer), more with a shorter one (see [`ConnectOptions::beat_period`]). `None` while a
    /// new session is being started, and after close.
    ///
    /// Calling this asks for the window for one session timeout (the session beats meanwhile):
    /// on a session that nobody asked for a while, the first call may return an instant already
    /// passed, until the next proofs. A hold's window ([`crate::LockGuard::safe_until`]) is
    /// asked for as long as the hold lives, and proven when the acquire hands it out.
    pub fn safe_until(&self) -> Option<Instant> {
        self.handle.shared.ask_window();
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
                let mut states = shared.reports.status.subscribe();
                let _ = states.wait_for(|s| s.state == ConnectionState::Closed).await;
            }
        }
    }
}
