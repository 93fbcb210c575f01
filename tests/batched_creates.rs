//! A session's concurrent joins send their creates together, in one `multi`, where the server
//! answers each create's `Stat` (ZOOKEEPER-4026: 3.8.2+, 3.9); each node's `czxid` is still its
//! guard's fencing token, and a create that fails the `multi` fails alone. On 3.8.0 every
//! create goes alone, as before. Runs on the run's `ZK_VERSION` (3.9.3 by default; 3.8.0 too).

mod common;

use common::*;
use zk_recipes::zookeeper_client::{Acls, CreateMode};
use zk_recipes::{ConnectOptions, Error, InterProcessMutex, Lock, LockGuard, QueueEvent, Session};

const LOCKS: usize = 48;

/// Whether the run's server answers a multi's creates with their `Stat`.
fn batches() -> bool {
    multi_creates_answer_stat()
}

async fn packets(zk: &zk_testcluster::ZkCluster) -> i64 {
    zk.mntr(0).await.expect("mntr").packets()
}

/// Each guard's fencing token is its node's czxid, read by a raw client.
async fn tokens_are_czxids(connect: &str, guards: &[LockGuard]) {
    let raw = client(connect).await;
    for guard in guards {
        let stat = raw.check_stat(guard.node_path()).await.expect("stat").expect("our node exists");
        assert_eq!(guard.fencing_token(), stat.czxid as u64, "{}", guard.node_path());
    }
}

