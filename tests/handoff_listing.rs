//! Moving up the queue without listing it. A holder admitted at the head leaves
//! a tombstone in the transaction that deletes its node, and the waiter behind it, which watches
//! that tombstone's name, enters on the deletion alone: a clean handoff lists nothing, whatever
//! the queue's length. Any other departure (a waiter giving up, a session closed, a revocation
//! request on a waiter followed by its departure) still makes the waiter behind list, and admits
//! nobody early.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use zk_recipes::{InterProcessMutex, Lock, LockGuard, QueueEvent, Session};
use zk_testcluster::ZkCluster;

/// A waiter: its session (kept open), its handle, its events and its acquire.
struct Waiter {
    session: Session,
    mutex: InterProcessMutex,
    events: mpsc::UnboundedReceiver<QueueEvent>,
    task: JoinHandle<LockGuard>,
    /// Its node's name, from its `Queued` event.
    node: String,
}

/// Queues a waiter on `path`, on a session of its own, and waits for its `Queued` event (its
/// watches are set by then).
async fn queue(connect: &str, path: &str, holding: Arc<AtomicUsize>) -> Waiter {
    let session = session(connect).await;
    let mutex = InterProcessMutex::new(&session, path).unwrap();
    let (tx, mut events) = mpsc::unbounded_channel();
    let m = mutex.clone();
    let task = tokio::spawn(async move {
        let mut report = move |e: &QueueEvent| {
            let _ = tx.send(e.clone());
        };
        let guard = m.acquire_with_events(None, &mut report).await.unwrap().unwrap();
        // Mutual exclusion, as the holders see it.
        assert_eq!(holding.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
        guard
    });
    let node = match within("queued", events.recv()).await.unwrap() {
        QueueEvent::Queued { node, .. } => node,
        other => panic!("not queued first: {other:?}"),
    };
    Waiter { session, mutex, events, task, node }
}

/// A holder on `path` and `n` waiters queued behind it, with the count of holders at once.
async fn behind_a_holder(connect: &str, path: &str, n: usize) -> (LockGuard, Arc<AtomicUsize>, Vec<Waiter>) {
    let holding = Arc::new(AtomicUsize::new(0));
    let holder = InterProcessMutex::new(&session(connect).await, path).unwrap();
    let guard = holder.acquire().await.unwrap();
    holding.fetch_add(1, Ordering::SeqCst);
    let mut waiters = Vec::new();
    for _ in 0..n {
        waiters.push(queue(connect, path, holding.clone()).await);
    }
    (guard, holding, waiters)
}

/// Releases `guard`, noting that its holder no longer holds.
async fn release(guard: LockGuard, holding: &AtomicUsize) {
    assert_eq!(holding.fetch_sub(1, Ordering::SeqCst), 1);
    guard.release().await.unwrap();
}

/// Eight waiters behind a holder, released in turn: each enters on its predecessor's deletion
/// with no listing but the one of its join. Before tombstones, every waiter from the third on
/// listed the whole queue once more (woken by the node two ahead of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_clean_handoff_lists_nothing() {
    const WAITERS: usize = 8;
    let zk = standalone().await;
    let connect = zk.connect_string();
    let path = "/locks/handoff-clean";
    let (mut guard, holding, mut waiters) = behind_a_holder(&connect, path, WAITERS).await;
    for waiter in &mut waiters {
        release(guard, &holding).await;
        guard = within("next in line", &mut waiter.task).await.unwrap();
    }
    release(guard, &holding).await;
    for (i, waiter) in waiters.iter_mut().enumerate() {
        let stats = waiter.mutex.stats();
        assert_eq!(stats.listings, 1, "waiter {i} listed again: {stats:?}");
        assert_eq!(stats.relists_saved, 1, "waiter {i}: {stats:?}");
        // The first waiter's predecessor was the head at its listing; every other one learned
        // it from the tombstone.
        assert_eq!(stats.behind_head, u64::from(i > 0), "waiter {i}: {stats:?}");
        let mut moved = Vec::new();
        while let Ok(event) = waiter.events.try_recv() {
            moved.extend(matches!(event, QueueEvent::MovedUp { .. }).then_some(event));
        }
        assert!(moved.is_empty(), "waiter {i} listed and moved up: {moved:?}");
    }
    for waiter in waiters {
        waiter.session.close().await;
    }
}

