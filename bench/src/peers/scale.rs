//! The scale scenarios: many waiters queued behind one holder, in one process (`scale`) or
//! spread over several (`scale-spread`), one session per process; and the Rust peers' side of
//! them (`zk-bench scale-child`).

use std::sync::Arc;
use std::time::Duration;

use zk_recipes::zookeeper_client::LockPrefix;
use zk_testcluster::ZkCluster;

use super::{
    driver, lock_options, lockclient_cycle, raw_connect, session_for, Peer, ServerWork, Session, SESSION_MS,
};
use crate::clock::{now_ns, rss_bytes};
use crate::driver::Driver;
use crate::ours;
use crate::report::Row;
use crate::stats::{self, Hold};

/// What a scale run measured.
pub struct Scale {
    pub rss_per_waiter: f64,
    pub drain_secs: f64,
    /// Every waiter's hold (acquired, starting to release), on the one clock.
    pub holds: Vec<Hold>,
    /// The servers' work over the drain.
    pub server: ServerWork,
}

/// The scenario name of a scale run's rows.
pub fn scale_scenario(procs: usize) -> &'static str {
    if procs == 1 {
        "scale"
    } else {
        "scale-spread"
    }
}

impl Scale {
    /// The run's row: handoffs/s over the drain, the drain time (as `p50_us`), resident bytes per
    /// waiter (`extra`), the servers' packets and bytes per handoff, and overlapping holds.
    pub fn row(mut self, peer: Peer, waiters: usize, procs: usize, repeat: usize) -> Row {
        let overlaps = stats::overlaps(&mut self.holds);
        let rate = waiters as f64 / self.drain_secs;
        Row {
            p50_us: self.drain_secs * 1e6,
            extra: self.rss_per_waiter,
            overlaps,
            ..crate::server_row(
                self.server,
                waiters as f64,
                Row::new(scale_scenario(procs), peer, waiters, repeat, rate),
            )
        }
    }
}

/// `waiters` queued behind a holder, spread over `procs` processes (one session each, the first
/// the holder's); resident memory per waiter (the processes' growth while queueing, summed) and
/// the time from the holder's release until the last waiter held. Rust peers run in child
/// `zk-bench scale-child` processes, so that each peer's memory is measured alone.
pub async fn scale(
    zk: &ZkCluster,
    peer: Peer,
    waiters: usize,
    procs: usize,
    path: &str,
) -> Result<Scale, String> {
    let connect = zk.connect_string();
    let total = (waiters + 1).to_string();
    let spawn = |i: usize| -> Result<Driver, String> {
        let n = (waiters / procs + usize::from(i < waiters % procs)).to_string();
        let hold = if i == 0 { "1" } else { "0" };
        match peer {
            Peer::Curator | Peer::Kazoo => {
                driver(peer, &["queue", &connect, path, &n, SESSION_MS, &total, hold])
            }
            _ => {
                let mut cmd = std::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
                cmd.args(["scale-child", peer.short(), &connect, path, &n, &total, hold]);
                Driver::spawn(peer.short(), cmd)
            }
        }
    };
    let based = |d: &mut Driver| tokio::task::block_in_place(|| d.expect("BASE")).map(drop);
    // The holder first (the others queue behind it, under the path it creates), then the others
    // all at once.
    let mut ds = vec![spawn(0)?];
    based(&mut ds[0])?;
    ds.extend((1..procs).map(spawn).collect::<Result<Vec<_>, _>>()?);
    ds.iter_mut().skip(1).try_for_each(based)?;
    let rss = |ds: &[Driver]| ds.iter().map(|d| rss_bytes(d.pid())).sum::<u64>();
    let base = rss(&ds);
    ds.iter_mut().for_each(|d| d.say("spawn"));
    for d in &mut ds {
        tokio::task::block_in_place(|| d.expect("QUEUED"))?;
    }
    let queued = rss(&ds);
    let before = ServerWork::read(zk).await?;
    let t0 = now_ns();
    ds.iter_mut().for_each(|d| d.say("go"));
    let mut holds = Vec::with_capacity(waiters);
    for d in &mut ds {
        for line in tokio::task::block_in_place(|| d.lines_until("DRAINED_NS"))? {
            let mut f =
                line.strip_prefix("HOLD ").into_iter().flat_map(|l| l.split(' ')).map(str::parse::<u64>);
            if let (Some(Ok(a)), Some(Ok(b))) = (f.next(), f.next()) {
                holds.push((a, b));
            }
        }
    }
    let server = before.since(zk).await?;
    for d in ds {
        tokio::task::block_in_place(|| d.finish())?;
    }
    if holds.len() != waiters {
        return Err(format!("{}: {} holds from {waiters} waiters", peer.name(), holds.len()));
    }
    let last = holds.iter().map(|h| h.1).max().unwrap_or(t0);
    Ok(Scale {
        rss_per_waiter: queued.saturating_sub(base) as f64 / waiters as f64,
        drain_secs: last.saturating_sub(t0).max(1) as f64 / 1e9,
        holds,
        server,
    })
}

/// The child side of [`scale`] for the Rust peers: the same protocol as the drivers' `queue` mode
/// (`total`: the path's children to wait for; `hold`: whether this process takes the holder).
pub async fn scale_child(
    peer: &str,
    connect: &str,
    path: &str,
    waiters: usize,
    total: usize,
    hold: bool,
) -> Result<(), String> {
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
        Session::Ours(h) if hold => {
            ours_guard = Some(ours::mutex(h, path)?.acquire().await.map_err(|e| e.to_string())?)
        }
        Session::Raw(client) if hold => {
            let p = LockPrefix::new_curator(path, "lock-").map_err(|e| e.to_string())?;
            theirs_guard = Some(client.lock(p, b"", lock_options()?).await.map_err(|e| e.to_string())?);
        }
        _ => {}
    }
    println!("BASE");
    wait_for("spawn");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..waiters {
        let (tx, path) = (tx.clone(), path.to_string());
        // One task type per peer: a task keeps room for its future's largest state, and one
        // future over both peers' cycles would charge each waiter the larger of the two.
        match session.as_ref() {
            Session::Ours(h) => {
                let h = h.clone();
                tokio::spawn(async move { tx.send(ours_cycle(&h, &path).await) })
            }
            Session::Raw(client) => {
                let client = client.clone();
                tokio::spawn(async move { tx.send(lockclient_cycle(&client, &path).await) })
            }
        };
    }
    drop(tx);
    let probe = raw_connect(connect).await?;
    while probe.list_children(path).await.map(|c| c.len()).unwrap_or(0) < total {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("QUEUED");
    wait_for("go");
    let t0 = now_ns();
    drop(theirs_guard);
    if let Some(g) = ours_guard {
        g.release().await.map_err(|e| e.to_string())?;
    }
    let mut held = String::new();
    for _ in 0..waiters {
        let (a, b) = rx.recv().await.ok_or("a waiter vanished")??;
        held += &format!("HOLD {a} {b}\n");
    }
    let drained = now_ns() - t0;
    print!("{held}");
    println!("DRAINED_NS {drained}");
    wait_for("exit");
    Ok(())
}

/// One acquire → release cycle of our mutex on `path`, returning the hold.
async fn ours_cycle(h: &ours::Handle, path: &str) -> Result<Hold, String> {
    let guard = ours::mutex(h, path)?.acquire().await.map_err(|e| e.to_string())?;
    let acquired = now_ns();
    let held = (acquired, now_ns());
    guard.release().await.map_err(|e| e.to_string())?;
    Ok(held)
}
