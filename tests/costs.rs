//! What an acquisition costs: tasks in the client, requests to the server, and the order of a
//! release's delete against the session's next request. Counts, never timings.

mod common;

use common::*;
use zk_recipes::{InterProcessMutex, LockOptions, LockStatus};

/// Session states reach holds from the session's one task: holding many locks adds no task per
/// hold (it did: each hold spawned a monitor task).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holding_many_locks_costs_no_task_per_hold() {
    const LOCKS: usize = 50;
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    let runtime = tokio::runtime::Handle::current().metrics();
    let before = runtime.num_alive_tasks();
    let mut guards = Vec::new();
    for i in 0..LOCKS {
        let mutex = InterProcessMutex::new(&s, &format!("/locks/costs/l{i}")).unwrap();
        guards.push(mutex.acquire().await.unwrap());
    }
    let during = runtime.num_alive_tasks();
    assert!(during < before + LOCKS / 10, "{LOCKS} holds took {} tasks", during - before);
    assert!(guards.iter().all(|g| g.current_status() == LockStatus::Held));
    for g in guards {
        g.release().await.unwrap();
    }
    s.close().await;
}

/// A dropped guard's delete is sent before `drop` returns, so the session's next acquire (sent
/// after it, answered in order) finds the lock free at once. On a single-threaded runtime a
/// delete left to a spawned task goes out after the next acquire's create and listing: that
/// acquire then finds the old node ahead of it and has to wait for it.
#[tokio::test(flavor = "current_thread")]
async fn a_dropped_guard_deletes_before_the_next_acquire() {
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    let mutex = InterProcessMutex::new(&s, "/locks/drop-order").unwrap();
    for _ in 0..5 {
        let guard = mutex.acquire().await.unwrap();
        drop(guard);
    }
    let last = mutex.acquire().await.unwrap();
    let stats = mutex.stats();
    assert_eq!(stats.listings, 6, "one listing per acquire: {stats:?}");
    assert_eq!(stats.wakeups + stats.relists_saved, 0, "an acquire waited for our own old node: {stats:?}");
    last.release().await.unwrap();
    mutex.settled().await;
    assert!(children(&client(&zk.connect_string()).await, "/locks/drop-order").await.is_empty());
    s.close().await;
}

/// Server packets (both directions) so far.
async fn packets(zk: &zk_testcluster::ZkCluster) -> i64 {
    zk.mntr(0).await.expect("mntr").packets()
}

/// One lock per order id: every acquisition on a path whose parent does not exist yet. Once the
/// session has seen that its joins meet missing parents, the parent's create, ours and the
/// listing go back to back (one round trip), and a cycle costs 8 packets: those three requests,
/// the delete, and their replies. LockClient's costs 10: its create that finds the parent
/// missing comes first, alone. The watch on our own node, on by default so that a holder learns
/// of its node's deletion, is carried by the listing there (a child watch on the fresh parent,
/// no request of its own): it adds only the event our delete fires, 9.
///
/// Where the server answers a `multi`'s creates with their `Stat` (3.8.2+, 3.9), the parent's
/// create and ours go as one `multi` (the session learns it by its probe, during the first
/// cycles): 6 packets, 7 with the own-node watch. On 3.8.0 and 3.6.3, 8 and 9 as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_lock_paths_cost_eight_packets_per_cycle_and_one_for_the_own_node_watch() {
    const CYCLES: i64 = 20;
    let zk = standalone().await;
    let together = multi_creates_answer_stat();
    for (watch, plain) in [(false, 8), (true, 9)] {
        let per_cycle = if together { plain - 2 } else { plain };
        let s = session(&zk.connect_string()).await;
        let options = LockOptions::new().watch_own_node(watch);
        let mut order = 0;
        let cycle = |order: &mut usize| {
            *order += 1;
            let mutex =
                InterProcessMutex::with_options(&s, &format!("/orders-{watch}/o{order}"), options.clone())
                    .unwrap();
            async move { mutex.acquire().await.unwrap().release().await.unwrap() }
        };
        // The first few teach the session that parents are missing (and what its server can do).
        for _ in 0..8 {
            cycle(&mut order).await;
        }
        assert_eq!(
            s.known_server_features().map(|f| f.multi_create_stat),
            Some(together),
            "the session probed its server"
        );
        let before = packets(&zk).await;
        for _ in 0..CYCLES {
            cycle(&mut order).await;
        }
        let used = packets(&zk).await - before;
        // Slack for the session's heartbeat and the `mntr` request itself.
        assert!(
            used <= CYCLES * per_cycle + 8,
            "watch {watch}: {used} packets for {CYCLES} cycles ({} each)",
            used as f64 / CYCLES as f64
        );
        // And no fewer: the watch is really sent (or really not).
        assert!(
            used >= CYCLES * per_cycle,
            "watch {watch}: {used} packets for {CYCLES} cycles ({} each)",
            used as f64 / CYCLES as f64
        );
        s.close().await;
    }
}

