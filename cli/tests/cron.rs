//! Cron on several "hosts": `--min-hold` keeps a quick job's lock
//! long enough that a skewed cron elsewhere finds it taken; `--once-per` runs the job once per
//! period across hosts, aged by ZooKeeper's clock.

mod common;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use zk_testcluster::ZkCluster;

/// One "host"'s cron firing: `zklock run --no-wait EXTRA /locks/cron -- append to log`.
fn fire(connect: &str, extra: &[&str], log: &Path) -> std::process::Child {
    zklock(connect)
        .args(["run", "--no-wait"])
        .args(extra)
        .args(["/locks/cron", "--", "sh", "-c", &format!("echo ran >> {}", log.display())])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_min_hold_a_skewed_cron_runs_the_job_twice() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let started = Instant::now();
    // Host A fires, runs the one-second-or-less job and is done; host B's cron fires 2 s after
    // A's (clock skew: the sleep is the fault).
    let a = finish(fire(&c, &[], &log)).await;
    assert_eq!(code(&a), Some(0), "{}", String::from_utf8_lossy(&a.stderr));
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(started.elapsed())).await;
    let b = finish(fire(&c, &[], &log)).await;
    assert_eq!(code(&b), Some(0), "{}", String::from_utf8_lossy(&b.stderr));
    assert_eq!(lines(&log).len(), 2, "the plain form runs the job on both hosts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_min_hold_the_second_host_finds_it_taken_and_the_job_runs_once() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let started = Instant::now();
    let a = fire(&c, &["--min-hold", "5s"], &log);
    eventually("host A's job ran", || lines(&log).len() == 1).await;
    // The job is done; the lock is not free: host B, 2 s later, is busy (75).
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(started.elapsed())).await;
    let b = finish(fire(&c, &["--min-hold", "5s"], &log)).await;
    let err = String::from_utf8_lossy(&b.stderr);
    assert_eq!(code(&b), Some(75), "{err}");
    assert!(err.contains("is busy"), "{err}");
    let a = finish(a).await;
    // A held it at least 5 s (from before its acquisition, so this bound is safe), then exited
    // with the job's status and released.
    assert!(started.elapsed() >= Duration::from_secs(5), "released after {:?}", started.elapsed());
    assert_eq!(code(&a), Some(0), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(lines(&log).len(), 1, "the job ran twice");
    assert_eq!(queue_len(&c, "/locks/cron"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_hold_ends_at_once_on_revoke_and_may_not_exceed_max_hold() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let out = zklock(&c)
        .args(["run", "--min-hold", "10s", "--max-hold", "5s", "/locks/cron", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(&out), Some(64), "{err}");
    assert!(err.contains("--min-hold") && err.contains("--max-hold"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let a = fire(&c, &["--min-hold", "1h"], &log);
    eventually("host A's job ran", || lines(&log).len() == 1).await;
    eventually("A holds", || queue_len(&c, "/locks/cron") == 1).await;
    let out = zklock(&c).args(["revoke", "/locks/cron"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let a = finish(a).await;
    assert_eq!(code(&a), Some(0), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(queue_len(&c, "/locks/cron"), 0);

    // `hold --min-hold`: closing stdin does not release before the minimum; a second signal does.
    let mut hold = zklock(&c)
        .args(["hold", "--min-hold", "1h", "/locks/cron"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("hold holds", || queue_len(&c, "/locks/cron") == 1).await;
    drop(hold.stdin.take());
    let busy = zklock(&c).args(["run", "-n", "/locks/cron", "--", "true"]).output().unwrap();
    assert_eq!(code(&busy), Some(75), "released before --min-hold");
    kill("TERM", hold.id());
    let out = finish(hold).await;
    assert_eq!(code(&out), Some(0));
    assert_eq!(queue_len(&c, "/locks/cron"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_per_runs_the_job_once_across_three_hosts() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    // A failed run is not recorded: the next host runs the job.
    let failed = zklock(&c)
        .args(["run", "--once-per", "1h", "/locks/cron", "--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(code(&failed), Some(3));
    let mut codes = Vec::new();
    for _host in 0..3 {
        let out = finish(fire(&c, &["--once-per", "1h"], &log)).await;
        codes.push((code(&out), String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    assert_eq!(lines(&log).len(), 1, "{codes:?}");
    assert_eq!(codes[0].0, Some(0), "{codes:?}");
    for (code, err) in &codes[1..] {
        assert_eq!(*code, Some(79), "{err}");
        assert!(err.contains("within --once-per 1h"), "{err}");
    }
    // The marker does not get in the way: status sees a free lock, a plain run runs.
    assert_eq!(status(&c, "/locks/cron")["queue"].as_array().unwrap().len(), 0);
    let plain = zklock(&c).args(["run", "/locks/cron", "--", "true"]).output().unwrap();
    assert_eq!(code(&plain), Some(0), "{}", String::from_utf8_lossy(&plain.stderr));

    // status and ls show the marker and its age; once-per --clear deletes
    // it, and the next run runs.
    let marker = &status(&c, "/locks/cron")["once_per"];
    assert_eq!(marker["marker"], "/locks/cron/zklock.once-per");
    assert!(marker["age_ms"].is_i64(), "{marker}");
    let text = zklock(&c).args(["status", "/locks/cron"]).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("last --once-per success"), "{text:?}");
    let ls = zklock(&c).args(["ls", "--json", "/locks"]).output().unwrap();
    let ls: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    let row = ls.as_array().unwrap().iter().find(|l| l["path"] == "/locks/cron").expect("listed");
    assert!(row["once_per_age_ms"].is_i64() && row["holders"].as_array().unwrap().is_empty(), "{ls}");
    let shown = zklock(&c).args(["once-per", "/locks/cron"]).output().unwrap();
    assert_eq!(code(&shown), Some(0));
    assert!(String::from_utf8_lossy(&shown.stdout).contains("last --once-per success"), "{shown:?}");
    let cleared = zklock(&c).args(["once-per", "--clear", "/locks/cron"]).output().unwrap();
    assert_eq!(code(&cleared), Some(0), "{}", String::from_utf8_lossy(&cleared.stderr));
    assert!(status(&c, "/locks/cron")["once_per"].is_null());
    let again = zklock(&c).args(["once-per", "--clear", "/locks/cron"]).output().unwrap();
    assert_eq!(code(&again), Some(1), "nothing to clear");
    let out = finish(fire(&c, &["--once-per", "1h"], &log)).await;
    assert_eq!(code(&out), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(lines(&log).len(), 2, "ran again after --clear");
}

/// `--once-per` needs one holder at a time: not with `--shared` or `--limit` (64). With `-n`, a
/// host that finds the run in progress exits 75 (busy), and the job runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_per_refuses_shared_holders_and_a_no_wait_host_finds_the_run_busy() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    for extra in [&["--shared"][..], &["--limit", "2"][..]] {
        let out = zklock(&c)
            .args(["run", "--once-per", "1h"])
            .args(extra)
            .args(["/locks/once", "--", "true"])
            .output()
            .unwrap();
        assert_eq!(code(&out), Some(64), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let dir = tempfile::tempdir().unwrap();
    let (log, started, done) = (dir.path().join("log"), dir.path().join("started"), dir.path().join("done"));
    // The job runs until the test has seen the second host busy.
    let job = format!(
        "echo ran >> {}; touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        log.display(),
        started.display(),
        done.display()
    );
    let first = zklock(&c)
        .args(["run", "--once-per", "1h", "/locks/once", "--", "sh", "-c", &job])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("the first host's job to start", || started.exists()).await;
    let busy = zklock(&c)
        .args(["run", "--once-per", "1h", "-n", "/locks/once", "--", "sh", "-c", &job])
        .output()
        .unwrap();
    assert_eq!(code(&busy), Some(75), "{}", String::from_utf8_lossy(&busy.stderr));
    std::fs::write(&done, "").unwrap();
    let out = finish(first).await;
    assert_eq!(code(&out), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(lines(&log).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_per_runs_again_after_the_period() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let once = |period: &str| {
        zklock(&c)
            .args(["run", "--once-per", period, "/locks/period", "--"])
            .args(["sh", "-c", &format!("echo ran >> {}", log.display())])
            .output()
            .unwrap()
    };
    assert_eq!(code(&once("1h")), Some(0));
    assert_eq!(code(&once("1h")), Some(79));
    // The period is each run's own: 1.6 s later (the sleep is the age under test), a run with a
    // period of 1 s (a bare number: seconds) finds the success older than that and runs.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let out = once("1");
    assert_eq!(code(&out), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // ...and records its own success.
    assert_eq!(code(&once("1h")), Some(79));
    assert_eq!(lines(&log).len(), 2);
}
