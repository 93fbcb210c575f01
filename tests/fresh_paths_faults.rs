//! The fresh-path join under faults and races: the parent's create, ours and
//! the listing back to back, and the listing's child watch on the fresh parent standing in for
//! the data watch on our node, in sessions whose parent hint is set. The promises of the
//! own-node watch, of a waiter that enters on its predecessor's deletion alone, of mutual
//! exclusion and of cancel safety; and the loss counts.
//!
//! Three of them guard against what a join that lets a child watch stand in gets wrong easily:
//! * `a_waiter_on_a_fresh_path_enters_on_the_notification_alone`: the head's deletion also
//!   fires the waiter's child watch; a waiter that read its node then, before it entered, would
//!   pay a round trip per handoff. A waiter sets the data watch, as on any path;
//! * `closing_the_session_of_a_fresh_path_holder_counts_a_close_not_a_deletion`: the child watch
//!   reports a close's delete as a change, whose read finds the node gone: counted as
//!   `node_deleted`, it would name the wrong cause;
//! * `a_hold_lost_to_its_sessions_close_is_counted_once` (on any path): two threads see the one
//!   loss (`Monitor::lose`), and only one may count it.

mod common;

use common::queued::*;
use common::*;
use zk_recipes::zookeeper_client::Client;
use zk_recipes::{
    Error, InterProcessMutex, InterProcessSemaphore, LockGuard, LockOptions, LockStatus, Session,
};
use zk_testcluster::{FaultProxy, ZkCluster};

/// The guess is really taken on these tests' paths: after an acquire on a fresh path, the
/// holder's session has no data watch on its node (the listing's child watch on the parent
/// stands in for it). Without the child watch (a data watch on our node, as on any path) this
/// fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_on_a_fresh_path_has_no_data_watch_on_its_node() {
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    learn_fresh_paths(&s, "/rev-a").await;
    let guard = InterProcessMutex::new(&s, "/rev-a/o1").unwrap().acquire().await.unwrap();
    let id = raw(&s).session_id().0;
    sync_session(&s).await;
    assert!(!has_data_watch(&zk, guard.node_path(), id).await, "no data watch on our node");
    guard.release().await.unwrap();
    s.close().await;
}

/// `watch_own_node(false)` keeps its promise of no watch on fresh paths too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_own_node_watch_a_fresh_path_holder_watches_nothing() {
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    learn_fresh_paths(&s, "/rev-b").await;
    let mutex =
        InterProcessMutex::with_options(&s, "/rev-b/o1", LockOptions::new().watch_own_node(false)).unwrap();
    let guard = mutex.acquire().await.unwrap();
    let id = raw(&s).session_id().0;
    sync_session(&s).await;
    assert!(!has_data_watch(&zk, guard.node_path(), id).await);
    guard.release().await.unwrap();
    s.close().await;
}

/// docs/how-it-works.md, "A handoff on the notification alone", on a fresh path: a waiter whose
/// session guesses fresh paths queues behind the head; its join's listing set a child watch,
/// which the head's deletion fires too. The waiter must still enter without a request (here:
/// while a proxy holds back everything it sends): it sets the data watch on its node, as on any
/// path, and does not act on the child watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_fresh_path_enters_on_the_notification_alone() {
    let zk = standalone().await;
    let holder_session = session(&zk.connect_string()).await;
    let (proxy, waiter_session) = guessing_behind_a_proxy(&zk, "/rev-c").await;
    for round in 0..10 {
        let path = format!("/rev-c/o{round}");
        enters_on_the_notification_alone(&zk, &proxy, (&holder_session, &waiter_session), &path, round).await;
        // Keeps the hint up: the waiter's guess above met an existing parent.
        take_fresh(&waiter_session, &format!("/rev-c/keep{round}")).await;
    }
    holder_session.close().await;
    waiter_session.close().await;
}

