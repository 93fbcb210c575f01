//! Ensembles that change: members added to a running ensemble and removed from it
//! (`reconfig`), and a server moved to another loopback address.

mod common;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::{connect, within};
use zk_testcluster::{ClusterConfig, ZkCluster};
use zookeeper_client::{Client, EnsembleUpdate};

/// The `server.N` lines of `/zookeeper/config`, as read by `client`.
async fn members(client: &Client) -> Vec<String> {
    let (data, _) = within("read /zookeeper/config", client.get_config()).await.expect("get_config");
    let text = String::from_utf8(data).expect("a text config");
    let mut lines: Vec<String> =
        text.lines().filter(|l| l.starts_with("server.")).map(String::from).collect();
    lines.sort();
    lines
}

async fn reconfig(client: &Client, add: &[String], remove: &[String]) {
    let joinings = add.iter().map(String::as_str);
    let leavings = remove.iter().map(String::as_str);
    let update = EnsembleUpdate::Incremental { joinings, leavings };
    within("reconfig", client.update_ensemble(update, None)).await.expect("reconfig");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_and_leave_a_running_ensemble_by_reconfig() {
    let config = ClusterConfig { nodes: 3, reconfig: true, ..ClusterConfig::default() };
    let mut zk = ZkCluster::start(config).await.expect("start a reconfigurable ensemble");
    let admin = connect(&zk.connect_string(), Duration::from_secs(20)).await;
    let first = members(&admin).await;
    assert_eq!(first.len(), 3, "{first:?}");
    assert_eq!(first[0], zk.member_spec(0).unwrap(), "the harness's spec is the server's");

    let added = zk.add_member().await.expect("start a fourth server");
    assert_eq!(added, 3);
    reconfig(&admin, &[zk.member_spec(added).unwrap()], &[]).await;
    let now = members(&admin).await;
    assert!(now.contains(&zk.member_spec(added).unwrap()), "{now:?}");

    reconfig(&admin, &[], &[zk.member_id(0).unwrap().to_string()]).await;
    zk.remove_member(0).await.expect("stop the removed server");
    let left = members(&admin).await;
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(!left.contains(&zk.member_spec(0).unwrap()), "{left:?}");
    // The new member serves clients on its own.
    let direct = connect(&zk.client_addr(added).unwrap().to_string(), Duration::from_secs(20)).await;
    assert_eq!(members(&direct).await, left);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_moves_to_another_loopback_address() {
    let mut zk = ZkCluster::ensemble(3).await.expect("start an ensemble");
    let before = zk.client_addr(0).unwrap();
    assert_eq!(before.ip(), Ipv4Addr::LOCALHOST);
    let moved = Ipv4Addr::new(127, 0, 0, 3);
    zk.move_client_address(0, moved).await.expect("move node 0");
    let after = zk.client_addr(0).unwrap();
    assert_eq!((after.ip(), after.port()), (moved.into(), before.port()));
    assert!(tokio::net::TcpStream::connect(before).await.is_err(), "nothing left on the old address");
    let client = connect(&after.to_string(), Duration::from_secs(20)).await;
    within("a read on the moved server", client.get_data("/zookeeper/config")).await.ok();
    assert!(zk.mode(0).await.is_some(), "the moved server serves");
}
