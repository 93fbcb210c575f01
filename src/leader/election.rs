//! What the two leader recipes share: [`Election`] (the core, the participant id and the
//! lifecycle), [`Handle`] (what a recipe's clones hold, closing it when the last one goes),
//! and, generated once for both, the handles' common methods (`election_handle!`) and the
//! options' setters that pass through to [`LockOptions`] (`lock_setters!`).

use std::sync::Arc;

use tokio::sync::oneshot;

use super::lifecycle::Lifecycle;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lock_core::{Acquire, LockCore};
use crate::options::LockOptions;

/// One participant of an election: its lock core, its id, and its lifecycle (the background
/// task and the leadership channel).
pub(crate) struct Election {
    pub core: LockCore,
    /// The participant id (the options', or `hostname:pid`).
    pub id: String,
    pub life: Lifecycle,
}

impl Election {
    /// The participant id and the lock options an election takes from `lock`: the id the
    /// options name (or `hostname:pid`) in the node's data, and revocation requests reported.
    /// An election also always watches its own node (revocable locks do): leadership ends the
    /// moment it is deleted.
    pub fn options(lock: LockOptions) -> (String, LockOptions) {
        let id = lock.participant_id.clone().unwrap_or_else(crate::identity::default_participant_id);
        let lock = lock.participant_id(id.clone()).revocable(true);
        (id, lock)
    }

    /// The participant `id` on `core`, not started.
    pub fn new(core: LockCore, id: String) -> Election {
        Election { life: Lifecycle::new(core.path().as_str()), core, id }
    }

