//! Sequence-wrap ordering: every participant on a path computes the same
//! order. Hand-made nodes with wrapped sequence numbers are put on real ZooKeeper; real Curator
//! and kazoo list them in their own order; we must list them in that same order, or refuse with
//! `Error::SequenceWrapped` exactly where that order is not creation order.

mod common;

use std::process::Output;

use common::peers::{curator, kazoo};
use common::*;
use zk_recipes::zookeeper_client::{Acls, CreateMode};
use zk_recipes::{Error, InterProcessMutex, LockOptions, NodeFormat, Session};

/// Sequence numbers in the order they were created (as ZooKeeper's counter would have made them),
/// and whether Curator's and kazoo's order is creation order (read from their source, and
/// checked here against the real clients).
const CASES: &[(&str, &[i32], bool, bool)] = &[
    ("plain", &[5, 6, 7], true, true),
    ("signed-wrap", &[i32::MAX - 1, i32::MAX, i32::MIN], false, false),
    ("negatives", &[-5, -3], false, false),
    // `-000000005` sorts before `0000000001` as text; kazoo's `-?\d{10}` doesn't match it.
    ("negative-then-positive", &[-5, 1], true, false),
    ("min-alone", &[i32::MIN], true, true),
    // `-1000000000` sorts before `-999999999` as text; kazoo doesn't see the latter.
    ("eleven-chars", &[-1_000_000_000, -999_999_999], true, false),
];

/// The one place that builds the recipe, so that a change of constructor is a one-line change.
fn mutex(session: &Session, path: &str, format: NodeFormat) -> InterProcessMutex {
    InterProcessMutex::with_options(session, path, LockOptions::new().format(format)).expect("a valid path")
}

fn name(format: NodeFormat, i: usize, seq: i32) -> String {
    match format {
        NodeFormat::Curator => format!("_c_hand{i}-lock-{seq:010}"),
        _ => format!("hand{i}__lock__{seq:010}"),
    }
}

/// The peer's order of the path's lock nodes (`order` mode of the Curator and kazoo peers).
async fn peer_order(format: NodeFormat, connect: &str, path: &str) -> Vec<String> {
    let mut cmd = match format {
        NodeFormat::Curator => curator(&["order", connect, path, "20000"]),
        _ => kazoo(&["order", connect, path, "20000"]),
    };
    let output: Output = within("the peer's order", tokio::task::spawn_blocking(move || cmd.output()))
        .await
        .expect("join")
        .expect("run the peer");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && stdout.contains("END"), "peer failed: {stdout}");
    stdout.lines().filter_map(|l| l.strip_prefix("NODE ")).map(str::to_string).collect()
}

async fn check(format: NodeFormat) {
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    let ours_session = session(&zk.connect_string()).await;
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    for &(case, seqs, curator_agrees, kazoo_agrees) in CASES {
        let path = format!("/wrap/{format}/{case}");
        admin.mkdir(&path, &persistent).await.expect("mkdir");
        let created: Vec<String> = seqs.iter().enumerate().map(|(i, &s)| name(format, i, s)).collect();
        for node in &created {
            admin.create(&format!("{path}/{node}"), node.as_bytes(), &persistent).await.expect("create");
        }
        let theirs = peer_order(format, &zk.connect_string(), &path).await;
        let agrees = if format == NodeFormat::Curator { curator_agrees } else { kazoo_agrees };
        assert_eq!(theirs == created, agrees, "{format} {case}: their order {theirs:?}");
        let lock = mutex(&ours_session, &path, format);
        let ours = lock.participants().await;
        if theirs == created {
            // Their order is creation order: ours is the same.
            let ours: Vec<String> =
                ours.unwrap_or_else(|e| panic!("{case}: {e}")).into_iter().map(|p| p.node).collect();
            assert_eq!(ours, theirs, "{format} {case}");
        } else {
            // Their order is not creation order (or they don't see a node): we refuse, and
            // an acquire leaves nothing behind.
            assert!(
                matches!(ours, Err(Error::SequenceWrapped { .. })),
                "{format} {case}: {theirs:?} {ours:?}"
            );
            let acquired = within("a refused acquire", lock.acquire()).await;
            match acquired {
                Err(Error::SequenceWrapped { path: p, .. }) => assert_eq!(p, path),
                other => panic!("{format} {case}: expected SequenceWrapped, got {other:?}"),
            }
            let mut left = children(&admin, &path).await;
            left.sort();
            let mut want = created.clone();
            want.sort();
            assert_eq!(left, want, "{format} {case}: a node of ours was left behind");
        }
    }
}

/// Backs the claim of docs/interop.md: on a path shared with Curator, we order exactly as Curator does, and
/// refuse where a wrapped counter makes that order differ from creation order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_format_agrees_with_curator_or_refuses() {
    check(NodeFormat::Curator).await;
}

/// Backs the claim of docs/interop.md for kazoo, which does not even see `-000000005`-style nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_format_agrees_with_kazoo_or_refuses() {
    check(NodeFormat::Kazoo).await;
}
