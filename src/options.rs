//! Options shared by the lock recipes.

use crate::status::LossPolicy;

/// Options for a lock recipe. `LockOptions::default()` is what `new` uses.
#[derive(Clone, Debug, Default)]
pub struct LockOptions {
    pub(crate) participant_id: Option<String>,
    pub(crate) loss_policy: LossPolicy,
}

impl LockOptions {
    /// The defaults: participant id `hostname:pid`, [`LossPolicy::SuspendedIsLost`].
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

    pub(crate) fn data(&self) -> Vec<u8> {
        self.participant_id.clone().unwrap_or_else(crate::identity::default_participant_id).into_bytes()
    }
}