    /// Waits to lead: acquires, and queues again when someone deleted our node while we
    /// waited (an expiry queues us on the session's next generation inside the core).
    /// `Ok(None)` once `closing` fires: dropping the acquire deletes our node (or a create in
    /// flight) in the background.
    ///
    /// # Errors
    /// The acquire's errors ([`Error::SessionClosed`], a conflicting node, ...).
    pub async fn await_term(&self, closing: &mut oneshot::Receiver<()>) -> Result<Option<LockGuard>> {
        loop {
            let guard = tokio::select! {
                _ = &mut *closing => return Ok(None),
                guard = self.core.acquire(Acquire::forever()) => {
                    guard.and_then(|g| g.ok_or_else(|| self.core.closed()))
                }
            };
            match guard {
                Ok(guard) => return Ok(Some(guard)),
                Err(Error::NodeDeleted { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// What the clones of one leader recipe share. The election task holds the inside (`I`), not
/// this: the recipe closes when the last clone is dropped, whatever the task is doing.
pub(crate) struct Handle<I: AsRef<Election>> {
    pub inner: Arc<I>,
}

impl<I: AsRef<Election>> Drop for Handle<I> {
    fn drop(&mut self) {
        (*self.inner).as_ref().life.close_in_background();
    }
}

/// What both leader handles have, the same way: `$handle` is a struct with a field
/// `handle: Arc<Handle<$inner>>`, where `$inner` has a field `election: Election`; `$options`
/// are its options; `$what` names it in the docs (`latch`, `selector`).
macro_rules! election_handle {
    ($handle:ident, $inner:ident, $options:ident, $what:literal) => {
        impl AsRef<super::election::Election> for $inner {
            fn as_ref(&self) -> &super::election::Election {
                &self.election
            }
        }

        impl std::fmt::Debug for $handle {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let election = self.election();
                f.debug_struct(stringify!($handle))
                    .field("path", election.core.path())
                    .field("id", &election.id)
                    .field("leadership", &election.life.current())
                    .finish()
            }
        }

        impl $handle {
            #[doc = concat!("A ", $what, " on `path` with default options (participant id")]
            /// `hostname:pid`), as every recipe's `new`. Nothing is sent until
            #[doc = concat!("[`", stringify!($handle), "::start`].")]
            ///
            /// # Errors
            /// [`crate::Error::InvalidPath`] for an invalid path.
            pub fn new(session: &crate::session::Session, path: &str) -> crate::error::Result<$handle> {
                Self::with_options(session, path, $options::new())
            }

            fn election(&self) -> &super::election::Election {
                (*self.handle.inner).as_ref()
            }

            /// This participant's id.
            pub fn id(&self) -> &str {
                &self.election().id
            }

            /// Whether we lead now. It turns false the moment leadership is lost.
            pub fn has_leadership(&self) -> bool {
                self.election().life.current().is_leader()
            }

            /// Leadership changes, starting with the current state, for `select!` and
            /// `wait_for`.
            pub fn leadership(&self) -> tokio::sync::watch::Receiver<super::lifecycle::Leadership> {
                self.election().life.subscribe()
            }

            /// Waits until we lead; returns the term's fencing token.
            ///
            /// # Errors
            #[doc = concat!("[`crate::Error::Closed`] if the ", $what, " is closed first; the")]
            /// election's error (for example [`crate::Error::SessionExpired`]) if it stopped.
            ///
            /// # Cancel safety
            /// Cancel-safe: it only observes.
            pub async fn await_leadership(&self) -> crate::error::Result<u64> {
                self.election().life.await_leadership().await
            }

            #[doc = concat!("Asks the current leader of this ", $what, "'s path (whichever")]
            /// participant it is, this one included) to step down, by setting `__REVOKE__` on
            /// its node (see [`crate::request_revocation`]); returns how many requests reached a
            /// node (0 or 1). A [`crate::LeaderLatch`] leading there reports it
            /// ([`crate::LeaderLatch::revocation`]); a [`crate::LeaderSelector`] ends its term
            /// as [`crate::TermOutcome::Revoked`]; Curator's and kazoo's leaders ignore it.
            ///
            /// # Errors
            /// As [`crate::request_revocation`].
            ///
            /// # Cancel safety
            /// A request already sent stays sent.
            pub async fn revoke_leader(&self) -> crate::error::Result<usize> {
                self.election().core.revoke_holders().await
            }

            /// The current leader (the first participant), if any.
            ///
            /// # Errors
            /// [`crate::Error::SessionClosed`], [`crate::Error::SessionExpired`],
            /// [`crate::Error::NoAuth`] or [`crate::Error::ZooKeeper`].
            ///
            /// # Cancel safety
            /// Cancel-safe: it only reads.
            pub async fn leader(&self) -> crate::error::Result<Option<crate::lock_core::Participant>> {
                Ok(self.participants().await?.into_iter().find(|p| p.is_holder))
            }

            /// Every participant in sequence order; the first leads.
            ///
            /// # Errors
            #[doc = concat!("As [`", stringify!($handle), "::leader`].")]
            ///
            /// # Cancel safety
            /// Cancel-safe: it only reads.
            pub async fn participants(&self) -> crate::error::Result<Vec<crate::lock_core::Participant>> {
                self.election().core.participants().await
            }
        }
    };
}
pub(super) use election_handle;

/// The setters of `$options` (a struct with a field `lock: LockOptions`) that pass through to
/// [`LockOptions`]; `$what` names the recipe in the docs. The attributes given are
/// `max_hold`'s docs, which differ by recipe.
macro_rules! lock_setters {
    ($options:ident, $what:literal, $(#[$max_hold:meta])*) => {
        impl $options {
            /// The participant id stored as our node's data (shown by `participants()` and
            /// `leader()`, here and in Curator's `getLeader()` and `getParticipants()`), as
            /// [`crate::LockOptions::participant_id`]. Default: `hostname:pid`.
            pub fn participant_id(mut self, id: impl Into<String>) -> $options {
                self.lock = self.lock.participant_id(id);
                self
            }

            #[doc = concat!("The `role` label of this ", $what, "'s metrics (see")]
            /// [`crate::LockOptions::metrics_role`]).
            pub fn metrics_role(mut self, role: &str) -> $options {
                self.lock = self.lock.metrics_role(role);
                self
            }

            /// Whether a suspended connection ends leadership (see [`crate::LossPolicy`]).
            pub fn loss_policy(mut self, policy: crate::status::LossPolicy) -> $options {
                self.lock = self.lock.loss_policy(policy);
                self
            }

            #[doc = concat!("The ACLs of the nodes the ", $what, " creates, parents included")]
            /// (default: open, as Curator's): `Acls::creator_all()`, `Acls::anyone_all()`, ...
            pub fn acls(mut self, acls: zookeeper_client::Acls<'_>) -> $options {
                self.lock = self.lock.acls(acls);
                self
            }

            /// Curator's node names (default) or kazoo's, as [`crate::LockOptions::format`].
            pub fn format(mut self, format: crate::format::NodeFormat) -> $options {
                self.lock = self.lock.format(format);
                self
            }

            $(#[$max_hold])*
            pub fn max_hold(mut self, limit: std::time::Duration) -> $options {
                self.lock = self.lock.max_hold(limit);
                self
            }
        }
    };
}
pub(super) use lock_setters;
