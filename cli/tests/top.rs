//! `zklock top ROOT` (issue 37, item 7) against real ZooKeeper and real `zklock hold`
//! processes: `--once` prints one frame (the lock path, its holder and how many wait, the
//! clock the ages are by), and in a real terminal (tmux) the live view shows the same and
//! follows a change.

mod common;

use std::process::{Command, Stdio};

use common::*;
use zk_testcluster::ZkCluster;

/// A `zklock hold` process, killed when dropped.
struct Holding(std::process::Child);

impl Drop for Holding {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A holder and two waiters on /top/a, each a `zklock hold` of its own.
async fn queue_of_three(c: &str) -> Vec<Holding> {
    let mut holds = Vec::new();
    for (n, id) in ["top-holder", "top-waiter-1", "top-waiter-2"].iter().enumerate() {
        let child = zklock(c)
            .args(["hold", "--id", id, "/top/a"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        holds.push(Holding(child));
        eventually("queued", || queue_len(c, "/top/a") == n + 1).await;
    }
    holds
}

/// The row of `path` in a frame, split into words.
fn row<'a>(frame: &'a str, path: &str) -> Option<Vec<&'a str>> {
    frame.lines().find(|l| l.starts_with(&format!("{path} "))).map(|l| l.split_whitespace().collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_prints_one_frame_with_holder_and_waiters() {
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let _holds = queue_of_three(&c).await;
    let out = zklock(&c).args(["top", "--once", "/top"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let frame = String::from_utf8_lossy(&out.stdout);
    assert!(!frame.contains('\x1b'), "--once does not clear the screen: {frame:?}");
    assert!(frame.contains("by this host's clock"), "{frame}");
    let cols = row(&frame, "/top/a").unwrap_or_else(|| panic!("no row for /top/a: {frame}"));
    // PATH KIND HOLDERS WAITERS HELD-FOR HOLDER (SESSION)
    assert_eq!(&cols[..4], ["/top/a", "lock", "1", "2"], "{frame}");
    assert!(cols[4].ends_with('s') && cols[5] == "top-holder", "{frame}");
    assert!(frame.contains("1 queues, 1 holding, 2 waiting"), "{frame}");

    // By the server's clock: top writes the clock node (only it), and says so.
    let out = zklock(&c).args(["top", "--once", "--clock-node", "/top-clock", "/top"]).output().unwrap();
    let frame = String::from_utf8_lossy(&out.stdout);
    assert!(frame.contains("by the server's clock") && row(&frame, "/top/a").is_some(), "{frame}");
    assert_eq!(queue_len(&c, "/top/a"), 3);
}

/// A tmux server of this test's own (its own socket), killed when dropped.
struct Tmux(String);

impl Tmux {
    fn cmd(&self) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.args(["-L", &self.0]);
        cmd
    }

    fn capture(&self) -> String {
        let out = self.cmd().args(["capture-pane", "-p", "-t", "top"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_view_in_a_real_terminal_shows_the_queue_and_follows_it() {
    let has_tmux = Command::new("tmux").arg("-V").output().is_ok_and(|o| o.status.success());
    assert!(has_tmux, "tmux is needed: apt-get install -y tmux");
    let zk = ZkCluster::standalone().await.unwrap();
    let c = zk.connect_string();
    let mut holds = queue_of_three(&c).await;

    let tmux = Tmux(format!("zklock-top-test-{}", std::process::id()));
    // tmux runs the command through a shell with its own environment: say everything.
    let command = format!("env -u RUST_LOG ZK_CONNECT={c} {ZKLOCK} top --interval 200ms /top");
    let started = tmux
        .cmd()
        .args(["new-session", "-d", "-s", "top", "-x", "120", "-y", "40", &command])
        .status()
        .unwrap();
    assert!(started.success());
    let shows = |waiters: &'static str| {
        let tmux = &tmux;
        move || {
            let screen = tmux.capture();
            row(&screen, "/top/a").is_some_and(|cols| cols[..4] == ["/top/a", "lock", "1", waiters])
                && screen.contains("top-holder")
        }
    };
    eventually("the frame in the terminal", shows("2")).await;
    let screen = tmux.capture();
    assert!(screen.starts_with("zklock top /top at "), "the screen is cleared before a frame: {screen}");
    assert!(screen.contains("every 200ms") && screen.contains("HOLDER (SESSION)"), "{screen}");

    // A waiter gives up (SIGTERM: it deletes its node): a later frame says so.
    let leaving = holds.pop().unwrap();
    let pid = leaving.0.id();
    kill("TERM", pid);
    eventually("the waiter's exit", || !running(pid)).await;
    drop(leaving);
    eventually("the frame after a waiter left", shows("1")).await;
    // And the view is still running (not one frame and out).
    let alive = tmux.cmd().args(["list-panes", "-t", "top", "-F", "#{pane_dead}"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&alive.stdout).trim(), "0");
}
