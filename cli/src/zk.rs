//! Every place `zklock` connects to ZooKeeper or builds a recipe, in one module: one
//! `zk_recipes::Session` per run, every recipe built from it.

use std::time::{Duration, Instant};

use tokio::sync::watch;
use zk_recipes::zookeeper_client::Client;
use zk_recipes::{
    ConnectOptions, ConnectionState, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphore,
    LatchOptions, LeaderLatch, Lock as _, LockGuard, LockOptions, NodeFormat, Participant, QueueEvent,
    Session, TlsConfig,
};

use crate::exit::{self, Failure};

/// The default requested session timeout.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// What the global flags say about how to connect.
pub struct Target<'a> {
    pub connect: Option<&'a str>,
    pub session_timeout: Option<Duration>,
    pub tls: Option<TlsConfig>,
    pub sasl: Option<zk_recipes::SaslConfig>,
    /// Digest credentials, `user:password`.
    pub auth: Option<&'a str>,
}

/// The session every recipe of this run is built from.
#[derive(Clone)]
pub struct Conn {
    session: Session,
    /// The connect string, `host:port,host:port[/chroot]`, to ask the servers whether they listen.
    connect: String,
}

impl Conn {
    /// The current raw client, for reads the recipes do not offer (watches, `ls`, `break`).
    pub fn raw(&self) -> Result<Client, Failure> {
        Ok(self.session.client()?)
    }

    /// The session itself, for library calls that take one.
    pub fn session(&self) -> &Session {
        &self.session
    }
}

/// zklock's beat period, as a fraction of the session timeout: a twentieth, the freshest window.
const BEAT_PERIOD: f64 = 0.05;

pub async fn connect(target: Target<'_>) -> Result<Conn, Failure> {
    let connect = target.connect.ok_or_else(|| {
        Failure::new(exit::USAGE, "no ZooKeeper to talk to: pass --connect or set ZK_CONNECT")
    })?;
    // Beats every twentieth (the library's default is 0.14): the kill deadline after a loss is
    // the window, and a fresher window leaves the command a grace (`deadline::best_grace`).
    // zklock beats only while it waits or holds (the library beats only while asked).
    let timeout = target.session_timeout.unwrap_or(DEFAULT_SESSION_TIMEOUT);
    let mut options = ConnectOptions::new(timeout).beat_period(BEAT_PERIOD);
    if let Some(tls) = target.tls {
        options = options.tls(tls);
    }
    if let Some(credentials) = target.auth {
        options = options.auth("digest", credentials.as_bytes());
    }
    if let Some(sasl) = target.sasl {
        options = options.sasl(sasl);
    }
    Ok(Conn { session: Session::connect_with(connect, &options).await?, connect: connect.to_string() })
}

/// After a loss, with the command gone: lets go of our node through `release` (the guard's
/// release, the latch's close) as long as that can end promptly, and not a moment longer.
///
/// Connected, the delete is answered at once, and the next waiter gets the lock now rather than
/// at the session's expiry. Disconnected, it waits for the session to come back (a blip), but
/// stops as soon as the node is gone with the session (`Lost`), as soon as no server listens
/// (every address refuses a connection: an outage, nothing could answer the delete), or when
/// the safe window ends (the server may have expired the session by then). Whichever way it
/// stops, the node is gone or goes with the session's expiry, and nobody can take the lock
/// before that: safety does not depend on this wait, only how soon the next waiter enters.
pub async fn let_go(conn: &Conn, release: impl std::future::Future<Output = ()>) {
    let session = &conn.session;
    // No safe window: the session is lost or closed, and our node with it.
    let Some(window_end) = session.safe_until() else { return };
    let mut states = session.states();
    let gone = states.wait_for(|s| matches!(s.state, ConnectionState::Lost | ConnectionState::Closed));
    let why = tokio::select! {
        () = release => "released",
        _ = gone => "the session is gone",
        () = no_server_listens(session, &conn.connect) => "no server listens",
        () = tokio::time::sleep_until(window_end.into()) => "the safe window ended",
    };
    tracing::debug!(why, "let go of the node");
}

