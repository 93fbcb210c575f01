//! `zklock`'s safety promises, against real ZooKeeper and the harness's fault proxy: the
//! command never runs on after another holder starts, its whole process group is stopped, and
//! a waiter that is told to stop leaves no node behind.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use zk_testcluster::ZkCluster;

/// The environment variable that turns this test binary into a helper command (see `helper`).
const HELPER: &str = "ZKLOCK_TEST_HELPER";

/// Not a test: the command zklock runs in the partition test, when this binary is started with
/// `ZKLOCK_TEST_HELPER=tick:FILE` (ignore SIGTERM, append a CLOCK_MONOTONIC timestamp every
/// 2 ms until killed) or `stamp:FILE` (append one and exit). Without the variable it returns.
#[test]
fn helper() {
    let Ok(spec) = std::env::var(HELPER) else { return };
    let (mode, file) = spec.split_once(':').expect("mode:file");
    let stamp = || {
        use std::io::Write;
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes into the timespec we own.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let ns = ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(file).unwrap();
        writeln!(f, "{ns}").unwrap();
    };
    match mode {
        "stamp" => stamp(),
        "tick" => {
            // SAFETY: setting a signal disposition to SIG_IGN.
            unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
            loop {
                stamp();
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        other => panic!("unknown helper mode {other}"),
    }
}

/// The argv and environment that run [`helper`] in `mode` on `file`.
fn helper_command(mode: &str, file: &Path) -> (Vec<String>, String) {
    let me = std::env::current_exe().unwrap().display().to_string();
    let argv = [me.as_str(), "--exact", "helper", "--nocapture", "--test-threads=1", "-q"];
    (argv.iter().map(|s| s.to_string()).collect(), format!("{mode}:{}", file.display()))
}

fn stamps(file: &Path) -> Vec<u128> {
    lines(file).iter().filter_map(|l| l.trim().parse().ok()).collect()
}

/// The partition: A holds through a proxy that goes silent, its command ignores
/// SIGTERM; B waits on a direct connection. A's command must have stopped before B's starts.
async fn partition(session: &str) {
    let zk = ZkCluster::standalone().await.unwrap();
    let proxy = zk.proxy().unwrap();
    let direct = zk.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let (a_log, b_log) = (dir.path().join("a"), dir.path().join("b"));
    let (argv, spec) = helper_command("tick", &a_log);
    let a = zklock(&proxy.connect_string())
        .args(["run", "--session-timeout", session, "--id", "A", "/locks/partition", "--"])
        .args(&argv)
        .env(HELPER, spec)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("A's command ticks", || !stamps(&a_log).is_empty()).await;
    let (argv, spec) = helper_command("stamp", &b_log);
    let b = zklock(&direct)
        .args(["run", "--session-timeout", session, "--id", "B", "/locks/partition", "--"])
        .args(&argv)
        .env(HELPER, spec)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("B queued", || queue_len(&direct, "/locks/partition") == 2).await;

    proxy.blackhole();
    let b_out = finish(b).await;
    proxy.heal();
    let a_out = finish(a).await;
    assert!(b_out.status.success(), "B: {}", String::from_utf8_lossy(&b_out.stderr));
    assert_eq!(a_out.status.code(), Some(76), "A: {}", String::from_utf8_lossy(&a_out.stderr));
    let b_started = stamps(&b_log)[0];
    let a_last = *stamps(&a_log).last().unwrap();
    if a_last < b_started {
        eprintln!(
            "session {session}: A's command had stopped {} ms before B's started",
            (b_started - a_last) / 1_000_000
        );
    }
    assert!(
        a_last < b_started,
        "A's command was still running {} ms after B's started (session {session})",
        (a_last - b_started) / 1_000_000
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_2s_a_stops_before_b_starts() {
    partition("2s").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_4s_a_stops_before_b_starts() {
    partition("4s").await;
}

/// A command whose grandchild ignores SIGTERM: `sh` starts it in the background and waits.
fn with_stubborn_grandchild(gpid: &Path) -> String {
    // Its stdio is not the pipes of zklock's, so that nothing but the process itself is waited for.
    format!(
        "sh -c 'trap \"\" TERM; echo $$ > {}; exec sleep 3600 </dev/null >/dev/null 2>&1' & wait",
        gpid.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_loss_the_whole_group_is_killed_grandchildren_too() {
    let zk = ZkCluster::standalone().await.unwrap();
    let proxy = zk.proxy().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gpid = dir.path().join("gpid");
    let run = zklock(&proxy.connect_string())
        .args(["run", "--session-timeout", "2s", "/locks/tree", "-c", &with_stubborn_grandchild(&gpid)])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let grandchild = pid_in(&gpid).await;
    let _reaper = Reaper(grandchild);
    proxy.blackhole();
    let out = finish(run).await;
    proxy.heal();
    assert_eq!(out.status.code(), Some(76), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!running(grandchild), "the grandchild outlived the lock");
}

async fn signal_to_holder_stops_the_group(signal: &str, code: i32) {
    let zk = ZkCluster::standalone().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gpid = dir.path().join("gpid");
    let run = zklock(&zk.connect_string())
        .args(["run", "--grace", "300ms", "/locks/tree", "-c", &with_stubborn_grandchild(&gpid)])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let grandchild = pid_in(&gpid).await;
    let _reaper = Reaper(grandchild);
    kill(signal, run.id());
    let out = finish(run).await;
    assert_eq!(out.status.code(), Some(code), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!running(grandchild), "the grandchild outlived zklock's {signal}");
    assert_eq!(queue_len(&zk.connect_string(), "/locks/tree"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_zklock_stops_the_whole_group() {
    signal_to_holder_stops_the_group("TERM", 128 + 15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_to_zklock_stops_the_whole_group() {
    signal_to_holder_stops_the_group("INT", 128 + 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_jobs_left_by_the_command_are_stopped_before_release() {
    let zk = ZkCluster::standalone().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gpid = dir.path().join("gpid");
    // The command exits at once, leaving a job that ignores SIGTERM.
    let script = format!(
        "sh -c 'trap \"\" TERM; echo $$ > {}; exec sleep 3600 </dev/null >/dev/null 2>&1' & sleep 0.2",
        gpid.display()
    );
    let out = zklock(&zk.connect_string())
        .args(["run", "--grace", "300ms", "/locks/bg", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let grandchild = pid_in(&gpid).await;
    let _reaper = Reaper(grandchild);
    assert!(!running(grandchild), "a background job outlived the lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_gets_sigkill_when_zklock_is_killed() {
    let zk = ZkCluster::standalone().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let script = format!("trap '' TERM; echo $$ > {}; exec sleep 3600", pid.display());
    let mut run = zklock(&zk.connect_string()).args(["run", "/locks/pdeath", "-c", &script]).spawn().unwrap();
    let child = pid_in(&pid).await;
    let _reaper = Reaper(child);
    run.kill().unwrap(); // SIGKILL: zklock can do nothing more
    let _ = run.wait();
    eventually("the command ends with zklock", || !running(child)).await;
}

async fn signal_while_waiting_deletes_our_node(signal: &str, code: i32) {
    signal_while_waiting_in("run", signal, code).await;
}

async fn signal_while_waiting_in(subcommand: &str, signal: &str, code: i32) {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    // A long session: only our own delete can remove the node in time.
    let holder = zklock(&c)
        .args([subcommand, "--session-timeout", "30s", "--id", "holder", "/locks/wait", "--", "sleep", "60"])
        .spawn()
        .unwrap();
    eventually("holder", || queue_len(&c, "/locks/wait") == 1).await;
    let waiter = zklock(&c)
        .args([subcommand, "--session-timeout", "30s", "--id", "waiter", "/locks/wait", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("waiter queued", || queue_len(&c, "/locks/wait") == 2).await;
    kill(signal, waiter.id());
    let out = finish(waiter).await;
    assert_eq!(out.status.code(), Some(code), "{}", String::from_utf8_lossy(&out.stderr));
    // At once: no waiting for the session to time out.
    let queue = status(&c, "/locks/wait");
    let ids: Vec<&str> =
        queue["queue"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["holder"], "the waiter's node outlived it");
    kill("TERM", holder.id());
    finish(holder).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_waiting_deletes_our_node_and_exits_143() {
    signal_while_waiting_deletes_our_node("TERM", 143).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_waiting_for_leadership_deletes_our_node_and_exits_143() {
    signal_while_waiting_in("elect", "TERM", 143).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_while_waiting_deletes_our_node_and_exits_130() {
    signal_while_waiting_deletes_our_node("INT", 130).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_too_short_for_any_grace_is_warned_about() {
    // The harness's tick is 200 ms, so 400 ms is the shortest session it negotiates.
    let zk = ZkCluster::standalone().await.unwrap();
    let out = zklock(&zk.connect_string())
        .args(["run", "--session-timeout", "400ms", "/locks/short", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("leaves no grace"), "{err}");
    let out = zklock(&zk.connect_string()).args(["run", "/locks/short", "--", "true"]).output().unwrap();
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_follows_the_queue_by_watches() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let holder =
        zklock(&c).args(["run", "--id", "h", "/locks/progress", "--", "sleep", "60"]).spawn().unwrap();
    eventually("holder", || queue_len(&c, "/locks/progress") == 1).await;
    let middle = zklock(&c).args(["run", "--id", "m", "/locks/progress", "--", "true"]).spawn().unwrap();
    eventually("middle", || queue_len(&c, "/locks/progress") == 2).await;
    let dir = tempfile::tempdir().unwrap();
    let err = dir.path().join("err");
    let last = zklock(&c)
        .args(["-v", "run", "--id", "l", "/locks/progress", "--", "true"])
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    eventually("2 ahead", || lines(&err).iter().any(|l| l.contains("2 ahead (holder: h)"))).await;
    // Our predecessor leaves: its watch fires, and the line changes without any timer.
    kill("TERM", middle.id());
    finish(middle).await;
    eventually("1 ahead", || lines(&err).iter().any(|l| l.contains("1 ahead (holder: h)"))).await;
    kill("TERM", holder.id());
    finish(holder).await;
    let out = finish(last).await;
    assert!(out.status.success());
}

#[test]
fn missing_dashes_before_the_command_is_usage_64_in_one_line() {
    for args in [&["run", "/locks/x", "sleep", "1"][..], &["elect", "/e", "sleep", "1"], &["run", "/locks/x"]]
    {
        let out = Command::new(ZKLOCK).args(args).env("ZK_CONNECT", "127.0.0.1:1").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.starts_with("zklock: ") && err.contains("after --"), "{err}");
    }
    let out = Command::new(ZKLOCK).args(["run", "--limit", "0", "/x", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim().lines().count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_too_late_to_vouch_for_the_window_stop_the_command() {
    // Session 4 s, margin 3.5 s: a window of 0.5 s after each confirmed contact. With every
    // reply 1 s late, the client still hears from the server often enough never to declare the
    // connection dead, but no contact is ever fresh enough: the watchdog stops the command.
    let zk = ZkCluster::standalone().await.unwrap();
    let proxy = zk.proxy().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let script = format!("trap '' TERM; echo $$ > {}; exec sleep 3600", pid.display());
    let run = zklock(&proxy.connect_string())
        .args(["run", "--session-timeout", "4s", "--kill-margin", "3500ms", "/locks/late", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let child = pid_in(&pid).await;
    let _reaper = Reaper(child);
    proxy.set_reply_latency(Duration::from_secs(1));
    let out = finish(run).await;
    proxy.set_reply_latency(Duration::ZERO);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(76), "{err}");
    assert!(err.contains("safe window ran out"), "{err}");
    assert!(!running(child));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_forked_as_zklock_dies_is_never_executed() {
    // zklock dies between fork and prctl (the test hook widens that window to 2 s): the parent
    // pid seen after prctl is no longer zklock's, so the command must not run.
    let zk = ZkCluster::standalone().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let script = format!("echo ran > {}; exec sleep 3600", ran.display());
    let mut run = zklock(&zk.connect_string())
        .env("ZKLOCK_TEST_FORK_DELAY_MS", "2000")
        .args(["run", "/locks/race", "-c", &script])
        .spawn()
        .unwrap();
    let zpid = run.id();
    // The forked child shows up (it sleeps before prctl); the heartbeat has no child process.
    eventually("zklock forked", || !children_of(zpid).is_empty()).await;
    let forked = children_of(zpid)[0];
    let _reaper = Reaper(forked);
    run.kill().unwrap();
    let _ = run.wait();
    eventually("the forked child gives up", || !running(forked)).await;
    assert!(!ran.exists(), "the command ran after zklock died");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grandchildren_are_not_reached_when_zklock_is_killed() {
    // The documented limit: after SIGKILL to zklock, its direct command gets SIGKILL, but the
    // command's own children get nothing and run on. Only fencing tokens protect against them.
    let zk = ZkCluster::standalone().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (pid, gpid) = (dir.path().join("pid"), dir.path().join("gpid"));
    let script = format!(
        "echo $$ > {}; sh -c 'echo $$ > {}; exec sleep 3600 </dev/null >/dev/null 2>&1' & wait",
        pid.display(),
        gpid.display()
    );
    let mut run =
        zklock(&zk.connect_string()).args(["run", "/locks/orphans", "-c", &script]).spawn().unwrap();
    let (child, grandchild) = (pid_in(&pid).await, pid_in(&gpid).await);
    let _reapers = (Reaper(child), Reaper(grandchild));
    run.kill().unwrap();
    let _ = run.wait();
    eventually("the command gets SIGKILL", || !running(child)).await;
    assert!(running(grandchild), "the grandchild was expected to run on (the documented limit)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_the_command_gets_the_foreground_and_can_read_it() {
    // The command runs in its own process group; on a terminal that group must be made the
    // foreground one, or reading the terminal would stop it (SIGTTIN). `script` gives zklock a
    // pseudo-terminal and feeds it our input.
    if Command::new("script").arg("--version").output().is_err() {
        panic!("this test needs script(1) from util-linux");
    }
    let zk = ZkCluster::standalone().await.unwrap();
    let inner = format!(
        "ZK_CONNECT={} {ZKLOCK} run /locks/tty -- sh -c 'read line; echo got:$line'",
        zk.connect_string()
    );
    let mut script = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    script.stdin.as_mut().unwrap().write_all(b"hello\n").unwrap();
    let out = finish(script).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("got:hello"), "{text} {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_progress_line_lists_the_queue_per_change_not_per_tick() {
    // The holder is SIGKILLed: its node stays until its 4 s session expires. A waiter showing
    // progress all that time lists the queue once, and again only when the holder's node goes:
    // a handful of listings in all, not one every half second.
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let mut holder = zklock(&c)
        .args(["run", "--session-timeout", "4s", "--id", "h", "/locks/cost", "--", "sleep", "60"])
        .spawn()
        .unwrap();
    eventually("holder", || queue_len(&c, "/locks/cost") == 1).await;
    let dir = tempfile::tempdir().unwrap();
    let err = dir.path().join("err");
    let waiter = zklock(&c)
        .args(["-v", "run", "--id", "w", "/locks/cost", "--", "true"])
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    eventually("waiting shown", || lines(&err).iter().any(|l| l.contains("1 ahead"))).await;
    holder.kill().unwrap();
    let _ = holder.wait();
    let out = finish(waiter).await;
    assert!(out.status.success(), "{:?}", lines(&err));
    let report = lines(&err).into_iter().find(|l| l.contains("listing(s)")).expect("the -v report");
    let listings: u64 = report.split(" after ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    eprintln!("{report}");
    assert!(listings <= 4, "{report}");
}
