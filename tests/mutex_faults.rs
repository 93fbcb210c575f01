//! InterProcessMutex under faults: session expiry, suspension, outside deletion, connection
//! loss during create, and a ZooKeeper leader failover.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use zk_recipes::{InterProcessMutex, LockOptions, LockStatus, LossPolicy};
use zk_testcluster::ZkCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holder_session_expiry_is_reported_lost_and_a_waiter_takes_over() {
    let zk = standalone().await;
    let proxy = zk.proxy().unwrap();
    let holder_session = session_with_timeout(&proxy.connect_string(), Duration::from_secs(1)).await;
    let holder = InterProcessMutex::new(&holder_session, "/locks/expiry").unwrap();
    let waiter = InterProcessMutex::new(&session(&zk.connect_string()).await, "/locks/expiry").unwrap();

    let held = holder.acquire().await.unwrap();
    let old_token = held.fencing_token();
    assert_eq!(held.session_generation(), 1);
    assert!(held.safe_until().is_some(), "a live hold has a safe window");
    // The task hands back the handle with the guard: the handle keeps its session open.
    let waiting = tokio::spawn(async move { waiter.acquire().await.map(|g| (g, waiter)) });
    eventually("waiter queued", || async {
        holder.participants().await.map(|p| p.len() == 2).unwrap_or(false)
    })
    .await;

    proxy.blackhole();
    // The server expires the holder's session; the waiter acquires.
    let (taken, _waiter) = within("waiter acquires", waiting).await.unwrap().unwrap();
    assert!(
        taken.fencing_token() > old_token,
        "token did not grow: {} <= {old_token}",
        taken.fencing_token()
    );
    // The holder learns it, without the partition healing (the client declares expiry itself).
    let mut status = held.status();
    within("holder sees Lost", status.wait_for(|s| *s == LockStatus::Lost)).await.unwrap();
    within("lost()", held.lost()).await;
    assert!(held.safe_until().is_none(), "a lost hold still reports a safe window");
    // The session starts a new session by itself once the server is reachable again.
    proxy.heal();
    let generation = wait_new_generation(&holder_session, 1).await;
    assert!(generation >= 2);
    // The hold belongs to the expired session: it stays lost, and can't be re-entered.
    assert_eq!(held.current_status(), LockStatus::Lost);
    assert!(matches!(held.reenter(), Err(zk_recipes::Error::LockLost { .. })));
    assert!(matches!(held.release().await, Err(zk_recipes::Error::LockLost { .. })));
    // The same handle carries on, on the new session, behind the waiter that took over.
    let again = tokio::spawn({
        let holder = holder.clone();
        async move { holder.acquire().await }
    });
    let taken_token = taken.fencing_token();
    taken.release().await.unwrap();
    let again = within("the holder's handle acquires on the new session", again).await.unwrap().unwrap();
    assert_eq!(again.session_generation(), holder_session.generation());
    assert!(again.session_generation() >= 2);
    assert!(again.fencing_token() > taken_token);
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_short_disconnect_suspends_then_holds_again_with_the_node_intact() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let proxy = zk.proxy().unwrap();
    let s = session_with_timeout(&proxy.connect_string(), Duration::from_secs(8)).await;
    let mutex = InterProcessMutex::with_options(
        &s,
        "/locks/suspend",
        LockOptions::new().loss_policy(LossPolicy::SessionOnly),
    )
    .unwrap();
    let g = mutex.acquire().await.unwrap();
    let (_, before) = admin.get_data(g.node_path()).await.unwrap();

    let mut status = g.status();
    assert_eq!(*status.borrow_and_update(), LockStatus::Held);
    // Cut, and hold reconnection back until the holder has seen Suspended.
    proxy.blackhole();
    proxy.cut();
    within("Suspended", status.wait_for(|s| *s == LockStatus::Suspended)).await.unwrap();
    proxy.heal();
    within("Held again", status.wait_for(|s| *s == LockStatus::Held)).await.unwrap();

    let (_, after) = admin.get_data(g.node_path()).await.expect("node intact");
    assert_eq!(after.czxid, before.czxid);
    assert_eq!(after.ephemeral_owner, before.ephemeral_owner);
    // Same session: no new generation.
    assert_eq!(s.generation(), 1);
    assert_eq!(g.session_generation(), 1);
    g.release().await.expect("release after suspension");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn suspended_counts_as_lost_under_the_default_policy() {
    let zk = standalone().await;
    let proxy = zk.proxy().unwrap();
    let s = session_with_timeout(&proxy.connect_string(), Duration::from_secs(8)).await;
    let mutex = InterProcessMutex::new(&s, "/locks/strict").unwrap();
    let g = mutex.acquire().await.unwrap();
    proxy.blackhole();
    proxy.cut();
    // Under SuspendedIsLost, lost() resolves at Suspended.
    within("lost() at Suspended", g.lost()).await;
    assert_eq!(g.current_status(), LockStatus::Suspended);
    proxy.heal();
    let mut status = g.status();
    within("Held again", status.wait_for(|s| *s == LockStatus::Held)).await.unwrap();
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_the_holders_node_from_outside_is_lost_and_hands_over() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    // Revocable: the holder watches its own node, so it hears of the deletion at once.
    let holder = InterProcessMutex::with_options(
        &session(&zk.connect_string()).await,
        "/locks/admin",
        LockOptions::new().revocable(true),
    )
    .unwrap();
    let waiter = InterProcessMutex::new(&session(&zk.connect_string()).await, "/locks/admin").unwrap();
    let g = holder.acquire().await.unwrap();
    // The task hands back the handle with the guard: the handle keeps its session open.
    let waiting = tokio::spawn(async move { waiter.acquire().await.map(|g| (g, waiter)) });
    eventually("waiter queued", || async { children(&admin, "/locks/admin").await.len() == 2 }).await;

    admin.delete(g.node_path(), None).await.unwrap();
    within("Lost", g.lost()).await;
    assert_eq!(g.current_status(), LockStatus::Lost);
    let (next, _waiter) = within("next waiter acquires", waiting).await.unwrap().unwrap();
    assert!(next.fencing_token() > g.fencing_token());
    // A lost hold can't be re-entered; releasing it reports the loss.
    assert!(matches!(g.reenter(), Err(zk_recipes::Error::LockLost { .. })));
    let (lost_node, lost_token) = (g.node_path().to_string(), g.fencing_token());
    assert!(matches!(g.release().await, Err(zk_recipes::Error::LockLost { .. })));
    // An acquire through the same handle queues anew, behind the new holder.
    let again = tokio::spawn({
        let holder = holder.clone();
        async move { holder.acquire().await }
    });
    eventually("queued anew", || async { children(&admin, "/locks/admin").await.len() == 2 }).await;
    next.release().await.unwrap();
    let again = within("fresh acquire after loss", again).await.unwrap().unwrap();
    assert_ne!(again.node_path(), lost_node);
    assert!(again.fencing_token() > lost_token);
    again.release().await.unwrap();
}

/// How the connection under an in-flight create goes away.
#[derive(Clone, Copy, Debug)]
enum Loss {
    /// An orderly close: the client sees `ConnectionLoss`.
    Cut,
    /// A TCP reset: the client crate hands the request the socket error (`Custom`).
    Reset,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_create_whose_reply_is_lost_is_recovered_not_duplicated() {
    create_reply_lost(Loss::Cut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_create_whose_connection_is_reset_is_recovered_not_duplicated() {
    create_reply_lost(Loss::Reset).await;
}

async fn create_reply_lost(how: Loss) {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let proxy = zk.proxy().unwrap();
    let s = session_with_timeout(&proxy.connect_string(), Duration::from_secs(10)).await;
    let mutex = InterProcessMutex::new(&s, "/locks/protected").unwrap();
    // Make the parents first so that the create under test is the only one in flight.
    mutex.acquire().await.unwrap().release().await.unwrap();

    proxy.set_reply_latency(Duration::from_secs(3));
    let acquiring = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.acquire().await }
    });
    // The create has landed on the server; its reply is held back in the proxy. Cut.
    eventually("create landed", || async { children(&admin, "/locks/protected").await.len() == 1 }).await;
    proxy.set_reply_latency(Duration::ZERO);
    match how {
        Loss::Cut => proxy.cut(),
        Loss::Reset => proxy.reset(),
    }

    let g = within("acquire after recovery", acquiring).await.unwrap().expect("recovered acquire");
    assert!(mutex.stats().recoveries >= 1, "the recovery path did not run: {:?}", mutex.stats());
    let nodes = children(&admin, "/locks/protected").await;
    assert_eq!(nodes.len(), 1, "duplicated: {nodes:?}");
    assert_eq!(g.node_path().rsplit('/').next().unwrap(), nodes[0]);
    let (_, stat) = admin.get_data(g.node_path()).await.unwrap();
    assert_eq!(stat.ephemeral_owner, raw(&s).session_id().0);
    assert_eq!(g.session_generation(), 1, "the session did not survive the cut");
    assert_eq!(stat.czxid as u64, g.fencing_token());
    g.release().await.unwrap();
    assert!(children(&admin, "/locks/protected").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_whose_connection_is_reset_reports_success_once_the_node_is_gone() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let proxy = zk.proxy().unwrap();
    let s = session_with_timeout(&proxy.connect_string(), Duration::from_secs(10)).await;
    let mutex = InterProcessMutex::with_options(
        &s,
        "/locks/release-reset",
        LockOptions::new().loss_policy(LossPolicy::SessionOnly),
    )
    .unwrap();
    let g = mutex.acquire().await.unwrap();

    // The delete lands on the server; its reply is held back; the connection is reset. The
    // retried delete meets `NoNode`, which after a retry means our own first attempt worked.
    proxy.set_reply_latency(Duration::from_secs(3));
    let releasing = tokio::spawn(g.release());
    eventually("delete landed", || async { children(&admin, "/locks/release-reset").await.is_empty() }).await;
    proxy.set_reply_latency(Duration::ZERO);
    proxy.reset();
    within("release after reset", releasing).await.unwrap().expect("release");
    assert!(children(&admin, "/locks/release-reset").await.is_empty());
    // The session lived through it, and the lock works on.
    assert_eq!(s.generation(), 1);
    mutex.acquire().await.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_zookeeper_leader_never_double_grants_and_the_queue_goes_on() {
    init_tracing();
    let mut zk = ZkCluster::ensemble(3).await.expect("ensemble");
    let admin = client(&zk.connect_string()).await;
    create_persistent(&admin, "/counter", b"0").await;
    const CONTENDERS: usize = 4;
    const ROUNDS: usize = 15;
    let overlap = Arc::new(Overlap::default());
    let (progress_tx, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for _ in 0..CONTENDERS {
        let (connect, overlap, progress_tx) = (zk.connect_string(), overlap.clone(), progress_tx.clone());
        tasks.push(tokio::spawn(async move {
            let s = session_with_timeout(&connect, Duration::from_secs(10)).await;
            let mutex = InterProcessMutex::with_options(
                &s,
                "/locks/failover",
                LockOptions::new().loss_policy(LossPolicy::SessionOnly),
            )
            .unwrap();
            for _ in 0..ROUNDS {
                let g = mutex.acquire().await.expect("acquire");
                // The current client: the one of the session the hold was taken in.
                let c = raw(&s);
                overlap.enter();
                // Through the failover the write may see connection loss; retry it.
                loop {
                    let (data, stat) = match c.get_data("/counter").await {
                        Ok(r) => r,
                        Err(_) => continue,
                    };
                    let n: u64 = String::from_utf8(data).unwrap().parse().unwrap();
                    match c.set_data("/counter", (n + 1).to_string().as_bytes(), Some(stat.version)).await {
                        Ok(_) => break,
                        Err(e) if zk_recipes::is_connection_loss(&e) => {
                            // The write may have landed: re-read decides.
                            let (data, _) = loop {
                                if let Ok(r) = c.get_data("/counter").await {
                                    break r;
                                }
                            };
                            if String::from_utf8(data).unwrap().parse::<u64>().unwrap() == n + 1 {
                                break;
                            }
                        }
                        Err(e) => panic!("counter write: {e}"),
                    }
                }
                overlap.exit();
                let _ = progress_tx.send(());
                g.release().await.expect("release");
            }
        }));
    }
    // Kill the ZooKeeper leader once the queue is busy.
    for _ in 0..(CONTENDERS * ROUNDS / 3) {
        within("progress", progress.recv()).await;
    }
    let leader = zk.leader().await.unwrap();
    zk.kill(leader).await.unwrap();
    within("new leader", zk.wait_for_leader()).await.unwrap();
    for t in tasks {
        within("contenders finish", t).await.unwrap();
    }
    assert_eq!(overlap.violations(), 0, "double grant across the failover");
    assert_eq!(read_counter(&admin, "/counter").await, (CONTENDERS * ROUNDS) as u64);
    assert!(children(&admin, "/locks/failover").await.is_empty());
}
