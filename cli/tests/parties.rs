//! `zklock deadlocks` across processes: the deadlocks operators make with
//! `zklock` itself, where each `zklock` is a session of its own. Nested runs
//! (`zklock run /a -- zklock run /b`, beside the same with a and b swapped), two scripts that
//! each `coproc zklock hold X` then `zklock run Y` in opposite orders, and a three-party cycle
//! through a read/write lock are found (exit 1, both sessions of each party and what ties
//! them); independent scripts that share only a shell, or a daemon, as ancestor are not one
//! party (exit 0).
//!
//! Every script and zklock starts in a process group of its own, killed whole at the end. Each
//! says READY on stdout once it holds its first lock, and waits for a line on stdin before it
//! goes for the second, so that every first lock is held before anyone waits.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use common::*;
use zk_testcluster::ZkCluster;

/// A process group (a script or a zklock and all it starts), killed whole when dropped.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.0.id())]).status();
        let _ = self.0.wait();
    }
}

impl Group {
    fn go(&mut self) {
        writeln!(self.0.stdin.as_mut().unwrap(), "go").unwrap();
    }
}

/// Starts `cmd` in a group of its own with `ZK_CONNECT` and `Z` (the zklock binary) set, and
/// waits for its READY.
fn start(connect: &str, mut cmd: Command) -> Group {
    cmd.env("ZK_CONNECT", connect).env("Z", ZKLOCK).env_remove("RUST_LOG");
    // `setsid` makes its own group (it would fork, out of reach, if it led one already).
    if cmd.get_program() != "setsid" {
        cmd.process_group(0);
    }
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while line.trim_end() != "READY" {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "{cmd:?} ended before READY");
    }
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    Group(child)
}

fn bash(script: &str) -> Command {
    let mut cmd = Command::new("bash");
    cmd.args(["-c", script]);
    cmd
}

/// `zklock run OUTER -- (READY; wait for go; zklock run INNER -- sleep)`: a nested run.
fn nested(outer: &[&str], inner: &str) -> Command {
    let mut cmd = Command::new(ZKLOCK);
    cmd.arg("run")
        .args(outer)
        .args(["-c", &format!("echo READY; read go; exec \"$Z\" run {inner} -- sleep 600")]);
    cmd
}

/// A script that holds `first` through a `zklock hold` coprocess, then runs under `second`.
fn two_step(first: &str, second: &str) -> Command {
    bash(&format!(
        "coproc L {{ exec \"$Z\" hold {first}; }}
         read -r token <&\"${{L[0]}}\"
         echo READY; read go
         \"$Z\" run {second} -- sleep 600
         kill \"$L_PID\"; wait"
    ))
}

fn deadlocks(connect: &str, root: &str) -> (Option<i32>, serde_json::Value, String) {
    let out = zklock(connect).args(["deadlocks", "--json", root]).output().unwrap();
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let text = zklock(connect).args(["deadlocks", root]).output().unwrap();
    (out.status.code(), report, String::from_utf8_lossy(&text.stdout).into_owned())
}

