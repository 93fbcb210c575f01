//! Read/write lock, semaphore, non-reentrant mutex, multi-lock and revocation, against real
//! ZooKeeper.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use zk_recipes::zookeeper_client::{Acl, Acls, AuthId, Permission};
use zk_recipes::{
    Error, InterProcessMultiLock, InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphore,
    InterProcessSemaphoreMutex, LockOptions, LockStatus, Session,
};

/// A read/write lock on its own session.
async fn rw(zk: &zk_testcluster::ZkCluster, path: &str) -> (Session, InterProcessReadWriteLock) {
    let s = session(&zk.connect_string()).await;
    let lock = InterProcessReadWriteLock::new(&s, path).unwrap();
    (s, lock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_readers_hold_at_once_and_a_writer_excludes_everyone() {
    let zk = standalone().await;
    let barrier = Arc::new(tokio::sync::Barrier::new(5));
    let mut readers = Vec::new();
    for _ in 0..5 {
        let (_, lock) = rw(&zk, "/rw/many").await;
        let barrier = barrier.clone();
        readers.push(tokio::spawn(async move {
            let g = lock.read().await.unwrap();
            // All five reach the barrier while holding: they hold at once.
            barrier.wait().await;
            g.release().await.unwrap();
        }));
    }
    for r in readers {
        within("five concurrent readers", r).await.unwrap();
    }

    let (_, writer) = rw(&zk, "/rw/many").await;
    let (_, reader) = rw(&zk, "/rw/many").await;
    let (_, other_writer) = rw(&zk, "/rw/many").await;
    let w = writer.write().await.unwrap();
    assert!(reader.try_read().await.unwrap().is_none(), "a reader got in beside a writer");
    assert!(other_writer.try_write().await.unwrap().is_none(), "two writers");
    w.release().await.unwrap();
    let r = reader.try_read().await.unwrap().expect("free for readers");
    assert!(other_writer.try_write().await.unwrap().is_none(), "a writer got in beside a reader");
    r.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reader_behind_a_waiting_writer_waits() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let (_, r1) = rw(&zk, "/rw/pref").await;
    let (_, w) = rw(&zk, "/rw/pref").await;
    let (_, r2) = rw(&zk, "/rw/pref").await;
    let first = r1.read().await.unwrap();
    let (order_tx, mut order) = tokio::sync::mpsc::unbounded_channel();
    let tx = order_tx.clone();
    let writer = tokio::spawn(async move {
        let g = w.write().await.unwrap();
        tx.send("writer").unwrap();
        g.release().await.unwrap();
    });
    eventually("writer queued", || async { children(&admin, "/rw/pref").await.len() == 2 }).await;
    // Only a reader holds, yet a new reader must queue behind the waiting writer.
    assert!(r2.try_read().await.unwrap().is_none(), "reader overtook a waiting writer");
    let reader = tokio::spawn(async move {
        let g = r2.read().await.unwrap();
        order_tx.send("reader").unwrap();
        g.release().await.unwrap();
    });
    eventually("reader queued", || async { children(&admin, "/rw/pref").await.len() == 3 }).await;
    first.release().await.unwrap();
    assert_eq!(within("first", order.recv()).await, Some("writer"));
    assert_eq!(within("second", order.recv()).await, Some("reader"));
    writer.await.unwrap();
    reader.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn downgrade_keeps_readers_in_and_writers_out() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let (_, lock) = rw(&zk, "/rw/grade").await;
    let (_, other) = rw(&zk, "/rw/grade").await;
    let w = lock.write().await.unwrap();
    // Downgrade: with the write guard in hand, the read lock is granted at once.
    let r = within("downgrade", lock.downgrade(&w)).await.unwrap();
    assert_eq!(children(&admin, "/rw/grade").await.len(), 2, "the write and the read node");
    // Nobody can get in between: the write node is still there.
    assert!(other.try_write().await.unwrap().is_none(), "a writer got in during the downgrade");
    assert!(other.try_read().await.unwrap().is_none(), "a reader got in beside the writer");
    let write_node = w.node_path().to_string();
    w.release().await.unwrap();
    assert!(admin.check_stat(&write_node).await.unwrap().is_none(), "the write node outlived its release");
    assert!(other.try_write().await.unwrap().is_none(), "the downgraded read hold was lost");
    let shared = other.try_read().await.unwrap().expect("readers share with a downgraded reader");
    shared.release().await.unwrap();
    // Only a write guard of this lock can be downgraded.
    assert!(matches!(lock.downgrade(&r).await, Err(Error::LockLost { .. })));
    // A read holder asking for the write lock is not admitted while its read lock is held (it
    // would wait for it: release the read lock first); a try or a bounded wait leaves no node.
    assert!(lock.try_write().await.unwrap().is_none(), "a writer got in beside a reader");
    assert!(lock.write_timeout(Duration::from_millis(300)).await.unwrap().is_none());
    assert_eq!(children(&admin, "/rw/grade").await.len(), 1, "a refused write left a node");
    r.release().await.unwrap();
    let w = lock.try_write().await.unwrap().expect("write after releasing the read lock");
    w.release().await.unwrap();
    assert!(children(&admin, "/rw/grade").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writers_release_wakes_only_the_readers_before_the_next_writer() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let (_, w1) = rw(&zk, "/rw/herd").await;
    let held = w1.write().await.unwrap();
    // Queue: W1 (holds), R, R, R, W2, R, R.
    let roles = ["r", "r", "r", "w", "r", "r"];
    let mut waiters = Vec::new();
    let (granted_tx, mut granted) = tokio::sync::mpsc::unbounded_channel();
    for (i, role) in roles.iter().enumerate() {
        let (c, lock) = rw(&zk, "/rw/herd").await;
        let (l2, tx, role) = (lock.clone(), granted_tx.clone(), *role);
        let task = tokio::spawn(async move {
            let g = if role == "w" { l2.write().await.unwrap() } else { l2.read().await.unwrap() };
            tx.send(i).unwrap();
            g
        });
        waiters.push((c, lock, task));
        eventually("queued", || async { children(&admin, "/rw/herd").await.len() == i + 2 }).await;
    }
    held.release().await.unwrap();
    let mut first = Vec::new();
    for _ in 0..3 {
        first.push(within("reader grant", granted.recv()).await.unwrap());
    }
    first.sort();
    assert_eq!(first, [0, 1, 2]);
    for (c, _, _) in &waiters {
        raw(c).get_data("/").await.unwrap(); // events for this session precede this reply
    }
    tokio::task::yield_now().await;
    let wakeups: Vec<u64> = waiters.iter().map(|(_, l, _)| l.stats().wakeups).collect();
    assert_eq!(wakeups, [1, 1, 1, 0, 0, 0], "the release woke the wrong contenders");
    assert!(granted.try_recv().is_err(), "the second writer or later readers got in");
    // Drain (each guard released while its handle, and so its session, is still open).
    let rest = waiters.split_off(3);
    let mut guards = Vec::new();
    for (c, l, task) in waiters {
        guards.push((task.await.unwrap(), c, l));
    }
    for (g, _c, _l) in guards {
        g.release().await.unwrap();
    }
    for (_c, _l, task) in rest {
        let g = within("rest", task).await.unwrap();
        g.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_semaphore_never_grants_more_than_its_leases() {
    let zk = standalone().await;
    let overlap = Arc::new(Overlap::default());
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (connect, overlap) = (zk.connect_string(), overlap.clone());
        tasks.push(tokio::spawn(async move {
            let sem = InterProcessSemaphore::new(&session(&connect).await, "/sem/three", 3).unwrap();
            for _ in 0..6 {
                let lease = sem.acquire().await.unwrap();
                overlap.enter();
                tokio::time::sleep(Duration::from_millis(3)).await; // the work, holding a lease
                overlap.exit();
                lease.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        within("contenders", t).await.unwrap();
    }
    let most = overlap.max_concurrent();
    assert!(most <= 3, "{most} leases held at once with 3 available");
    assert!(most >= 2, "leases were never shared ({most} at most): it behaves like a mutex");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn multi_lease_acquires_are_all_or_none() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let a = InterProcessSemaphore::new(&session(&zk.connect_string()).await, "/sem/four", 4).unwrap();
    let b = InterProcessSemaphore::new(&session(&zk.connect_string()).await, "/sem/four", 4).unwrap();
    let three = a.acquire_many(3).await.unwrap();
    // Two don't fit beside three: nothing is taken, nothing is left.
    assert!(b.acquire_many_timeout(2, Duration::from_millis(300)).await.unwrap().is_none());
    assert!(b.try_acquire_many(2).await.unwrap().is_none());
    assert_eq!(children(&admin, "/sem/four").await.len(), 1, "a refused multi-lease acquire left a node");
    let one = b.try_acquire().await.unwrap().expect("one fits");
    // A lease is not reentrant: more leases are taken through the semaphore.
    assert!(matches!(one.reenter(), Err(Error::NotReentrant { .. })));
    assert!(matches!(three.reenter(), Err(Error::NotReentrant { .. })));
    assert!(matches!(b.acquire_many(5).await, Err(Error::BadLeaseCount { requested: 5, max: 4, .. })));
    assert!(matches!(b.acquire_many(0).await, Err(Error::BadLeaseCount { requested: 0, .. })));
    let waiting = tokio::spawn(async move { b.acquire_many(3).await.map(|g| (g, b)) });
    eventually("queued", || async { children(&admin, "/sem/four").await.len() == 3 }).await;
    three.release().await.unwrap();
    // 1 + 3 = 4 fit once the three are back.
    let (got, _b) = within("three leases", waiting).await.unwrap().unwrap();
    got.release().await.unwrap();
    one.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_holders_session_expiry_frees_its_leases() {
    let zk = standalone().await;
    let proxy = zk.proxy().unwrap();
    let holder_session = session_with_timeout(&proxy.connect_string(), Duration::from_secs(1)).await;
    let holder = InterProcessSemaphore::new(&holder_session, "/sem/expiry", 2).unwrap();
    let waiter = InterProcessSemaphore::new(&session(&zk.connect_string()).await, "/sem/expiry", 2).unwrap();
    let both = holder.acquire_many(2).await.unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire_many(2).await.map(|g| g.fencing_token()) });
    eventually("queued", || async { holder.participants().await.map(|p| p.len() == 2).unwrap_or(false) })
        .await;
    proxy.blackhole();
    let token = within("leases freed by expiry", waiting).await.unwrap().unwrap();
    assert!(token > both.fencing_token());
    within("holder sees lost()", both.lost()).await;
    within("holder sees Lost", both.status().wait_for(|s| *s == LockStatus::Lost)).await.unwrap();
    // The holder's session starts a new session; the same semaphore handle works on there (the
    // waiter's leases went back when its guard was dropped).
    proxy.heal();
    wait_new_generation(&holder_session, 1).await;
    assert!(matches!(both.release().await, Err(Error::LockLost { .. })));
    let again = within("leases on the new session", holder.acquire_many(2)).await.unwrap();
    assert!(again.session_generation() >= 2);
    assert!(again.fencing_token() > token);
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_different_maximum_on_the_same_path_is_refused() {
    let zk = standalone().await;
    let three = InterProcessSemaphore::new(&session(&zk.connect_string()).await, "/sem/max", 3).unwrap();
    three.acquire().await.unwrap().release().await.unwrap();
    let five = InterProcessSemaphore::new(&session(&zk.connect_string()).await, "/sem/max", 5).unwrap();
    match five.try_acquire().await {
        Err(Error::LeaseMaxMismatch { configured: 5, stored, .. }) => assert_eq!(stored, "3"),
        other => panic!("expected LeaseMaxMismatch, got {other:?}"),
    }
    let admin = client(&zk.connect_string()).await;
    assert!(children(&admin, "/sem/max").await.is_empty());
}

/// Liveness (an acquire refused). With ACLs that do not grant WRITE on our nodes (READ, CREATE
/// and DELETE: enough for every recipe without the lock delay), a semaphore's waiter admitted
/// with another behind it cannot announce its admission (a write of its own node, which wakes
/// that one): its acquire still succeeds, and the waiter behind gets the lease on its release.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_semaphore_under_acls_without_write_admits_a_waiter_with_another_behind() {
    const PATH: &str = "/sem/acl-no-write";
    let zk = standalone().await;
    let session = session(&zk.connect_string()).await;
    let admin = client(&zk.connect_string()).await;
    let acl = [Acl::new(Permission::READ | Permission::CREATE | Permission::DELETE, AuthId::anyone())];
    let options = LockOptions::new().acls(Acls::new(&acl));
    let sem = Arc::new(InterProcessSemaphore::with_options(&session, PATH, 1, options).unwrap());
    let held = sem.acquire().await.unwrap();
    let mut waiters = Vec::new();
    for queued in [2, 3] {
        let sem = sem.clone();
        waiters.push(tokio::spawn(async move { sem.acquire().await }));
        eventually("the waiter's node", || async { children(&admin, PATH).await.len() == queued }).await;
    }
    let second = waiters.pop().unwrap();
    held.release().await.unwrap();
    let first = within("the first waiter's lease", waiters.pop().unwrap()).await.unwrap();
    let first = first.expect("the acquire of a waiter with another behind it");
    assert!(!second.is_finished(), "two leases held of one");
    first.release().await.unwrap();
    let second = within("the second waiter's lease", second).await.unwrap().unwrap();
    second.release().await.unwrap();
    assert_eq!(children(&admin, PATH).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_semaphore_mutex_does_not_reenter() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let lock = InterProcessSemaphoreMutex::new(&session(&zk.connect_string()).await, "/smutex").unwrap();
    let held = lock.acquire().await.unwrap();
    assert!(matches!(held.reenter(), Err(Error::NotReentrant { .. })), "re-entered through the guard");
    assert!(lock.try_acquire().await.unwrap().is_none(), "re-entered");
    assert!(lock.acquire_timeout(Duration::from_millis(300)).await.unwrap().is_none(), "re-entered");
    assert_eq!(children(&admin, "/smutex").await.len(), 1);
    // It excludes the reentrant mutex on the same path too.
    let mutex = InterProcessMutex::new(&session(&zk.connect_string()).await, "/smutex").unwrap();
    assert!(mutex.try_acquire().await.unwrap().is_none());
    held.release().await.unwrap();
    assert!(lock.try_acquire().await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_multi_locks_in_opposite_orders_never_deadlock() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let overlap = Arc::new(Overlap::default());
    let mut tasks = Vec::new();
    for paths in [vec!["/multi/a", "/multi/b", "/multi/c"], vec!["/multi/c", "/multi/b"]] {
        let (connect, overlap) = (zk.connect_string(), overlap.clone());
        tasks.push(tokio::spawn(async move {
            let multi = InterProcessMultiLock::new(&session(&connect).await, &paths).unwrap();
            for _ in 0..20 {
                let all = multi.acquire().await.unwrap();
                overlap.enter(); // both sets share b and c: never together
                assert_eq!(all.fencing_tokens().len(), paths.len());
                tokio::task::yield_now().await;
                overlap.exit();
                all.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        within("multi-locks finish (a deadlock would hang here)", t).await.unwrap();
    }
    assert_eq!(overlap.violations(), 0);
    for p in ["/multi/a", "/multi/b", "/multi/c"] {
        assert!(children(&admin, p).await.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_multi_lock_timeout_releases_every_partial_hold() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let blocker = InterProcessMutex::new(&session(&zk.connect_string()).await, "/multi/z").unwrap();
    let held = blocker.acquire().await.unwrap();
    let multi = InterProcessMultiLock::new(
        &session(&zk.connect_string()).await,
        &["/multi/z", "/multi/x", "/multi/y", "/multi/x"],
    )
    .unwrap();
    assert_eq!(multi.paths(), ["/multi/x", "/multi/y", "/multi/z"], "canonical order, duplicates removed");
    assert!(multi.acquire_timeout(Duration::from_millis(300)).await.unwrap().is_none());
    assert!(children(&admin, "/multi/x").await.is_empty(), "partial hold on x left");
    assert!(children(&admin, "/multi/y").await.is_empty(), "partial hold on y left");
    assert_eq!(children(&admin, "/multi/z").await.len(), 1);
    held.release().await.unwrap();
    let all = multi.acquire().await.unwrap();
    let tokens = all.fencing_tokens();
    assert_eq!(
        tokens.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
        ["/multi/x", "/multi/y", "/multi/z"]
    );
    assert!(tokens.iter().all(|(_, t)| *t > 0));
    all.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revocation_request_reaches_the_holder_who_hands_over() {
    let zk = standalone().await;
    // A revocable holder (Curator's makeRevocable) watches its node for revocation requests.
    let holder = InterProcessMutex::with_options(
        &session(&zk.connect_string()).await,
        "/revocable",
        LockOptions::new().revocable(true),
    )
    .unwrap();
    let requester = InterProcessMutex::new(&session(&zk.connect_string()).await, "/revocable").unwrap();
    let held = holder.acquire().await.unwrap();
    let req = requester.clone();
    let waiting = tokio::spawn(async move { req.acquire().await });
    eventually("requester queued", || async { holder.participants().await.unwrap().len() == 2 }).await;

    assert_eq!(requester.revoke_holders().await.unwrap(), 1);
    let mut status = held.status();
    within("revocation reaches the holder", status.wait_for(|s| *s == LockStatus::RevocationRequested))
        .await
        .unwrap();
    // The holder decides to honour it.
    held.release().await.unwrap();
    let got = within("requester acquires", waiting).await.unwrap().unwrap();
    got.release().await.unwrap();

    // An administrator can ask too, by node path.
    let again = holder.acquire().await.unwrap();
    let admin = session(&zk.connect_string()).await;
    assert!(zk_recipes::request_revocation(&admin, again.node_path()).await.unwrap());
    let mut status = again.status();
    within("admin revocation", status.wait_for(|s| *s == LockStatus::RevocationRequested)).await.unwrap();
    again.release().await.unwrap();
    assert!(!zk_recipes::request_revocation(&admin, "/revocable/_c_gone-lock-0000000099").await.unwrap());
}
