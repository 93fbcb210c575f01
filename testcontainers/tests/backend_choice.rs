//! `ZK_TEST_BACKEND` selection. A separate test binary: it sets process-wide environment
//! variables, so it must not share a process with tests that start clusters.

use std::time::Duration;

use zk_testcluster::{HarnessError, ZkCluster};

#[tokio::test]
async fn backend_choice_errors_say_what_to_do() {
    std::env::set_var("ZK_TEST_BACKEND", "bogus");
    match ZkCluster::standalone().await {
        Err(HarnessError::BadBackend(v)) => assert_eq!(v, "bogus"),
        other => panic!("expected BadBackend, got {other:?}"),
    }

    // No Docker daemon runs on CI machines; without the `docker` feature the backend is not even
    // compiled in. Either way: a clear error that names Docker and how to install ZooKeeper.
    std::env::set_var("ZK_TEST_BACKEND", "docker");
    let attempt = tokio::time::timeout(Duration::from_secs(120), ZkCluster::standalone()).await;
    match attempt.expect("the docker backend hung instead of failing") {
        Err(HarnessError::NoBackend(msg)) => {
            assert!(msg.contains("docker") || msg.contains("Docker"), "{msg}");
            assert!(msg.contains("scripts/ensure-zookeeper-versions"), "{msg}");
            assert!(msg.contains("ZOOKEEPER_HOME"), "{msg}");
        }
        Ok(cluster) => {
            // Only where a Docker daemon is reachable and the feature is on.
            assert!(cluster.mode(0).await.is_some());
        }
        Err(other) => panic!("unexpected error: {other}"),
    }
}
