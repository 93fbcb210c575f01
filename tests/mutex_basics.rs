//! InterProcessMutex: exclusion (also between tasks on one handle), fairness, reentrancy through
//! the guard, try/timeout, inspection, bad input.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use zk_recipes::{Error, InterProcessMutex, LockOptions, LockStatus, PathError, Session};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_sessions_never_overlap_and_the_counter_is_exact() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    create_persistent(&admin, "/counter", b"0").await;
    const CONTENDERS: usize = 8;
    const ROUNDS: usize = 25;
    let overlap = Arc::new(Overlap::default());
    let mut tasks = Vec::new();
    for i in 0..CONTENDERS {
        let connect = zk.connect_string();
        let overlap = overlap.clone();
        tasks.push(tokio::spawn(async move {
            let s = session(&connect).await;
            let c = raw(&s);
            let mutex = InterProcessMutex::with_options(
                &s,
                "/locks/exclusion",
                LockOptions::new().participant_id(format!("c{i}")),
            )
            .unwrap();
            for _ in 0..ROUNDS {
                let guard = mutex.acquire().await.expect("acquire");
                overlap.enter();
                bump_counter(&c, "/counter").await;
                overlap.exit();
                guard.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        within("contender", t).await.expect("contender task");
    }
    assert_eq!(overlap.violations(), 0, "two holders at once");
    assert_eq!(overlap.entries(), CONTENDERS * ROUNDS);
    assert_eq!(read_counter(&admin, "/counter").await, (CONTENDERS * ROUNDS) as u64);
    assert!(children(&admin, "/locks/exclusion").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grants_follow_creation_order() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let holder = InterProcessMutex::new(&session(&zk.connect_string()).await, "/locks/fifo").unwrap();
    let first = holder.acquire().await.unwrap();

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for i in 0..6 {
        let m = InterProcessMutex::new(&session(&zk.connect_string()).await, "/locks/fifo").unwrap();
        let tx = tx.clone();
        waiters.push(tokio::spawn(async move {
            let g = m.acquire().await.expect("acquire");
            let seq: i64 = g.node_path().rsplit("lock-").next().unwrap().parse().unwrap();
            tx.send((i, seq)).unwrap();
            g.release().await.unwrap();
        }));
        // Join one at a time: wait until this waiter's node is in the queue.
        eventually("waiter queued", || async { children(&admin, "/locks/fifo").await.len() == i + 2 }).await;
    }
    first.release().await.unwrap();
    let mut order = Vec::new();
    for _ in 0..6 {
        order.push(within("grant", rx.recv()).await.unwrap());
    }
    let by_join: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(by_join, (0..6).collect::<Vec<_>>(), "grants out of join order");
    let seqs: Vec<i64> = order.iter().map(|(_, s)| *s).collect();
    let mut sorted = seqs.clone();
    sorted.sort();
    assert_eq!(seqs, sorted, "grants out of sequence order");
    for w in waiters {
        w.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_holds_count_and_the_last_release_frees() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let s = session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::new(&s, "/locks/reentrant").unwrap();
    let other = InterProcessMutex::new(&session(&zk.connect_string()).await, "/locks/reentrant").unwrap();

    let outer = mutex.acquire().await.unwrap();
    let creates = mutex.stats().creates;
    // Re-entry goes through the guard (the proof of ownership), not through the handle.
    let inner = outer.reenter().unwrap();
    assert_eq!(mutex.stats().creates, creates, "re-entry went to ZooKeeper");
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    assert_eq!(inner.node_path(), outer.node_path());
    assert_eq!(children(&admin, "/locks/reentrant").await.len(), 1);
    // The handle is not a proof of ownership: acquiring through it (or a clone) waits like any
    // other contender, also from this task.
    assert!(mutex.clone().try_acquire().await.unwrap().is_none(), "the handle re-entered implicitly");
    assert!(mutex.acquire_timeout(Duration::from_millis(200)).await.unwrap().is_none());
    assert_eq!(children(&admin, "/locks/reentrant").await.len(), 1, "a refused acquire left a node");

    inner.release().await.unwrap();
    assert!(mutex.is_held_by_this_handle());
    assert!(other.try_acquire().await.unwrap().is_none(), "another handle got a lock still held");

    let outer_token = outer.fencing_token();
    outer.release().await.unwrap();
    assert!(!mutex.is_held_by_this_handle());
    let g = other.try_acquire().await.unwrap().expect("free after the last release");
    assert!(g.fencing_token() > outer_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_guards_release_in_any_order_and_a_lost_hold_is_not_reentered() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let mutex = InterProcessMutex::new(&session(&zk.connect_string()).await, "/locks/nested").unwrap();
    let outer = mutex.acquire().await.unwrap();
    let inner = outer.reenter().unwrap();
    // The outer guard may go first: the node stays until the last guard is released.
    outer.release().await.unwrap();
    assert!(mutex.is_held_by_this_handle());
    assert_eq!(children(&admin, "/locks/nested").await.len(), 1, "released with a guard left");
    let nested = inner.reenter().expect("re-enter through any live guard");
    nested.release().await.unwrap();
    let node = inner.node_path().to_string();
    inner.release().await.unwrap();
    assert!(admin.check_stat(&node).await.unwrap().is_none(), "the node outlived its last guard");

    // A lost hold can't be re-entered (a revocable lock, which learns of the deletion at once).
    let mutex = InterProcessMutex::with_options(
        &session(&zk.connect_string()).await,
        "/locks/nested",
        LockOptions::new().revocable(true),
    )
    .unwrap();
    let g = mutex.acquire().await.unwrap();
    admin.delete(g.node_path(), None).await.unwrap();
    within("Lost", g.status().wait_for(|s| *s == LockStatus::Lost)).await.unwrap();
    assert!(matches!(g.reenter(), Err(Error::LockLost { .. })));
    assert!(matches!(g.release().await, Err(Error::LockLost { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_tasks_on_one_handle_exclude_each_other() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let s = session(&zk.connect_string()).await;
    create_persistent(&admin, "/shared-counter", b"0").await;
    let mutex = InterProcessMutex::new(&s, "/locks/shared-handle").unwrap();
    let overlap = Arc::new(Overlap::default());
    const TASKS: usize = 4;
    const ROUNDS: usize = 10;
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        // One handle (clones of it) for every task: exclusion between them is the point.
        let (mutex, overlap, c) = (mutex.clone(), overlap.clone(), raw(&s));
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let g = mutex.acquire().await.expect("acquire");
                overlap.enter();
                bump_counter(&c, "/shared-counter").await;
                overlap.exit();
                g.release().await.expect("release");
            }
        }));
    }
    // One node at a time: the tasks take turns locally before queueing in ZooKeeper.
    let most_nodes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watcher = {
        let (admin, most_nodes) = (admin.clone(), most_nodes.clone());
        tokio::spawn(async move {
            loop {
                let n = children(&admin, "/locks/shared-handle").await.len();
                most_nodes.fetch_max(n, std::sync::atomic::Ordering::SeqCst);
                tokio::task::yield_now().await;
            }
        })
    };
    for t in tasks {
        within("task on a shared handle", t).await.expect("task");
    }
    watcher.abort();
    assert_eq!(overlap.violations(), 0, "two tasks on one handle held at once");
    assert_eq!(overlap.entries(), TASKS * ROUNDS);
    assert_eq!(read_counter(&admin, "/shared-counter").await, (TASKS * ROUNDS) as u64);
    // The turn passes on as the last guard is released, so the next task's node may briefly
    // sit behind the one being deleted: never more than two, however many tasks wait.
    let most = most_nodes.load(std::sync::atomic::Ordering::SeqCst);
    assert!(most <= 2, "{most} nodes at once: tasks on one handle queued side by side");
    assert!(children(&admin, "/locks/shared-handle").await.is_empty());
}

/// The guard is the proof of ownership: it stays valid when the recipe handle and every
/// `Session` handle it came from are dropped (as when a task returns only the guard).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_outlives_its_handle_and_its_session_handles() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let guard = {
        let s = session(&zk.connect_string()).await;
        let mutex = InterProcessMutex::new(&s, "/locks/orphan").unwrap();
        tokio::spawn(async move { mutex.acquire().await }).await.unwrap().unwrap()
    };
    let other = InterProcessMutex::new(&session(&zk.connect_string()).await, "/locks/orphan").unwrap();
    assert!(other.try_acquire().await.unwrap().is_none(), "the lock was freed under a live guard");
    assert_eq!(children(&admin, "/locks/orphan").await.len(), 1);
    assert_eq!(guard.current_status(), LockStatus::Held);
    guard.release().await.expect("release of a guard whose handles were dropped");
    assert!(other.try_acquire().await.unwrap().is_some(), "free after the release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_and_timeout_leave_no_node() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let holder = InterProcessMutex::new(&session(&zk.connect_string()).await, "/locks/busy").unwrap();
    let other = InterProcessMutex::new(&session(&zk.connect_string()).await, "/locks/busy").unwrap();
    let g = holder.acquire().await.unwrap();

    assert!(other.try_acquire().await.unwrap().is_none());
    assert_eq!(
        children(&admin, "/locks/busy").await,
        vec![g.node_path().rsplit('/').next().unwrap().to_string()]
    );

    assert!(other.acquire_timeout(Duration::from_millis(300)).await.unwrap().is_none());
    assert_eq!(children(&admin, "/locks/busy").await.len(), 1, "timeout left a node");

    g.release().await.unwrap();
    let got = other.acquire_timeout(Duration::from_secs(10)).await.unwrap();
    assert!(got.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn participants_list_the_queue_in_order() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let a_session = session(&zk.connect_string()).await;
    let a =
        InterProcessMutex::with_options(&a_session, "/locks/who", LockOptions::new().participant_id("alpha"))
            .unwrap();
    let b = InterProcessMutex::with_options(
        &session(&zk.connect_string()).await,
        "/locks/who",
        LockOptions::new().participant_id("beta"),
    )
    .unwrap();
    let ga = a.acquire().await.unwrap();
    let waiting = tokio::spawn(async move { b.acquire().await.map(|g| g.fencing_token()) });
    eventually("beta queued", || async { children(&admin, "/locks/who").await.len() == 2 }).await;

    let list = a.participants().await.unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!((list[0].id.as_str(), list[0].is_holder, list[0].position), ("alpha", true, 0));
    assert_eq!((list[1].id.as_str(), list[1].is_holder, list[1].position), ("beta", false, 1));
    assert_eq!(list[0].session, raw(&a_session).session_id().0);
    assert_eq!(list[0].czxid as u64, ga.fencing_token());
    assert_ne!(list[1].session, list[0].session);
    ga.release().await.unwrap();
    within("beta", waiting).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_releases_from_another_task_and_by_drop() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let mutex = InterProcessMutex::new(&session(&zk.connect_string()).await, "/locks/anywhere").unwrap();
    let g = mutex.acquire().await.unwrap();
    // Released from a different task (and thread): no affinity.
    tokio::spawn(async move { g.release().await }).await.unwrap().unwrap();
    assert!(children(&admin, "/locks/anywhere").await.is_empty());

    let g = mutex.acquire().await.unwrap();
    std::thread::spawn(move || drop(g)).join().unwrap();
    mutex.settled().await;
    assert!(children(&admin, "/locks/anywhere").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_commit_only_while_held() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    create_persistent(&admin, "/stock", b"10").await;
    let mutex = InterProcessMutex::new(&session(&zk.connect_string()).await, "/locks/stock").unwrap();
    let g = mutex.acquire().await.unwrap();

    let mut w = g.fenced_writer().unwrap();
    w.add_set_data("/stock", b"9", None).unwrap();
    w.commit().await.expect("fenced write while held");
    assert_eq!(admin.get_data("/stock").await.unwrap().0, b"9");

    // An administrator deletes our node: a fenced write is refused at once, even by a holder
    // that was not told (a lock that is not revocable does not watch its own node), and the
    // release reports the loss.
    admin.delete(g.node_path(), None).await.unwrap();
    let mut w = g.fenced_writer().unwrap();
    w.add_set_data("/stock", b"8", None).unwrap();
    assert!(matches!(w.commit().await, Err(Error::LockLost { .. })));
    assert_eq!(admin.get_data("/stock").await.unwrap().0, b"9", "a lost holder wrote");
    assert!(matches!(g.release().await, Err(Error::LockLost { .. })));

    // A revocable lock watches its own node: the holder is told Lost, and its fenced writes
    // are refused just the same.
    let revocable = InterProcessMutex::with_options(
        &session(&zk.connect_string()).await,
        "/locks/stock",
        LockOptions::new().revocable(true),
    )
    .unwrap();
    let g = revocable.acquire().await.unwrap();
    admin.delete(g.node_path(), None).await.unwrap();
    let mut status = g.status();
    within("Lost", status.wait_for(|s| *s == LockStatus::Lost)).await.unwrap();
    let mut w = g.fenced_writer().unwrap();
    w.add_set_data("/stock", b"8", None).unwrap();
    assert!(matches!(w.commit().await, Err(Error::LockLost { .. })));
    assert_eq!(admin.get_data("/stock").await.unwrap().0, b"9", "a lost holder wrote");
    assert!(matches!(g.release().await, Err(Error::LockLost { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_paths_get_typed_errors_and_nothing_is_sent() {
    let zk = standalone().await;
    let c = session(&zk.connect_string()).await;
    let cases = [
        ("locks/x", PathError::NotAbsolute),
        ("/locks/x/", PathError::TrailingSlash),
        ("/locks//x", PathError::EmptySegment),
        ("/locks/./x", PathError::RelativeSegment),
        ("/locks/../x", PathError::RelativeSegment),
        ("/lo\0cks", PathError::Nul),
        ("", PathError::Empty),
        ("/", PathError::Root),
    ];
    for (path, want) in cases {
        match InterProcessMutex::new(&c, path) {
            Err(Error::InvalidPath { reason, .. }) => assert_eq!(reason, want, "{path:?}"),
            other => panic!("{path:?}: {other:?}"),
        }
    }
    let long = format!("/{}", "x".repeat(5000));
    assert!(matches!(
        InterProcessMutex::new(&c, &long),
        Err(Error::InvalidPath { reason: PathError::TooLong { .. }, .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_an_error_not_a_hang() {
    init_tracing();
    // A port we bound and closed: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let connect = format!("127.0.0.1:{port}");
    let result = within("connect to nowhere", Session::connect(&connect, Duration::from_secs(1))).await;
    assert!(matches!(result, Err(Error::Connect { .. })), "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_children_are_ignored() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    create_persistent(&admin, "/locks/mixed", b"").await;
    for foreign in ["config", "lock-", "readme-lock-12", "_c_x-latch-00000001"] {
        create_persistent(&admin, &format!("/locks/mixed/{foreign}"), b"").await;
    }
    let mutex = InterProcessMutex::new(&session(&zk.connect_string()).await, "/locks/mixed").unwrap();
    let g = within("acquire beside foreign nodes", mutex.acquire()).await.unwrap();
    assert_eq!(mutex.participants().await.unwrap().len(), 1);
    g.release().await.unwrap();
    assert_eq!(children(&admin, "/locks/mixed").await.len(), 4, "foreign nodes must be left alone");
    // A node named as another recipe's queue node (here a leader latch's) is not foreign: the
    // mutex refuses the path rather than admit beside it (`tests/promises.rs`), and leaves it.
    create_persistent(&admin, "/locks/mixed/_c_x-latch-0000000001", b"").await;
    assert!(matches!(
        within("acquire beside a latch's node", mutex.acquire()).await,
        Err(Error::RecipeConflict { theirs: "a leader latch", .. })
    ));
    assert_eq!(children(&admin, "/locks/mixed").await.len(), 5, "foreign nodes must be left alone");
}
