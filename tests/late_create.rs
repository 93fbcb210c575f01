//! A create whose answer a lost connection took with it, while the leader still had it in
//! flight, must be found when we look for it from another server, not made a second time.
//!
//! How it happens: during a disk stall on a majority, a worker's create reaches the leader, its
//! connection drops, and the worker reconnects to a follower that has not committed the create
//! yet. Its listing shows no node of ours, so it would create again; the first create then
//! commits, and our own live session holds a node that no hold owns, ahead of every writer,
//! until the session ends (a 33 s read/write-lock stall in a chaos run: docs/safety.md). Looking
//! with a `sync` first (`find_ours`) makes the listing wait for every write the leader took in
//! before.

mod common;

use std::time::Duration;

use common::*;
use zk_recipes::InterProcessMutex;
use zk_testcluster::{ClusterConfig, ZkCluster};

/// How long each server's log sync takes during the fault: every write waits this long. Well
/// inside the ensemble's `syncLimit` (10 ticks of 200 ms), so that the leader keeps its quorum.
const STALL: Duration = Duration::from_millis(500);

/// The leader's count of change records made (a write it takes in makes them at once, before it
/// is logged and committed: a create makes two, its node's and its parent's).
async fn changes_taken_in(cluster: &ZkCluster, leader: usize) -> i64 {
    let mntr = cluster.mntr(leader).await.expect("mntr");
    mntr.get("zk_outstanding_changes_queued").expect("zk_outstanding_changes_queued in mntr")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_the_leader_took_in_before_we_reconnected_elsewhere_is_found_not_made_twice() {
    init_tracing();
    let cluster = ZkCluster::start(ClusterConfig { nodes: 3, ..ClusterConfig::default() }.disk_stall(true))
        .await
        .expect("ensemble");
    let leader = cluster.wait_for_leader().await.expect("leader");
    let other = (0..cluster.len()).find(|&i| i != leader).expect("a follower");
    let addr = |i: usize| cluster.client_addr(i).expect("client address");

    // Our session talks to the leader first; the admin reads from the follower.
    let proxy = cluster.proxy().expect("proxy");
    proxy.pin_to(addr(leader));
    let session = session_with_timeout(&proxy.connect_string(), Duration::from_secs(10)).await;
    let admin = client(&addr(other).to_string()).await;
    let path = "/late-create/lock";
    create_persistent(&admin, path, b"").await;
    let mutex = InterProcessMutex::new(&session, path).expect("mutex");
    let before = changes_taken_in(&cluster, leader).await;

    // Every write now waits for its log sync on every server: the create stays in flight.
    for i in 0..cluster.len() {
        cluster.stall_disk(i, STALL).expect("stall");
    }
    let acquiring = tokio::spawn(async move { mutex.acquire().await });
    eventually("the leader to take our create in", || async {
        changes_taken_in(&cluster, leader).await > before
    })
    .await;
    // Our connection to the leader drops (the create's answer with it); the session moves to
    // the follower, which has not committed the create.
    proxy.pin_to(addr(other));

    // Either the acquire ends, or a second node of ours shows up.
    eventually("the acquire to end, or a second node of ours", || async {
        acquiring.is_finished() || children(&admin, path).await.len() > 1
    })
    .await;
    for i in 0..cluster.len() {
        cluster.unstall_disk(i).expect("unstall");
    }
    let nodes = children(&admin, path).await;
    assert_eq!(nodes.len(), 1, "our session made more than one node for one acquire: {nodes:?}");
    let guard = within("the acquire", acquiring).await.expect("task").expect("acquire");
    guard.release().await.expect("release");
    let left = children(&admin, path).await;
    assert!(left.is_empty(), "nodes left after the release: {left:?}");
    session.close().await;
}