/// A waiter in the middle gives up and another one's session closes (their nodes deleted with no
/// tombstone): the waiter behind each lists again, enters only in its turn, and the queue keeps
/// its order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unclean_departure_still_lists_and_stays_correct() {
    const WAITERS: usize = 6;
    let zk = standalone().await;
    let connect = zk.connect_string();
    let path = "/locks/handoff-unclean";
    let (mut guard, holding, mut waiters) = behind_a_holder(&connect, path, WAITERS).await;
    // Waiter 1 gives up; waiter 3's session closes. Waiters 2 and 4 each list again, and move
    // up to watch the node ahead of the one that left, while the holder still holds.
    let gone_up = waiters.remove(1);
    gone_up.task.abort();
    let closed = waiters.remove(2);
    closed.task.abort();
    closed.session.close().await;
    for i in [1, 2] {
        let moved = within("moved up", async {
            loop {
                match waiters[i].events.recv().await.unwrap() {
                    QueueEvent::MovedUp { ahead, .. } => break ahead,
                    QueueEvent::Acquired { .. } => panic!("entered while the holder held"),
                    _ => {}
                }
            }
        })
        .await;
        assert_eq!(moved, i + 1, "waiter behind a departure");
        assert_eq!(waiters[i].mutex.stats().listings, 2, "it listed again");
    }
    assert!(waiters.iter().all(|w| !w.task.is_finished()), "someone entered while the holder held");
    for waiter in &mut waiters {
        release(guard, &holding).await;
        guard = within("next in line", &mut waiter.task).await.unwrap();
    }
    release(guard, &holding).await;
    // Entered in order (each waited for the one before it), and only those behind a departure
    // listed more than once.
    let listings: Vec<u64> = waiters.iter().map(|w| w.mutex.stats().listings).collect();
    assert_eq!(listings, vec![1, 2, 2, 1], "listings per waiter");
    for waiter in waiters {
        waiter.session.close().await;
    }
}

/// A revocation request written to a waiter's node (anyone may write one to any node), and then
/// that waiter's departure: a data change and a deletion of the node ahead, as a release marked
/// for the lock delay looks. It is no tombstone: the waiter behind lists, sees the holder still
/// there, and waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revoked_waiter_leaving_admits_nobody_early() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let path = "/locks/handoff-revoked";
    let holding = Arc::new(AtomicUsize::new(0));
    let revoker = session(&connect).await;
    let holder = InterProcessMutex::new(&session(&connect).await, path).unwrap();
    let guard = holder.acquire().await.unwrap();
    holding.fetch_add(1, Ordering::SeqCst);
    let middle = queue(&connect, path, holding.clone()).await;
    let mut last = queue(&connect, path, holding.clone()).await;
    let middle_path = format!("{path}/{}", middle.node);
    assert!(zk_recipes::request_revocation(&revoker, &middle_path).await.unwrap());
    middle.task.abort();
    middle.session.close().await;
    let moved = within("moved up", async {
        loop {
            match last.events.recv().await.unwrap() {
                QueueEvent::MovedUp { ahead, .. } => break ahead,
                QueueEvent::Acquired { .. } => panic!("entered while the holder held"),
                _ => {}
            }
        }
    })
    .await;
    assert_eq!(moved, 1);
    assert!(!last.task.is_finished(), "entered while the holder held");
    release(guard, &holding).await;
    let guard = within("last acquires", &mut last.task).await.unwrap();
    release(guard, &holding).await;
    last.session.close().await;
    revoker.close().await;
}

/// Three in one queue: a holder, a middle one whose listing (right behind the holder, nobody
/// after it) came before the waiter joined, and the waiter; once the waiter watches the middle
/// one and its tombstone's name.
struct Three {
    holder: LockGuard,
    middle: InterProcessMutex,
    middle_task: JoinHandle<zk_recipes::Result<LockGuard>>,
    waiter: InterProcessMutex,
    waiting: JoinHandle<zk_recipes::Result<LockGuard>>,
    middle_node: String,
    waiter_node: String,
    /// The middle one's tombstone's name.
    tomb: String,
}

