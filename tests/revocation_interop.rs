//! Revocation requests between zk-recipes and real Apache Curator 5.4 processes: both write and
//! watch for the same `__REVOKE__` on the holder's node.

mod common;

use common::peers;
use common::*;
use zk_recipes::{InterProcessMutex, LockOptions, LockStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_revocable_holder_hears_our_request() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let mut java =
        Peer::spawn(peers::curator(&["revocable", &connect, "/interop/revoke-java", "java", "10000"]));
    java.expect("HOLDING").await;
    let admin = client(&connect).await;
    let nodes = children(&admin, "/interop/revoke-java").await;
    assert_eq!(nodes.len(), 1);
    let session = session(&connect).await;
    let node = format!("/interop/revoke-java/{}", nodes[0]);
    assert!(zk_recipes::request_revocation(&session, &node).await.unwrap());
    java.expect("REVOCATION REQUESTED").await;
    java.say("release");
    java.expect("RELEASED").await;
    java.wait_success().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_revocable_holder_hears_curators_revoker() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let session = session(&connect).await;
    let mutex =
        InterProcessMutex::with_options(&session, "/interop/revoke-rust", LockOptions::new().revocable(true))
            .unwrap();
    let held = mutex.acquire().await.unwrap();
    let java = Peer::spawn(peers::curator(&["revoke", &connect, held.node_path(), "10000"]));
    let mut status = held.status();
    within("Curator's request reaches us", status.wait_for(|s| *s == LockStatus::RevocationRequested))
        .await
        .unwrap();
    java.wait_success().await;
    held.release().await.unwrap();
}