/// A long-lived lock path used by one session at a time. Its first acquisitions cost 9 packets
/// each (create and listing, the data watch on our node, the delete, their replies, and the
/// event our delete fires). Once the session's joins have found their node alone a few times,
/// the listing's child watch on the parent stands in for the data watch: 7 (the own-node watch
/// costs only the event our delete fires), against 6 without the own-node watch. A revocable
/// lock keeps the data watch (a revocation request is a change of our node's data): 9.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_lock_costs_seven_packets_per_cycle_once_its_session_has_seen_it_idle() {
    const CYCLES: i64 = 20;
    let zk = standalone().await;
    for (name, options, per_cycle) in [
        ("plain", LockOptions::new(), 7),
        ("unwatched", LockOptions::new().watch_own_node(false), 6),
        ("revocable", LockOptions::new().revocable(true), 9),
    ] {
        let s = session(&zk.connect_string()).await;
        let mutex = InterProcessMutex::with_options(&s, &format!("/idle-cost/{name}"), options).unwrap();
        // The first few teach the session that its joins find their node alone.
        for _ in 0..8 {
            mutex.acquire().await.unwrap().release().await.unwrap();
        }
        let before = packets(&zk).await;
        for _ in 0..CYCLES {
            mutex.acquire().await.unwrap().release().await.unwrap();
        }
        let used = packets(&zk).await - before;
        let each = used as f64 / CYCLES as f64;
        // Slack for the session's heartbeat and the `mntr` request itself.
        assert!(used <= CYCLES * per_cycle + 8, "{name}: {used} packets for {CYCLES} cycles ({each} each)");
        assert!(used >= CYCLES * per_cycle, "{name}: {used} packets for {CYCLES} cycles ({each} each)");
        s.close().await;
    }
}

/// A semaphore's root carries its maximum, which every acquire checks. The join's listing
/// returns the root's version with the children (the same packets), and a root whose version is
/// the one last checked is not read again: an uncontended lease costs what a mutex's cycle does,
/// 9 packets (create and listing, the own-node watch, the delete, its event), not 11.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_checks_its_maximum_without_a_read_once_known() {
    const CYCLES: i64 = 20;
    let zk = standalone().await;
    let s = session(&zk.connect_string()).await;
    let semaphore = zk_recipes::InterProcessSemaphore::new(&s, "/costs/semaphore", 3).unwrap();
    // The first acquire creates the root and checks it.
    semaphore.acquire().await.unwrap().release().await.unwrap();
    let before = packets(&zk).await;
    for _ in 0..CYCLES {
        semaphore.acquire().await.unwrap().release().await.unwrap();
    }
    let used = packets(&zk).await - before;
    assert!(
        (CYCLES * 9..=CYCLES * 9 + 8).contains(&used),
        "{used} packets for {CYCLES} cycles ({} each)",
        used as f64 / CYCLES as f64
    );
    // A changed maximum is still seen: the root's version moved.
    let admin = client(&zk.connect_string()).await;
    admin.set_data("/costs/semaphore", b"5", None).await.unwrap();
    assert!(matches!(semaphore.acquire().await, Err(zk_recipes::Error::LeaseMaxMismatch { .. })));
    s.close().await;
}

