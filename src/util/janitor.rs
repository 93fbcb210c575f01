//! Background cleanup of nodes whose owner future was dropped, with a way to await it.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::runtime::Handle;
use tokio::sync::Notify;

/// Counts background cleanups in flight so that callers (and tests) can await quiescence
/// instead of sleeping. Cheap to clone; clones share the count.
#[derive(Clone, Default, Debug)]
pub(crate) struct Janitor(Arc<JanitorState>);

#[derive(Default, Debug)]
struct JanitorState {
    pending: AtomicUsize,
    idle: Notify,
    /// The runtime the queue was used on, for drops on threads outside any runtime.
    runtime: OnceLock<Handle>,
}

struct PendingGuard(Arc<JanitorState>);

impl Drop for PendingGuard {
    fn drop(&mut self) {
        if self.0.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Janitor {
    /// Remembers the current runtime (called from async code that uses the queue).
    pub fn remember_runtime(&self) {
        if self.0.runtime.get().is_none() {
            if let Ok(handle) = Handle::try_current() {
                let _ = self.0.runtime.set(handle);
            }
        }
    }

    /// Runs `work` in the background: on the current tokio runtime, or else on the runtime the
    /// queue was used on (a guard dropped on a plain thread). With neither, nothing can run: the
    /// work is skipped with a warning, and the session's end removes the ephemeral node.
    pub fn spawn(&self, what: &'static str, work: impl Future<Output = ()> + Send + 'static) {
        let Some(runtime) = Handle::try_current().ok().or_else(|| self.0.runtime.get().cloned()) else {
            tracing::warn!(what, "no tokio runtime to clean up on; the node goes when the session ends");
            return;
        };
        self.0.pending.fetch_add(1, Ordering::SeqCst);
        let guard = PendingGuard(self.0.clone());
        runtime.spawn(async move {
            let _guard = guard;
            work.await;
        });
    }

    /// Resolves once no background cleanup is in flight.
    pub async fn settled(&self) {
        loop {
            let idle = self.0.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.0.pending.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}
