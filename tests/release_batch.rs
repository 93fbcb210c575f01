//! Plain deletes of one session's awaited releases go out together while others are in flight
//! (`src/session/deletes.rs`): many tasks of one session releasing at once (many locks,
//! per-order locks) cost the server a `multi` for the lot instead of a request each, and each
//! release still gets its own answer: a delete that fails in a batch fails alone, and the
//! others go through. A dropped guard's delete is never held back: the session's next request
//! comes after it.

mod common;

use common::*;
use futures_util::future::join_all;
use zk_recipes::zookeeper_client::{Acl, AuthId, Client, Error as ZkError, EventType, Permission};
use zk_recipes::{Error, InterProcessMutex, LockGuard, Session};

/// Requests the server received from session `sid` (its `cons` line).
async fn received(zk: &zk_testcluster::ZkCluster, sid: i64) -> u64 {
    let cons = zk.four_letter(0, "cons").await.expect("cons");
    let line = cons.lines().find(|l| l.contains(&format!("sid={sid:#x},"))).expect("the session in cons");
    line.split("recved=").nth(1).and_then(|r| r.split([',', ')']).next()?.parse().ok()).expect("recved")
}

/// A server, a session of ours and a raw admin session on it, and `n` locks `{prefix}/l{i}`
/// taken on ours.
async fn holding(prefix: &str, n: usize) -> (zk_testcluster::ZkCluster, Session, Client, Vec<LockGuard>) {
    init_tracing();
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    let admin = client(&zk.connect_string()).await;
    let guards = hold_many(&s, prefix, n).await;
    (zk, s, admin, guards)
}

/// Takes `n` locks `{prefix}/l{i}` on `s`, one after another.
async fn hold_many(s: &Session, prefix: &str, n: usize) -> Vec<LockGuard> {
    let mut guards = Vec::with_capacity(n);
    for i in 0..n {
        let mutex = InterProcessMutex::new(s, &format!("{prefix}/l{i}")).unwrap();
        guards.push(within("an uncontended acquire", mutex.acquire()).await.unwrap());
    }
    guards
}

/// The children of `path` (none when it is gone: an empty CONTAINER parent is reaped).
async fn left_under(admin: &Client, path: &str) -> Vec<String> {
    match admin.list_children(path).await {
        Ok(children) => children,
        Err(ZkError::NoNode) => Vec::new(),
        Err(e) => panic!("listing {path}: {e}"),
    }
}

/// Thirty-two releases at once on one session: the server receives a handful of requests, not
/// one per release (two go out at once, the rest in a `multi` once one of those is answered),
/// and every node is gone when the releases return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_at_once_on_one_session_go_out_together() {
    const LOCKS: usize = 32;
    let (zk, s, admin, guards) = holding("/batch", LOCKS).await;
    let sid = raw(&s).session_id().0;
    let before = received(&zk, sid).await;

    let released = within("the releases", join_all(guards.into_iter().map(|g| g.release()))).await;
    let sent = received(&zk, sid).await - before;

    for (i, r) in released.into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("release {i}: {e}"));
    }
    for i in 0..LOCKS {
        assert_eq!(left_under(&admin, &format!("/batch/l{i}")).await, Vec::<String>::new(), "lock {i}");
    }
    // Unbatched, each release is a request of its own (32). Batched: two at once, then the rest
    // together; a few more for releases that leave a tombstone (a multi of their own) and a
    // beat or two of the session.
    assert!(sent < LOCKS as u64 / 2, "the server received {sent} requests for {LOCKS} releases");
    s.close().await;
}

/// A delete that fails inside a batch fails alone: its release reports the error, its node
/// stays (until the session ends), and every other release of the batch goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_that_fails_in_a_batch_fails_alone() {
    const LOCKS: usize = 8;
    const DENIED: usize = 4;
    let (zk, s, admin, guards) = holding("/batch-fail", LOCKS).await;
    let denied_node = guards[DENIED].node_path().to_string();
    // Nobody may delete under lock 4's path any more: our delete of its node fails (NoAuth).
    let no_delete = Permission::READ | Permission::WRITE | Permission::CREATE | Permission::ADMIN;
    admin
        .set_acl(&format!("/batch-fail/l{DENIED}"), &[Acl::new(no_delete, AuthId::anyone())], None)
        .await
        .unwrap();

    let sid = raw(&s).session_id().0;
    let before = received(&zk, sid).await;
    // Released in order, at once: the first two go out alone, the other six (lock 4's among
    // them) wait and go out together; lock 4's fails that multi, and the other five go again,
    // together.
    let released = within("the releases", join_all(guards.into_iter().map(|g| g.release()))).await;
    let sent = received(&zk, sid).await - before;
    // Unbatched, eight deletes; batched, four requests (and a beat, perhaps).
    assert!(sent < LOCKS as u64, "the server received {sent} requests for {LOCKS} releases");

    for (i, r) in released.into_iter().enumerate() {
        if i == DENIED {
            let e = r.expect_err("the delete was denied");
            assert!(matches!(e, Error::NoAuth { op: "delete", .. }), "{e:?}");
        } else {
            r.unwrap_or_else(|e| panic!("release {i}: {e}"));
            assert_eq!(
                left_under(&admin, &format!("/batch-fail/l{i}")).await,
                Vec::<String>::new(),
                "lock {i}"
            );
        }
    }
    let (stat, gone) = admin.check_and_watch_stat(&denied_node).await.unwrap();
    assert!(stat.is_some(), "the denied node stays");
    s.close().await;
    let event = within("the denied node to go with the session", gone.changed()).await;
    assert_eq!(event.event_type, EventType::NodeDeleted);
}

/// Guards dropped at once on one session: each delete is sent as the guard drops (none waits
/// for a batch), so the session's next request comes after it: taking one of those locks again
/// at once, on the same session, finds it free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guards_delete_goes_before_the_sessions_next_request() {
    const LOCKS: usize = 8;
    let (_zk, s, _admin, guards) = holding("/batch-drop", LOCKS).await;
    drop(guards);
    let last = InterProcessMutex::new(&s, &format!("/batch-drop/l{}", LOCKS - 1)).unwrap();
    let again = within("a try", last.try_acquire()).await.unwrap();
    assert!(again.is_some(), "our own dropped guard's node was still ahead of the try");
    s.close().await;
}
