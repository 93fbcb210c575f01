//! [`LeadershipContext`]: what a [`crate::LeaderSelector`]'s task gets for its term.

use std::time::Instant;

use tokio::sync::watch;

use crate::error::Result;
use crate::guard::{FencedWriter, HoldView};

/// What a leadership task gets: its fencing token, a signal to stop, fenced writes and the
/// safe window of its term.
#[derive(Clone)]
pub struct LeadershipContext {
    pub(super) fencing_token: u64,
    /// Our participant id, kept before a proclaimed value in our node.
    pub(super) id: String,
    pub(super) stop: watch::Receiver<bool>,
    pub(super) hold: HoldView,
}

impl std::fmt::Debug for LeadershipContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeadershipContext")
            .field("fencing_token", &self.fencing_token)
            .field("stopped", &self.is_stopped())
            .finish()
    }
}

impl LeadershipContext {
    /// The fencing token of this term (the `czxid` of our node).
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// As [`crate::LockGuard::fencing_token_i64`]: the same token, for a signed 64-bit column.
    pub fn fencing_token_i64(&self) -> i64 {
        self.hold.fencing_token_i64()
    }

    /// Resolves when the task must stop: leadership was lost or interrupted, or the selector is
    /// closing.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn stopped(&self) {
        let mut stop = self.stop.clone();
        let _ = stop.wait_for(|s| *s).await;
    }

    /// Whether the task has been told to stop.
    pub fn is_stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// A multi-op that commits only while this term's node exists, as
    /// [`crate::LockGuard::fenced_writer`]: a leader that lost its term cannot write.
    ///
    /// # Errors
    /// As [`crate::LockGuard::fenced_writer`].
    pub fn fenced_writer(&self) -> Result<FencedWriter<'_>> {
        self.hold.fenced_writer()
    }

    /// As [`crate::LockGuard::safe_until`]: before this instant nobody else can lead. `None`
    /// once the term is lost.
    pub fn safe_until(&self) -> Option<Instant> {
        self.hold.safe_until()
    }

    /// As [`crate::LockGuard::ensure_safe`]: call it right before acting as the leader; it
    /// fails once the term is lost or less than `margin` of its safe window is left.
    ///
    /// # Errors
    /// As [`crate::LockGuard::ensure_safe`].
    pub fn ensure_safe(&self, margin: std::time::Duration) -> Result<std::time::Duration> {
        self.hold.ensure_safe(margin)
    }

    /// Proclaims `value` for this term, as [`crate::LeaderLatch::proclaim`]: stored in our node
    /// after our participant id and a newline, seen by [`crate::LeaderObserver`]s; a fenced
    /// write, so a term that is over cannot proclaim.
    ///
    /// # Errors
    /// [`crate::Error::LockLost`] if this term's node is gone; as [`FencedWriter::commit`] otherwise.
    ///
    /// # Cancel safety
    /// The write is sent when this is called; dropping the future does not withdraw it.
    pub async fn proclaim(&self, value: &[u8]) -> Result<()> {
        self.hold.proclaim(&self.id, value).await
    }
}
