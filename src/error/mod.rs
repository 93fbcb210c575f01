//! The crate's error type.

mod connect;

use std::time::Duration;

pub(crate) use self::connect::classify;
pub use self::connect::{ConnectFailure, Probe};

/// Why a lock path was refused. See [`crate::LockPath::new`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// The path is empty.
    #[error("the path is empty")]
    Empty,
    /// The path does not start with `/`.
    #[error("the path must start with '/'")]
    NotAbsolute,
    /// The path is `/` itself; a lock needs its own directory.
    #[error("the root '/' cannot be a lock path")]
    Root,
    /// The path ends with `/`.
    #[error("the path must not end with '/'")]
    TrailingSlash,
    /// The path has `//`.
    #[error("the path has an empty segment ('//')")]
    EmptySegment,
    /// The path has a `.` or `..` segment.
    #[error("the path has a relative segment ('.' or '..')")]
    RelativeSegment,
    /// The path has a NUL character.
    #[error("the path has a NUL character")]
    Nul,
    /// The path has a character ZooKeeper refuses (controls, surrogates, non-characters).
    #[error("the path has a character ZooKeeper refuses: {0:?}")]
    BadCharacter(char),
    /// The path is under `/zookeeper`, which the server reserves.
    #[error("'/zookeeper' is reserved by the server")]
    Reserved,
    /// The path is longer than [`crate::LockPath::MAX_LEN`] bytes.
    #[error("the path is {len} bytes, more than the {max} allowed")]
    TooLong {
        /// The path's length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// Errors of every recipe in this crate.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A lock path was refused before anything was sent.
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// Why it was refused.
        reason: PathError,
    },

    /// The ZooKeeper session expired: every node it created is gone, so any lock it held is
    /// lost. A [`crate::Session`] starts a new session by itself; recipes built from it carry
    /// on (acquires queue again), so this reaches you only from calls bound to the old session
    /// (a hold's release, a raw client taken before the expiry) or from
    /// [`crate::Session::client`] while the new session is being started. Try again after
    /// [`crate::Session::connected`].
    #[error("ZooKeeper session expired; a new one is being started (await Session::connected, then retry)")]
    SessionExpired,

    /// The [`crate::Session`] was closed (or every handle to it dropped). Connect a new one.
    #[error("the ZooKeeper session was closed; connect a new Session")]
    SessionClosed,

    /// The connection dropped while a request was in flight and its outcome is unknown. Local
    /// state is consistent and a later call may succeed.
    #[error("connection to ZooKeeper lost during {op} on {path}")]
    ConnectionLoss {
        /// The operation.
        op: &'static str,
        /// The path it targeted.
        path: String,
    },

    /// No ZooKeeper session could be started within the connect wait (the session timeout, at
    /// least 2 s; see [`crate::Session::connect`]), or the connect string cannot be read.
    /// `reason` says which failure it was, from what a plain TCP connection to each address found
    /// (`probes`); the message names each address and what to check.
    #[error(
        "cannot connect to ZooKeeper at {connect:?}: {}",
        connect::describe(*.reason, .probes, *.waited, .source.as_zookeeper_client())
    )]
    Connect {
        /// The connect string.
        connect: String,
        /// Why: every address refused, one accepts but started no session, none answered, or a
        /// connect string the client cannot read.
        reason: ConnectFailure,
        /// What a plain TCP connection to each address of the connect string found, once the
        /// attempts had failed (empty for [`crate::ConnectFailure::BadConnectString`]).
        probes: Vec<(std::net::SocketAddr, Probe)>,
        /// How long connecting went on.
        waited: Duration,
        /// What the client reported last (`timeout` when the wait ran out).
        #[source]
        source: ClientError,
    },

    /// No server of the connect string could be found: its host name (every one, for an
    /// ensemble) could not be resolved to an address. Nothing was sent. Check the spelling of the
    /// host, and the resolver (DNS, `/etc/hosts`) of this machine.
    #[error(
        "cannot connect to ZooKeeper at {connect:?}: the address of {host:?} could not be resolved \
         ({reason}); check the host name and this machine's DNS or /etc/hosts"
    )]
    Resolve {
        /// The connect string.
        connect: String,
        /// The first host that could not be resolved.
        host: String,
        /// What the resolver reported.
        reason: String,
    },

    /// TLS settings that cannot work: an unreadable or empty PEM file, a certificate without
    /// its key, or a server name a certificate cannot be checked against. Nothing was sent.
    #[error("TLS: {reason}")]
    Tls {
        /// What is wrong, naming the file or host (never key material).
        reason: String,
    },

    /// The servers refused this session's authentication at connect: SASL credentials they do
    /// not accept (a wrong password, an unknown user or principal), Kerberos credentials that
    /// could not be had (no ticket or keytab, an unknown service principal, no KDC answering),
    /// or servers that require SASL (`enforce.auth.enabled`, `sessionRequireClientSASLAuth`)
    /// from a session configured without it. No session was started.
    #[error("authentication refused at {connect} ({mechanism}): {reason}")]
    AuthFailed {
        /// The connect string.
        connect: String,
        /// The SASL mechanism (`DIGEST-MD5`, `GSSAPI`), or `none` when no SASL was configured.
        mechanism: &'static str,
        /// What failed (never a password).
        reason: String,
    },

    /// The connect string's chroot does not exist (connect with
    /// [`crate::ConnectOptions::create_chroot`] to create it).
    #[error("the chroot {chroot} does not exist on the server")]
    ChrootMissing {
        /// The chroot path.
        chroot: String,
    },

    /// The server refused our credentials for this path (ACL).
    #[error("not authorized for {op} on {path}")]
    NoAuth {
        /// The operation.
        op: &'static str,
        /// The path.
        path: String,
    },

    /// Our queue node was deleted by someone else (an administrator, say) while we waited or held.
    #[error("our node {path} was deleted by someone else")]
    NodeDeleted {
        /// The node's path.
        path: String,
    },

    /// The lock was lost while held (session expiry, or our node deleted); see
    /// [`crate::LockStatus::Lost`]. A fenced write was refused for this reason.
    #[error("the lock on {path} was lost")]
    LockLost {
        /// The lock path.
        path: String,
    },

    /// [`crate::LockGuard::ensure_safe`]: the hold is not lost, but less than the margin asked
    /// for is left of its safe window (none at all after a pause of this process or a silent
    /// server past the window). Stop before writing: another holder may exist before long, or
    /// already. The hold may come back (`Held` once the server answers again, if the session
    /// survived); a fencing token at the resource is what refuses a write made anyway.
    #[error(
        "the lock on {path} is not safe to act on: {left:?} of its safe window left, {margin:?} asked for"
    )]
    UnsafeWindow {
        /// The lock path.
        path: String,
        /// What is left of the safe window (zero once it has passed).
        left: Duration,
        /// The margin asked for.
        margin: Duration,
    },

    /// The recipe was closed (its `close()` was called, or it was dropped) before the awaited
    /// event. Build a new one to take part again.
    #[error(
        "the recipe on {path} is closed (close() was called or it was dropped); build a new one to \
         take part again"
    )]
    Closed {
        /// The recipe's path.
        path: String,
    },

    /// [`crate::LockGuard::reenter`] on a lock that is not reentrant (a semaphore lease, an
    /// `InterProcessSemaphoreMutex`). Acquire it again through the recipe instead (which waits).
    #[error("the lock on {path} is not reentrant; acquire it again through the recipe instead")]
    NotReentrant {
        /// The lock path.
        path: String,
    },

    /// The recipe was started twice.
    #[error("the recipe on {path} is already started")]
    AlreadyStarted {
        /// The recipe's path.
        path: String,
    },

    /// The path holds queue nodes of the other naming format (Curator's on a kazoo-format recipe,
    /// or kazoo's on a Curator-format one). The two order nodes differently, so sharing a path
    /// would let two holders in at once; nothing of ours was left behind.
    #[error("{path} holds {theirs}-format node {node:?}; a {ours}-format recipe can't share it safely")]
    FormatConflict {
        /// The recipe path.
        path: String,
        /// The first offending node.
        node: String,
        /// Our format.
        ours: crate::format::NodeFormat,
        /// Theirs.
        theirs: crate::format::NodeFormat,
    },

    /// The path holds queue nodes of another kind of recipe (a leader latch's nodes on a mutex
    /// path, a semaphore's on a read/write lock's, Curator's or kazoo's as well as ours). Recipes
    /// of different kinds ignore each other's nodes, so sharing a path would let both admit at
    /// once (two leaders, a writer beside a lease holder); the recipe refuses instead, and
    /// nothing of ours was left behind. Recipes that share a path by design still do: a mutex
    /// beside Curator's mutex or a leader selector (both queue `lock-` nodes), the two sides of a
    /// read/write lock.
    #[error("{path} holds {theirs} node {node:?}; a {ours} can't share the path with it (use another path)")]
    RecipeConflict {
        /// The recipe path.
        path: String,
        /// The first offending node.
        node: String,
        /// What our queue is: `lock` (a mutex, a semaphore mutex or a leader selector), `leader
        /// latch`, `read/write lock` or `semaphore`.
        ours: &'static str,
        /// What its node says it is, e.g. `a leader latch`.
        theirs: &'static str,
    },

    /// ZooKeeper's sequence counter under the path has wrapped past 2^31 creations, and the order
    /// Curator and kazoo use (the text of the sequence suffix) no longer follows creation order:
    /// `node` sorts ahead of nodes created before it. Going on could admit two holders, so the
    /// recipe refuses; nothing of ours was left behind.
    ///
    /// What to do: let the path empty (every participant releases or closes), so that its
    /// CONTAINER parent is removed by the server, or delete the path when it is empty; the next
    /// participant re-creates it with a counter back at 0. A path created as a persistent node
    /// by hand is never removed by the server: delete it.
    #[error(
        "the sequence counter under {path} has wrapped (node {node:?} sorts ahead of older nodes), \
         so Curator's and kazoo's order no longer follows creation order; refused to avoid two \
         holders. Let {path} empty so the server removes it (a CONTAINER node), or delete it once \
         empty: re-created, its counter starts at 0 again"
    )]
    SequenceWrapped {
        /// The recipe path.
        path: String,
        /// The first node out of creation order.
        node: String,
    },

    /// The recipe has no equivalent in that naming format.
    #[error("the {recipe} recipe has no {format}-format equivalent")]
    UnsupportedFormat {
        /// The recipe.
        recipe: &'static str,
        /// The format asked for.
        format: crate::format::NodeFormat,
    },

    /// A semaphore was asked for a lease count it can never grant (0, or above its maximum).
    #[error("cannot take {requested} leases of a semaphore with {max} on {path}")]
    BadLeaseCount {
        /// The semaphore path.
        path: String,
        /// Leases asked for.
        requested: u32,
        /// The semaphore's maximum.
        max: u32,
    },

    /// The semaphore's configured maximum differs from the one stored at its path by the
    /// participants already using it.
    #[error("semaphore {path} is configured with {configured} leases but {stored:?} is stored there")]
    LeaseMaxMismatch {
        /// The semaphore path.
        path: String,
        /// Our maximum.
        configured: u32,
        /// What the path holds.
        stored: String,
    },

    /// The server answered that it does not implement a request the operation needs: it is
    /// older than that request (a `multi` read, which the recipes' `participants()` and
    /// `zk_recipes::inspect` send, needs ZooKeeper 3.6.0; 3.5 answers `Unimplemented`; `whoami`,
    /// [`crate::Session::whoami`], needs 3.7.0). docs/compatibility.md says which version each
    /// feature needs.
    #[error(
        "the ZooKeeper server does not implement {op} (on {path}): it is older than the request \
         needs (a multi-read needs ZooKeeper 3.6.0 or later, whoami 3.7.0; see docs/compatibility.md)"
    )]
    ServerTooOld {
        /// The request the server refused (`"multi-read"`, `"whoami"`).
        op: &'static str,
        /// The path it was about.
        path: String,
    },

    /// The operation gave up after its deadline. Nothing of ours was left behind.
    #[error("timed out after {0:?}")]
    Timeout(Duration),

    /// Any other error from ZooKeeper, with the operation and path for context.
    #[error("ZooKeeper {op} on {path} failed: {source}")]
    ZooKeeper {
        /// The operation.
        op: &'static str,
        /// The path.
        path: String,
        /// The client's error.
        #[source]
        source: ClientError,
    },

    /// A session timeout that cannot be asked of ZooKeeper: under 1 ms (zero would become the
    /// client's default of 6 s), or over `i32::MAX` milliseconds (the protocol carries it as a
    /// signed 32-bit count of milliseconds). Nothing was sent.
    #[error(
        "invalid session timeout {requested:?}: ask for 1 ms to {} ms (i32::MAX); the server then \
         bounds it to its [minSessionTimeout, maxSessionTimeout], by default 2 to 20 ticks",
        i32::MAX
    )]
    InvalidSessionTimeout {
        /// The session timeout asked for.
        requested: Duration,
    },

    /// A beat period ([`crate::ConnectOptions::beat_period`]) outside a twentieth to three
    /// twentieths of the session timeout (or not a number). Nothing was sent.
    #[error(
        "invalid beat period {fraction} of the session timeout: ask for 0.05 (a twentieth) to 0.15 \
         (three twentieths; the default is 0.14)"
    )]
    InvalidBeatPeriod {
        /// The fraction of the negotiated session timeout asked for.
        fraction: f64,
    },
}