/// Resolves once the session is disconnected and every address of `connect` refuses a TCP
/// connection. While disconnected it asks again at each change of the session's state, when a
/// connection an address accepted ends, and every [`ASK_AGAIN`] as the client's own reconnects
/// do: a ZooKeeper that is shutting down has closed our session's connection but still
/// accepts connections (or holds them unanswered) until its process exits.
async fn no_server_listens(session: &Session, connect: &str) {
    let mut states = session.states();
    loop {
        let connected = states.borrow_and_update().state.is_connected();
        let mut accepted = tokio::task::JoinSet::new();
        if !connected {
            // An address that does not answer within the period is asked again next time.
            let now = tokio::time::timeout(ASK_AGAIN, listening(connect)).await.unwrap_or(Listening::Unknown);
            tracing::debug!(listening = ?now, "asked the servers");
            match now {
                Listening::No => return,
                Listening::Accepted(streams) => {
                    for mut stream in streams {
                        accepted.spawn(async move {
                            use tokio::io::AsyncReadExt as _;
                            let _ = stream.read(&mut [0u8; 64]).await;
                        });
                    }
                }
                Listening::Unknown => {}
            }
        }
        tokio::select! {
            changed = states.changed() => if changed.is_err() { return },
            Some(_) = accepted.join_next() => {}
            () = tokio::time::sleep(ASK_AGAIN), if !connected => {}
        }
    }
}

/// How often [`no_server_listens`] asks the servers again while disconnected.
const ASK_AGAIN: Duration = Duration::from_millis(250);

/// What the addresses of a connect string do with a TCP connection now.
#[derive(Debug)]
enum Listening {
    /// Every one refuses it: nothing listens.
    No,
    /// These accepted it (a server, maybe one shutting down, or something in between).
    Accepted(Vec<tokio::net::TcpStream>),
    /// An address did not resolve, or its connection failed otherwise.
    Unknown,
}

async fn listening(connect: &str) -> Listening {
    let hosts = connect.split('/').next().unwrap_or_default();
    let (mut refused, mut accepted) = (0, Vec::new());
    for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        let Ok(addresses) = tokio::net::lookup_host(host).await else { return Listening::Unknown };
        for address in addresses {
            match tokio::net::TcpStream::connect(address).await {
                Ok(stream) => accepted.push(stream),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => refused += 1,
                Err(_) => return Listening::Unknown,
            }
        }
    }
    match (refused, accepted.is_empty()) {
        (_, false) => Listening::Accepted(accepted),
        (0, true) => Listening::Unknown,
        (_, true) => Listening::No,
    }
}

/// Which lock `run` and `hold` take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The mutex (Curator's `InterProcessMutex`), the default.
    Mutex,
    /// The read side of the read/write lock (`--shared`).
    Read,
    /// The write side of the read/write lock (`--exclusive`).
    Write,
    /// One lease of a semaphore of N (`--limit N`).
    Limit(u32),
}

/// How long to wait for the lock.
#[derive(Clone, Copy, Debug)]
pub enum Wait {
    Try,
    For(Duration),
    Forever,
}

/// A lock of any [`Kind`].
pub enum Lock {
    Mutex(InterProcessMutex),
    Rw { lock: InterProcessReadWriteLock, read: bool },
    Limit(Box<InterProcessSemaphore>),
}

/// A lock of `kind` on `path`. Revocable: the holder watches its node, so `zklock revoke` and
/// `zklock break` reach it at once.
pub fn lock(conn: &Conn, path: &str, kind: Kind, options: LockOptions) -> Result<Lock, Failure> {
    let session = &conn.session;
    let options = options.revocable(true);
    Ok(match kind {
        Kind::Mutex => Lock::Mutex(InterProcessMutex::with_options(session, path, options)?),
        Kind::Read | Kind::Write => Lock::Rw {
            lock: InterProcessReadWriteLock::with_options(session, path, options)?,
            read: kind == Kind::Read,
        },
        Kind::Limit(n) => {
            Lock::Limit(Box::new(InterProcessSemaphore::with_options(session, path, n, options)?))
        }
    })
}

