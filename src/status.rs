//! What a holder knows about its hold.

/// The state of a held lock (or leadership), as seen by its holder.
///
/// It moves `Held` → `Suspended` → `Held` across a connection drop that the session survives,
/// and to `Lost` (for good) when the session expires or our node is deleted by someone else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockStatus {
    /// We hold it, and ZooKeeper agrees as far as we know.
    Held,
    /// The connection dropped; ownership is uncertain until it comes back. If the session
    /// expires meanwhile, another contender may already hold the lock.
    Suspended,
    /// Certainly lost: the session expired or our node was deleted. Another contender may hold it.
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