async fn acquire_all(mutexes: &[InterProcessMutex]) -> Vec<zk_recipes::Result<LockGuard>> {
    let tasks: Vec<_> = mutexes
        .iter()
        .cloned()
        .map(|m| tokio::spawn(async move { within("acquire", m.acquire()).await }))
        .collect();
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.expect("task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acquires_on_one_session_send_their_creates_together_where_the_server_allows() {
    init_tracing();
    let zk = standalone().await;
    let connect = zk.connect_string();
    let raw = client(&connect).await;
    let s = session(&connect).await;
    let mut mutexes = Vec::new();
    for i in 0..LOCKS {
        let path = format!("/locks/batch/l{i}");
        create_persistent(&raw, &path, b"").await;
        mutexes.push(InterProcessMutex::new(&s, &path).unwrap());
    }
    // One by one: nothing is ever in flight beside a create.
    let before = packets(&zk).await;
    let mut guards = Vec::new();
    for m in &mutexes {
        guards.push(within("acquire", m.acquire()).await.unwrap());
    }
    let alone = packets(&zk).await - before;
    for g in guards {
        g.release().await.unwrap();
    }
    // All at once: the first time, the session probes its server (once per connection).
    for g in acquire_all(&mutexes).await {
        g.unwrap().release().await.unwrap();
    }
    let before = packets(&zk).await;
    let guards: Vec<LockGuard> = acquire_all(&mutexes).await.into_iter().map(|g| g.unwrap()).collect();
    let together = packets(&zk).await - before;
    tracing::info!(alone, together, "packets for {LOCKS} acquires");
    // Each acquire of an idle lock needs at least its create and its listing: four packets
    // with their replies, when every create goes alone.
    let floor = 4 * LOCKS as i64;
    if batches() {
        assert!(together * 4 < floor * 3, "{together} packets together ({alone} one by one)");
        assert!(together * 4 < alone * 3, "{together} packets together against {alone} one by one");
    } else {
        assert!(together >= floor, "{together} packets together: creates went out together");
        assert!(together <= alone + 8, "{together} packets together against {alone} one by one");
    }
    tokens_are_czxids(&connect, &guards).await;
    for g in guards {
        g.release().await.unwrap();
    }
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_fails_a_batch_fails_alone_and_the_others_acquire() {
    init_tracing();
    let zk = standalone().await;
    let connect = zk.connect_string();
    let raw = client(&connect).await;
    let other = Session::connect_with(
        &connect,
        &ConnectOptions::new(std::time::Duration::from_secs(10)).auth("digest", b"other:secret"),
    )
    .await
    .expect("connect");
    raw.mkdir("/locks/acl", &CreateMode::Persistent.with_acls(Acls::anyone_all())).await.expect("mkdir");
    let theirs = CreateMode::Persistent.with_acls(Acls::creator_all());
    within("create", common::raw(&other).create("/locks/acl/theirs", b"", &theirs)).await.expect("create");
    let s = session(&connect).await;
    let mut mutexes = Vec::new();
    for i in 0..LOCKS {
        let path = format!("/locks/acl/l{i}");
        create_persistent(&raw, &path, b"").await;
        mutexes.push(InterProcessMutex::new(&s, &path).unwrap());
    }
    // A first round lets the session learn what its server can do.
    for g in acquire_all(&mutexes).await {
        g.unwrap().release().await.unwrap();
    }
    for round in 0..3 {
        let mut all = mutexes.clone();
        all.insert(LOCKS / 2 + round, InterProcessMutex::new(&s, "/locks/acl/theirs").unwrap());
        let mut guards = Vec::new();
        for (i, g) in acquire_all(&all).await.into_iter().enumerate() {
            match g {
                Ok(g) => guards.push(g),
                Err(Error::NoAuth { path, .. }) if i == LOCKS / 2 + round => {
                    assert!(path.starts_with("/locks/acl/theirs"), "{path}")
                }
                Err(e) => panic!("acquire {i}: {e}"),
            }
        }
        assert_eq!(guards.len(), LOCKS, "every other acquire holds");
        tokens_are_czxids(&connect, &guards).await;
        for g in guards {
            g.release().await.unwrap();
        }
    }
    assert!(children(&common::raw(&other), "/locks/acl/theirs").await.is_empty());
    s.close().await;
    other.close().await;
}

/// Acquires on fresh paths (a lock per order id), many at once on one session: once the session
/// guesses that parents are missing, each join sends the parent's create and ours in one `multi`
/// where the server answers its creates' `Stat`, then the listing: two requests and their
/// replies, where the parent's create and ours sent one by one are three. Each guard's token is
/// still its node's czxid. On 3.8.0 nothing changes: three requests each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_path_acquires_send_the_parents_create_with_ours_where_the_server_allows() {
    init_tracing();
    let zk = standalone().await;
    let connect = zk.connect_string();
    let s = session(&connect).await;
    // First rounds, all at once: they teach the session that parents are missing, and what its
    // server can do. Their first creates fail (the parent is missing) before any probe can go
    // out (under the parent, once a create is in); they must not use up the session's probes.
    let mutexes = |round: usize| -> Vec<InterProcessMutex> {
        (0..LOCKS).map(|i| InterProcessMutex::new(&s, &format!("/orders/r{round}-o{i}")).unwrap()).collect()
    };
    for round in 0..3 {
        for g in acquire_all(&mutexes(round)).await {
            g.unwrap().release().await.unwrap();
        }
    }
    assert_eq!(s.known_server_features().map(|f| f.multi_create_stat), Some(batches()));
    let round = mutexes(3);
    let before = packets(&zk).await;
    let guards: Vec<LockGuard> = acquire_all(&round).await.into_iter().map(|g| g.unwrap()).collect();
    let used = packets(&zk).await - before;
    let each = used as f64 / LOCKS as f64;
    tracing::info!(used, each, "packets for {LOCKS} acquires on fresh paths");
    // Slack for the session's heartbeat and the `mntr` requests.
    let requests = if batches() { 2 } else { 3 };
    let per = 2 * requests as i64;
    assert!(
        (per * LOCKS as i64..=per * LOCKS as i64 + 8).contains(&used),
        "{used} packets for {LOCKS} fresh-path acquires ({each} each): not {requests} requests each"
    );
    tokens_are_czxids(&connect, &guards).await;
    for g in guards {
        g.release().await.unwrap();
    }
    s.close().await;
}

/// Acquires dropped at random points while their creates wait for a batch, or ride in one,
/// leave no node behind: a create still queued is never sent, and one sent is found and
/// deleted by the dropped acquire's cleanup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_whose_creates_wait_for_a_batch_leave_no_node() {
    init_tracing();
    let zk = standalone().await;
    let connect = zk.connect_string();
    let admin = client(&connect).await;
    let s = session(&connect).await;
    let mut mutexes = Vec::new();
    for i in 0..LOCKS {
        let path = format!("/locks/dropped/l{i}");
        create_persistent(&admin, &path, b"").await;
        mutexes.push(InterProcessMutex::new(&s, &path).unwrap());
    }
    for g in acquire_all(&mutexes).await {
        g.unwrap().release().await.unwrap();
    }
    let seed = seed();
    eprintln!("cancellation seed: {seed} (replay with ZK_TEST_SEED={seed})");
    let (mut acquired, mut dropped) = (0, 0);
    for round in 0..6u64 {
        let tasks: Vec<_> = mutexes
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, m)| {
                let mut rng = Rng(seed ^ (round << 32) ^ i as u64);
                tokio::spawn(async move { drop_randomly(&mut rng, || m.acquire()).await.map(|g| g.unwrap()) })
            })
            .collect();
        for task in tasks {
            match task.await.expect("task") {
                Some(guard) => {
                    acquired += 1;
                    drop(guard);
                }
                None => dropped += 1,
            }
        }
    }
    for m in &mutexes {
        within("cleanup", m.settled()).await;
    }
    eprintln!("acquired {acquired}, dropped {dropped}");
    assert!(dropped > 20, "too few drops exercised: {dropped}");
    let owner = common::raw(&s).session_id().0;
    for i in 0..LOCKS {
        let path = format!("/locks/dropped/l{i}");
        assert!(nodes_owned_by(&admin, &path, owner).await.is_empty(), "a node left under {path}");
    }
    for g in acquire_all(&mutexes).await {
        g.unwrap().release().await.unwrap();
    }
    s.close().await;
}

