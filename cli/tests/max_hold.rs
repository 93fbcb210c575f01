//! `zklock run --max-hold`: when the limit passes, the command's group is
//! stopped as on a loss (SIGTERM, then SIGKILL by the kill deadline), then the lock is released
//! and zklock exits 124.

mod common;

use std::process::Stdio;

use common::*;
use zk_testcluster::ZkCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_stops_the_command_releases_and_exits_124() {
    let zk = ZkCluster::standalone().await.unwrap();
    let connect = zk.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let run = zklock(&connect)
        .args(["run", "--max-hold", "1s", "/locks/limit", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = pid_in(&pidfile).await;
    let _reaper = Reaper(pid);
    // A second run waits behind the first, and gets the lock once the limit released it.
    let waiter =
        zklock(&connect).args(["run", "/locks/limit", "--", "true"]).stderr(Stdio::piped()).spawn().unwrap();
    eventually("the waiter queued", || queue_len(&connect, "/locks/limit") == 2).await;

    let out = finish(run).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(124), "{stderr}");
    assert!(stderr.contains("--max-hold"), "{stderr}");
    assert!(!running(pid), "the command outlived its --max-hold");
    let waited = finish(waiter).await;
    assert!(waited.status.success(), "{}", String::from_utf8_lossy(&waited.stderr));
    assert_eq!(queue_len(&connect, "/locks/limit"), 0, "the lock is not free");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let zk = ZkCluster::standalone().await.unwrap();
    let connect = zk.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let (pidfile, kidfile) = (dir.path().join("pid"), dir.path().join("kid"));
    // SIGTERM ignored by the shell and (inherited) by its sleep: only SIGKILL stops them.
    let script = format!(
        "trap '' TERM; sleep 60 & echo $! > {}; echo $$ > {}; wait",
        kidfile.display(),
        pidfile.display()
    );
    let run = zklock(&connect)
        .args(["run", "--max-hold", "500ms", "--grace", "1s", "/locks/stubborn", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = pid_in(&pidfile).await;
    let kid = pid_in(&kidfile).await;
    let (_reaper, _kid_reaper) = (Reaper(pid), Reaper(kid));
    let out = finish(run).await;
    assert_eq!(out.status.code(), Some(124), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!running(pid), "the command outlived its --max-hold");
    assert!(!running(kid), "the command's child outlived its --max-hold");
    assert_eq!(queue_len(&connect, "/locks/stubborn"), 0, "the lock is not free");
}

#[test]
fn max_hold_and_its_exit_code_are_in_the_help_and_a_bad_duration_is_usage() {
    let help = zklock("127.0.0.1:1").args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--max-hold <DURATION>") && help.contains("exit 124"), "{help}");
    let codes = zklock("127.0.0.1:1").arg("--help").output().unwrap();
    let codes = String::from_utf8_lossy(&codes.stdout);
    assert!(codes.contains("124  run --max-hold passed"), "{codes}");
    let bad =
        zklock("127.0.0.1:1").args(["run", "--max-hold", "soon", "/locks/x", "--", "true"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(64), "{}", String::from_utf8_lossy(&bad.stderr));
}