/// A waiter whose predecessor is the head of the queue enters on that predecessor's deletion
/// notification alone, with no request after it: its requests are held back by a proxy (replies
/// and events still flow) from before the holder releases until after it holds. (It did not: it
/// sent an `exists` on its own node after the notification, a round trip on every handoff.) That
/// its own node was not deleted meanwhile is said by a watch on it, set while it queued:
/// `tests/correctness.rs`, `a_waiter_whose_node_was_deleted_from_outside_does_not_enter`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_behind_the_head_enters_on_the_notification_alone() {
    let zk = standalone().await;
    let proxy = zk.proxy().expect("a proxy");
    let path = "/costs/notified";
    let holder_session = session(&zk.connect_string()).await;
    let waiter_session = session(&proxy.connect_string()).await;
    let holder = InterProcessMutex::new(&holder_session, path).unwrap().acquire().await.unwrap();
    let holder_node = holder.node_path().to_string();
    let waiter = InterProcessMutex::new(&waiter_session, path).unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.acquire().await }
    });
    // The waiter's watch on the holder's node is on the server: it has sent all it will send.
    until_watched(&zk, "the waiter to watch the holder's node", &holder_node).await;
    proxy.hold_requests();
    holder.release().await.unwrap();
    let guard = within("the waiter, its requests held back", waiting).await.unwrap().unwrap();
    assert_eq!(guard.current_status(), LockStatus::Held);
    proxy.heal();
    guard.release().await.unwrap();
    waiter.settled().await;
    holder_session.close().await;
    waiter_session.close().await;
}

/// A semaphore's first waiter, which any holder's release may admit, waits on one child watch
/// on the semaphore's root, set by a listing (a request and its reply), where a data watch on
/// each of its 6 holders cost 6 requests. From before its join to its `Queued` event, the
/// server counts 14 packets: five requests and their replies (the create and the listing, the
/// own-node watch, the listing with the child watch, the read of the head's id for the event)
/// and the count's own. With a data watch on each holder it counted 24.
/// Once admitted, it keeps the child watch set by its last listing until it fires, rather than
/// drop it: a dropped watch is removed with a request and its reply, and the server no longer
/// counts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphores_first_waiter_waits_on_one_child_watch_and_keeps_it_once_admitted() {
    const HOLDERS: usize = 6;
    let zk = standalone().await;
    let mut sessions = Vec::new();
    for _ in 0..=HOLDERS {
        sessions.push(session(&zk.connect_string()).await);
    }
    // The holders watch nothing, so that the server's watch count is the waiter's alone.
    let unwatched = LockOptions::new().watch_own_node(false);
    let waiter_session = &sessions[HOLDERS];
    let semaphore =
        zk_recipes::InterProcessSemaphore::new(waiter_session, "/costs/first-waiter", HOLDERS as u32)
            .unwrap();
    // The waiter's handle has checked the root's maximum: it is not read again.
    semaphore.acquire().await.unwrap().release().await.unwrap();
    let mut holds = Vec::new();
    for s in &sessions[..HOLDERS] {
        let semaphore = zk_recipes::InterProcessSemaphore::with_options(
            s,
            "/costs/first-waiter",
            HOLDERS as u32,
            unwatched.clone(),
        )
        .unwrap();
        holds.push(semaphore.acquire().await.unwrap());
    }
    let before = packets(&zk).await;
    let mut waiter = Waiter::leases(semaphore, 1);
    waiter.queued().await;
    let used = packets(&zk).await - before;
    // Slack for four pings of the seven idle sessions (a join that costs 24 stays above it).
    assert!((10..=14 + 8).contains(&used), "{used} packets from the waiter's join to its wait");

    sync_session(waiter_session).await;
    let watches = zk.mntr(0).await.expect("mntr").watch_count();
    holds.remove(0).release().await.unwrap();
    let held =
        within("the waiter's turn", waiter.task).await.unwrap().unwrap().expect("no timeout was given");
    // Anything the waiter's client sent on admission (a removal) is processed by now.
    sync_session(waiter_session).await;
    // The release fired the waiter's child watch, and its last listing set it again.
    assert_eq!(
        zk.mntr(0).await.expect("mntr").watch_count(),
        watches,
        "the admitted waiter's child watch is kept"
    );
    held.release().await.unwrap();
    for hold in holds {
        hold.release().await.unwrap();
    }
    for s in &sessions {
        s.close().await;
    }
}
