//! [`Conn`]: one generation's raw client, as the recipes use it.

use std::sync::{Arc, Weak};
use std::time::Instant;

use zookeeper_client::Client;

use super::Shared;

/// The raw client of one session generation, with a way back to its [`super::Session`] for the
/// bookkeeping that outlives a request: live nodes (deleted on close) and the last contact (the
/// safe window). A hold keeps the `Conn` it was taken on, so that nothing it does can touch a
/// later session's nodes.
#[derive(Clone)]
pub(crate) struct Conn {
    pub client: Arc<Client>,
    pub generation: u64,
    shared: Weak<Shared>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("session", &format_args!("{:#x}", self.client.session_id().0))
            .field("generation", &self.generation)
            .finish()
    }
}

impl Conn {
    pub(super) fn new(client: Client, generation: u64, shared: &Arc<Shared>) -> Conn {
        Conn { client: Arc::new(client), generation, shared: Arc::downgrade(shared) }
    }

    fn shared(&self) -> Option<Arc<Shared>> {
        self.shared.upgrade()
    }

    /// Our node at `path` exists (until [`Conn::untrack`]).
    pub fn track(&self, path: &str) {
        if let Some(shared) = self.shared() {
            shared.track(path);
        }
    }

    /// Our node at `path` is gone.
    pub fn untrack(&self, path: &str) {
        if let Some(shared) = self.shared() {
            shared.untrack(path);
        }
    }

    /// A request of this generation sent at `sent` got an answer.
    pub fn note_contact(&self, sent: Instant) {
        if let Some(shared) = self.shared() {
            shared.note_contact(self.generation, sent);
        }
    }

    /// The safe window of this generation: `None` once it is not the current session.
    pub fn safe_until(&self) -> Option<Instant> {
        self.shared()?.safe_until(self.generation)
    }

    /// Whether the session this connection belongs to was closed.
    pub fn session_closed(&self) -> bool {
        self.shared().is_none_or(|s| s.is_closed())
    }
}