/// The same with a contender joined behind the waiter: its join fires the waiter's child watch
/// before the head goes, and the handoff still needs no request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_path_waiter_with_a_contender_behind_enters_on_the_notification_alone() {
    let zk = standalone().await;
    let holder_session = session(&zk.connect_string()).await;
    let behind_session = session(&zk.connect_string()).await;
    let (proxy, waiter_session) = guessing_behind_a_proxy(&zk, "/rev-n").await;
    for round in 0..10 {
        let path = format!("/rev-n/o{round}");
        let Behind { holder, waiter, waiting, .. } =
            behind_a_holder(&zk, (&holder_session, &waiter_session), &path).await;
        let mut behind = Waiter::lock(InterProcessMutex::new(&behind_session, &path).unwrap(), None);
        behind.queued().await;
        let queue = waiter.participants().await.unwrap();
        let waiter_node = format!("{path}/{}", queue[1].node);
        let id = raw(&waiter_session).session_id().0;
        until_data_watch(&zk, "the waiter's data watch on its node", &waiter_node, id).await;
        proxy.hold_requests();
        holder.release().await.unwrap();
        let entered = tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await;
        proxy.heal();
        let guard = match entered {
            Ok(joined) => joined.unwrap().unwrap(),
            Err(_) => panic!("round {round}: the waiter did not enter on the notification alone"),
        };
        guard.release().await.unwrap();
        behind.guard().await.release().await.unwrap();
        waiter.settled().await;
        take_fresh(&waiter_session, &format!("/rev-n/keep{round}")).await;
    }
    close_all([holder_session, behind_session, waiter_session]).await;
}

/// A session connected through a proxy of its own, taught to guess fresh paths under `base`.
async fn guessing_behind_a_proxy(zk: &ZkCluster, base: &str) -> (FaultProxy, Session) {
    let proxy = zk.proxy().expect("a proxy");
    let s = session(&proxy.connect_string()).await;
    learn_fresh_paths(&s, base).await;
    (proxy, s)
}

/// An admin client and three sessions (a holder's, a waiter's, and one behind it).
async fn admin_and_sessions(zk: &ZkCluster) -> (Client, [Session; 3]) {
    let connect = zk.connect_string();
    let admin = client(&connect).await;
    (admin, [session(&connect).await, session(&connect).await, session(&connect).await])
}

/// A holder of `path` in `h`, and a waiter in `w` queued behind it.
async fn holder_and_waiter((h, w): (&Session, &Session), path: &str) -> (LockGuard, Waiter) {
    let holder = InterProcessMutex::new(h, path).unwrap().acquire().await.unwrap();
    let mut waiter = Waiter::lock(InterProcessMutex::new(w, path).unwrap(), None);
    waiter.queued().await;
    (holder, waiter)
}

/// The waiter's acquire ends: it was told its node was deleted.
async fn told_deleted(waiter: &mut Waiter) {
    let outcome = waiter.result().await;
    assert!(matches!(outcome, Err(Error::NodeDeleted { .. })), "{outcome:?}");
}

async fn close_all<const N: usize>(sessions: [Session; N]) {
    for s in sessions {
        s.close().await;
    }
}

/// A waiter on a fresh path (its join's listing set a child watch) whose node is deleted from
/// outside while it waits behind the head is told so, and never enters; the one queued behind
/// it takes the lock when the head releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_fresh_path_whose_node_was_deleted_does_not_enter() {
    let zk = standalone().await;
    let (admin, [h, w, t]) = admin_and_sessions(&zk).await;
    learn_fresh_paths(&w, "/rev-d").await;
    learn_fresh_paths(&t, "/rev-d2").await;
    let path = "/rev-d/o1";
    let (holder, mut waiter) = holder_and_waiter((&h, &w), path).await;
    let queue = InterProcessMutex::new(&h, path).unwrap().participants().await.unwrap();
    let waiter_node = format!("{path}/{}", queue[1].node);
    assert!(
        has_data_watch(&zk, &waiter_node, raw(&w).session_id().0).await,
        "a waiter watches its node's data"
    );
    admin.delete(&format!("{path}/{}", queue[1].node), None).await.unwrap();
    told_deleted(&mut waiter).await;
    let mut behind = Waiter::lock(InterProcessMutex::new(&t, path).unwrap(), None);
    behind.queued().await;
    holder.release().await.unwrap();
    let next = behind.guard().await;
    assert_eq!(next.current_status(), LockStatus::Held);
    next.release().await.unwrap();
    assert!(children(&admin, path).await.is_empty());
    close_all([h, w, t]).await;
}

