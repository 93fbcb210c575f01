//! Things told of every session state change by the session's own task: one task for all of
//! them, rather than a task per hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use super::{SessionStatus, Shared};
use crate::util::lock;

/// Told of every state change of a session (see [`Shared::listen`]).
pub(crate) trait Listener: Send + Sync {
    /// The session's status is now `status`. Called once at registration with the status then,
    /// and then on every change, from the session's task; it must not block.
    fn session_changed(&self, status: SessionStatus);
}

/// The listeners of one session.
#[derive(Default)]
pub(super) struct Listeners {
    next: u64,
    by_id: HashMap<u64, Weak<dyn Listener>>,
}

impl Listeners {
    /// The listeners still alive.
    pub(super) fn alive(&self) -> Vec<Arc<dyn Listener>> {
        self.by_id.values().filter_map(Weak::upgrade).collect()
    }
}

/// A listener's place in a session's list; leaves it when dropped.
pub(crate) struct Registration {
    id: u64,
    shared: Weak<Shared>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            lock(&shared.listeners).by_id.remove(&self.id);
        }
    }
}

impl Shared {
    /// Tells `listener` of the status now and of every change until the registration is
    /// dropped.
    pub(crate) fn listen(self: &Arc<Self>, listener: Weak<dyn Listener>) -> Registration {
        let id = {
            let mut listeners = lock(&self.listeners);
            let id = listeners.next;
            listeners.next += 1;
            listeners.by_id.insert(id, listener.clone());
            id
        };
        // Read after joining the list: a change published meanwhile reaches the listener either
        // here or from the session's task (telling twice is harmless: listeners are idempotent).
        let now = *self.status.borrow();
        if let Some(listener) = listener.upgrade() {
            listener.session_changed(now);
        }
        Registration { id, shared: Arc::downgrade(self) }
    }

    /// Tells every listener of `status` (after it was published).
    pub(super) fn tell_listeners(&self, status: SessionStatus) {
        let alive = lock(&self.listeners).alive();
        for listener in alive {
            listener.session_changed(status);
        }
    }
}

/// A listener list, for [`Shared`].
pub(super) type ListenerList = Mutex<Listeners>;
