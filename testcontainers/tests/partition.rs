//! A partition between ZooKeeper servers ([`ZkCluster::partition`]), against a real ensemble.

mod common;

use common::alive;
use std::time::Duration;

use zk_testcluster::{ClusterConfig, HarnessError, Mode, ZkCluster};
use zookeeper_client::{Acls, Client, CreateMode, Error, SessionState};

/// A guard against hangs, not a speed assertion: every awaited event has a generous bound.
const PATIENCE: Duration = Duration::from_secs(60);

/// How often a condition on the servers' roles is polled.
const POLL: Duration = Duration::from_millis(50);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, fut).await.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

async fn connect(connect: &str) -> Client {
    within("connect", Client::connector().with_session_timeout(Duration::from_secs(10)).connect(connect))
        .await
        .expect("connect")
}

/// Every node's role, `None` for a node that does not serve.
async fn modes(cluster: &ZkCluster) -> Vec<Option<Mode>> {
    let mut modes = Vec::new();
    for i in 0..cluster.len() {
        modes.push(cluster.mode(i).await);
    }
    modes
}

/// Polls the nodes' roles until `done` holds, and returns them.
async fn await_modes(
    cluster: &ZkCluster,
    what: &str,
    done: impl Fn(&[Option<Mode>]) -> bool,
) -> Vec<Option<Mode>> {
    within(what, async {
        loop {
            let now = modes(cluster).await;
            if done(&now) {
                return now;
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_steps_down_the_majority_elects_another_and_heal_rejoins_it() {
    let config = ClusterConfig { nodes: 3, ..ClusterConfig::default() }.partitionable(true);
    let cluster = ZkCluster::start(config).await.expect("partitionable ensemble");
    let old = cluster.wait_for_leader().await.expect("a leader");
    let others = (0..3).filter(|&i| i != old).collect::<Vec<_>>();
    assert!(matches!(cluster.partition(3), Err(HarnessError::NoSuchNode(3))));

    // One session that knows only the leader's client port, one that knows only the others'.
    let isolated = connect(&cluster.client_addr(old).expect("addr").to_string()).await;
    let majority_connect = others
        .iter()
        .map(|&i| cluster.client_addr(i).expect("addr").to_string())
        .collect::<Vec<_>>()
        .join(",");
    let majority = connect(&majority_connect).await;
    let acl = CreateMode::Persistent.with_acls(Acls::anyone_all());
    isolated.create("/before", b"", &acl).await.expect("write before the partition");
    let mut states = isolated.state_watcher();

    cluster.partition(old).expect("partition");

    // The old leader loses its quorum and steps down; the two others elect one of themselves.
    let after = await_modes(&cluster, "a new leader among the majority", |m| {
        m[old] != Some(Mode::Leader) && others.iter().any(|&i| m[i] == Some(Mode::Leader))
    })
    .await;
    let new = others.iter().copied().find(|&i| after[i] == Some(Mode::Leader)).expect("new leader");

    // The session on the isolated server loses its connection and cannot write there...
    within("the isolated session's disconnect", async {
        let mut state = states.state();
        while state == SessionState::SyncConnected {
            state = states.changed().await;
        }
    })
    .await;
    let refused = within("the isolated write to fail", isolated.create("/isolated", b"", &acl)).await;
    assert!(
        matches!(refused, Err(Error::ConnectionLoss | Error::SessionExpired)),
        "a write through the isolated server: {refused:?}"
    );
    // ...while the majority serves writes.
    within("a write on the majority", async {
        loop {
            match majority.create("/majority", b"", &acl).await {
                Ok(_) => return,
                Err(Error::ConnectionLoss) => tokio::time::sleep(POLL).await,
                Err(e) => panic!("a write on the majority: {e:?}"),
            }
        }
    })
    .await;
    // The isolated server stays out of the quorum while the partition lasts.
    assert_ne!(cluster.mode(old).await, Some(Mode::Leader));
    assert_ne!(cluster.mode(old).await, Some(Mode::Follower));

    cluster.heal_partition().expect("heal");
    // The old leader rejoins as a follower of the new one, and sees the majority's write.
    await_modes(&cluster, "the isolated server to rejoin as a follower", |m| {
        m[old] == Some(Mode::Follower) && m[new] == Some(Mode::Leader) && m.iter().all(Option::is_some)
    })
    .await;
    let rejoined = connect(&cluster.client_addr(old).expect("addr").to_string()).await;
    within("the majority's write on the rejoined server", async {
        loop {
            rejoined.sync("/").await.ok();
            if rejoined.check_stat("/majority").await.ok().flatten().is_some() {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await;

    let pids = cluster.pids();
    drop((isolated, majority, rejoined));
    drop(cluster);
    for pid in pids {
        assert!(!alive(pid), "server {pid} survived its cluster handle");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_needs_a_partitionable_cluster() {
    let cluster = ZkCluster::standalone().await.expect("standalone");
    assert!(matches!(cluster.partition(0), Err(HarnessError::NotPartitionable)));
    assert!(matches!(cluster.heal_partition(), Err(HarnessError::NotPartitionable)));
}