impl Lock {
    /// Acquires, reporting progress to `events` (a try has none to report).
    pub async fn acquire(
        &self,
        wait: Wait,
        events: &mut (dyn for<'e> FnMut(&'e QueueEvent) + Send),
    ) -> zk_recipes::Result<Option<LockGuard>> {
        let timeout = match wait {
            Wait::Try => None,
            Wait::For(t) => Some(t),
            Wait::Forever => None,
        };
        match (self, wait) {
            (Lock::Mutex(m), Wait::Try) => m.try_acquire().await,
            (Lock::Mutex(m), _) => m.acquire_with_events(timeout, events).await,
            (Lock::Rw { lock, read: true }, Wait::Try) => lock.try_read().await,
            (Lock::Rw { lock, read: true }, _) => lock.read_lock().acquire_with_events(timeout, events).await,
            (Lock::Rw { lock, read: false }, Wait::Try) => lock.try_write().await,
            (Lock::Rw { lock, read: false }, _) => {
                lock.write_lock().acquire_with_events(timeout, events).await
            }
            (Lock::Limit(s), Wait::Try) => s.try_acquire().await,
            (Lock::Limit(s), _) => s.acquire_with_events(1, timeout, events).await,
        }
    }

    pub async fn participants(&self) -> zk_recipes::Result<Vec<Participant>> {
        match self {
            Lock::Mutex(m) => m.participants().await,
            Lock::Rw { lock, .. } => lock.participants().await,
            Lock::Limit(s) => s.participants().await,
        }
    }

    /// What this handle's queue work has cost so far (listings include the progress line's).
    pub fn stats(&self) -> zk_recipes::QueueStats {
        match self {
            Lock::Mutex(m) => m.stats(),
            Lock::Rw { lock, .. } => lock.stats(),
            Lock::Limit(s) => s.stats(),
        }
    }

    /// Waits for the background deletes of dropped acquires and guards.
    pub async fn settled(&self) {
        match self {
            Lock::Mutex(m) => m.settled().await,
            Lock::Rw { lock, .. } => lock.settled().await,
            Lock::Limit(s) => s.settled().await,
        }
    }
}

/// The recipe family a queue node's name belongs to, if it looks like one.
fn family(name: &str) -> Option<&'static str> {
    const FAMILIES: [(&str, &str); 7] = [
        ("__rlock__", "read/write lock"),
        ("__lock__", "lock"),
        ("__READ__", "read/write lock"),
        ("__WRIT__", "read/write lock"),
        ("-lease-", "semaphore"),
        ("-latch-", "election"),
        ("-lock-", "lock"),
    ];
    FAMILIES.iter().find(|(marker, _)| name.contains(marker)).map(|(_, family)| *family)
}

/// Refuses a path that holds another recipe's queue nodes: a mutex, a read/write lock and a
/// semaphore on one path would not exclude each other. (A check at start, against mistakes; a
/// contender of another kind arriving later is not seen.)
pub async fn refuse_other_recipes(
    conn: &Conn,
    path: &str,
    kind: Kind,
    format: NodeFormat,
) -> Result<(), Failure> {
    zk_recipes::LockPath::new(path)?;
    let children = match conn.raw()?.list_children(path).await {
        Ok(children) => children,
        Err(zk_recipes::zookeeper_client::Error::NoNode) => return Ok(()),
        Err(e) => {
            return Err(
                zk_recipes::Error::ZooKeeper { op: "list", path: path.into(), source: e.into() }.into()
            )
        }
    };
    let ours: &[&str] = match (kind, format) {
        (Kind::Mutex, NodeFormat::Kazoo) => &["lock", "read/write lock"],
        (Kind::Mutex, _) => &["lock"],
        (Kind::Read | Kind::Write, NodeFormat::Kazoo) => &["lock", "read/write lock"],
        (Kind::Read | Kind::Write, _) => &["read/write lock"],
        (Kind::Limit(_), _) => &["semaphore"],
    };
    let (ours, hint) = (
        ours,
        match kind {
            Kind::Mutex => "",
            Kind::Read | Kind::Write => " (--shared/--exclusive)",
            Kind::Limit(_) => " (--limit)",
        },
    );
    if let Some(theirs) = children.iter().filter_map(|c| family(c)).find(|f| !ours.contains(f)) {
        let how = match theirs {
            "read/write lock" => "take it with --shared or --exclusive",
            "semaphore" => "take it with --limit N",
            "election" => "it is an election: use zklock elect",
            _ => "take it without --shared, --exclusive or --limit",
        };
        return Err(Failure::new(
            exit::USAGE,
            format!("{path} holds {theirs} nodes, not this kind of lock{hint}: {how}"),
        ));
    }
    Ok(())
}

