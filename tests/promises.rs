//! Promises the docs make that a new user tries first: a deletion from outside is
//! noticed by every hold with default options; two recipes of different kinds never share a
//! path; no acquire hangs after a loss or a close.

mod common;

use std::time::Duration;

use common::peers;
use common::*;
use zk_recipes::zookeeper_client::Client;
use zk_recipes::{
    Error, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphore, LatchOptions, LeaderLatch,
    LeaderSelector, Leadership, LockGuard, LockOptions, LockStatus, NodeFormat, SelectorOptions,
};

/// Deletes `guard`'s node as an operator would (or `zklock break`), and waits for the holder to
/// be told: its status turns `Lost`, `lost()` resolves, and `safe_until()` is `None`.
async fn deleted_from_outside_is_noticed(admin: &Client, guard: &LockGuard, what: &str) {
    assert_eq!(guard.current_status(), LockStatus::Held, "{what}");
    admin.delete(guard.node_path(), None).await.unwrap();
    within(&format!("{what}: lost() after its node was deleted"), guard.lost()).await;
    assert_eq!(guard.current_status(), LockStatus::Lost, "{what}");
    assert_eq!(guard.safe_until(), None, "{what}");
}

/// Every hold of every lock recipe, with default options, learns that its node was deleted
/// (it did not: only revocable locks watched their node, and a default mutex stayed `Held` while
/// another session took the lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_from_outside_is_noticed_by_default() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let s = session(&zk.connect_string()).await;

    let mutex = InterProcessMutex::new(&s, "/promises/mutex").unwrap();
    let g = mutex.acquire().await.unwrap();
    deleted_from_outside_is_noticed(&admin, &g, "mutex").await;
    // Another session takes the lock; the old holder knows it lost it.
    let other = InterProcessMutex::new(&session(&zk.connect_string()).await, "/promises/mutex").unwrap();
    let taken = other.try_acquire().await.unwrap().expect("the lock is free after the deletion");
    assert!(matches!(g.release().await, Err(Error::LockLost { .. })));
    taken.release().await.unwrap();

    let semaphore = InterProcessSemaphore::new(&s, "/promises/semaphore", 3).unwrap();
    let lease = semaphore.acquire().await.unwrap();
    deleted_from_outside_is_noticed(&admin, &lease, "semaphore lease").await;
    drop(lease);

    let rw = InterProcessReadWriteLock::new(&s, "/promises/rw").unwrap();
    let read = rw.read().await.unwrap();
    deleted_from_outside_is_noticed(&admin, &read, "read hold").await;
    drop(read);
    let write = rw.write().await.unwrap();
    deleted_from_outside_is_noticed(&admin, &write, "write hold").await;
    drop(write);

    // The opt-out keeps the documented behaviour: a fenced write is refused all the same.
    let unwatched =
        InterProcessMutex::with_options(&s, "/promises/unwatched", LockOptions::new().watch_own_node(false))
            .unwrap();
    let g = unwatched.acquire().await.unwrap();
    admin.delete(g.node_path(), None).await.unwrap();
    let mut write = g.fenced_writer().unwrap();
    write.add_check_version("/promises", -1).unwrap();
    assert!(matches!(write.commit().await, Err(Error::LockLost { .. })));
    assert!(matches!(g.release().await, Err(Error::LockLost { .. })));
    s.close().await;
}

/// The leader recipes notice it too: the latch and the selector lose leadership and queue again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_from_outside_ends_a_leaders_term() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let s = session(&zk.connect_string()).await;

    let latch = LeaderLatch::with_options(
        &s,
        "/promises/latch",
        zk_recipes::LatchOptions::new().participant_id("latch"),
    )
    .unwrap();
    latch.start().unwrap();
    let token = within("the latch leads", latch.await_leadership()).await.unwrap();
    let mut leadership = latch.leadership();
    let node = latch.leader().await.unwrap().expect("a leader").node;
    admin.delete(&format!("/promises/latch/{node}"), None).await.unwrap();
    within(
        "the latch leads again, on a new node",
        leadership.wait_for(|l| match l {
            Leadership::Leader { fencing_token } => *fencing_token != token,
            _ => false,
        }),
    )
    .await
    .unwrap();
    latch.close().await;

    let selector = LeaderSelector::with_options(
        &s,
        "/promises/selector",
        SelectorOptions::new().participant_id("sel").auto_requeue(true),
    )
    .unwrap();
    let mut terms = selector.terms();
    selector
        .start(|ctx| async move {
            ctx.stopped().await;
        })
        .unwrap();
    within("the selector leads", selector.await_leadership()).await.unwrap();
    let node = selector.leader().await.unwrap().expect("a leader").node;
    admin.delete(&format!("/promises/selector/{node}"), None).await.unwrap();
    within("the term ends", terms.recv()).await.unwrap();
    within("the selector leads again", selector.await_leadership()).await.unwrap();
    selector.close().await;
    s.close().await;
}

