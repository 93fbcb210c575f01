//! Cycling runs: one session, many tasks, each acquiring and releasing lock after lock (many
//! locks, per-order locks).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use zk_recipes::zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};
use zk_testcluster::ZkCluster;

use super::{
    driver, driver_cpu, lockclient_cycle, raw_connect, session_for, Peer, ServerWork, Session, SESSION_MS,
};
use crate::clock::{now_ns, self_cpu_ns};
use crate::ours;

/// What a cycling run (many locks, per-order locks) produced.
pub struct Cycles {
    pub count: u64,
    pub secs: f64,
    pub server: ServerWork,
    pub cpu_ns: u64,
}

/// Lock paths per run in [`cycle_locks`] when every operation takes a fresh lock.
pub const FRESH: usize = i32::MAX as usize;

/// One process, one session, `tasks` concurrent tasks (threads in the drivers), each cycling
/// acquire → release over the paths `{prefix}/l{i % locks}`. With `locks` = [`FRESH`], every
/// operation takes a lock path never used before (per-order locks).
pub async fn cycle_locks(
    zk: &ZkCluster,
    peer: Peer,
    locks: usize,
    tasks: usize,
    secs: f64,
    prefix: &str,
) -> Result<Cycles, String> {
    let connect = zk.connect_string();
    if locks != FRESH {
        precreate(&connect, prefix, locks).await?;
    }
    if matches!(peer, Peer::Curator | Peer::Kazoo) {
        let (l, t, s) = (locks.to_string(), tasks.to_string(), secs.to_string());
        let mut d = driver(peer, &["many", &connect, prefix, &l, &t, &s, SESSION_MS])?;
        tokio::task::block_in_place(|| d.expect("READY"))?;
        let before = ServerWork::read(zk).await?;
        let cpu_before = driver_cpu(&d)?;
        let started = now_ns();
        d.say("go");
        let line = tokio::task::block_in_place(|| d.expect("COUNT"))?;
        let secs = (now_ns() - started) as f64 / 1e9;
        let cpu_ns = driver_cpu(&d)?.saturating_sub(cpu_before);
        let server = before.since(zk).await?;
        tokio::task::block_in_place(|| d.finish())?;
        let count = line.trim_start_matches("COUNT ").parse().map_err(|_| format!("bad line {line}"))?;
        return Ok(Cycles { count, secs, server, cpu_ns });
    }
    let session = match session_for(peer, &connect).await? {
        Session::Ours(h) => Ok(h),
        Session::Raw(c) => Err(c),
    };
    let session = Arc::new(session);
    let count = Arc::new(AtomicU64::new(0));
    let before = ServerWork::read(zk).await?;
    let cpu_before = self_cpu_ns();
    let started = now_ns();
    let end = started + (secs * 1e9) as u64;
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (session, count, prefix) = (session.clone(), count.clone(), prefix.to_string());
        handles.push(tokio::spawn(async move {
            let mut i = t;
            while now_ns() < end {
                let path = format!("{prefix}/l{}", i % locks);
                match session.as_ref() {
                    Ok(h) => {
                        // A handle per acquisition: handles on one session still exclude each other.
                        let m = ours::mutex(h, &path)?;
                        let guard = m.acquire().await.map_err(|e| e.to_string())?;
                        if peer == Peer::ZkRecipesDrop {
                            drop(guard);
                        } else {
                            guard.release().await.map_err(|e| e.to_string())?;
                        }
                    }
                    Err(client) => {
                        lockclient_cycle(client, &path).await?;
                    }
                }
                count.fetch_add(1, Ordering::Relaxed);
                i += tasks;
            }
            Ok::<(), String>(())
        }));
    }
    for h in handles {
        h.await.map_err(|e| e.to_string())??;
    }
    let secs = (now_ns() - started) as f64 / 1e9;
    let cpu_ns = self_cpu_ns().saturating_sub(cpu_before);
    let server = before.since(zk).await?;
    Ok(Cycles { count: count.load(Ordering::Relaxed), secs, server, cpu_ns })
}

/// Creates the lock paths `{prefix}/l{i}`, `i < locks`, as PERSISTENT nodes: many long-lived
/// locks have paths that exist. (As CONTAINER parents, the servers' fast container reaper
/// would delete the idle ones between uses, and the scenario would measure parent creation,
/// which is the per-order scenario's subject.)
async fn precreate(connect: &str, prefix: &str, locks: usize) -> Result<(), String> {
    let probe = raw_connect(connect).await?;
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    probe.mkdir(prefix, &persistent).await.map_err(|e| format!("mkdir {prefix}: {e}"))?;
    for chunk in (0..locks).collect::<Vec<_>>().chunks(100) {
        // Sent back to back, a hundred at a time.
        let paths: Vec<String> = chunk.iter().map(|i| format!("{prefix}/l{i}")).collect();
        let creates: Vec<_> = paths.iter().map(|p| probe.create(p, b"", &persistent)).collect();
        for (create, path) in creates.into_iter().zip(&paths) {
            match create.await {
                Ok(_) | Err(ZkError::NodeExists) => {}
                Err(e) => return Err(format!("create {path}: {e}")),
            }
        }
    }
    Ok(())
}

/// Nodes in the subtree at `root`, `root` included; 0 when it does not exist.
pub async fn subtree_size(probe: &Client, root: &str) -> Result<u64, String> {
    match probe.count_descendants_number(root).await {
        Ok(n) => Ok(n as u64 + 1),
        Err(ZkError::NoNode) => Ok(0),
        Err(e) => Err(format!("counting {root}: {e}")),
    }
}
