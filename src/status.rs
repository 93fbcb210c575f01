//! What a holder knows about its hold ([`LockStatus`], [`LossPolicy`]), and what a session
//! reports of its connection ([`ConnectionState`], [`SessionStatus`]).

/// The state of a held lock (or leadership), as seen by its holder.
///
/// It moves `Held` → `Suspended` → `Held` across a connection drop that the session survives,
/// and to `Lost` (for good) when the session expires, our node is deleted by someone else, or
/// the hold's [`crate::LockOptions::max_hold`] passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockStatus {
    /// We hold it, and ZooKeeper agrees as far as we know.
    Held,
    /// The connection dropped, or the safe window passed without an answer from the server (a
    /// pause of this process, a server that stopped answering); ownership is uncertain until
    /// the server answers again. If the session expires meanwhile, another contender may
    /// already hold the lock.
    Suspended,
    /// Certainly lost: the session expired, our node was deleted, or the maximum hold
    /// ([`crate::LockOptions::max_hold`]) passed (and we deleted our node). Another contender
    /// may hold it.
    Lost,
    /// Still held, but someone asked us to release it (our node's data was set to
    /// `__REVOKE__`, as Curator's revocation). The holder decides whether to release.
    RevocationRequested,
}

/// Whether [`LockStatus::Suspended`] counts as lost, as Curator's `ConnectionStateErrorPolicy`.
///
/// It decides when `lost()` on a guard resolves (and so, in the CLI, when a child is killed);
/// the status channel always shows the real state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossPolicy {
    /// `Suspended` counts as lost (Curator's `StandardConnectionStateErrorPolicy`). The safe
    /// default: a holder that can't reach ZooKeeper can't know that nobody else holds the lock.
    #[default]
    SuspendedIsLost,
    /// Only `Lost` counts (Curator's `SessionConnectionStateErrorPolicy`): a holder rides out a
    /// short disconnect, accepting that near the session timeout another may already hold it.
    SessionOnly,
}

impl LossPolicy {
    /// Whether `status` counts as lost under this policy.
    pub fn is_lost(self, status: LockStatus) -> bool {
        match status {
            LockStatus::Lost => true,
            LockStatus::Suspended => self == LossPolicy::SuspendedIsLost,
            LockStatus::Held | LockStatus::RevocationRequested => false,
        }
    }
}

/// The state of a [`crate::Session`]'s connection, as Curator's `ConnectionState`.
///
/// ```text
///            connect()                      connection drops
///   ──────────────────────▶ Connected ───────────────────────▶ Suspended
///                               ▲                               │    │
///                               │ new session (generation + 1)  │    │ back on the same session
///                               │                               │    ▼
///                             Lost ◀──────────────────────── session  Reconnected ──▶ (drops again:
///                                       expired on the server         Suspended)
///   close() from any state ──▶ Closed (final)
/// ```
///
/// | ours | Curator's `ConnectionState` | kazoo's `KazooState` |
/// |---|---|---|
/// | `Connected` | `CONNECTED` (first session), `RECONNECTED` after `LOST` | `CONNECTED` |
/// | `Suspended` | `SUSPENDED` | `SUSPENDED` |
/// | `Reconnected` | `RECONNECTED` (same session) | `CONNECTED` |
/// | `Lost` | `LOST` | `LOST` |
/// | `Closed` | (the framework is closed) | (the client is stopped) |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectionState {
    /// A new session is established: the first one, or the one after a [`ConnectionState::Lost`]
    /// (its [`SessionStatus::generation`] is one more than the last).
    Connected,
    /// The connection dropped, or the safe window ([`crate::Session::safe_until`]) passed
    /// without an answer from the server (a pause of this process past it, or a server that
    /// stopped answering while the connection stayed up). The session may still be alive on the
    /// server: until it answers again, nobody can tell whether our ephemeral nodes (and so our
    /// locks) are still there.
    Suspended,
    /// The connection is back on the same session, and the server has answered within the
    /// session timeout (the safe window is open again): our ephemeral nodes, watches and locks
    /// survived.
    Reconnected,
    /// The session expired: every ephemeral node of it is gone, and every lock or leadership it
    /// held is lost. A new session follows on its own ([`ConnectionState::Connected`]).
    Lost,
    /// [`crate::Session::close`] was called (or every handle was dropped). Final.
    Closed,
}

impl ConnectionState {
    /// Whether requests can be answered now (`Connected` or `Reconnected`).
    pub fn is_connected(self) -> bool {
        matches!(self, ConnectionState::Connected | ConnectionState::Reconnected)
    }
}

/// A state and the session generation it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SessionStatus {
    /// The connection state.
    pub state: ConnectionState,
    /// Which session this is: 1 for the first, one more after each expiry.
    pub generation: u64,
}
