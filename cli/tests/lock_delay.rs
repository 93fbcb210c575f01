//! `zklock run --lock-delay`: after a holder that did not release cleanly (here: its zklock was
//! killed, and the server expired its session), the next run waits the delay, and says so with
//! -v; after a clean release (the command exited) it takes the lock at once. (A `--max-hold` end
//! is a clean release: zklock stops the command before it releases.) The waiting line is built
//! on the library's queue events.

mod common;

use std::process::Stdio;

use common::*;
use zk_testcluster::ZkCluster;

/// A holder on `/locks/delay` running `command` with `args` (all with `--lock-delay 2s`), and
/// the next run queued behind it (seen "1 ahead"), its stderr in `err`.
async fn holder_and_next(
    connect: &str,
    args: &[&str],
    command: &[&str],
    err: &std::path::Path,
) -> (std::process::Child, std::process::Child) {
    let holder = zklock(connect)
        .args(["run", "--lock-delay", "2s"])
        .args(args)
        .args(["/locks/delay", "--"])
        .args(command)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually("the holder", || queue_len(connect, "/locks/delay") == 1).await;
    let next = zklock(connect)
        .args(["-v", "run", "--lock-delay", "2s", "/locks/delay", "--", "true"])
        .stderr(std::fs::File::create(err).unwrap())
        .spawn()
        .unwrap();
    eventually("queued behind the holder", || lines(err).iter().any(|l| l.contains("1 ahead"))).await;
    (holder, next)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_run_waits_the_delay_after_an_unclean_end_only() {
    let zk = ZkCluster::standalone().await.unwrap();
    let connect = zk.connect_string();
    let dir = tempfile::tempdir().unwrap();

    // Unclean: the holder's zklock is killed (-9); the server expires its session.
    let err = dir.path().join("unclean");
    let (holder, next) =
        holder_and_next(&connect, &["--session-timeout", "2s"], &["sleep", "60"], &err).await;
    let command = children_of(holder.id());
    kill("KILL", holder.id());
    for pid in command {
        kill("KILL", pid);
    }
    finish(holder).await;
    assert!(finish(next).await.status.success(), "{:?}", lines(&err));
    assert!(lines(&err).iter().any(|l| l.contains("lock delay of")), "{:?}", lines(&err));

    // Clean: the holder's command exits once told to; its release is marked.
    let go = dir.path().join("go");
    let script = format!("while [ ! -e {} ]; do sleep 0.05; done", go.display());
    let err = dir.path().join("clean");
    let (holder, next) = holder_and_next(&connect, &[], &["sh", "-c", &script], &err).await;
    std::fs::write(&go, b"").unwrap();
    assert!(finish(holder).await.status.success());
    assert!(finish(next).await.status.success(), "{:?}", lines(&err));
    assert!(!lines(&err).iter().any(|l| l.contains("lock delay")), "{:?}", lines(&err));

    // A `--max-hold` end: the command is stopped (124), then the lock released cleanly. The
    // next run must have queued behind it (its "1 ahead") for this to say anything.
    let err = dir.path().join("max-hold");
    let (holder, next) = holder_and_next(&connect, &["--max-hold", "5s"], &["sleep", "60"], &err).await;
    assert_eq!(finish(holder).await.status.code(), Some(124));
    assert!(finish(next).await.status.success(), "{:?}", lines(&err));
    assert!(!lines(&err).iter().any(|l| l.contains("lock delay")), "{:?}", lines(&err));
}
