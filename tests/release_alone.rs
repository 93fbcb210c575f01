//! A holder that knows nobody is queued behind it releases with a plain delete, no tombstone
//! (`AloneCheck` in src/queue/entry.rs): its join's listing showed its node alone, that
//! listing's child watch (standing in for the data watch on its node, on an idle lock or a
//! fresh path) has not fired since, and the connection has not changed since. A tombstone
//! serves only the waiter right behind; on the uncontended cycle it cost the server about 50 µs
//! of CPU per cycle for nobody (docs/performance.md). When any of this is unknown (someone joined
//! behind, the connection changed), the release leaves its tombstone as before.
//!
//! Each test watches, from a raw session of its own, the tombstone's name and the holder's node:
//! ZooKeeper delivers a session's events in zxid order (and a transaction's in its order), so
//! once the node's deletion is heard, a tombstone created in the same transaction has been
//! heard too.

mod common;

use std::future::Future;
use std::time::Duration;

use common::*;
use zk_recipes::zookeeper_client::{Client, EventType, WatchedEvent};
use zk_recipes::{ConnectionState, InterProcessMutex, LockGuard, LockStatus, Session};

/// Teaches `s` that its joins find their node alone: uncontended cycles on `path` (as in
/// tests/idle_locks.rs). Its next join's listing carries the child watch that stands in for the
/// data watch on its node.
async fn learn_idle(s: &Session, path: &str) {
    let mutex = InterProcessMutex::new(s, path).unwrap();
    for _ in 0..8 {
        mutex.acquire().await.unwrap().release().await.unwrap();
    }
}

/// The tombstone a release of the node at `node_path` would leave: `<parent>/<its
/// sequence>.released` (`markers::tombstone_of`).
fn tombstone_of(node_path: &str) -> String {
    let (parent, name) = node_path.rsplit_once('/').unwrap();
    format!("{parent}/{}.released", &name[name.len() - 10..])
}

/// What `watcher` (`admin`'s, on the tombstone's name) heard by the time `guard`'s release had
/// deleted its node, heard on a watch `admin` set on that node: `None` when no tombstone was
/// created in the release's transaction.
async fn tombstone_heard_on_release(admin: &Client, guard: LockGuard) -> Option<WatchedEvent> {
    let node = guard.node_path().to_string();
    let (found, tomb) = admin.check_and_watch_stat(&tombstone_of(&node)).await.unwrap();
    assert!(found.is_none(), "no tombstone before the release");
    let (_, _, deleted) = admin.get_and_watch_data(&node).await.unwrap();
    let mut tomb = std::pin::pin!(tomb.changed());
    guard.release().await.unwrap();
    let deleted = within("the node's deletion", deleted.changed()).await;
    assert_eq!(deleted.event_type, EventType::NodeDeleted);
    // Events of one session come in order: a tombstone's creation, had it come, was delivered
    // first. Looked at without waiting.
    ready_now(tomb.as_mut()).await
}

/// `fut`'s output if it is ready now, without waiting.
async fn ready_now<F: Future>(fut: std::pin::Pin<&mut F>) -> Option<F::Output> {
    tokio::time::timeout(Duration::ZERO, fut).await.ok()
}

/// The uncontended cycle: a holder alone on an idle lock releases with a plain delete, no
/// tombstone. Before the change its release created and deleted the tombstone in the
/// transaction that deleted its node, and this fails with the tombstone's `NodeCreated`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_alone_releases_without_a_tombstone() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let s = session(&zk.connect_string()).await;
    let path = "/alone-a/lock";
    learn_idle(&s, path).await;
    for round in 0..3 {
        let guard = InterProcessMutex::new(&s, path).unwrap().acquire().await.unwrap();
        sync_session(&s).await;
        let id = raw(&s).session_id().0;
        assert!(
            !has_data_watch(&zk, guard.node_path(), id).await,
            "round {round}: the child watch stands in"
        );
        let heard = tombstone_heard_on_release(&admin, guard).await;
        assert!(heard.is_none(), "round {round}: a holder alone left a tombstone: {heard:?}");
    }
    assert!(children(&admin, path).await.is_empty());
    s.close().await;
}

/// A holder alone at its join, with a waiter queued behind it since (the join fired its child
/// watch, and the holder watches its node's data from then on): its release leaves the
/// tombstone, and the waiter holds next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_someone_joined_behind_leaves_a_tombstone() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let (s, t) = (session(&zk.connect_string()).await, session(&zk.connect_string()).await);
    let path = "/alone-b/lock";
    learn_idle(&s, path).await;
    let guard = InterProcessMutex::new(&s, path).unwrap().acquire().await.unwrap();
    let id = raw(&s).session_id().0;
    sync_session(&s).await;
    assert!(!has_data_watch(&zk, guard.node_path(), id).await, "the child watch stands in");
    let mut behind = Waiter::lock(InterProcessMutex::new(&t, path).unwrap(), None);
    behind.queued().await;
    // The holder heard the join: it reads its node and watches its data from then on.
    eventually("the holder's data watch on its node", || {
        let (zk, node) = (&zk, guard.node_path().to_string());
        async move { has_data_watch(zk, &node, id).await }
    })
    .await;
    let heard = tombstone_heard_on_release(&admin, guard).await;
    assert_eq!(heard.map(|e| e.event_type), Some(EventType::NodeCreated), "no tombstone");
    let next = behind.guard().await;
    next.release().await.unwrap();
    assert!(children(&admin, path).await.is_empty());
    for s in [s, t] {
        s.close().await;
    }
}

/// A holder alone at its join whose connection changed since (a reconnection sets the child
/// watch again, and it says nothing then): its release leaves the tombstone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_connection_changed_leaves_a_tombstone() {
    let zk = standalone().await;
    let proxy = zk.proxy().expect("a proxy");
    let admin = client(&zk.connect_string()).await;
    let s = session(&proxy.connect_string()).await;
    let path = "/alone-c/lock";
    learn_idle(&s, path).await;
    let guard = InterProcessMutex::new(&s, path).unwrap().acquire().await.unwrap();
    sync_session(&s).await;
    assert!(
        !has_data_watch(&zk, guard.node_path(), raw(&s).session_id().0).await,
        "the child watch stands in"
    );
    let mut events = s.events();
    let mut status = guard.status();
    proxy.cut();
    within("reconnected", async {
        while events.recv().await.unwrap().state != ConnectionState::Reconnected {}
    })
    .await;
    within("held again", status.wait_for(|s| *s == LockStatus::Held)).await.unwrap();
    let heard = tombstone_heard_on_release(&admin, guard).await;
    assert_eq!(heard.map(|e| e.event_type), Some(EventType::NodeCreated), "no tombstone");
    assert!(children(&admin, path).await.is_empty());
    s.close().await;
}