/// As above, with a contender joining behind the waiter first (its create fires the waiter's
/// child watch: the waiter reads its node and watches its data), then the waiter's node deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_path_waiter_whose_child_watch_fired_still_hears_its_deletion() {
    let zk = standalone().await;
    let (admin, [h, w, t]) = admin_and_sessions(&zk).await;
    learn_fresh_paths(&w, "/rev-e").await;
    let path = "/rev-e/o1";
    let (holder, mut waiter) = holder_and_waiter((&h, &w), path).await;
    let mut behind = Waiter::lock(InterProcessMutex::new(&t, path).unwrap(), None);
    behind.queued().await;
    let queue = InterProcessMutex::new(&h, path).unwrap().participants().await.unwrap();
    assert_eq!(queue.len(), 3);
    let waiter_node = format!("{path}/{}", queue[1].node);
    // The waiter's child watch fired with the join behind it: it now watches its node's data.
    until_data_watch(&zk, "the waiter's data watch on its node", &waiter_node, raw(&w).session_id().0).await;
    admin.delete(&waiter_node, None).await.unwrap();
    told_deleted(&mut waiter).await;
    holder.release().await.unwrap();
    let next = behind.guard().await;
    next.release().await.unwrap();
    assert!(children(&admin, path).await.is_empty());
    close_all([h, w, t]).await;
}

/// correctness.rs's `a_waiter_whose_node_goes_with_the_node_ahead_does_not_enter` on fresh
/// paths: the waiter's node and the head's deleted in one transaction, ours first. The child
/// watch fires for ours before the head's deletion is told: the waiter must not enter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_path_waiter_whose_node_goes_with_the_head_does_not_enter() {
    deleted_with_the_head("/rev-f", Order::WaiterFirst).await;
}

/// The other order: the head's node first, then the waiter's, in one transaction. The waiter
/// may enter on the head's deletion (for it, its node went just after), but then its hold must
/// turn `Lost` at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_path_waiter_whose_node_goes_just_after_the_head_never_holds_unknowingly() {
    deleted_with_the_head("/rev-g", Order::HeadFirst).await;
}

/// Which of the two nodes a transaction deletes first.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    WaiterFirst,
    HeadFirst,
}

/// Ten rounds under `base` of a waiter on a fresh path behind the head, both of their nodes
/// deleted in one transaction in `order`, and what the waiter must make of it.
async fn deleted_with_the_head(base: &str, order: Order) {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let (h, w) = (session(&zk.connect_string()).await, session(&zk.connect_string()).await);
    learn_fresh_paths(&w, base).await;
    for round in 0..10 {
        let path = format!("{base}/o{round}");
        let Behind { holder, holder_node, waiter, waiting } = behind_a_holder(&zk, (&h, &w), &path).await;
        let queue = waiter.participants().await.unwrap();
        let waiter_node = format!("{path}/{}", queue[1].node);
        if order == Order::WaiterFirst {
            assert_eq!(queue.len(), 2, "round {round}: {queue:?}");
            assert!(
                has_data_watch(&zk, &waiter_node, raw(&w).session_id().0).await,
                "round {round}: a waiter watches its node's data"
            );
            delete_together(&admin, &waiter_node, &holder_node).await;
            let outcome = within("the waiter", waiting).await.unwrap();
            assert!(matches!(outcome, Err(Error::NodeDeleted { .. })), "round {round}: {outcome:?}");
            assert!(!waiter.is_held_by_this_handle(), "round {round}");
        } else {
            delete_together(&admin, &holder_node, &waiter_node).await;
            match within("the waiter", waiting).await.unwrap() {
                Err(Error::NodeDeleted { .. }) => {}
                Ok(guard) => {
                    within("the hold is lost", guard.lost()).await;
                    assert_eq!(guard.current_status(), LockStatus::Lost, "round {round}");
                }
                other => panic!("round {round}: {other:?}"),
            }
        }
        let _ = holder.release().await;
        waiter.settled().await;
        assert!(children(&admin, &path).await.is_empty(), "round {round}");
        // Keeps the hint up (the guess above met an existing lock path).
        take_fresh(&w, &format!("{base}/keep{round}")).await;
    }
    h.close().await;
    w.close().await;
}