/// One path, one recipe: a latch and a selector on one path both led (each ignored the other's
/// nodes). The second to come now refuses, naming what it found, and leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_and_a_selector_never_share_a_path() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let s = session(&zk.connect_string()).await;
    let selector =
        LeaderSelector::with_options(&s, "/promises/el", SelectorOptions::new().participant_id("sel"))
            .unwrap();
    selector.start(|ctx| async move { ctx.stopped().await }).unwrap();
    within("the selector leads", selector.await_leadership()).await.unwrap();

    let latch = LeaderLatch::with_options(
        &s,
        "/promises/el",
        zk_recipes::LatchOptions::new().participant_id("latch"),
    )
    .unwrap();
    latch.start().unwrap();
    match within("the latch refuses", latch.await_leadership()).await {
        Err(Error::RecipeConflict { path, node, ours: "leader latch", theirs }) => {
            assert_eq!(path, "/promises/el");
            assert!(node.contains("-lock-"), "{node}");
            assert!(theirs.contains("leader selector"), "{theirs}");
        }
        other => panic!("expected RecipeConflict, got {other:?}"),
    }
    assert!(!latch.has_leadership());
    latch.close().await;
    assert_eq!(children(&admin, "/promises/el").await.len(), 1, "the refused latch left a node");
    selector.close().await;

    // And the other way round: a selector on a latch's path.
    let latch = LeaderLatch::with_options(
        &s,
        "/promises/el2",
        zk_recipes::LatchOptions::new().participant_id("latch"),
    )
    .unwrap();
    latch.start().unwrap();
    within("the latch leads", latch.await_leadership()).await.unwrap();
    let selector =
        LeaderSelector::with_options(&s, "/promises/el2", SelectorOptions::new().participant_id("sel"))
            .unwrap();
    selector.start(|ctx| async move { ctx.stopped().await }).unwrap();
    assert!(matches!(
        within("the selector refuses", selector.await_leadership()).await,
        Err(Error::RecipeConflict { theirs: "a leader latch", .. })
    ));
    assert!(latch.has_leadership());
    selector.close().await;
    latch.close().await;
    s.close().await;
}

/// A mutex and a semaphore on one path would not exclude each other: the second refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_and_a_semaphore_never_share_a_path() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let s = session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::new(&s, "/promises/mixed").unwrap();
    let semaphore = InterProcessSemaphore::new(&s, "/promises/mixed", 2).unwrap();

    let held = mutex.acquire().await.unwrap();
    match semaphore.acquire().await {
        Err(Error::RecipeConflict { ours: "semaphore", theirs, .. }) => {
            assert!(theirs.contains("mutex"), "{theirs}")
        }
        other => panic!("expected RecipeConflict, got {other:?}"),
    }
    assert_eq!(children(&admin, "/promises/mixed").await, vec![held.node_path().rsplit('/').next().unwrap()]);
    held.release().await.unwrap();

    let lease = semaphore.acquire().await.unwrap();
    assert!(matches!(
        mutex.try_acquire().await,
        Err(Error::RecipeConflict { ours: "lock", theirs: "a semaphore", .. })
    ));
    let rw = InterProcessReadWriteLock::new(&s, "/promises/mixed").unwrap();
    assert!(matches!(rw.try_write().await, Err(Error::RecipeConflict { ours: "read/write lock", .. })));
    assert_eq!(children(&admin, "/promises/mixed").await.len(), 1, "a refused acquire left a node");
    lease.release().await.unwrap();

    // Recipes that share a path by design still do: a mutex beside a semaphore mutex.
    let other = zk_recipes::InterProcessSemaphoreMutex::new(&s, "/promises/mixed").unwrap();
    let g = mutex.acquire().await.unwrap();
    assert!(other.try_acquire().await.unwrap().is_none(), "a semaphore mutex got in beside the mutex");
    g.release().await.unwrap();
    s.close().await;
}

