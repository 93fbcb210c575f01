//! `zklock deadlocks ROOT` against real ZooKeeper and real processes: a
//! two- and a three-process deadlock (through a read/write lock and a semaphore) are found
//! (exit 1, with paths, nodes, sessions and participant ids); a long queue of `zklock hold`
//! processes is none (exit 0) and is left as it was; no ZooKeeper is exit 69.
//!
//! Each deadlocked process is this test binary run again as a worker (the ignored test
//! `worker`, given its part in `DEADLOCK_WORKER`): one session that takes one lock, says
//! HOLDING, and on "go" waits for another, as a service taking two locks would; when its stdin
//! closes, it closes its session.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

use common::*;
use zk_testcluster::ZkCluster;

/// Kills a worker or zklock process when dropped, so that a failed assertion leaves none.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A worker process: holds `hold`, then on "go" waits for `wait` (each `KIND:PATH`, KIND one
/// of mutex, read, write, sem1), with participant id `id`.
fn spawn_worker(connect: &str, hold: &str, wait: &str, id: &str) -> Killed {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["worker", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env("DEADLOCK_WORKER", format!("{connect}|{hold}|{wait}|{id}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    // The harness prints "test worker ... " with no newline before it.
    while !line.trim_end().ends_with("HOLDING") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "worker {id} ended before holding");
    }
    // Keep reading: the harness still reports on stdout when the worker ends.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    Killed(child)
}

fn go(workers: &mut [Killed]) {
    for w in workers {
        writeln!(w.0.stdin.as_mut().unwrap(), "go").unwrap();
    }
}

/// `zklock deadlocks --json ROOT`: the exit code and the report.
fn deadlocks(connect: &str, root: &str) -> (Option<i32>, serde_json::Value) {
    let out = zklock(connect).args(["deadlocks", "--json", root]).output().unwrap();
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), report)
}