/// A lock with a lock delay and a semaphore, in a session whose hint is set, on fresh paths:
/// each holder hears its node deleted by someone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_lock_and_a_semaphore_on_fresh_paths_hear_their_nodes_deleted() {
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    let admin = client(&zk.connect_string()).await;
    learn_fresh_paths(&s, "/rev-h").await;
    let delayed = InterProcessMutex::with_options(
        &s,
        "/rev-h/o1",
        LockOptions::new().lock_delay(std::time::Duration::from_millis(100)),
    )
    .unwrap();
    let guard = delayed.acquire().await.unwrap();
    admin.delete(guard.node_path(), None).await.unwrap();
    within("the delayed lock's holder is told", guard.lost()).await;
    let semaphore = InterProcessSemaphore::new(&s, "/rev-h/o2", 2).unwrap();
    let lease = semaphore.acquire().await.unwrap();
    admin.delete(lease.node_path(), None).await.unwrap();
    within("the lease holder is told", lease.lost()).await;
    // And a per-order mutex in the same session still guesses and hears its deletion.
    let guard = InterProcessMutex::new(&s, "/rev-h/o3").unwrap().acquire().await.unwrap();
    admin.delete(guard.node_path(), None).await.unwrap();
    within("the mutex holder is told", guard.lost()).await;
    s.close().await;
}

/// Mutual exclusion on fresh paths, several sessions that all guess, contending at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_that_all_guess_exclude_each_other_on_fresh_paths() {
    let zk = standalone().await;
    let mut sessions = Vec::new();
    for i in 0..3 {
        let s = session(&zk.connect_string()).await;
        learn_fresh_paths(&s, &format!("/rev-i/learn-{i}")).await;
        sessions.push(s);
    }
    let admin = client(&zk.connect_string()).await;
    for round in 0..8 {
        let path = format!("/rev-i/o{round}");
        exclusion_round(&sessions, &admin, &path, round).await;
    }
    for s in sessions {
        s.close().await;
    }
}

/// Cancel safety on fresh paths: an acquire dropped at any point (with a holder in another
/// session, or none) leaves no node of ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_dropped_anywhere_on_a_fresh_path_leaves_no_node() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let (s, other) = (session(&zk.connect_string()).await, session(&zk.connect_string()).await);
    learn_fresh_paths(&s, "/rev-j").await;
    let mut rng = Rng(seed());
    let mut handles = Vec::new();
    for round in 0..40 {
        let path = format!("/rev-j/o{round}");
        let held = match rng.below(3) {
            0 => Some(InterProcessMutex::new(&other, &path).unwrap().acquire().await.unwrap()),
            _ => None,
        };
        let mutex = InterProcessMutex::new(&s, &path).unwrap();
        if let Some(Ok(guard)) = drop_randomly(&mut rng, || mutex.acquire()).await {
            guard.release().await.unwrap();
        }
        if let Some(held) = held {
            held.release().await.unwrap();
        }
        handles.push((path, mutex));
    }
    let id = raw(&s).session_id().0;
    for (path, mutex) in handles {
        within("cleanups", mutex.settled()).await;
        let left = nodes_owned_by(&admin, &path, id).await;
        assert!(left.is_empty(), "{path}: {left:?}");
    }
    s.close().await;
    other.close().await;
}

/// A fresh-path holder whose node is deleted while its connection is down hears of it once the
/// client reconnects: the child watch, set again by the client with the last zxid it saw, fires
/// for a change of the parent's children made meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_path_holder_hears_its_node_deleted_while_disconnected() {
    let zk = standalone().await;
    let (proxy, s) = guessing_behind_a_proxy(&zk, "/rev-k").await;
    let admin = client(&zk.connect_string()).await;
    let guard = InterProcessMutex::new(&s, "/rev-k/o1").unwrap().acquire().await.unwrap();
    assert!(!has_data_watch(&zk, guard.node_path(), raw(&s).session_id().0).await, "the holder guessed");
    proxy.blackhole();
    admin.delete(guard.node_path(), None).await.unwrap();
    // Whatever the server sent meanwhile goes with the connection.
    proxy.cut();
    proxy.heal();
    // (`lost()` resolves on `Suspended` already, under the default loss policy.)
    let mut status = guard.status();
    within("the holder is told", status.wait_for(|s| *s == LockStatus::Lost)).await.unwrap();
    s.close().await;
}

