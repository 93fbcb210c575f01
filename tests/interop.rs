//! zk-recipes beside real Apache Curator 5.4 and kazoo 2.8 processes on the same paths.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::peers;
use common::*;
use zk_recipes::{
    Error, InterProcessMutex, InterProcessReadWriteLock, LatchOptions, LeaderLatch, LockOptions, NodeFormat,
};

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

fn lock_args(zk: &zk_testcluster::ZkCluster, path: &str, rounds: usize, dir: &Path, id: &str) -> Vec<String> {
    vec![
        "lock".into(),
        zk.connect_string(),
        path.into(),
        rounds.to_string(),
        "/counter".into(),
        dir.join("events").display().to_string(),
        dir.join("inside").display().to_string(),
        id.into(),
        "10000".into(),
    ]
}

fn rust_args(
    zk: &zk_testcluster::ZkCluster,
    path: &str,
    rounds: usize,
    dir: &Path,
    format: &str,
    id: &str,
) -> Vec<String> {
    vec![
        zk.connect_string(),
        path.into(),
        "/counter".into(),
        rounds.to_string(),
        dir.join("inside").display().to_string(),
        dir.join("events").display().to_string(),
        format.into(),
        id.into(),
    ]
}

fn assert_grants_in_sequence_order(events: &Path, languages: &[&str]) {
    let enters: Vec<(String, i64)> = lines(events)
        .iter()
        .filter_map(|l| {
            l.strip_prefix("enter ")
                .and_then(|r| r.split_once(' '))
                .map(|(id, seq)| (id.to_string(), seq.parse().unwrap()))
        })
        .collect();
    assert!(enters.windows(2).all(|w| w[0].1 < w[1].1), "grants out of sequence order: {enters:?}");
    for lang in languages {
        assert!(enters.iter().any(|(id, _)| id.starts_with(lang)), "{lang} never held the lock: {enters:?}");
    }
    // Every enter is followed by its own exit before the next enter: no overlap in the log.
    let log = lines(events);
    for pair in log.chunks(2) {
        assert_eq!(pair[0].replacen("enter", "exit", 1), pair[1], "interleaved holders: {log:?}");
    }
}