/// Each step's party: its sessions, and the evidence that ties them.
fn parties(report: &serde_json::Value) -> Vec<(usize, String)> {
    report["cycles"][0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["party"].as_array().unwrap().len(), s["evidence"].to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_runs_in_opposite_orders_are_a_deadlock_of_two_parties() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let mut ab = start(&c, nested(&["/n/a"], "/n/b"));
    let mut ba = start(&c, nested(&["/n/b"], "/n/a"));
    assert_eq!(deadlocks(&c, "/n").0, Some(0), "both hold, nobody waits");
    ab.go();
    ba.go();
    eventually("both inner runs wait", || queue_len(&c, "/n/a") == 2 && queue_len(&c, "/n/b") == 2).await;
    let (code, report, text) = deadlocks(&c, "/n");
    assert_eq!(code, Some(1), "{report}");
    let cycle = &report["cycles"][0];
    assert_eq!(cycle["sessions"].as_array().unwrap().len(), 4, "{report}");
    assert_eq!(report["stuck_sessions"].as_array().unwrap().len(), 4, "{report}");
    for (sessions, evidence) in parties(&report) {
        assert_eq!(sessions, 2, "{report}");
        assert!(evidence.contains("was taken inside the hold of /n/"), "{evidence}");
    }
    assert!(text.contains("are one party:") && text.contains("inside the hold of"), "{text}");
    // top shows it too.
    let frame = zklock(&c).args(["top", "--once", "/n"]).output().unwrap();
    let frame = String::from_utf8_lossy(&frame.stdout);
    assert!(frame.contains("DEADLOCK: sessions") && frame.contains("/n/a"), "{frame}");
    // One party gives up (its outer zklock is stopped): no deadlock any more.
    drop(ba);
    eventually("ba's nodes gone", || queue_len(&c, "/n/b") <= 1 && queue_len(&c, "/n/a") <= 1).await;
    assert_eq!(deadlocks(&c, "/n").0, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_scripts_holding_and_running_in_opposite_orders_are_a_deadlock() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let mut xy = start(&c, two_step("/s/x", "/s/y"));
    let mut yx = start(&c, two_step("/s/y", "/s/x"));
    xy.go();
    yx.go();
    eventually("both runs wait", || queue_len(&c, "/s/x") == 2 && queue_len(&c, "/s/y") == 2).await;
    let (code, report, text) = deadlocks(&c, "/s");
    assert_eq!(code, Some(1), "{report}");
    for (sessions, evidence) in parties(&report) {
        assert_eq!(sessions, 2, "{report}");
        assert!(evidence.contains("a hold for the same parent process"), "{evidence}");
    }
    assert!(text.contains("cycle 1 of 1") && text.contains("are one party:"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_parties_through_a_read_write_lock_are_a_deadlock() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    // A writes rw and waits for m1, which B's hold has; B's run waits for m2, which C holds;
    // C's inner run waits to read rw, behind A's write.
    let mut parties3 = [
        start(&c, nested(&["--exclusive", "/t/rw"], "/t/m1")),
        start(&c, two_step("/t/m1", "/t/m2")),
        start(&c, nested(&["/t/m2"], "--shared /t/rw")),
    ];
    for p in &mut parties3 {
        p.go();
    }
    eventually("all three wait", || ["/t/rw", "/t/m1", "/t/m2"].iter().all(|p| queue_len(&c, p) == 2)).await;
    let (code, report, _) = deadlocks(&c, "/t");
    assert_eq!(code, Some(1), "{report}");
    let cycle = &report["cycles"][0];
    assert_eq!(cycle["steps"].as_array().unwrap().len(), 3, "{report}");
    let mut paths: Vec<&str> =
        cycle["paths"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    paths.sort_unstable();
    assert_eq!(paths, ["/t/m1", "/t/m2", "/t/rw"]);
    assert!(parties(&report).iter().all(|(n, _)| *n == 2), "{report}");
}

/// T holds y and waits for x (nested runs). An independent script holds x through a hold
/// coprocess; another, started by the same shell (or the same daemon), waits for y. Were they
/// one party with the shell, T and it would wait for each other; they are not: exit 0.
async fn beside_a_shell(c: &str) {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("go");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let script = format!(
        "bash -c 'coproc L {{ exec \"$Z\" hold /i/x; }}; read -r t <&\"${{L[0]}}\"; echo READY; wait' &
         read go
         bash -c 'read go < {fifo}; \"$Z\" run /i/y -- sleep 600; true' &
         wait",
        fifo = fifo.display()
    );
    let mut shell = start(c, bash(&script));
    let mut t = start(c, nested(&["/i/y"], "/i/x"));
    t.go();
    eventually("T waits for x", || queue_len(c, "/i/x") == 2).await;
    shell.go();
    std::fs::write(&fifo, "go\n").unwrap();
    eventually("the second script waits for y", || queue_len(c, "/i/y") == 2).await;
    let (code, report, _) = deadlocks(c, "/i");
    assert_eq!(code, Some(0), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn independent_scripts_of_one_shell_or_daemon_are_no_deadlock() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    beside_a_shell(&c).await;
    beside_a_daemon(&c).await;
}

/// As [`beside_a_shell`], with the hold and the run two jobs of one daemon (a session leader,
/// as cron or a login shell), which waits for neither: its zklocks stay parties of their own.
async fn beside_a_daemon(c: &str) {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("go");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let script = format!(
        "coproc L {{ exec \"$Z\" hold /d/x; }}; read -r t <&\"${{L[0]}}\"; echo READY
         read go < {fifo}; \"$Z\" run /d/y -- sleep 600 & wait",
        fifo = fifo.display()
    );
    let mut daemon = Command::new("setsid");
    daemon.args(["bash", "-c", &script]);
    let _daemon = start(c, daemon);
    let mut t = start(c, nested(&["/d/y"], "/d/x"));
    t.go();
    eventually("T waits for x", || queue_len(c, "/d/x") == 2).await;
    std::fs::write(&fifo, "go\n").unwrap();
    eventually("the daemon's run waits for y", || queue_len(c, "/d/y") == 2).await;
    let (code, report, _) = deadlocks(c, "/d");
    assert_eq!(code, Some(0), "{report}");
}
