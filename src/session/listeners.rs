//! Things told of every session state change by the session's own task: one task for all of
//! them, rather than a task per hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::status::SessionStatus;
use crate::util::lock;

/// Told of every state change of a session (see `Shared::listen`).
pub(crate) trait Listener: Send + Sync {
    /// The session's status is now `status`. Called once at registration with the status then,
    /// and then on every change, from the session's task; it must not block.
    fn session_changed(&self, status: SessionStatus);
}

/// The listeners of one session.
#[derive(Default)]
pub(crate) struct Listeners {
    next: u64,
    by_id: HashMap<u64, Weak<dyn Listener>>,
}

impl Listeners {
    /// Adds `listener` to `list` until the returned registration is dropped.
    pub(crate) fn add(list: &Arc<Mutex<Listeners>>, listener: Weak<dyn Listener>) -> Registration {
        let mut listeners = lock(list);
        let id = listeners.next;
        listeners.next += 1;
        listeners.by_id.insert(id, listener);
        Registration { id, list: Arc::downgrade(list) }
    }

    /// The listeners still alive.
    pub(crate) fn alive(&self) -> Vec<Arc<dyn Listener>> {
        self.by_id.values().filter_map(Weak::upgrade).collect()
    }
}

/// A listener's place in a session's list; leaves it when dropped.
pub(crate) struct Registration {
    id: u64,
    list: Weak<Mutex<Listeners>>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(list) = self.list.upgrade() {
            lock(&list).by_id.remove(&self.id);
        }
    }
}