/// Queues [`Three`] on `path`, on the sessions `h`, `m` and `w`.
async fn three_queued(zk: &ZkCluster, path: &str, (h, m, w): (&Session, &Session, &Session)) -> Three {
    let holder = InterProcessMutex::new(h, path).unwrap().acquire().await.unwrap();
    let spawn = |s: &Session| {
        let mutex = InterProcessMutex::new(s, path).unwrap();
        (mutex.clone(), tokio::spawn(async move { mutex.acquire().await }))
    };
    let (middle, middle_task) = spawn(m);
    eventually("the middle one listed", || async { middle.stats().listings == 1 }).await;
    let (waiter, waiting) = spawn(w);
    let queue = within("three in the queue", async {
        loop {
            let queue = waiter.participants().await.unwrap();
            if queue.len() == 3 {
                break queue;
            }
        }
    })
    .await;
    let (middle_node, waiter_node) =
        (format!("{path}/{}", queue[1].node), format!("{path}/{}", queue[2].node));
    let tomb = format!("{path}/{}.released", &queue[1].node[queue[1].node.len() - 10..]);
    eventually("the waiter to watch the middle one's tombstone", || async {
        zk.four_letter(0, "wchp").await.is_ok_and(|listing| watchers(&listing, &tomb).next().is_some())
    })
    .await;
    until_watched(zk, "the waiter to watch the middle one", &middle_node).await;
    Three { holder, middle, middle_task, waiter, waiting, middle_node, waiter_node, tomb }
}

/// The own-node check holds on the tombstone's path too: when our node and the node ahead go in
/// one transaction (ours first), the tombstone created in it as well, the waiter sees its own
/// node's deletion, which came first, and does not enter. Five rounds, so that a waiter that
/// picked between the events at random would be caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_node_goes_with_a_tombstone_does_not_enter() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let admin = client(&connect).await;
    let path = "/locks/handoff-own-node";
    let (h, m, w) = (session(&connect).await, session(&connect).await, session(&connect).await);
    for round in 0..5 {
        let Three { holder, middle_task, waiter, waiting, middle_node, waiter_node, tomb, .. } =
            three_queued(&zk, path, (&h, &m, &w)).await;
        let mut all = admin.new_multi_writer();
        all.add_delete(&waiter_node, None).unwrap();
        let options =
            zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
        all.add_create(&tomb, &[], &options).unwrap();
        all.add_delete(&tomb, None).unwrap();
        all.add_delete(&middle_node, None).unwrap();
        all.commit().await.unwrap();
        let outcome = within("the waiter", waiting).await.unwrap();
        assert!(matches!(outcome, Err(zk_recipes::Error::NodeDeleted { .. })), "round {round}: {outcome:?}");
        assert!(!waiter.is_held_by_this_handle(), "round {round}");
        let middle = within("the middle one", middle_task).await.unwrap();
        assert!(matches!(middle, Err(zk_recipes::Error::NodeDeleted { .. })), "round {round}: {middle:?}");
        holder.release().await.unwrap();
        waiter.settled().await;
        assert!(children(&admin, path).await.is_empty(), "round {round}");
    }
}

/// A node right behind the head at its listing, with nobody after it, leaves no tombstone when
/// it releases at the head; the waiter behind it, which listed it right behind the head, reads
/// once that the head is gone, and enters on that. But when the waiter's node goes in the
/// transaction that deletes the node ahead (ours first), the waiter sees its own node's
/// deletion, which came first, and does not enter; the node ahead, a holder by then, hears its
/// node's deletion too: its hold is lost. Five rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_node_goes_with_a_head_that_left_no_tombstone_does_not_enter() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let admin = client(&connect).await;
    let path = "/locks/handoff-own-node-no-tomb";
    let (h, m, w) = (session(&connect).await, session(&connect).await, session(&connect).await);
    for round in 0..5 {
        let Three { holder, middle, middle_task, waiter, waiting, middle_node, waiter_node, .. } =
            three_queued(&zk, path, (&h, &m, &w)).await;
        holder.release().await.unwrap();
        let guard = within("the middle one", middle_task).await.unwrap().unwrap();
        let mut status = guard.status();
        let mut all = admin.new_multi_writer();
        all.add_delete(&waiter_node, None).unwrap();
        all.add_delete(&middle_node, None).unwrap();
        all.commit().await.unwrap();
        let outcome = within("the waiter", waiting).await.unwrap();
        assert!(matches!(outcome, Err(zk_recipes::Error::NodeDeleted { .. })), "round {round}: {outcome:?}");
        assert!(!waiter.is_held_by_this_handle(), "round {round}");
        within("the middle one's hold lost", status.wait_for(|s| *s == zk_recipes::LockStatus::Lost))
            .await
            .unwrap();
        drop(guard);
        waiter.settled().await;
        middle.settled().await;
        assert!(children(&admin, path).await.is_empty(), "round {round}");
    }
}