/// A connection lost while a `multi` of creates waits for its answer loses no node and makes
/// none twice: the `multi` landed whole, and each waiter's recovery finds its own node by its
/// protection prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_whose_reply_is_lost_is_recovered_node_by_node_not_duplicated() {
    use std::time::Duration;
    init_tracing();
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let proxy = zk.proxy().unwrap();
    let s = session_with_timeout(&proxy.connect_string(), Duration::from_secs(10)).await;
    let mut mutexes = Vec::new();
    let mut paths = Vec::new();
    for i in 0..LOCKS {
        let path = format!("/locks/lost/l{i}");
        create_persistent(&admin, &path, b"").await;
        mutexes.push(InterProcessMutex::new(&s, &path).unwrap());
        paths.push(path);
    }
    for g in acquire_all(&mutexes).await {
        g.unwrap().release().await.unwrap();
    }
    eventually("the server probed", || async { s.known_server_features().is_some() }).await;
    // Every reply held back: the first two creates go out alone (each seen landed before the
    // next acquire starts, so neither takes another with it), the rest together once one is
    // answered.
    proxy.set_reply_latency(Duration::from_secs(3));
    let landed = |n: usize| {
        let (admin, paths) = (&admin, &paths);
        async move {
            let mut landed = 0;
            for path in paths {
                landed += children(admin, path).await.len();
            }
            landed == n
        }
    };
    let mut acquiring = Vec::new();
    for (i, m) in mutexes.iter().enumerate() {
        let m = m.clone();
        acquiring.push(tokio::spawn(async move { within("acquire", m.acquire()).await }));
        if i < 2 {
            eventually("the create landed", || landed(i + 1)).await;
        }
    }
    eventually("every create landed", || landed(LOCKS)).await;
    proxy.set_reply_latency(Duration::ZERO);
    proxy.cut();
    let mut guards: Vec<LockGuard> = Vec::new();
    for task in acquiring {
        guards.push(within("acquires after recovery", task).await.unwrap().unwrap());
    }
    let recoveries: u64 = mutexes.iter().map(|m| m.stats().recoveries).sum();
    assert!(recoveries >= 1, "the recovery path did not run");
    if batches() {
        assert!(recoveries as usize >= LOCKS - 2, "{recoveries} recoveries: the batch's waiters recover");
    }
    for (path, guard) in paths.iter().zip(&guards) {
        let nodes = children(&admin, path).await;
        assert_eq!(nodes.len(), 1, "{path}: {nodes:?}");
        assert_eq!(guard.node_path(), format!("{path}/{}", nodes[0]));
        assert_eq!(guard.session_generation(), 1, "the session did not survive the cut");
    }
    tokens_are_czxids(&zk.connect_string(), &guards).await;
    for g in guards {
        g.release().await.unwrap();
    }
    s.close().await;
}

