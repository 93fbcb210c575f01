//! Helpers shared by the zklock integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

pub const ZKLOCK: &str = env!("CARGO_BIN_EXE_zklock");
pub const PATIENCE: Duration = Duration::from_secs(60);

pub fn zklock(connect: &str) -> Command {
    let mut cmd = Command::new(ZKLOCK);
    cmd.env("ZK_CONNECT", connect).env_remove("RUST_LOG");
    cmd
}

/// Waits (bounded) for a child process to end.
pub async fn finish(child: std::process::Child) -> Output {
    tokio::time::timeout(PATIENCE, tokio::task::spawn_blocking(move || child.wait_with_output()))
        .await
        .expect("zklock hung")
        .expect("join")
        .expect("wait")
}

/// Polls for a condition on another process's state (a file it writes, a queue on the server).
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    tokio::time::timeout(PATIENCE, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

/// `zklock status --json PATH`.
pub fn status(connect: &str, path: &str) -> serde_json::Value {
    let out = zklock(connect).args(["status", "--json", path]).output().expect("status");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json")
}

pub fn queue_len(connect: &str, path: &str) -> usize {
    status(connect, path)["queue"].as_array().expect("queue").len()
}

pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

/// Sends `signal` (e.g. "TERM") to `pid`.
pub fn kill(signal: &str, pid: u32) {
    let ok = Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]).status().unwrap();
    assert!(ok.success(), "kill -{signal} {pid}");
}

/// Whether `pid` is a live process (a zombie or a missing one is not).
pub fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) != Some("Z"),
        Err(_) => false,
    }
}

/// The pid a command wrote into `file`, once it has.
pub async fn pid_in(file: &Path) -> u32 {
    eventually("a pid file", || lines(file).first().is_some_and(|l| l.trim().parse::<u32>().is_ok())).await;
    lines(file)[0].trim().parse().unwrap()
}

/// SIGKILLs a process the test made (through zklock) when dropped, so that a failed assertion
/// leaves nothing running.
pub struct Reaper(pub u32);

impl Drop for Reaper {
    fn drop(&mut self) {
        if running(self.0) {
            let _ = Command::new("kill").args(["-KILL", &self.0.to_string()]).status();
        }
    }
}

/// The children of `parent`, found by scanning /proc.
pub fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().is_some_and(|stat| {
                let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
                rest.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent)
            })
        })
        .collect()
}

/// A standalone server with 1 s ticks that grants sessions of 2 to 4 s (2 to 4 ticks): a
/// session timeout asked for outside that range is bounded by the server, which zklock notes.
pub async fn one_second_ticks() -> zk_testcluster::ZkCluster {
    let config = zk_testcluster::ClusterConfig {
        tick_time: Duration::from_secs(1),
        max_session_timeout: Duration::from_secs(4),
        ..zk_testcluster::ClusterConfig::default()
    };
    zk_testcluster::ZkCluster::start(config).await.unwrap()
}
