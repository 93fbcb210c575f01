//! Options shared by the lock recipes.

use std::sync::Arc;

use zookeeper_client::{Acl, Acls};

use crate::naming::NodeFormat;
use crate::status::LossPolicy;

/// Options for a lock recipe. `LockOptions::default()` is what `new` uses.
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct LockOptions {
    pub(crate) participant_id: Option<String>,
    pub(crate) loss_policy: LossPolicy,
    pub(crate) format: NodeFormat,
    pub(crate) acls: Option<Arc<[Acl]>>,
    pub(crate) role: Option<Arc<str>>,
    pub(crate) revocable: bool,
}

impl LockOptions {
    /// The defaults: participant id `hostname:pid`, [`LossPolicy::SuspendedIsLost`], Curator
    /// node names.
    pub fn new() -> LockOptions {
        LockOptions::default()
    }

    /// The participant id stored as our nodes' data (shown by `participants()`).
    pub fn participant_id(mut self, id: impl Into<String>) -> LockOptions {
        self.participant_id = Some(id.into());
        self
    }

    /// Whether a suspended connection counts as a lost lock.
    pub fn loss_policy(mut self, policy: LossPolicy) -> LockOptions {
        self.loss_policy = policy;
        self
    }

    /// The node naming format, for sharing a path with Curator (the default) or kazoo clients.
    pub fn format(mut self, format: NodeFormat) -> LockOptions {
        self.format = format;
        self
    }

    /// The ACLs of the nodes the recipe creates, parents included (default: open to anyone, as
    /// Curator's). With digest credentials on the client, `Acls::creator_all()` makes our nodes
    /// ours alone: nobody else can delete them or set `__REVOKE__` on them.
    pub fn acls(mut self, acls: Acls<'_>) -> LockOptions {
        self.acls = Some(Arc::from(acls.to_vec()));
        self
    }

    /// Makes the holder watch its own node, as Curator's `makeRevocable()`: it then sees
    /// [`crate::LockStatus::RevocationRequested`] when someone asks it to release
    /// ([`crate::request_revocation`], `zklock revoke`), and [`crate::LockStatus::Lost`] at once
    /// when someone deletes its node (`zklock break`). The watch costs one request per
    /// acquisition (sent with the create, never waited for) and one event at release; without
    /// it (the default) an uncontended acquire costs only the create and the listing, and a
    /// deletion by someone else shows at release ([`crate::Error::LockLost`]) and in fenced
    /// writes. Session loss is reported either way.
    pub fn revocable(mut self, revocable: bool) -> LockOptions {
        self.revocable = revocable;
        self
    }

    /// The `role` label of this lock's metrics (default `default`): name what the path is for
    /// (`orders`, `stock`), never the path itself, so that label values stay few.
    pub fn metrics_role(mut self, role: &str) -> LockOptions {
        self.role = Some(Arc::from(role));
        self
    }

    pub(crate) fn data(&self) -> Vec<u8> {
        self.participant_id.clone().unwrap_or_else(crate::identity::default_participant_id).into_bytes()
    }
}