pub fn latch(conn: &Conn, path: &str, id: &str, format: NodeFormat) -> Result<LeaderLatch, Failure> {
    latch_with(conn, path, LatchOptions::new().participant_id(id).format(format))
}

pub fn latch_with(conn: &Conn, path: &str, options: LatchOptions) -> Result<LeaderLatch, Failure> {
    Ok(LeaderLatch::with_options(&conn.session, path, options)?)
}

/// What kind of queue a path holds, for `status`, `ls`, `break` and `revoke`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueKind {
    Lock,
    Election,
    ReadWrite,
    Semaphore,
}

impl QueueKind {
    pub fn name(self) -> &'static str {
        match self {
            QueueKind::Lock => "lock",
            QueueKind::Election => "election",
            QueueKind::ReadWrite => "read/write lock",
            QueueKind::Semaphore => "semaphore",
        }
    }
}

/// The queue under `path`, read as a mutex, an election, a read/write lock or a semaphore
/// (whichever kind of node is there), in `format` names and then in the other format's.
pub async fn queue(
    conn: &Conn,
    path: &str,
    format: NodeFormat,
) -> Result<Option<(QueueKind, Vec<Participant>)>, Failure> {
    let other = if format == NodeFormat::Kazoo { NodeFormat::Curator } else { NodeFormat::Kazoo };
    for format in [format, other] {
        let options = LockOptions::new().format(format);
        let found = lock(conn, path, Kind::Mutex, options.clone())?.participants().await?;
        if !found.is_empty() {
            return Ok(Some((QueueKind::Lock, found)));
        }
        let found = latch(conn, path, "zklock-status", format)?.participants().await?;
        if !found.is_empty() {
            return Ok(Some((QueueKind::Election, found)));
        }
        let found = lock(conn, path, Kind::Read, options.clone())?.participants().await?;
        if !found.is_empty() {
            return Ok(Some((QueueKind::ReadWrite, found)));
        }
    }
    // A semaphore keeps its maximum as the path's data; Curator names only.
    if let Some(max) = semaphore_max(conn, path).await {
        let found = lock(conn, path, Kind::Limit(max), LockOptions::new())?.participants().await?;
        if !found.is_empty() {
            return Ok(Some((QueueKind::Semaphore, found)));
        }
    }
    Ok(None)
}

async fn semaphore_max(conn: &Conn, path: &str) -> Option<u32> {
    let (data, _) = conn.raw().ok()?.get_data(path).await.ok()?;
    std::str::from_utf8(&data).ok()?.trim().parse().ok().filter(|&n| n > 0)
}

/// The latest "confirmed contact" with the server: the send time of the latest request of the
/// session that got a reply (`Session::contacts`, kept fresh by the session's own beat).
#[derive(Clone)]
pub struct Contact {
    last: watch::Receiver<Option<Instant>>,
    session: Session,
}

impl Contact {
    /// Follows the session's contacts; returns once one is known (within the session timeout,
    /// else the hold counts as lost).
    pub async fn start(conn: &Conn) -> Result<Contact, Failure> {
        let session = conn.session.clone();
        let mut last = session.contacts();
        let known = tokio::time::timeout(session.session_timeout(), last.wait_for(Option::is_some))
            .await
            .map(|r| r.is_ok());
        if known != Ok(true) {
            return Err(Failure::new(exit::LOST, "no reply from ZooKeeper within the session timeout"));
        }
        Ok(Contact { last, session })
    }

    /// The negotiated session timeout.
    pub fn session_timeout(&self) -> Duration {
        self.session.session_timeout()
    }

    /// Resolves when a new contact is recorded.
    pub async fn changed(&mut self) {
        if self.last.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// The session's safe window (for leadership: the latch lives in this session).
    pub fn session_safe_until(&self) -> Option<Instant> {
        self.session.safe_until()
    }
}
