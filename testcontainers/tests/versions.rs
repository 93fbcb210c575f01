//! Server versions: the version a cluster is asked for is the one that runs (checked against
//! `srvr`), a mixed ensemble forms, and `restart_as` upgrades one server at a time, data kept.
//! Needs `scripts/ensure-zookeeper-versions 3.9.3` (and Debian 12's 3.8.0 package).

mod common;

use common::{connect, within};
use std::time::Duration;

use zk_testcluster::{ClusterConfig, HarnessError, ZkCluster, ZkVersion};
use zookeeper_client::{Acls, Client, CreateMode};

/// A release no registry here carries.
const ABSENT: ZkVersion = ZkVersion::new(3, 7, 99);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_cluster_runs_the_version_of_the_run_and_reports_it() {
    let cluster = ZkCluster::standalone().await.expect("standalone");
    let asked = ZkVersion::from_env().expect("ZK_VERSION");
    assert_eq!(cluster.version(0).expect("node 0"), asked);
    if std::env::var_os("ZOOKEEPER_HOME").is_none() {
        assert_eq!(cluster.server_version(0).await.expect("srvr"), asked);
    }
}

/// Reads `/upgrade` through `client`, which may be moving between servers.
async fn read(client: &Client) -> Vec<u8> {
    within("a read of /upgrade", async {
        loop {
            match client.get_data("/upgrade").await {
                Ok((data, _)) => return data,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_ensemble_forms_and_restart_as_upgrades_it_one_server_at_a_time() {
    let old = ZkVersion::V3_8_0;
    let new = ZkVersion::V3_9_3;
    let config = ClusterConfig { nodes: 3, node_versions: vec![old, old, new], ..ClusterConfig::default() };
    let mut cluster = ZkCluster::start(config.version(old)).await.expect("a 3.8.0/3.9.3 ensemble");
    for (i, want) in [old, old, new].into_iter().enumerate() {
        assert_eq!(cluster.server_version(i).await.expect("srvr"), want, "node {i}");
    }
    let client = connect(&cluster.connect_string(), Duration::from_secs(20)).await;
    client
        .create("/upgrade", b"before", &CreateMode::Persistent.with_acls(Acls::anyone_all()))
        .await
        .expect("create");

    for i in 0..2 {
        cluster.restart_as(i, new).await.expect("restart as 3.9.3");
        assert_eq!(cluster.version(i).expect("node"), new);
        assert_eq!(cluster.server_version(i).await.expect("srvr"), new, "node {i}");
        // The upgraded server kept its data directory: it serves what was written before.
        let alone =
            connect(&cluster.client_addr(i).expect("addr").to_string(), Duration::from_secs(20)).await;
        within("node's own copy", alone.sync("/upgrade")).await.expect("sync");
        assert_eq!(alone.get_data("/upgrade").await.expect("read").0, b"before", "node {i}");
    }
    assert_eq!(read(&client).await, b"before");
    client.set_data("/upgrade", b"after", None).await.expect("a write on the upgraded ensemble");
    // A plain restart keeps the version restart_as gave.
    cluster.restart(0).await.expect("restart");
    assert_eq!(cluster.server_version(0).await.expect("srvr"), new);
    assert_eq!(read(&client).await, b"after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_not_at_hand_is_a_typed_error_that_names_the_script() {
    let err = ZkCluster::start(ClusterConfig::default().version(ABSENT)).await.expect_err("no 3.7.99 here");
    assert!(matches!(err, HarnessError::MissingVersion { version, .. } if version == ABSENT), "{err:?}");
    assert!(err.to_string().contains("scripts/ensure-zookeeper-versions 3.7.99"), "{err}");

    // restart_as looks before it stops: the server keeps running its version.
    let mut cluster = ZkCluster::standalone().await.expect("standalone");
    let pid = cluster.pid(0).expect("pid");
    let err = cluster.restart_as(0, ABSENT).await.expect_err("no 3.7.99 here");
    assert!(matches!(err, HarnessError::MissingVersion { .. }), "{err:?}");
    assert_eq!(cluster.pid(0), Some(pid));
    assert!(cluster.mode(0).await.is_some(), "the server stopped");
}