fn as_refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Two `lang` peer processes and two of ours (in `format`), interleaved, loop on one lock:
/// no overlap (a worker exits 3 if it finds another inside), an exact counter, and grants in
/// sequence order across languages.
async fn shared_fifo_lock(lang: &str, format: &str, peer: fn(&[&str]) -> Command) {
    const ROUNDS: usize = 15;
    let zk = standalone().await;
    let admin = client(&zk.connect_string()).await;
    create_persistent(&admin, "/counter", b"0").await;
    let dir = tempfile::tempdir().unwrap();
    let path = format!("/interop/{lang}");
    let mut procs = Vec::new();
    for i in 1..=2 {
        let theirs = lock_args(&zk, &path, ROUNDS, dir.path(), &format!("{lang}-{i}"));
        procs.push(Peer::spawn(peer(&as_refs(&theirs))));
        let ours = rust_args(&zk, &path, ROUNDS, dir.path(), format, &format!("rust-{i}"));
        procs.push(Peer::spawn(peers::rust_worker(&as_refs(&ours))));
    }
    for p in procs {
        p.wait_success().await;
    }
    assert_eq!(read_counter(&admin, "/counter").await, 4 * ROUNDS as u64, "lost updates");
    assert_grants_in_sequence_order(&dir.path().join("events"), &[lang, "rust"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_and_curator_share_one_fifo_lock() {
    shared_fifo_lock("curator", "curator", peers::curator).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_in_kazoo_format_and_kazoo_share_one_fifo_lock() {
    shared_fifo_lock("kazoo", "kazoo", peers::kazoo).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_latch_beside_curators_leader_latch() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let latch_args = |id: &'static str| {
        vec!["latch".to_string(), connect.clone(), "/interop/latch".into(), id.into(), "2000".into()]
    };
    // Curator leads first; ours waits.
    let mut java = Peer::spawn(peers::curator(&as_refs(&latch_args("java-1"))));
    java.expect("LEADER").await;
    let ours = LeaderLatch::with_options(
        &session_with_timeout(&connect, Duration::from_secs(5)).await,
        "/interop/latch",
        zk_recipes::LatchOptions::new().participant_id("rust"),
    )
    .unwrap();
    ours.start().unwrap();
    eventually("rust joined", || async { ours.participants().await.unwrap().len() == 2 }).await;
    assert_eq!(ours.leader().await.unwrap().unwrap().id, "java-1");
    assert!(!ours.has_leadership(), "two leaders: Curator and ours");
    // Killing the Curator leader makes ours lead (once its session expires).
    java.kill9();
    within("ours leads", ours.await_leadership()).await.unwrap();
    // The other way round: a Curator latch waits behind ours, and leads when ours closes.
    let mut java2 = Peer::spawn(peers::curator(&as_refs(&latch_args("java-2"))));
    java2.expect("STARTED").await;
    eventually("java-2 joined", || async { ours.participants().await.unwrap().len() == 2 }).await;
    assert!(ours.has_leadership());
    assert!(java2.lines.try_recv().map(|l| l != "LEADER").unwrap_or(true), "two leaders: ours and Curator");
    ours.close().await;
    java2.expect("LEADER").await;
    java2.say("quit");
    java2.wait_success().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handover_on_expiry_and_on_kill_across_languages() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let proxy = zk.proxy().unwrap();
    // A Rust holder's session expires; a waiting Curator process acquires.
    let rust_session = session_with_timeout(&proxy.connect_string(), Duration::from_secs(1)).await;
    let rust = InterProcessMutex::new(&rust_session, "/interop/handover").unwrap();
    let held = rust.acquire().await.unwrap();
    let rust_seq: i64 = held.node_path().rsplit('-').next().unwrap().parse().unwrap();
    let mut java = Peer::spawn(peers::curator(&["hold", &connect, "/interop/handover", "java", "2000"]));
    let admin = client(&connect).await;
    eventually("java queued", || async { children(&admin, "/interop/handover").await.len() == 2 }).await;
    proxy.blackhole();
    let line = java.expect("HOLDING").await;
    let java_seq: i64 = line.trim_start_matches("HOLDING ").parse().unwrap();
    assert!(java_seq > rust_seq);
    within("rust holder sees Lost", held.lost()).await;
    proxy.heal();
    // The Rust side starts a new session by itself; the expired hold stays lost.
    wait_new_generation(&rust_session, 1).await;
    assert!(matches!(held.release().await, Err(Error::LockLost { .. })));

    // A killed Curator holder hands over to a Rust waiter.
    let waiter = InterProcessMutex::new(&session(&connect).await, "/interop/handover").unwrap();
    let w = waiter.clone();
    let waiting = tokio::spawn(async move { w.acquire().await });
    eventually("rust queued", || async { children(&admin, "/interop/handover").await.len() == 2 }).await;
    java.kill9();
    let got = within("rust acquires after the kill", waiting).await.unwrap().unwrap();
    got.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_mixes_are_refused_and_leave_nothing() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let admin = client(&connect).await;

    // Curator holds; a kazoo-format acquire on the path is refused.
    let mut java = Peer::spawn(peers::curator(&["hold", &connect, "/interop/mix1", "java", "10000"]));
    java.expect("HOLDING").await;
    let c = session(&connect).await;
    let kazoo_side =
        InterProcessMutex::with_options(&c, "/interop/mix1", LockOptions::new().format(NodeFormat::Kazoo))
            .unwrap();
    match kazoo_side.acquire_timeout(Duration::from_secs(10)).await {
        Err(Error::FormatConflict { path, node, ours: NodeFormat::Kazoo, theirs: NodeFormat::Curator }) => {
            assert_eq!(path, "/interop/mix1");
            assert!(node.starts_with("_c_"), "{node}");
        }
        other => panic!("expected FormatConflict, got {other:?}"),
    }
    assert!(
        nodes_owned_by(&admin, "/interop/mix1", raw(&c).session_id().0).await.is_empty(),
        "a refused acquire left a node"
    );
    java.say("release");
    java.wait_success().await;

    // kazoo holds; a Curator-format acquire (and a Curator-format latch) is refused.
    let mut py = Peer::spawn(peers::kazoo(&["hold", &connect, "/interop/mix2", "py", "10000"]));
    py.expect("HOLDING").await;
    let curator_side = InterProcessMutex::new(&c, "/interop/mix2").unwrap();
    assert!(matches!(
        curator_side.try_acquire().await,
        Err(Error::FormatConflict { theirs: NodeFormat::Kazoo, .. })
    ));
    assert!(matches!(curator_side.acquire().await, Err(Error::FormatConflict { .. })));
    let latch =
        LeaderLatch::with_options(&c, "/interop/mix2", LatchOptions::new().participant_id("rust")).unwrap();
    latch.start().unwrap();
    assert!(matches!(
        within("latch refused", latch.await_leadership()).await,
        Err(Error::FormatConflict { .. })
    ));
    assert!(
        nodes_owned_by(&admin, "/interop/mix2", raw(&c).session_id().0).await.is_empty(),
        "a refused acquire left a node"
    );
    py.say("release");
    py.wait_success().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_kazoo_format_rwlock_beside_kazoos_read_and_write_locks() {
    let zk = standalone().await;
    let connect = zk.connect_string();
    let admin = client(&connect).await;
    let ours = InterProcessReadWriteLock::with_options(
        &session(&connect).await,
        "/interop/rw",
        LockOptions::new().format(NodeFormat::Kazoo),
    )
    .unwrap();
    // kazoo's writer excludes our reader and writer.
    let mut writer =
        Peer::spawn(peers::kazoo(&["hold", &connect, "/interop/rw", "py-writer", "10000", "write"]));
    writer.expect("HOLDING").await;
    assert!(ours.try_read().await.unwrap().is_none(), "our reader got in beside kazoo's writer");
    assert!(ours.try_write().await.unwrap().is_none(), "our writer got in beside kazoo's writer");
    writer.say("release");
    writer.wait_success().await;
    // Our reader and kazoo's reader share; kazoo's writer waits for both.
    let read = ours.read().await.unwrap();
    assert!(read.node_path().contains("__rlock__"), "{}", read.node_path());
    let mut reader =
        Peer::spawn(peers::kazoo(&["hold", &connect, "/interop/rw", "py-reader", "10000", "read"]));
    reader.expect("HOLDING").await;
    let mut writer =
        Peer::spawn(peers::kazoo(&["hold", &connect, "/interop/rw", "py-writer", "10000", "write"]));
    eventually("kazoo writer queued", || async { children(&admin, "/interop/rw").await.len() == 3 }).await;
    reader.say("release");
    reader.wait_success().await;
    assert!(writer.lines.try_recv().is_err(), "kazoo's writer got in beside our reader");
    read.release().await.unwrap();
    writer.expect("HOLDING").await;
    writer.say("release");
    writer.wait_success().await;
}
