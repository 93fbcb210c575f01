//! The scale scenario: many waiters queued behind one holder in one process, and the Rust
//! peers' side of it (`zk-bench scale-child`).

use std::sync::Arc;
use std::time::Duration;

use zk_recipes::zookeeper_client::LockPrefix;
use zk_testcluster::ZkCluster;

use super::{driver, lock_options, lockclient_cycle, raw_connect, session_for, Peer, Session, SESSION_MS};
use crate::clock::now_ns;
use crate::driver::Driver;
use crate::ours;

/// What the scale scenario measured.
pub struct Scale {
    pub rss_per_waiter: f64,
    pub drain_secs: f64,
}

/// `waiters` queued behind a holder in one process (one session); resident memory per waiter and
/// the time for the whole queue to drain. Rust peers run in a child `zk-bench scale-child`
/// process, so that each peer's memory is measured alone.
pub async fn scale(zk: &ZkCluster, peer: Peer, waiters: usize, path: &str) -> Result<Scale, String> {
    let connect = zk.connect_string();
    let n = waiters.to_string();
    let mut d = match peer {
        Peer::Curator | Peer::Kazoo => driver(peer, &["queue", &connect, path, &n, SESSION_MS])?,
        _ => {
            let mut cmd = std::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
            cmd.args(["scale-child", peer.short(), &connect, path, &n]);
            Driver::spawn(peer.short(), cmd)?
        }
    };
    tokio::task::block_in_place(|| d.expect("BASE"))?;
    let base = crate::clock::rss_bytes(d.pid());
    d.say("spawn");
    tokio::task::block_in_place(|| d.expect("QUEUED"))?;
    let queued = crate::clock::rss_bytes(d.pid());
    d.say("go");
    let line = tokio::task::block_in_place(|| d.expect("DRAINED_NS"))?;
    tokio::task::block_in_place(|| d.finish())?;
    let ns: f64 = line.trim_start_matches("DRAINED_NS ").parse().map_err(|_| format!("bad line {line}"))?;
    Ok(Scale { rss_per_waiter: queued.saturating_sub(base) as f64 / waiters as f64, drain_secs: ns / 1e9 })
}

/// The child side of [`scale`] for the Rust peers: the same protocol as the drivers' `queue` mode.
pub async fn scale_child(peer: &str, connect: &str, path: &str, waiters: usize) -> Result<(), String> {
    use std::io::BufRead;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut wait_for = |word: &str| loop {
        match lines.next() {
            Some(Ok(l)) if l.trim() == word => return,
            Some(_) => {}
            None => std::process::exit(0),
        }
    };
    let peer = if peer == Peer::LockClient.short() { Peer::LockClient } else { Peer::ZkRecipes };
    let session = Arc::new(session_for(peer, connect).await?);
    let mut ours_guard = None;
    let mut theirs_guard = None;
    match session.as_ref() {
        Session::Ours(h) => {
            ours_guard = Some(ours::mutex(h, path)?.acquire().await.map_err(|e| e.to_string())?)
        }
        Session::Raw(client) => {
            let p = LockPrefix::new_curator(path, "lock-").map_err(|e| e.to_string())?;
            theirs_guard = Some(client.lock(p, b"", lock_options()?).await.map_err(|e| e.to_string())?);
        }
    }
    println!("BASE");
    wait_for("spawn");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..waiters {
        let (session, tx, path) = (session.clone(), tx.clone(), path.to_string());
        tokio::spawn(async move {
            let outcome = match session.as_ref() {
                Session::Ours(h) => {
                    async {
                        let m = ours::mutex(h, &path)?;
                        m.acquire()
                            .await
                            .map_err(|e| e.to_string())?
                            .release()
                            .await
                            .map_err(|e| e.to_string())
                    }
                    .await
                }
                Session::Raw(client) => lockclient_cycle(client, &path).await.map(drop),
            };
            let _ = tx.send(outcome);
        });
    }
    drop(tx);
    let probe = raw_connect(connect).await?;
    while probe.list_children(path).await.map(|c| c.len()).unwrap_or(0) < waiters + 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("QUEUED");
    wait_for("go");
    let t0 = now_ns();
    drop(theirs_guard);
    if let Some(g) = ours_guard {
        g.release().await.map_err(|e| e.to_string())?;
    }
    for _ in 0..waiters {
        rx.recv().await.ok_or("a waiter vanished")??;
    }
    println!("DRAINED_NS {}", now_ns() - t0);
    wait_for("exit");
    Ok(())
}
