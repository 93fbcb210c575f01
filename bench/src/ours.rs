//! Every place the bench connects zk-recipes and builds its recipes, and nothing else: one
//! `zk_recipes::Session` per simulated process, recipes built from it. The peers (`LockClient`,
//! the naive recipe) and raw operations use `zookeeper_client::Client` directly, through
//! [`crate::peers::raw_connect`].

use std::time::Duration;

use zk_recipes::{
    InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphore, LatchOptions, LeaderLatch,
    LeaderSelector, SelectorOptions,
};

/// One session of ours.
pub type Handle = zk_recipes::Session;

/// Connects a session of ours.
pub async fn connect(connect: &str, session_timeout: Duration) -> Result<Handle, String> {
    zk_recipes::Session::connect(connect, session_timeout)
        .await
        .map_err(|e| format!("zk-recipes connect: {e}"))
}

/// Our mutex on `path`.
pub fn mutex(h: &Handle, path: &str) -> Result<InterProcessMutex, String> {
    InterProcessMutex::new(h, path).map_err(|e| e.to_string())
}

/// Our semaphore on `path` with `leases` leases.
pub fn semaphore(h: &Handle, path: &str, leases: u32) -> Result<InterProcessSemaphore, String> {
    InterProcessSemaphore::new(h, path, leases).map_err(|e| e.to_string())
}

/// Our read/write lock on `path`.
pub fn rwlock(h: &Handle, path: &str) -> Result<InterProcessReadWriteLock, String> {
    InterProcessReadWriteLock::new(h, path).map_err(|e| e.to_string())
}

/// A leader latch of ours on `path` (not started).
pub fn latch(h: &Handle, path: &str, id: &str) -> Result<LeaderLatch, String> {
    LeaderLatch::with_options(h, path, LatchOptions::new().participant_id(id)).map_err(|e| e.to_string())
}

/// A leader selector of ours on `path` that queues again after each term (not started).
pub fn selector(h: &Handle, path: &str, id: &str) -> Result<LeaderSelector, String> {
    let options = SelectorOptions::new().participant_id(id).auto_requeue(true);
    LeaderSelector::with_options(h, path, options).map_err(|e| e.to_string())
}