/// An error reported by the `zookeeper-client` crate, kept opaque so that this crate's API does
/// not change when that crate does. Its message says what happened;
/// [`ClientError::as_zookeeper_client`] gives the underlying error (the escape hatch: its type
/// follows `zookeeper-client`'s versions).
#[derive(Clone, Debug)]
pub struct ClientError(zookeeper_client::Error);

impl ClientError {
    /// The underlying `zookeeper_client` error.
    pub fn as_zookeeper_client(&self) -> &zookeeper_client::Error {
        &self.0
    }

    /// Whether the request's outcome is unknown because the connection failed (see
    /// [`is_connection_loss`]).
    pub fn is_connection_loss(&self) -> bool {
        is_connection_loss(&self.0)
    }
}

impl From<zookeeper_client::Error> for ClientError {
    fn from(e: zookeeper_client::Error) -> ClientError {
        ClientError(e)
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// This crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps a client error with the operation and path it came from, mapping the codes callers
    /// act on to their own variants.
    pub(crate) fn zk<'a>(
        op: &'static str,
        path: &'a str,
    ) -> impl FnOnce(zookeeper_client::Error) -> Error + 'a {
        move |source| Error::from_zk(op, path, source)
    }

    pub(crate) fn from_zk(op: &'static str, path: &str, source: zookeeper_client::Error) -> Error {
        use zookeeper_client::Error as Zk;
        match source {
            Zk::SessionExpired | Zk::ClientClosed | Zk::SessionMoved => Error::SessionExpired,
            source if is_connection_loss(&source) => Error::ConnectionLoss { op, path: path.to_string() },
            Zk::NoAuth | Zk::AuthFailed => Error::NoAuth { op, path: path.to_string() },
            Zk::Unimplemented => Error::ServerTooOld { op, path: path.to_string() },
            source => Error::ZooKeeper { op, path: path.to_string(), source: ClientError(source) },
        }
    }

    /// True for errors after which retrying the same call may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::ConnectionLoss { .. } | Error::Timeout(_))
    }
}

/// True when a request's outcome is unknown because the connection under it failed.
///
/// The `zookeeper-client` crate fails the requests in flight with the error that ended the
/// connection, and that is not always [`zookeeper_client::Error::ConnectionLoss`]: a reset socket
/// gives `Custom` (wrapping the I/O error), a silent server gives `Custom("no response from
/// connection …")`, and a garbled reply gives `UnexpectedError` or `UnmarshalError`. All of them
/// mean the same thing to a caller: the request may or may not have been applied, the session
/// may still be alive, and a retry after the client reconnects is the right move. Server error
/// codes (such as `NoNode`) and session ends (`SessionExpired`, `ClientClosed`) are not
/// connection losses.
///
/// Every retry loop in this crate uses this test; use it in yours.
pub fn is_connection_loss(err: &zookeeper_client::Error) -> bool {
    use zookeeper_client::Error as Zk;
    matches!(err, Zk::ConnectionLoss | Zk::Custom(_) | Zk::UnexpectedError(_) | Zk::UnmarshalError { .. })
}
