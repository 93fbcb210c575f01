//! The connection states a [`crate::Session`] reports.

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
    /// The connection dropped. The session may still be alive on the server: until it comes back,
    /// nobody can tell whether our ephemeral nodes (and so our locks) are still there.
    Suspended,
    /// The connection is back on the same session: our ephemeral nodes, watches and locks survived.
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
