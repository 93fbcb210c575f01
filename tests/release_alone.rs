//! A holder releases with a plain delete, no tombstone, when no waiter may need one
//! (`Leaving::watched_behind` in src/queue/entry.rs): its latest listing showed its node at the
//! head or right behind it, and no node after it. Only a waiter whose listing showed the holder
//! two or more places back needs its tombstone; one place back, a waiter that hears the
//! holder's deletion with no tombstone reads once whether the head it listed is gone, and
//! enters on that. On the uncontended cycle the tombstone cost the server about 50 µs of CPU
//! per cycle for nobody, and on a lock two contenders take turns on, the same on every handoff
//! (docs/performance.md).
//! A holder whose listing showed it further back, or a node behind it, leaves its tombstone.
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
use zk_recipes::{InterProcessMutex, LockGuard, Session};

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

/// A holder alone at its join, with a waiter queued behind it since: that waiter's listing
/// showed the holder at the head, so it watches the holder's node, not a tombstone. The release
/// leaves none, and the waiter enters on the deletion alone, with no listing but its join's.
/// Before the change the holder heard the join, and its release left the tombstone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_someone_joined_behind_releases_without_a_tombstone() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let (s, t) = (session(&zk.connect_string()).await, session(&zk.connect_string()).await);
    let path = "/alone-b/lock";
    learn_idle(&s, path).await;
    let guard = InterProcessMutex::new(&s, path).unwrap().acquire().await.unwrap();
    let mutex = InterProcessMutex::new(&t, path).unwrap();
    let mut behind = Waiter::lock(mutex.clone(), None);
    behind.queued().await;
    let heard = tombstone_heard_on_release(&admin, guard).await;
    assert!(heard.is_none(), "a tombstone nobody watches: {heard:?}");
    let next = behind.guard().await;
    assert_eq!(mutex.stats().listings, 1, "the waiter listed again: {:?}", mutex.stats());
    next.release().await.unwrap();
    assert!(children(&admin, path).await.is_empty());
    for s in [s, t] {
        s.close().await;
    }
}

/// Two contenders taking turns on one lock (a queue of two): each joins behind the other's
/// hold, right behind the head, and nobody after it. No release leaves a tombstone, and each
/// acquire lists once, at its join. Before the change every release after the first left one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_contenders_taking_turns_leave_no_tombstones() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let (s, t) = (session(&zk.connect_string()).await, session(&zk.connect_string()).await);
    let path = "/alone-c/lock";
    let (a, b) = (InterProcessMutex::new(&s, path).unwrap(), InterProcessMutex::new(&t, path).unwrap());
    let mut guard = a.acquire().await.unwrap();
    let mut turn = [b.clone(), a.clone()].into_iter().cycle();
    for round in 0..6 {
        let next = turn.next().unwrap();
        let mut behind = Waiter::lock(next.clone(), None);
        behind.queued().await;
        let listings = next.stats().listings;
        let heard = tombstone_heard_on_release(&admin, guard).await;
        assert!(heard.is_none(), "round {round}: a tombstone nobody watches: {heard:?}");
        guard = behind.guard().await;
        assert_eq!(next.stats().listings, listings, "round {round}: listed again: {:?}", next.stats());
    }
    guard.release().await.unwrap();
    assert!(children(&admin, path).await.is_empty());
    for s in [s, t] {
        s.close().await;
    }
}

/// A holder whose listing showed it two places back: a waiter that listed it there watches its
/// tombstone, so its release leaves one. (Here the third contender, admitted on the deletions of
/// the two ahead of it with no listing, releases with the tombstone.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_two_places_back_at_its_listing_leaves_a_tombstone() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let sessions = [
        session(&zk.connect_string()).await,
        session(&zk.connect_string()).await,
        session(&zk.connect_string()).await,
    ];
    let path = "/alone-d/lock";
    let mutexes: Vec<_> = sessions.iter().map(|s| InterProcessMutex::new(s, path).unwrap()).collect();
    let first = mutexes[0].acquire().await.unwrap();
    let mut second = Waiter::lock(mutexes[1].clone(), None);
    second.queued().await;
    let mut third = Waiter::lock(mutexes[2].clone(), None);
    third.queued().await;
    first.release().await.unwrap();
    second.guard().await.release().await.unwrap();
    let guard = third.guard().await;
    assert_eq!(mutexes[2].stats().listings, 1, "{:?}", mutexes[2].stats());
    let heard = tombstone_heard_on_release(&admin, guard).await;
    assert_eq!(heard.map(|e| e.event_type), Some(EventType::NodeCreated), "no tombstone");
    assert!(children(&admin, path).await.is_empty());
    for s in sessions {
        s.close().await;
    }
}