fn strings(value: &serde_json::Value) -> Vec<String> {
    let mut all: Vec<String> =
        value.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_process_deadlock_is_found() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let mut workers = [
        spawn_worker(&c, "mutex:/dl/l1", "mutex:/dl/l2", "proc-A"),
        spawn_worker(&c, "mutex:/dl/l2", "mutex:/dl/l1", "proc-B"),
    ];
    // Both hold, nobody waits: no deadlock, exit 0.
    let (code, report) = deadlocks(&c, "/dl");
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["deadlocked"], false);

    go(&mut workers);
    eventually("both wait", || queue_len(&c, "/dl/l1") == 2 && queue_len(&c, "/dl/l2") == 2).await;
    let (code, report) = deadlocks(&c, "/dl");
    assert_eq!(code, Some(1), "{report}");
    let cycles = report["cycles"].as_array().unwrap();
    assert_eq!(cycles.len(), 1, "{report}");
    assert_eq!(strings(&cycles[0]["paths"]), ["/dl/l1", "/dl/l2"]);
    assert_eq!(strings(&cycles[0]["sessions"]), strings(&report["stuck_sessions"]));
    let waiters: Vec<&str> = cycles[0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["edges"][0]["waiter_id"].as_str().unwrap())
        .collect();
    assert!(waiters.contains(&"proc-A") && waiters.contains(&"proc-B"), "{report}");
    // The sessions are the holders' as `zklock status` shows them.
    let holder = &status(&c, "/dl/l1")["queue"][0];
    assert_eq!(holder["id"], "proc-A");
    assert!(strings(&cycles[0]["sessions"]).contains(&holder["session"].as_str().unwrap().to_string()));
    assert_eq!(report["nodes_read"], 7);

    // The text says the same, in words.
    let out = zklock(&c).args(["deadlocks", "/dl"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cycle 1 of 1") && text.contains("(proc-A) waits at /dl/l2"), "{text}");
    assert!(text.contains("(proc-B) waits at /dl/l1") && text.contains("holding"), "{text}");

    // B gives up (closes its session): no deadlock any more.
    drop(workers[1].0.stdin.take());
    eventually("B's nodes gone", || queue_len(&c, "/dl/l1") == 1 && queue_len(&c, "/dl/l2") == 1).await;
    assert_eq!(deadlocks(&c, "/dl").0, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_process_deadlock_through_a_read_write_lock_and_a_semaphore_is_found() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    // A writes rw and waits for sem's one lease, which B has; B waits for m, which C holds; C
    // waits to read rw.
    let mut workers = [
        spawn_worker(&c, "write:/dl3/rw", "sem1:/dl3/sem", "A"),
        spawn_worker(&c, "sem1:/dl3/sem", "mutex:/dl3/m", "B"),
        spawn_worker(&c, "mutex:/dl3/m", "read:/dl3/rw", "C"),
    ];
    go(&mut workers);
    eventually("all three wait", || ["/dl3/rw", "/dl3/sem", "/dl3/m"].iter().all(|p| queue_len(&c, p) == 2))
        .await;
    let (code, report) = deadlocks(&c, "/dl3");
    assert_eq!(code, Some(1), "{report}");
    let cycle = &report["cycles"][0];
    assert_eq!(strings(&cycle["paths"]), ["/dl3/m", "/dl3/rw", "/dl3/sem"]);
    let steps = cycle["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3);
    for step in steps {
        let edge = &step["edges"][0];
        let want = match edge["waiter_id"].as_str().unwrap() {
            "A" => ("/dl3/sem", "B"),
            "B" => ("/dl3/m", "C"),
            "C" => ("/dl3/rw", "A"),
            other => panic!("{other}"),
        };
        assert_eq!((edge["path"].as_str().unwrap(), edge["blocker_id"].as_str().unwrap()), want, "{report}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_queue_is_no_deadlock_and_is_left_as_it_was() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let mut holds = Vec::new();
    for n in 0..8 {
        let child = zklock(&c)
            .args(["hold", "--id", &format!("h{n}"), "/nodl/q"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        holds.push(Killed(child));
        eventually("queued", || queue_len(&c, "/nodl/q") == n + 1).await;
    }
    // And a chain of two workers: A holds a and waits for b, which B holds.
    let mut chain = [
        spawn_worker(&c, "mutex:/nodl/a", "mutex:/nodl/b", "A"),
        spawn_worker(&c, "mutex:/nodl/b", "mutex:/nodl/c", "B"),
    ];
    go(&mut chain[..1]);
    eventually("A waits", || queue_len(&c, "/nodl/b") == 2).await;
    // The queue as status shows it, less the ages (which grow).
    let queue = || {
        let mut rows = status(&c, "/nodl/q")["queue"].clone();
        rows.as_array_mut()
            .unwrap()
            .iter_mut()
            .for_each(|r| drop(r.as_object_mut().unwrap().remove("age_ms")));
        rows
    };
    let before = queue();

    let (code, report) = deadlocks(&c, "/nodl");
    assert_eq!(code, Some(0), "{report}");
    assert_eq!((report["deadlocked"].as_bool(), report["queues"].as_u64()), (Some(false), Some(3)));
    assert_eq!(report["nodes_read"], 1 + 3 + 8 + 1 + 2);
    let out = zklock(&c).args(["deadlocks", "/nodl"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("/nodl: no deadlock (3 queues, 15 nodes read)"));
    // Nothing deleted or moved.
    assert_eq!(queue(), before);

    // Bounded: --max-nodes says where it stopped.
    let out = zklock(&c).args(["deadlocks", "--max-nodes", "3", "/nodl"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stopped after"), "{out:?}");
}

#[test]
fn no_zookeeper_is_exit_69() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = zklock(&format!("127.0.0.1:{port}"))
        .args(["--connect-timeout", "1s", "deadlocks", "/locks"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The worker process (see the file's note); it does nothing in a normal run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the tests above, as a process of its own"]
async fn worker() {
    use zk_recipes::{
        InterProcessMutex, InterProcessReadWriteLock, InterProcessSemaphore, Lock, LockOptions,
    };
    let Ok(spec) = std::env::var("DEADLOCK_WORKER") else { return };
    let parts: Vec<&str> = spec.split('|').collect();
    let session = zk_recipes::Session::connect(parts[0], std::time::Duration::from_secs(20)).await.unwrap();
    let options = LockOptions::new().participant_id(parts[3]);
    let take = |part: &str| {
        let (kind, path) = part.split_once(':').unwrap();
        let (session, options) = (session.clone(), options.clone());
        let (kind, path) = (kind.to_string(), path.to_string());
        async move {
            match kind.as_str() {
                "mutex" => InterProcessMutex::with_options(&session, &path, options).unwrap().acquire().await,
                "read" => {
                    InterProcessReadWriteLock::with_options(&session, &path, options)
                        .unwrap()
                        .read_lock()
                        .acquire()
                        .await
                }
                "write" => {
                    InterProcessReadWriteLock::with_options(&session, &path, options)
                        .unwrap()
                        .write_lock()
                        .acquire()
                        .await
                }
                "sem1" => {
                    InterProcessSemaphore::with_options(&session, &path, 1, options).unwrap().acquire().await
                }
                other => panic!("unknown kind {other}"),
            }
            .unwrap()
        }
    };
    let _held = take(parts[1]).await;
    println!("HOLDING");
    let mut line = String::new();
    tokio::task::block_in_place(|| std::io::stdin().read_line(&mut line)).unwrap();
    let second = tokio::spawn(take(parts[2]));
    // Stdin closed: close the session (its nodes go at once), as a service that gives up.
    line.clear();
    tokio::task::block_in_place(|| std::io::stdin().read_line(&mut line)).unwrap();
    second.abort();
    session.close().await;
}