/// A fresh path's parent's create and ours, sent in one `multi` (where the server allows it),
/// whose reply is lost with the connection: the `multi` landed whole, and the join's recovery
/// finds our node by its protection prefix, once, its token its czxid. (On 3.8.0 the two
/// creates go one by one, and the same holds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fresh_paths_multi_whose_reply_is_lost_is_recovered_not_duplicated() {
    use std::time::Duration;
    init_tracing();
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let proxy = zk.proxy().unwrap();
    let s = session_with_timeout(&proxy.connect_string(), Duration::from_secs(10)).await;
    learn_fresh_paths(&s, "/orders-lost").await;
    assert_eq!(s.known_server_features().map(|f| f.multi_create_stat), Some(batches()));
    let path = "/orders-lost/o1";
    let mutex = InterProcessMutex::new(&s, path).unwrap();
    proxy.set_reply_latency(Duration::from_secs(3));
    let acquiring = tokio::spawn({
        let mutex = mutex.clone();
        async move { within("acquire", mutex.acquire()).await }
    });
    eventually("our node landed", || async { children(&admin, path).await.len() == 1 }).await;
    proxy.set_reply_latency(Duration::ZERO);
    proxy.cut();
    let guard = acquiring.await.unwrap().unwrap();
    assert!(mutex.stats().recoveries >= 1, "the recovery path did not run: {:?}", mutex.stats());
    let nodes = children(&admin, path).await;
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert_eq!(guard.node_path(), format!("{path}/{}", nodes[0]));
    assert_eq!(guard.session_generation(), 1, "the session did not survive the cut");
    tokens_are_czxids(&zk.connect_string(), std::slice::from_ref(&guard)).await;
    guard.release().await.unwrap();
    s.close().await;
}

/// Waits for `n` reports on `queued`.
async fn all_queued(queued: &mut tokio::sync::mpsc::UnboundedReceiver<()>, n: usize) {
    within("the waiters' Queued events", async move {
        for _ in 0..n {
            queued.recv().await.expect("a waiter reports");
        }
    })
    .await
}

/// Many waiters joining one held lock at once on one session (thousands of waiters in a few
/// processes): where creates go together, the joins whose creates went out in one `multi`
/// share one listing of the lock's path, sent right behind it, where each sent its own after
/// its create's answer. So their join costs the server its creates' `multi`s, one listing per
/// `multi`, and per waiter the watches it sets (on its own node, on the node ahead and on that
/// node's tombstone) and the read of the holder's id for its `Queued` event: four requests
/// each, not five. On 3.8.0 every create goes alone and each join pipelines its own listing
/// behind it, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_whose_creates_go_together_share_one_listing() {
    const WAITERS: usize = 64;
    const PATH: &str = "/locks/shared-listing";
    init_tracing();
    let zk = standalone().await;
    let connect = zk.connect_string();
    let s = session(&connect).await;
    let holder = session(&connect).await;
    let held = InterProcessMutex::new(&holder, PATH).unwrap().acquire().await.unwrap();
    let (tx, mut queued) = tokio::sync::mpsc::unbounded_channel();
    // Each waiter takes the lock in its turn and releases it at once.
    let join = |n: usize| -> Vec<tokio::task::JoinHandle<()>> {
        (0..n)
            .map(|_| {
                let (mutex, tx) = (InterProcessMutex::new(&s, PATH).unwrap(), tx.clone());
                tokio::spawn(async move {
                    let mut report = move |event: &QueueEvent| {
                        if matches!(event, QueueEvent::Queued { .. }) {
                            let _ = tx.send(());
                        }
                    };
                    let guard = mutex.acquire_with_events(None, &mut report).await.unwrap();
                    guard.expect("no timeout").release().await.unwrap();
                })
            })
            .collect()
    };

    // A first round lets the session learn what its server can do, and that the lock is busy.
    let mut tasks = join(8);
    all_queued(&mut queued, 8).await;
    eventually("the session's probe", || async { s.known_server_features().is_some() }).await;
    assert_eq!(s.known_server_features().map(|f| f.multi_create_stat), Some(batches()));
    let requests = || async { zk.mntr(0).await.expect("mntr").packets_received() };
    let before = requests().await;
    tasks.extend(join(WAITERS));
    all_queued(&mut queued, WAITERS).await;
    let used = requests().await - before;
    tracing::info!(used, "requests for {WAITERS} joins at once");
    let waiters = WAITERS as i64;
    if batches() {
        // Each separate send of creates (a `multi`, or a create that went alone) costs one
        // request and one listing; with a listing each, the joins would cost 5 * WAITERS and
        // one per send. Slack for up to 28 sends, however the tasks happened to meet the
        // creates in flight, and the sessions' heartbeats.
        assert!(used <= 4 * waiters + 56, "{used} requests for {WAITERS} joins: a listing each?");
    } else {
        assert!(used >= 5 * waiters, "{used} requests for {WAITERS} joins: no listing each?");
    }
    held.release().await.unwrap();
    for task in tasks {
        within("a waiter's turn", task).await.unwrap();
    }
    holder.close().await;
    s.close().await;
}
