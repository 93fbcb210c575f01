//! `Session::server_features`: what the server can do, learned by a probe that leaves nothing
//! behind, and forgotten when the session moves to another server (which may run another
//! version). Runs 3.8.0 (no `Stat` from a multi's create, ZOOKEEPER-4026) and 3.9.3 (one)
//! whatever `ZK_VERSION` says, and the run's own version too.

mod common;

use common::{children, client, init_tracing, session, within};
use zk_recipes::{ConnectionState, Error, ServerFeatures};
use zk_testcluster::{ClusterConfig, ZkCluster, ZkVersion};

/// What ZOOKEEPER-4026 says a server of `version` answers: a multi's create returns its `Stat`
/// from 3.7.2 on the 3.7 line, 3.8.2 on the 3.8 line, and every 3.9.
fn stat_expected(version: ZkVersion) -> bool {
    let (_, minor, patch) = version.parts();
    match minor {
        7 | 8 => patch >= 2,
        m => m > 8,
    }
}

async fn features_of(version: ZkVersion) -> ServerFeatures {
    let zk = ZkCluster::start(ClusterConfig::default().version(version)).await.expect("start ZooKeeper");
    let session = session(&zk.connect_string()).await;
    assert_eq!(session.known_server_features(), None, "nothing probed yet");
    let features = within("the probe", session.server_features("/")).await.expect("probe");
    assert_eq!(session.known_server_features(), Some(features), "cached for the connection");
    // The probe's transaction created and deleted its node: nothing of it is left.
    assert_eq!(children(&client(&zk.connect_string()).await, "/").await, ["zookeeper"]);
    session.close().await;
    features
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_create_returns_its_stat_on_3_9_3_and_not_on_3_8_0() {
    init_tracing();
    let old = features_of(ZkVersion::V3_8_0).await;
    assert!(!old.multi_create_stat && old.multi_create_applied, "3.8.0: no Stat: {old:?}");
    let new = features_of(ZkVersion::V3_9_3).await;
    assert!(new.multi_create_stat && new.multi_create_applied, "3.9.3: a Stat: {new:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_version_answers_as_zookeeper_4026_says() {
    init_tracing();
    let version = ZkVersion::from_env().expect("ZK_VERSION");
    if std::env::var_os("ZOOKEEPER_HOME").is_some() {
        return; // the install's version is whatever it is; the harness only reports it
    }
    assert_eq!(features_of(version).await.multi_create_stat, stat_expected(version), "ZooKeeper {version}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_moved_to_a_server_of_another_version_probes_it_again() {
    init_tracing();
    let (old, new) = (ZkVersion::V3_8_0, ZkVersion::V3_9_3);
    let config = ClusterConfig { nodes: 3, node_versions: vec![old, new, new], ..ClusterConfig::default() };
    let zk = ZkCluster::start(config).await.expect("a 3.8.0/3.9.3 ensemble");
    let proxy = zk.proxy().expect("proxy");
    proxy.pin_to(zk.client_addr(0).expect("node 0"));
    let session = session(&proxy.connect_string()).await;
    let generation = session.generation();
    let on_old = within("probe 3.8.0", session.server_features("/")).await.expect("probe");
    assert!(!on_old.multi_create_stat);
    // A 3.8.0 follower of a 3.9.3 leader does not apply a multi holding a create (it answers it
    // with no results); led by itself, it does.
    let led_by_new = zk.leader().await.expect("a leader") != 0;
    assert_eq!(on_old.multi_create_applied, !led_by_new, "{on_old:?}");

    // The same session, moved to a 3.9.3 server: the 3.8.0 answer is forgotten, not reused.
    let mut events = session.events();
    proxy.pin_to(zk.client_addr(1).expect("node 1"));
    within("Reconnected", async {
        while events.recv().await.expect("events").state != ConnectionState::Reconnected {}
    })
    .await;
    assert_eq!(session.generation(), generation, "the same session");
    assert_eq!(session.known_server_features(), None, "forgotten with the connection");
    let on_new = within("probe 3.9.3", session.server_features("/")).await.expect("probe");
    assert!(on_new.multi_create_stat && on_new.multi_create_applied, "{on_new:?}");
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_parent_is_refused_and_a_missing_one_fails_without_a_trace() {
    let zk = common::standalone().await;
    let session = session(&zk.connect_string()).await;
    let err = session.server_features("relative").await.expect_err("not a path");
    assert!(matches!(err, Error::InvalidPath { .. }), "{err:?}");
    let err = session.server_features("/missing").await.expect_err("no parent");
    assert!(matches!(err, Error::ZooKeeper { .. }), "{err:?}");
    assert_eq!(session.known_server_features(), None);
    assert_eq!(children(&client(&zk.connect_string()).await, "/").await, ["zookeeper"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_on_a_server_without_multi_read_is_a_typed_error_not_a_hang() {
    let zk = common::standalone().await;
    let version = zk.server_version(0).await.expect("srvr");
    let session = session(&zk.connect_string()).await;
    let mutex = zk_recipes::InterProcessMutex::new(&session, "/features/listed").expect("mutex");
    let guard = within("acquire", mutex.acquire()).await.expect("acquire");
    let listed = within("participants", mutex.participants()).await;
    // A multi read needs 3.6.0: a 3.5 server answers Unimplemented (the CI matrix's 3.5.9 row).
    if version < ZkVersion::new(3, 6, 0) {
        let err = listed.expect_err("3.5 has no multi read");
        assert!(matches!(err, Error::ServerTooOld { op: "multi-read", .. }), "{err:?}");
        assert!(err.to_string().contains("3.6.0"), "{err}");
    } else {
        assert_eq!(listed.expect("participants").len(), 1, "ZooKeeper {version}");
    }
    guard.release().await.expect("release");
}