/// The recorder of this binary (process-wide), installed by the first test that asks.
fn snapshotter() -> &'static metrics_util::debugging::Snapshotter {
    static SNAPSHOTTER: std::sync::OnceLock<metrics_util::debugging::Snapshotter> =
        std::sync::OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("the only recorder in this binary");
        snapshotter
    })
}

/// `zk_recipes_holds_lost_total{role, cause}` so far, by cause. A snapshot of the debugging
/// recorder resets the counters it reads, and this binary's tests take theirs concurrently: every
/// snapshot is added to one running total, and each test reads its own role from it.
fn losses(role: &str) -> std::collections::HashMap<String, u64> {
    type Totals = std::collections::HashMap<(String, String), u64>;
    static TOTALS: std::sync::OnceLock<std::sync::Mutex<Totals>> = std::sync::OnceLock::new();
    let mut totals = TOTALS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let key = key.key();
        if key.name() != "zk_recipes_holds_lost_total" {
            continue;
        }
        let label = |name: &str| key.labels().find(|l| l.key() == name).map(|l| l.value().to_string());
        if let (Some(role), Some(cause), metrics_util::debugging::DebugValue::Counter(n)) =
            (label("role"), label("cause"), value)
        {
            *totals.entry((role, cause)).or_default() += n;
        }
    }
    totals.iter().filter(|((r, _), _)| r == role).map(|((_, cause), n)| (cause.clone(), *n)).collect()
}

/// docs/metrics.md: a hold ended by closing its session counts with cause `session_closed`.
/// A close deletes our node before it ends the session; with the data watch, the hold tells
/// that deletion from one by someone else (`session_closed()`); the child watch standing in for
/// it resolves as `Changed`, whose read finds the node gone and counts `node_deleted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_session_of_a_fresh_path_holder_counts_a_close_not_a_deletion() {
    snapshotter();
    let zk = standalone().await;
    const ROUNDS: u64 = 40;
    for round in 0..ROUNDS {
        let s = session(&zk.connect_string()).await;
        learn_fresh_paths(&s, &format!("/rev-l/{round}")).await;
        let mutex = InterProcessMutex::with_options(
            &s,
            &format!("/rev-l/{round}/o1"),
            LockOptions::new().metrics_role("fresh-close"),
        )
        .unwrap();
        let guard = mutex.acquire().await.unwrap();
        s.close().await;
        within("the holder is told", guard.lost()).await;
        // The hold's own-node job may still be reading; it counts before it ends.
        mutex.settled().await;
        drop(guard);
    }
    let causes = losses("fresh-close");
    // (Only the cause is checked here: a close's loss may be counted twice, see below.)
    assert_eq!(causes.get("node_deleted").copied().unwrap_or(0), 0, "{causes:?}");
    assert!(causes.get("session_closed").copied().unwrap_or(0) >= ROUNDS, "{causes:?}");
}

/// Not the fresh path's doing, but counted the same way as the above: a hold lost by its
/// session's close is counted once. The own-node job (our node's deletion, on the session's
/// driver) and the session's listener (`Closed`, on the supervisor) both call `Monitor::lose`;
/// only the call that moves the status to `Lost` counts. Here on an existing path (the data
/// watch), in a session that never guesses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_lost_to_its_sessions_close_is_counted_once() {
    snapshotter();
    const ROUNDS: u64 = 40;
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    create_persistent(&admin, "/rev-m", b"").await;
    create_persistent(&admin, "/rev-m/lock", b"").await;
    for _ in 0..ROUNDS {
        let s = session(&zk.connect_string()).await;
        let mutex =
            InterProcessMutex::with_options(&s, "/rev-m/lock", LockOptions::new().metrics_role("close-once"))
                .unwrap();
        let guard = mutex.acquire().await.unwrap();
        s.close().await;
        within("the holder is told", guard.lost()).await;
        mutex.settled().await;
        drop(guard);
    }
    let causes = losses("close-once");
    assert_eq!(causes.values().sum::<u64>(), ROUNDS, "{causes:?}");
}