/// Other libraries' recipes of another kind are refused too: a real Curator `LeaderLatch` on a
/// mutex's path, and kazoo's `ReadLock` on a kazoo-format mutex's path (kazoo's own `Lock`
/// ignores readers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_recipes_of_another_kind_are_refused() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let admin = client(&connect).await;
    let s = session(&connect).await;

    let mut java = Peer::spawn(peers::curator(&["latch", &connect, "/promises/curator", "java", "10000"]));
    java.expect("LEADER").await;
    let mutex = InterProcessMutex::new(&s, "/promises/curator").unwrap();
    match mutex.acquire_timeout(Duration::from_secs(10)).await {
        Err(Error::RecipeConflict { node, theirs: "a leader latch", .. }) => {
            assert!(node.contains("-latch-"), "{node}")
        }
        other => panic!("expected RecipeConflict, got {other:?}"),
    }
    assert!(nodes_owned_by(&admin, "/promises/curator", raw(&s).session_id().0).await.is_empty());
    java.say("quit");
    java.wait_success().await;

    let mut py = Peer::spawn(peers::kazoo(&["hold", &connect, "/promises/kazoo", "py", "10000", "read"]));
    py.expect("HOLDING").await;
    let kazoo_mutex =
        InterProcessMutex::with_options(&s, "/promises/kazoo", LockOptions::new().format(NodeFormat::Kazoo))
            .unwrap();
    assert!(matches!(
        kazoo_mutex.acquire_timeout(Duration::from_secs(10)).await,
        Err(Error::RecipeConflict { theirs: "a read/write lock's read side", .. })
    ));
    assert!(nodes_owned_by(&admin, "/promises/kazoo", raw(&s).session_id().0).await.is_empty());
    py.say("release");
    py.wait_success().await;
    // A latch in kazoo format is kazoo's `Election`, a `Lock`: it shares the path by design.
    let latch = LeaderLatch::with_options(
        &s,
        "/promises/kazoo",
        LatchOptions::new().participant_id("l").format(NodeFormat::Kazoo),
    )
    .unwrap();
    let g = kazoo_mutex.acquire().await.unwrap();
    latch.start().unwrap();
    assert_eq!(
        within("the latch waits", latch.await_leadership_timeout(Duration::from_millis(200))).await.unwrap(),
        None
    );
    g.release().await.unwrap();
    within("the latch leads", latch.await_leadership()).await.unwrap();
    latch.close().await;
    s.close().await;
}

/// After `close()`, every acquire returns `SessionClosed` at once, whatever guards are alive
/// (it waited forever for the handle's local turn, which the live guard kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acquire_hangs_after_a_close() {
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::new(&s, "/promises/closed").unwrap();
    let guard = mutex.acquire().await.unwrap();
    // One acquire waits for the handle's turn when the session closes, one comes after. One
    // poll takes the first to its wait for the turn (it sends nothing before).
    let mut waiting = std::pin::pin!(mutex.acquire());
    assert!(poll_once(waiting.as_mut()).is_pending(), "the acquire did not wait for the turn");
    s.close().await;
    assert!(matches!(within("the waiting acquire", waiting).await, Err(Error::SessionClosed)));
    assert!(matches!(within("an acquire after close", mutex.acquire()).await, Err(Error::SessionClosed)));
    assert!(matches!(
        within("a timed acquire after close", mutex.acquire_timeout(Duration::from_secs(3600))).await,
        Err(Error::SessionClosed)
    ));
    assert!(matches!(within("a try after close", mutex.try_acquire()).await, Err(Error::SessionClosed)));
    assert_eq!(guard.current_status(), LockStatus::Lost);
    drop(guard);
}

/// A lost guard keeps its handle's local turn until it is released or dropped, as a tokio
/// guard keeps its lock: a timed acquire is bounded by its timeout meanwhile, and the release of
/// the lost guard lets the next acquire through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_guard_keeps_its_turn_and_a_timed_acquire_is_bounded() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let s = session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::new(&s, "/promises/turn").unwrap();
    let guard = mutex.acquire().await.unwrap();
    admin.delete(guard.node_path(), None).await.unwrap();
    within("lost", guard.lost()).await;
    assert!(mutex.try_acquire().await.unwrap().is_none(), "the lost guard's turn was taken");
    assert!(within("a bounded acquire", mutex.acquire_timeout(Duration::from_millis(100)))
        .await
        .unwrap()
        .is_none());
    let waiting = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.acquire().await }
    });
    assert!(matches!(guard.release().await, Err(Error::LockLost { .. })));
    let next = within("the acquire after the lost guard's release", waiting).await.unwrap().unwrap();
    assert_eq!(next.current_status(), LockStatus::Held);
    next.release().await.unwrap();
    s.close().await;
}

/// Polls `fut` once, with a waker that does nothing.
fn poll_once<F: std::future::Future>(fut: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
    fut.poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
}
