//! The safe window (`Session::safe_until`) must never reach past the moment the ZooKeeper
//! leader may expire the session, even when the server we talk to still answers.
//!
//! The case a 60-minute chaos soak found: a follower whose messages to the leader are held (a
//! one-way partition between servers) keeps answering its clients' reads for `syncLimit`
//! ticks, while the leader, which hears no touch of their sessions, expires them after one
//! session timeout and gives their locks to others. A read's answer from that follower proves
//! nothing about the leader; a `sync`'s does (docs/safety.md, "The safe window").

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use zk_recipes::{ConnectionState, InterProcessMutex};
use zk_testcluster::{ClusterConfig, Mode, ZkCluster};

/// The holder's session: 1 s, well inside the ensemble's `syncLimit` (10 ticks of 200 ms), so
/// the leader expires it while the cut follower still serves it.
const SESSION: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_the_leader_no_longer_hears_does_not_extend_the_safe_window() {
    init_tracing();
    let cluster =
        ZkCluster::start(ClusterConfig { nodes: 3, ..ClusterConfig::default() }.partitionable(true))
            .await
            .expect("ensemble");
    let leader = cluster.wait_for_leader().await.expect("leader");
    let mut follower = None;
    for i in (0..cluster.len()).filter(|&i| i != leader) {
        if cluster.mode(i).await == Some(Mode::Follower) {
            follower = Some(i);
            break;
        }
    }
    let follower = follower.expect("a follower");
    let at = |i: usize| cluster.client_addr(i).expect("client address").to_string();

    // The holder talks to the follower only; the next holder to the leader.
    let holder = session_with_timeout(&at(follower), SESSION).await;
    let next = session(&at(leader)).await;
    let path = "/safe-window/one-way";
    let guard = within("the first hold", InterProcessMutex::new(&holder, path).expect("mutex").acquire())
        .await
        .expect("acquire");
    let waiting = tokio::spawn({
        let mutex = InterProcessMutex::new(&next, path).expect("mutex");
        async move {
            let guard = mutex.acquire().await.expect("the next hold");
            (Instant::now(), guard)
        }
    });
    // The next holder is queued behind (its node is there) before the fault begins.
    let admin = client(&at(leader)).await;
    eventually("the next holder to queue", || async { children(&admin, path).await.len() == 2 }).await;

    // Every safe window the holder's first session reports from now on. The holder learns of
    // the loss from the follower (which still hears the leader's commit of the expiry), or
    // when the follower gives up on the leader and drops it.
    let latest = Arc::new(Mutex::new(holder.safe_until().expect("a safe window while holding")));
    let tracker = tokio::spawn({
        let (holder, latest) = (holder.clone(), latest.clone());
        let mut contacts = holder.contacts();
        async move {
            loop {
                let status = *holder.states().borrow();
                if status.generation != 1 || status.state == ConnectionState::Lost {
                    return;
                }
                if let Some(contact) = *contacts.borrow_and_update() {
                    let mut latest = latest.lock().unwrap();
                    *latest = (*latest).max(contact + holder.session_timeout());
                }
                let mut states = holder.states();
                tokio::select! {
                    _ = contacts.changed() => {}
                    _ = states.changed() => {}
                }
            }
        }
    });
    cluster.partition_one_way(follower, leader).expect("one-way partition");
    let (next_began, next_guard) =
        within("the next holder to take the lock", waiting).await.expect("next holder");
    eventually("the holder to be told, or its follower to drop it", || async {
        holder.state() == ConnectionState::Lost
            || holder.generation() != 1
            || cluster.mode(follower).await != Some(Mode::Follower)
    })
    .await;
    tracker.abort();
    let latest = *latest.lock().unwrap();
    assert!(
        latest <= next_began,
        "the holder's safe window reached {:?} past the moment the next holder took the lock",
        latest - next_began
    );
    cluster.heal_partition().expect("heal");
    drop(next_guard);
    drop(guard);
}

/// A connection down for longer than the window, but not for the session timeout: the same
/// session comes back with its window passed, and the beats' proofs must open it again
/// (`Reconnected`). (The chaos run's observer phase caught the supervisor beating back to back
/// after such a return, each beat too close to the last for any proof: suspended for good, a
/// latch's leader never leading again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_back_after_its_window_passed_opens_it_again() {
    const TIMEOUT: Duration = Duration::from_secs(4);
    let zk = standalone().await;
    let proxy = zk.proxy().expect("proxy");
    let session = session_with_timeout(&proxy.connect_string(), TIMEOUT).await;
    let mut states = session.states();
    // The first proof (until then the window counts from when the session was asked for).
    let mut contacts = session.contacts();
    within("a proof", contacts.changed()).await.expect("contacts");
    proxy.blackhole();
    let cut = Instant::now();
    within("the session to be suspended", states.wait_for(|s| s.state == ConnectionState::Suspended))
        .await
        .expect("states");
    // The fault's duration: past the window (at most 0.65 of the timeout ahead at the cut), short
    // of the timeout, so the server still has the session.
    tokio::time::sleep_until((cut + TIMEOUT * 4 / 5).into()).await;
    assert!(
        session.safe_until().is_none_or(|until| until < Instant::now()),
        "the window is still open: {:?} after the cut, contact {:?}",
        session.safe_until().map(|u| u - cut),
        session.last_contact().map(|c| cut.saturating_duration_since(c))
    );
    proxy.heal();
    let status =
        *within("the window to open again", states.wait_for(|s| s.state != ConnectionState::Suspended))
            .await
            .expect("states");
    assert_eq!(status.state, ConnectionState::Reconnected, "{status:?}");
    assert_eq!(status.generation, 1);
    assert!(session.safe_until().is_some_and(|until| until > Instant::now()));
}
