//! A waiter queued behind a holder, the set-up of the tests that delete nodes under a waiting
//! acquire (`tests/correctness.rs`, `tests/fresh_paths_faults.rs`).

use zk_recipes::zookeeper_client::Client;
use zk_recipes::{InterProcessMutex, LockGuard, Session};
use zk_testcluster::ZkCluster;

use super::{eventually, has_data_watch, until_watched};

/// A holder and a waiter behind it ([`behind_a_holder`]).
pub struct Behind {
    pub holder: LockGuard,
    /// The holder's node (full path).
    pub holder_node: String,
    /// The waiter's handle (its acquire runs in `waiting`).
    pub waiter: InterProcessMutex,
    pub waiting: tokio::task::JoinHandle<zk_recipes::Result<LockGuard>>,
}

/// Takes `path` in session `h`, then acquires it in session `w` on a task of its own, and
/// returns once the waiter watches the holder's node: the waiter has sent everything it sends
/// before it waits.
pub async fn behind_a_holder(zk: &ZkCluster, (h, w): (&Session, &Session), path: &str) -> Behind {
    let holder = InterProcessMutex::new(h, path).unwrap().acquire().await.unwrap();
    let holder_node = holder.node_path().to_string();
    let waiter = InterProcessMutex::new(w, path).unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.acquire().await }
    });
    until_watched(zk, "the waiter to watch the holder's node", &holder_node).await;
    Behind { holder, holder_node, waiter, waiting }
}

/// Deletes the nodes `first` and `second` in one transaction, in that order.
pub async fn delete_together(admin: &Client, first: &str, second: &str) {
    let mut both = admin.new_multi_writer();
    both.add_delete(first, None).unwrap();
    both.add_delete(second, None).unwrap();
    both.commit().await.unwrap();
}

/// Waits until session `id` has a data watch on `node` (node 0's `wchp`).
pub async fn until_data_watch(zk: &ZkCluster, what: &str, node: &str, id: i64) {
    eventually(what, || async { has_data_watch(zk, node, id).await }).await;
}

/// Takes and gives back a mutex on `path` in `s`, a lock path that does not exist yet: a join
/// whose guess of a fresh path was right keeps the session's hint up after one whose guess met
/// an existing lock path (see `learn_fresh_paths`).
pub async fn take_fresh(s: &Session, path: &str) {
    InterProcessMutex::new(s, path).unwrap().acquire().await.unwrap().release().await.unwrap();
}
