//! LeaderLatch and LeaderSelector against real ZooKeeper.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use zk_recipes::{
    LatchOptions, LeaderLatch, LeaderSelector, Leadership, LossPolicy, SelectorOptions, TermOutcome,
};
use zk_testcluster::ZkCluster;

/// Counts leaders seen at once across latches in this process, from their leadership channels.
#[derive(Default)]
struct LeaderCount {
    now: AtomicUsize,
    max: AtomicUsize,
}

/// Follows one latch's channel: every transition in or out of leadership moves the shared count.
fn observe(
    mut rx: tokio::sync::watch::Receiver<Leadership>,
    count: Arc<LeaderCount>,
    log: Arc<Mutex<Vec<(Instant, String, Leadership)>>>,
    id: String,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut leading = false;
        loop {
            let now = *rx.borrow_and_update();
            if now.is_leader() != leading {
                leading = now.is_leader();
                if leading {
                    let n = count.now.fetch_add(1, Ordering::SeqCst) + 1;
                    count.max.fetch_max(n, Ordering::SeqCst);
                } else {
                    count.now.fetch_sub(1, Ordering::SeqCst);
                }
                log.lock().unwrap().push((Instant::now(), id.clone(), now));
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    })
}

/// Samples the latches' current leadership (not a lagging observer): a latch sets `NotLeader`
/// before it deletes its node, and its successor sets `Leader` only after the deletion event, so
/// two `true`s at one sample are a real double leader.
fn sample_leaders(latches: Arc<Vec<LeaderLatch>>, max: Arc<AtomicUsize>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let leading = latches.iter().filter(|l| l.has_leadership()).count();
            max.fetch_max(leading, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_leader_at_a_time_and_closing_hands_over_in_sequence_order() {
    let zk = standalone().await;
    let mut latches = Vec::new();
    for i in 0..5 {
        latches.push(
            LeaderLatch::with_options(
                &session(&zk.connect_string()).await,
                "/election/five",
                zk_recipes::LatchOptions::new().participant_id(format!("p{i}")),
            )
            .unwrap(),
        );
    }
    let latches = Arc::new(latches);
    let max = Arc::new(AtomicUsize::new(0));
    let sampler = sample_leaders(latches.clone(), max.clone());
    for (i, latch) in latches.iter().enumerate() {
        latch.start().unwrap();
        // Join in a known order.
        eventually("joined", || async { latch.participants().await.unwrap().len() == i + 1 }).await;
    }
    let order: Vec<String> = latches[0].participants().await.unwrap().into_iter().map(|p| p.id).collect();
    assert_eq!(order, ["p0", "p1", "p2", "p3", "p4"]);
    let mut last_token = 0;
    for (expected, latch) in order.iter().zip(latches.iter()) {
        let token = within("leadership", latch.await_leadership()).await.unwrap();
        assert_eq!(&latch.leader().await.unwrap().unwrap().id, expected);
        assert!(token > last_token, "token {token} not above {last_token}");
        last_token = token;
        assert_eq!(latches.iter().filter(|l| l.has_leadership()).count(), 1);
        latch.close().await;
        assert!(!latch.has_leadership());
    }
    sampler.abort();
    assert_eq!(max.load(Ordering::SeqCst), 1, "two leaders at once");
    let admin = client(&zk.connect_string()).await;
    assert!(children(&admin, "/election/five").await.is_empty(), "close() left nodes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_session_expiry_reports_not_leader_before_a_new_leader_appears() {
    let zk = standalone().await;
    let proxy = zk.proxy().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let count = Arc::new(LeaderCount::default());
    let old_session = session_with_timeout(&proxy.connect_string(), Duration::from_secs(2)).await;
    let old = LeaderLatch::with_options(
        &old_session,
        "/election/expiry",
        zk_recipes::LatchOptions::new().participant_id("old"),
    )
    .unwrap();
    observe(old.leadership(), count.clone(), log.clone(), "old".into());
    old.start().unwrap();
    let old_token = within("old leads", old.await_leadership()).await.unwrap();
    let new = LeaderLatch::with_options(
        &session(&zk.connect_string()).await,
        "/election/expiry",
        zk_recipes::LatchOptions::new().participant_id("new"),
    )
    .unwrap();
    observe(new.leadership(), count.clone(), log.clone(), "new".into());
    new.start().unwrap();
    eventually("new queued", || async { new.participants().await.unwrap().len() == 2 }).await;

    proxy.blackhole();
    let new_token = within("new leads", new.await_leadership()).await.unwrap();
    assert!(new_token > old_token);
    let logged = |who: &'static str, leading: bool| {
        let log = log.clone();
        move || {
            let log = log.clone();
            async move { log.lock().unwrap().iter().any(|(_, id, l)| id == who && l.is_leader() == leading) }
        }
    };
    eventually("old not leader", logged("old", false)).await;
    eventually("new leader", logged("new", true)).await;
    let log = log.lock().unwrap().clone();
    let old_lost = log.iter().find(|(_, id, l)| id == "old" && !l.is_leader()).expect("old lost").0;
    let new_won = log.iter().find(|(_, id, l)| id == "new" && l.is_leader()).expect("new won").0;
    assert!(old_lost <= new_won, "the old leader still led when the new one took over: {log:?}");
    assert_eq!(count.max.load(Ordering::SeqCst), 1, "{log:?}");

    // The old latch does not stop: its session starts a new session once the server is
    // reachable, and it rejoins the election there, at the back.
    proxy.heal();
    let generation = wait_new_generation(&old_session, 1).await;
    assert!(generation >= 2);
    eventually("old rejoined", || async {
        new.participants()
            .await
            .map(|p| p.iter().map(|p| p.id.clone()).collect::<Vec<_>>() == ["new", "old"])
            .unwrap_or(false)
    })
    .await;
    assert!(!old.has_leadership(), "the old latch leads behind the new leader");
    // When the new leader leaves, the old latch leads again, with a newer token.
    new.close().await;
    let regained = within("old leads again", old.await_leadership()).await.unwrap();
    assert!(regained > new_token, "token {regained} not above {new_token}");
    assert_eq!(count.max.load(Ordering::SeqCst), 1, "two leaders at once");
    old.close().await;
    let admin = client(&zk.connect_string()).await;
    assert!(children(&admin, "/election/expiry").await.is_empty(), "close() left nodes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_the_leaders_node_makes_it_not_leader_and_the_next_leads() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let a = LeaderLatch::with_options(
        &session(&zk.connect_string()).await,
        "/election/deleted",
        zk_recipes::LatchOptions::new().participant_id("a"),
    )
    .unwrap();
    a.start().unwrap();
    within("a leads", a.await_leadership()).await.unwrap();
    let b = LeaderLatch::with_options(
        &session(&zk.connect_string()).await,
        "/election/deleted",
        zk_recipes::LatchOptions::new().participant_id("b"),
    )
    .unwrap();
    b.start().unwrap();
    eventually("b queued", || async { b.participants().await.unwrap().len() == 2 }).await;

    let leader_node = a.leader().await.unwrap().unwrap().node;
    admin.delete(&format!("/election/deleted/{leader_node}"), None).await.unwrap();
    let mut rx = a.leadership();
    within("a not leader", rx.wait_for(|l| !l.is_leader())).await.unwrap();
    within("b leads", b.await_leadership()).await.unwrap();
    // a rejoined at the back (Curator's reset()), and leads again when b leaves.
    eventually("a rejoined", || async { b.participants().await.unwrap().len() == 2 }).await;
    assert_eq!(b.participants().await.unwrap()[1].id, "a");
    b.close().await;
    within("a leads again", a.await_leadership()).await.unwrap();
    a.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn selectors_with_auto_requeue_rotate_through_everyone() {
    let zk = standalone().await;
    let terms = Arc::new(Mutex::new(Vec::<String>::new()));
    // Each term ends only once all three selectors have a node: otherwise a requeue whose create
    // is slow (a loaded machine) lets the others lead twice meanwhile, and the turns are not a
    // property of the recipe but of the scheduler.
    let watcher = Arc::new(client(&zk.connect_string()).await);
    let mut selectors = Vec::new();
    for id in ["s0", "s1", "s2"] {
        let sel = LeaderSelector::with_options(
            &session(&zk.connect_string()).await,
            "/election/rotate",
            SelectorOptions::new().participant_id(id).auto_requeue(true),
        )
        .unwrap();
        let terms = terms.clone();
        let name = id.to_string();
        let watcher = watcher.clone();
        sel.start(move |ctx| {
            let (terms, name, watcher) = (terms.clone(), name.clone(), watcher.clone());
            async move {
                terms.lock().unwrap().push(name);
                assert!(ctx.fencing_token() > 0);
                // Closing stops the term too (then the others may never be three again).
                tokio::select! {
                    () = eventually("everyone queued", || async {
                        children(&watcher, "/election/rotate").await.len() == 3
                    }) => {}
                    () = ctx.stopped() => {}
                }
            }
        })
        .unwrap();
        selectors.push(sel);
    }
    eventually("twelve terms", || async { terms.lock().unwrap().len() >= 12 }).await;
    // Snapshot before closing: once one selector closes, the others rotate without it.
    let terms_seen = terms.lock().unwrap().clone();
    for s in &selectors {
        s.close().await;
    }
    let terms = terms_seen;
    for id in ["s0", "s1", "s2"] {
        assert!(terms.iter().filter(|t| *t == id).count() >= 2, "{id} led too rarely: {terms:?}");
    }
    // Rotation: once all three are queued, everyone requeueing means strict turns.
    let all_in = (1..=terms.len())
        .find(|&k| ["s0", "s1", "s2"].iter().all(|id| terms[..k].iter().any(|t| t == id)))
        .expect("everyone led");
    let steady = &terms[all_in - 1..];
    assert!(steady.windows(2).all(|w| w[0] != w[1]), "not rotating: {terms:?}");
    assert!(steady.windows(3).all(|w| w[0] != w[2]), "not rotating through all three: {terms:?}");
    let admin = client(&zk.connect_string()).await;
    assert!(children(&admin, "/election/rotate").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_selector_whose_task_ignores_the_stop_signal_is_still_not_leader() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let sel = LeaderSelector::with_options(
        &session(&zk.connect_string()).await,
        "/election/stubborn",
        SelectorOptions::new().participant_id("stubborn").grace(Duration::from_millis(300)),
    )
    .unwrap();
    let dropped = Arc::new(AtomicUsize::new(0));
    struct OnDrop(Arc<AtomicUsize>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let flag = dropped.clone();
    sel.start(move |_ctx| {
        let guard = OnDrop(flag.clone());
        async move {
            let _guard = guard;
            std::future::pending::<()>().await; // never looks at ctx.stopped()
        }
    })
    .unwrap();
    within("leads", sel.await_leadership()).await.unwrap();
    let token = sel.leadership().borrow().fencing_token().expect("leading");
    let mut terms = sel.terms();
    let node = sel.participants().await.unwrap()[0].node.clone();
    admin.delete(&format!("/election/stubborn/{node}"), None).await.unwrap();
    let mut rx = sel.leadership();
    within("not leader", rx.wait_for(|l| !l.is_leader())).await.unwrap();
    // After the grace period the task is dropped.
    eventually("task dropped", || async { dropped.load(Ordering::SeqCst) == 1 }).await;
    // The term is reported as lost, with the task aborted.
    let ended = within("the term's end", terms.recv()).await.unwrap();
    assert_eq!(ended.fencing_token, token);
    assert_eq!(ended.outcome, TermOutcome::Lost);
    assert!(ended.aborted, "the task ignored the stop signal, yet it was not aborted");
    sel.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_zookeeper_leader_keeps_exactly_one_latch_leader() {
    init_tracing();
    let mut zk = ZkCluster::ensemble(3).await.expect("ensemble");
    let mut latches = Vec::new();
    for i in 0..3 {
        let s = session_with_timeout(&zk.connect_string(), Duration::from_secs(10)).await;
        latches.push(
            LeaderLatch::with_options(
                &s,
                "/election/ensemble",
                LatchOptions::new().participant_id(format!("e{i}")).loss_policy(LossPolicy::SessionOnly),
            )
            .unwrap(),
        );
    }
    let latches = Arc::new(latches);
    let max = Arc::new(AtomicUsize::new(0));
    let sampler = sample_leaders(latches.clone(), max.clone());
    for latch in latches.iter() {
        latch.start().unwrap();
    }
    eventually("a latch leader", || async { latches.iter().any(|l| l.has_leadership()) }).await;
    let latch_leader = latches.iter().position(|l| l.has_leadership()).unwrap();
    let leader = zk.leader().await.unwrap();
    zk.kill(leader).await.unwrap();
    within("new zookeeper leader", zk.wait_for_leader()).await.unwrap();
    // The latch leader rides out the failover (its session survives) and stays the only one.
    let admin = client(&zk.connect_string()).await;
    eventually("queue readable", || async {
        admin.list_children("/election/ensemble").await.map(|c| c.len() == 3).unwrap_or(false)
    })
    .await;
    within("still led", latches[latch_leader].await_leadership()).await.unwrap();
    assert_eq!(latches.iter().filter(|l| l.has_leadership()).count(), 1);
    sampler.abort();
    assert_eq!(max.load(Ordering::SeqCst), 1, "two latch leaders at once");
    for l in latches.iter() {
        l.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn close_and_drop_leave_no_node() {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let leader = LeaderLatch::with_options(
        &session(&zk.connect_string()).await,
        "/election/cleanup",
        zk_recipes::LatchOptions::new().participant_id("leader"),
    )
    .unwrap();
    leader.start().unwrap();
    within("leads", leader.await_leadership()).await.unwrap();
    let waiter = LeaderLatch::with_options(
        &session(&zk.connect_string()).await,
        "/election/cleanup",
        zk_recipes::LatchOptions::new().participant_id("waiter"),
    )
    .unwrap();
    waiter.start().unwrap();
    eventually("queued", || async { children(&admin, "/election/cleanup").await.len() == 2 }).await;

    // Dropping a waiting latch deletes its node in the background.
    drop(waiter);
    eventually("dropped waiter's node gone", || async {
        children(&admin, "/election/cleanup").await.len() == 1
    })
    .await;
    // Closing the leader deletes its node before close() returns.
    leader.close().await;
    assert!(children(&admin, "/election/cleanup").await.is_empty());
    assert!(matches!(leader.await_leadership().await, Err(zk_recipes::Error::Closed { .. })));
    assert!(matches!(leader.start(), Err(zk_recipes::Error::Closed { .. })));
}
